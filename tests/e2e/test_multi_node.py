"""RayCollector on a local two-node Ray cluster: collectors placed on the second node."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.standalone  # the script starts its own two-node cluster


# ------------------------------------------------------------ multi-node


def test_collectors_run_on_a_second_node_of_a_local_cluster():
    script = textwrap.dedent(
        """
        import json, sys
        import ray
        from ray import cloudpickle
        from ray.cluster_utils import Cluster
        sys.path.insert(0, {tests!r})
        import fakes
        from fakes import CountingEnv
        from fleetrl import RayCollector
        cloudpickle.register_pickle_by_value(fakes)

        cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
        worker_node = cluster.add_node(num_cpus=2, resources={{"second_node": 2}})
        cluster.wait_for_nodes()
        with RayCollector(lambda: CountingEnv(5), None, frames_per_batch=40, total_frames=120,
                          num_collectors=2, sync=True,
                          remote_configs={{"num_cpus": 1, "resources": {{"second_node": 1}}}},
                          ray_init_config={{"address": cluster.address}}) as c:
            frames = sum(int(b["collector", "mask"].sum()) for b in c)
            nodes = set(c.stats()["nodes"].values())
        print(json.dumps({{"frames": frames, "nodes": sorted(nodes), "worker_node": worker_node.node_id,
                          "ray_still_up": ray.is_initialized()}}))
        cluster.shutdown()
        """
    ).format(tests=str(Path(__file__).resolve().parents[1]))
    env = dict(os.environ, RAY_DEDUP_LOGS="0")
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["frames"] == 120
    assert result["nodes"] == [result["worker_node"]]
    assert (
        result["ray_still_up"] is False
    )  # the collector started (attached) Ray, so it disconnected
