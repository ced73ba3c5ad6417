"""Elastic fleet: how fast a fleet of collectors follows its cluster, and a server's node loss.

A local multi-node Ray cluster (``ray.cluster_utils.Cluster``, one raylet per node). A
``RayCollector`` with ``num_collectors="1-4"`` (each worker holds one ``host``) starts on a
node with room for 2 (``host: 2``). After batch 20 a second such node joins; after batch 80
the first node is lost (its processes SIGKILLed), and the second is full, so its two
workers leave. Each run, in a fresh process, measures:

- ``first_join_s``: from the join to the first batch of a worker that joined on it;
- ``grown_s``: from the join to the fleet at its maximum (4);
- ``shrunk_s``: from the loss to the fleet at 2 (no room for replacements);
- that the frames served are exactly the budget.

Target: a node that joins gets collectors within 10 s (``grown_s``), in both modes.

Then central inference's server on a node that is lost: 2 collectors on one node, one
inference server placed by a ``srv`` resource, a spare ``srv`` node. Ray restarts the
server on the spare node and sends the workers' requests again; measured: the longest time
between two batches after the loss (``stall_s``), and that the frames are exact.

    python benchmarks/elastic_fleet.py

Writes ``benchmarks/results/elastic_fleet.json``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from common import machine, print_table, run_json, write_json

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 10.0
BATCH, BATCHES = 200, 150

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


def requested():  # the autoscaler's resource request (Ray's v1 autoscaler keeps it in GCS)
    from ray.autoscaler._private.constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
    from ray.experimental.internal_kv import _internal_kv_get

    return json.loads(_internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL) or b"[]")


cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
a = cluster.add_node(num_cpus=2, resources={{"host": 2}})
cluster.wait_for_nodes()
ray.init(address=cluster.address)  # this script's: the request is read after the collector ends
frames, marks, before, sizes = 0, {{}}, set(), []
with RayCollector(lambda: CountingEnv(5, sleep=0.004), None, frames_per_batch={batch},
                  total_frames={batch} * {batches}, num_collectors="1-4", sync={sync},
                  remote_configs={{"num_cpus": 1, "resources": {{"host": 1}}}}) as collector:
    request = requested()
    for i, batch in enumerate(collector):
        frames += int(batch["collector", "mask"].sum()) if {sync} else batch.numel()
        now, size = time.time(), collector.num_collectors
        if not sizes or sizes[-1] != size:
            sizes.append(size)
        if "joined" in marks:
            workers = set(batch["collector", "worker_id"].unique().tolist())
            if "first_join" not in marks and workers - before:
                marks["first_join"] = now
            if "grown" not in marks and size == 4:
                marks["grown"] = now
        if "lost" in marks and "shrunk" not in marks and size == 2:
            marks["shrunk"] = now
        if i == 20:
            before = set(range(collector.num_collectors))  # the ids in the fleet now
            cluster.add_node(num_cpus=2, resources={{"host": 2}})
            marks["joined"] = time.time()
        if i == 80:
            cluster.remove_node(a, allow_graceful=False)
            marks["lost"] = time.time()
    fleet = collector.stats()["fleet"]
    shape = list(batch.shape)
print(json.dumps({{
    "frames": frames, "exact": frames == {batch} * {batches}, "fleet": fleet, "sizes": sizes,
    "request": request, "after": requested(), "shape": shape,
    "first_join_s": round(marks["first_join"] - marks["joined"], 2),
    "grown_s": round(marks["grown"] - marks["joined"], 2),
    "shrunk_s": round(marks["shrunk"] - marks["lost"], 2),
}}))
ray.shutdown()
cluster.shutdown()
"""

