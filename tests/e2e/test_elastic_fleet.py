"""An elastic fleet (``num_collectors="1-4"``) on a local multi-node Ray cluster
(``ray.cluster_utils.Cluster``): it grows to the room the nodes have, grows again when a
node joins, shrinks when a node is lost with no room left for replacements, asks Ray's
autoscaler for its maximum, and serves exactly its frame budget, in sync and first-ready
mode."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.standalone  # each script starts its own cluster

TESTS = Path(__file__).resolve().parents[1]

#: node A holds 2 workers ("host": 2); after batch 20 node B (room for 2 more) joins, after
#: batch 80 node A is lost: B is full, so its 2 workers leave
ELASTIC = """
import json, logging, sys, time
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster
sys.path.insert(0, {tests!r})
import fakes
from fakes import CountingEnv
from fleetrl import RayCollector
cloudpickle.register_pickle_by_value(fakes)
logging.basicConfig(level=logging.WARNING)
logging.getLogger("fleetrl").setLevel(logging.INFO)  # as fleetrl train sets it


def requested():
    from ray.autoscaler._private.constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
    from ray.experimental.internal_kv import _internal_kv_get

    return json.loads(_internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL) or b"[]")


cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
a = cluster.add_node(num_cpus=2, resources={{"host": 2}})
cluster.wait_for_nodes()
ray.init(address=cluster.address)  # this script's: the request is read after the collector ends
frames, sizes, joined_at, added_at, lost_at = 0, [], None, None, None
with RayCollector(lambda: CountingEnv(5, sleep=0.004), None, frames_per_batch=200,
                  total_frames=200 * 150, num_collectors="1-4", sync={sync},
                  remote_configs={{"num_cpus": 1, "resources": {{"host": 1}}}}) as collector:
    request = requested()
    for i, batch in enumerate(collector):
        frames += int(batch["collector", "mask"].sum()) if {sync} else batch.numel()
        size = collector.num_collectors
        if not sizes or sizes[-1] != size:
            sizes.append(size)
        if added_at is not None and joined_at is None and size == 4:
            joined_at = time.time() - added_at
        if i == 20:
            cluster.add_node(num_cpus=2, resources={{"host": 2}})
            added_at = time.time()
        if i == 80:
            cluster.remove_node(a, allow_graceful=False)
    stats = collector.stats()
    shape = list(batch.shape)
print(json.dumps({{"frames": frames, "sizes": sizes, "joined_after_s": joined_at,
                  "fleet": stats["fleet"], "request": request, "after": requested(),
                  "shape": shape}}))
ray.shutdown()
cluster.shutdown()
"""


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "first-ready"])
def test_the_fleet_grows_with_a_node_that_joins_and_shrinks_with_one_lost(sync):
    script = textwrap.dedent(ELASTIC).format(tests=str(TESTS), sync=sync)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["frames"] == 200 * 150  # none lost, none twice
    # 1 to start, 2 once node A's room is used, 4 with node B, 2 once A is lost (its two
    # workers may leave between two batches)
    sizes = result["sizes"]
    top = sizes.index(4)
    assert sizes[: top + 1] == sorted(sizes[: top + 1]) and sizes[-1] == 2
    assert sizes[top:] == sorted(sizes[top:], reverse=True)
    # grown onto the node that joined (how fast: benchmarks/elastic_fleet.py; a timed
    # assertion here fails on a loaded CI machine)
    assert result["joined_after_s"] is not None
    assert result["fleet"] == {
        "size": 2,
        "min": 1,
        "max": 4,
        "joining": 0,
        "joined": 3,
        "left": 2,
    }
    # the autoscaler was asked for the maximum, and the request withdrawn at shutdown
    assert result["request"] == [{"CPU": 1.0, "host": 1.0}] * 4
    assert result["after"] == []
    if sync:  # every worker id the fleet had, the 2 that left masked out
        assert result["shape"][0] == 4
    log = out.stderr
    assert "joined on node" in log and "(fleet: 4 collectors, range 1-4)" in log
    assert "left the fleet: its node" in log and "(fleet: 2 collectors, range 1-4)" in log
