"""An elastic fleet (``num_collectors="1-4"``) on a local multi-node Ray cluster
(``ray.cluster_utils.Cluster``): it grows to the room the nodes have, grows again when a
node joins, shrinks when a node is lost with no room left for replacements, asks Ray's
autoscaler for its maximum, and serves exactly its frame budget, in sync and first-ready
mode."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import elastic_fleet

pytestmark = pytest.mark.standalone  # each script starts its own cluster


# the script benchmarks/elastic_fleet.py measures: node A holds 2 workers ("host": 2); after
# batch 20 node B (room for 2 more) joins, after batch 80 node A is lost: B is full, so its 2
# workers leave
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "first-ready"])
def test_the_fleet_grows_with_a_node_that_joins_and_shrinks_with_one_lost(sync):
    text = elastic_fleet.script(elastic_fleet.ELASTIC, sync=sync, batches=150)
    out = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["frames"] == 200 * 150 and result["exact"]  # none lost, none twice
    # 1 to start, 2 once node A's room is used, 4 with node B, 2 once A is lost (its two
    # workers may leave between two batches)
    sizes = result["sizes"]
    top = sizes.index(4)
    assert sizes[: top + 1] == sorted(sizes[: top + 1]) and sizes[-1] == 2
    assert sizes[top:] == sorted(sizes[top:], reverse=True)
    # grown onto the node that joined (how fast: benchmarks/elastic_fleet.py; a timed
    # assertion here fails on a loaded CI machine)
    assert result["grown_s"] is not None
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