SERVER = """
import json, sys, time
import ray
from ray import cloudpickle
from ray._private import state
from ray.cluster_utils import Cluster
sys.path.insert(0, {tests!r})
import fakes, policies
from fakes import CountingEnv
from policies import categorical_actor
from fleetrl import RayCollector
cloudpickle.register_pickle_by_value(fakes)
cloudpickle.register_pickle_by_value(policies)

cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
cluster.add_node(num_cpus=2, resources={{"host": 2}})
servers = [cluster.add_node(num_cpus=1, resources={{"srv": 1}}) for _ in range(2)]
cluster.wait_for_nodes()
ray.init(address=cluster.address)
frames, stall, last, lost_at, gap = 0, 0.0, None, None, 0.0
with RayCollector(lambda: CountingEnv(5, sleep=0.004), categorical_actor(1, 2),
                  frames_per_batch={batch}, total_frames={batch} * 60, num_collectors=2,
                  sync=False, remote_configs={{"num_cpus": 1, "resources": {{"host": 1}}}},
                  inference="server", num_inference_servers=1,
                  inference_remote_config={{"num_cpus": 1, "resources": {{"srv": 1}}}}) as collector:
    for i, batch in enumerate(collector):
        frames += batch.numel()
        now = time.time()
        if lost_at is not None:
            stall = max(stall, now - last)
        elif last is not None:
            gap = max(gap, now - last)
        last = now
        if i == 20:
            actor = collector.server_handles()[0]._actor_id.hex()
            lost = state.actors(actor)["Address"]["NodeID"]
            cluster.remove_node(next(n for n in servers if n.node_id == lost),
                                allow_graceful=False)
            lost_at = time.time()
    now_on = state.actors(actor)["Address"]["NodeID"]
    restarts = collector.stats()["restarts"]
print(json.dumps({{"frames": frames, "exact": frames == {batch} * 60,
                  "stall_s": round(stall, 2), "gap_before_s": round(gap, 3),
                  "moved": now_on != lost, "restarts": restarts}}))
ray.shutdown()
cluster.shutdown()
"""


def script(text: str, **words: object) -> str:
    """One of this benchmark's scripts (:data:`ELASTIC`, :data:`SERVER`), filled in; the
    end-to-end tests run the same (tests/e2e/test_elastic_fleet.py, test_node_loss.py)."""
    return textwrap.dedent(text).format(tests=str(ROOT / "tests"), batch=BATCH, **words)


def run(text: str, **words: object) -> dict:
    return run_json([sys.executable, "-c", script(text, **words)], timeout=400)[0]


def main() -> None:
    runs = {}
    for mode, sync in (("sync", True), ("first ready", False)):
        runs[mode] = run(ELASTIC, sync=sync, batches=BATCHES)
        print(f"{mode}: {json.dumps(runs[mode])}", flush=True)
    server = run(SERVER)
    print(f"server: {json.dumps(server)}", flush=True)
    summary = {
        mode: {**r, "met": r["grown_s"] <= TARGET_S and r["exact"]} for mode, r in runs.items()
    }
    print_table(
        [
            "mode",
            "join to first frames s",
            "join to 4 collectors s",
            "loss to 2 collectors s",
            "joined",
            "left",
            "frames exact",
            f"target <= {TARGET_S:g} s",
        ],
        [
            [
                mode,
                f"{r['first_join_s']:.1f}",
                f"{r['grown_s']:.1f}",
                f"{r['shrunk_s']:.1f}",
                str(r["fleet"]["joined"]),
                str(r["fleet"]["left"]),
                "yes" if r["exact"] else "NO",
                "met" if summary[mode]["met"] else "missed",
            ]
            for mode, r in runs.items()
        ],
        title="A fleet of 1-4 collectors: a node joins (room for 2), then one is lost",
    )
    print_table(
        [
            "longest gap between batches before s",
            "after the server's node is lost s",
            "frames exact",
        ],
        [
            [
                f"{server['gap_before_s']:.2f}",
                f"{server['stall_s']:.1f}",
                "yes" if server["exact"] else "NO",
            ]
        ],
        title="An inference server's node lost (Ray restarts it on a spare node)",
    )
    path = write_json(
        "elastic_fleet",
        {"machine": machine(), "runs": runs, "server": server, "summary": summary},
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
