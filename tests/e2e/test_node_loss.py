"""A node lost on a local multi-node Ray cluster (``ray.cluster_utils.Cluster``, one raylet
per node, its processes SIGKILLed), with a finished batch in its object store: nothing is
lost, nothing counted twice, in sync and first-ready mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import elastic_fleet

pytestmark = pytest.mark.standalone  # each script starts its own cluster

TESTS = Path(__file__).resolve().parents[1]

#: 2 collectors of PixelEnvs (28 KB frames: a 240-frame batch lives in the object store) on
#: three nodes that host one collector each (the "host" resource): the two never share a
#: node, as Ray's default placement sometimes had them (then both died with it), and the
#: third hosts the replacement. After the 4th batch the driver waits 2 s (the workers
#: finish their next batches), then the node of worker 0 is lost
NODE_LOSS = """
import json, sys, time
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster
sys.path.insert(0, {tests!r})
import fakes
from fakes import PixelEnv
from fleetrl import RayCollector
cloudpickle.register_pickle_by_value(fakes)

cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
nodes = [cluster.add_node(num_cpus=1, resources={{"host": 1}}) for _ in range(3)]
cluster.wait_for_nodes()
frames, lost, lost_at, first_after = 0, None, None, None
with RayCollector(lambda: PixelEnv(6), None, frames_per_batch=240, total_frames=240 * 24,
                  num_collectors=2, sync={sync},
                  remote_configs={{"num_cpus": 1, "resources": {{"host": 1}}}},
                  ray_init_config={{"address": cluster.address}}) as collector:
    for i, batch in enumerate(collector):
        frames += batch.numel()
        workers = set(batch["collector", "worker_id"].unique().tolist())
        if lost_at is not None and first_after is None and 0 in workers:
            first_after = time.time() - lost_at
        if i == 3:
            time.sleep(2.0)
            lost = collector.stats()["nodes"][0]
            cluster.remove_node(next(n for n in nodes if n.node_id == lost), allow_graceful=False)
            lost_at = time.time()
    stats = collector.stats()
print(json.dumps({{"frames": frames, "lost": lost, "now": stats["nodes"][0],
                  "restarts": stats["restarts"], "first_after_s": first_after}}))
cluster.shutdown()
"""


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "first-ready"])
def test_a_node_lost_with_a_batch_in_its_object_store_loses_no_frame(sync):
    script = textwrap.dedent(NODE_LOSS).format(tests=str(TESTS), sync=sync)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, RAY_DEDUP_LOGS="0"),
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["frames"] == 240 * 24  # none twice, none missing
    assert result["restarts"] == {"0": 1, "1": 0}  # JSON's keys: worker 0 replaced once
    assert result["now"] != result["lost"]  # the replacement runs on the surviving node
    assert result["first_after_s"] is not None  # the replacement served frames
    assert "died; starting incarnation 1" in out.stderr


#: one collector on the one node with the "host" resource; after its 4th batch that node is
#: lost. "join": another node with the resource joins 4 s later (``ray start``, as a node of
#: a real cluster does); "none": none joins within the replacement's wait
DRAINED = """
import json, subprocess, sys, threading, time
import ray
from ray import cloudpickle
from ray.cluster_utils import Cluster
sys.path.insert(0, {tests!r})
import fakes
from fakes import CountingEnv
from fleetrl import RayCollector, WorkerLostError
cloudpickle.register_pickle_by_value(fakes)

cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
node = cluster.add_node(num_cpus=2, resources={{"host": 2}})
cluster.wait_for_nodes()
joined, frames, error = [], 0, None

def join():
    time.sleep(4)
    joined.append(subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
         "--address=" + cluster.address, "--num-cpus=2", '--resources={{"host": 2}}'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

try:
    with RayCollector(lambda: CountingEnv(5, sleep=0.002), None, frames_per_batch=100,
                      total_frames=3000, num_collectors=1, sync=False, replacement_timeout_s=12,
                      remote_configs={{"num_cpus": 1, "resources": {{"host": 1}}}},
                      ray_init_config={{"address": cluster.address}}) as collector:
        for i, batch in enumerate(collector):
            frames += batch.numel()
            if i == 3:
                lost = node.node_id
                cluster.remove_node(node, allow_graceful=False)
                if {join!r}:
                    threading.Thread(target=join).start()
except WorkerLostError as err:
    error = str(err)
print(json.dumps({{"frames": frames, "error": error, "lost": lost}}))
for process in joined:
    process.terminate()
    process.wait()
cluster.shutdown()
"""


def _drained(join: bool) -> tuple[dict, str]:
    script = textwrap.dedent(DRAINED).format(tests=str(TESTS), join=join)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_no_node_left_to_host_a_replacement_is_said_then_stops_the_run_by_name():
    result, log = _drained(join=False)
    lost = result["lost"][:8]
    waits = (
        "collector worker 0's replacement waits for a node with {'CPU': 1.0, 'host': 1.0}: no "
        f"live node has them off the nodes that look lost (nodes lost: {lost}); waiting up to "
        "12 s (collector.replacement_timeout_s) for one to join"
    )
    assert waits in log
    assert result["error"] == (
        "collector worker 0 was lost: no node could host its replacement within 12 s "
        "(collector.replacement_timeout_s): it needs {'CPU': 1.0, 'host': 1.0} off the nodes "
        f"that look lost, and no live node has them (nodes lost: {lost}); add a node with "
        "these resources, or lower the worker's (collector.num_cpus_per_collector, "
        "remote_configs)"
    )
    # what was served before it stopped: whole batches, short of the budget
    assert result["frames"] % 100 == 0 and 400 <= result["frames"] < 3000


def test_a_node_that_joins_hosts_the_replacement_and_no_frame_is_lost():
    result, log = _drained(join=True)
    assert "replacement waits for a node with" in log  # said while the cluster had none
    assert result["error"] is None
    assert result["frames"] == 3000


#: 2 gradient workers (each collecting in its own process) on nodes with the "gw" resource,
#: a third such node spare; after the 3rd iteration, partway into the 4th, the node of
#: gradient worker 1 is lost: its replacement starts on the spare node
GRADIENT_WORKER_NODE = """
import json, sys, threading, time
from ray.cluster_utils import Cluster
from fleetrl import Trainer
from fleetrl.setup.load import load_config

cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 2}})
nodes = [cluster.add_node(num_cpus=1, resources={{"gw": 1}}) for _ in range(3)]
cluster.wait_for_nodes()
config = load_config("ppo_cartpole", [
    "collector.num_collectors=0", "collector.frames_per_batch=512", "env.num_envs=4",
    "scheme.num_grad_workers=2", "scheme.grad_worker_resources={{gw: 1}}",
    "ppo.num_epochs=2", "ppo.num_mini_batch=4", "trainer.total_frames=12288",
    "trainer.target_return=null", "trainer.test_every=0", "trainer.checkpoint_every=0",
    "collector.address=" + cluster.address, "logging.progress_bar=false",
    "logging.tensorboard=false"])
trainer = Trainer(config, run_dir={run_dir!r})
lost, restarts, killers = [], [], []

def lose(node_id):
    time.sleep(0.3)  # partway into the next iteration: the worker's batch is in progress
    cluster.remove_node(next(n for n in nodes if n.node_id == node_id), allow_graceful=False)

def on_iteration(row, checkpoint):
    restarts[:] = trainer.learner.restarts
    if trainer.iterations == 3:
        node_id = trainer.learner.workers[1].ask("node_id")
        lost.append(node_id)
        killers.append(threading.Thread(target=lose, args=(node_id,)))
        killers[0].start()
    if trainer.iterations == 4:  # on a loaded machine the removal can land late: not after
        killers[0].join()        # the run's end, where no iteration would see the loss

trainer.train(on_iteration=on_iteration)
print(json.dumps({{"frames": trainer.frames, "iterations": trainer.iterations,
                  "restarts": restarts, "lost": lost}}))
cluster.shutdown()
"""


def test_a_gradient_workers_node_lost_mid_batch_ends_the_run_at_its_exact_budget(tmp_path):
    script = textwrap.dedent(GRADIENT_WORKER_NODE).format(run_dir=str(tmp_path / "run"))
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=400
    )
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["restarts"] == [0, 1]
    assert result["frames"] == 12288  # the lost batch counted once, not twice
    assert result["iterations"] == 12
    assert "gradient worker 1 died; starting incarnation 1" in out.stderr


def test_an_inference_servers_node_lost_loses_no_frame():
    # benchmarks/elastic_fleet.py's script: 2 collectors on one node, central inference on one
    # server placed by the "srv" resource, a second such node spare; after batch 20 the
    # server's node is lost: Ray restarts the server there and sends the requests again
    text = elastic_fleet.script(elastic_fleet.SERVER)
    out = subprocess.run([sys.executable, "-c", text], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["frames"] == 200 * 60  # the requests in flight are sent again
    assert result["moved"]  # Ray restarted the server on the spare node
    assert result["restarts"] == {"0": 0, "1": 0}  # the collectors' workers lived on
