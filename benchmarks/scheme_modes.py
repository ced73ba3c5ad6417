"""The training scheme's modes side by side: PPO on CartPole-v1, on this machine, in one run.

For each mode a fresh process trains its shipped config until the mean return
of the last 20 training episodes reaches 475 (or the frame budget runs out):

    central        configs/ppo_cartpole.yaml                one learner, 2 Ray collectors
    parallel       configs/ppo_cartpole_parallel.yaml       2 gradient workers, sync gradients
    async          configs/ppo_cartpole_async.yaml          2 gradient workers, async gradients
    decentralized  configs/ppo_cartpole_decentralized.yaml  2 gradient workers, gloo all-reduce

It reports frames/s and updates/s (optimizer steps per second) over the run,
the wall time to 475 from process start, and the frames it took; medians over
the seeds.

    python benchmarks/scheme_modes.py                 # the modes on this machine
    python benchmarks/scheme_modes.py --multinode     # also: each mode on a local 3-node Ray
                                                      # cluster, checked for correctness

``--multinode`` starts a head and two worker nodes (``ray.cluster_utils.Cluster``),
places each gradient worker on its own worker node, runs 3 iterations per mode
and checks: the frame count, where the workers ran, that every replica holds
the same weights (sync after the broadcast, decentralized by construction), and
that async gradients are applied or dropped, never lost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import textwrap

from common import machine, print_table, run_json, write_json
from time_to_solve import ROOT, run_fleetrl

MODES = {
    "central": "ppo_cartpole.yaml",
    "parallel (sync)": "ppo_cartpole_parallel.yaml",
    "async": "ppo_cartpole_async.yaml",
    "decentralized": "ppo_cartpole_decentralized.yaml",
}

MULTINODE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import ray, torch
    from ray.cluster_utils import Cluster
    from fleetrl.setup.build import make_algorithm
    from fleetrl.setup.load import load_config
    from fleetrl.learners import UpdateWorker

    root = sys.argv[1]
    torch.set_num_threads(1)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    # one "grad_slot" per worker node: two gradient workers land on two different nodes
    nodes = [cluster.add_node(num_cpus=1, resources={"grad_slot": 1}) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR")
    out = {"worker_nodes": sorted(n.node_id for n in nodes), "head": cluster.head_node.node_id}
    for mode, name in [
        ("sync", "ppo_cartpole_parallel.yaml"),
        ("async", "ppo_cartpole_async.yaml"),
        ("decentralized", "ppo_cartpole_decentralized.yaml"),
    ]:
        overrides = ["ppo.num_epochs=2", "ppo.num_mini_batch=2", "scheme.grad_worker_resources={grad_slot: 1}"]
        config = load_config(f"{root}/configs/{name}", overrides)
        uw = UpdateWorker(config, make_algorithm(config, 0), seed=0)
        iterations = 3
        results = [uw.run_iteration() for _ in range(iterations)]
        steps, fpb = uw.algorithm.steps_per_batch, config.collector.frames_per_batch
        replicas = uw.replica_weights()  # sync: both replicas hold the last broadcast version
        out[mode] = {
            "frames": sum(r["frames"] for r in results),
            "expected_frames": iterations * 2 * fpb,
            "applied": uw.applied_gradients,
            "dropped": uw.dropped_gradients,
            "gradients": iterations * 2 * steps if mode == "async" else iterations * steps,
            "replicas_identical": all(
                torch.equal(replicas[0].get(k), replicas[1].get(k)) for k in replicas[0].keys(True, True)
            ),
            "nodes": sorted(ray.get([w.node_id.remote() for w in uw.workers])),
        }
        uw.shutdown()
    print(json.dumps(out))
    ray.shutdown()
    cluster.shutdown()
    """
)


def run_multinode() -> dict:
    result, _ = run_json([sys.executable, "-c", MULTINODE_SCRIPT, str(ROOT)], cwd=ROOT, timeout=600)
    checks = {}
    for mode in ("sync", "async", "decentralized"):
        r = result[mode]
        ok = [
            r["frames"] == r["expected_frames"],
            r["nodes"] == result["worker_nodes"],  # one gradient worker on each worker node
            r["applied"] + r["dropped"] == r["gradients"],
        ]
        if mode != "async":
            ok.append(r["replicas_identical"] and r["dropped"] == 0)
        checks[mode] = all(ok)
    result["checks"] = checks
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--budget", type=int, default=300_000, help="frames before giving up")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument(
        "--multinode", action="store_true", help="also check a local 3-node cluster"
    )
    args = parser.parse_args()

    results: dict[str, list[dict]] = {}
    for mode in args.modes:
        results[mode] = [run_fleetrl(seed, args.budget, [], MODES[mode]) for seed in args.seeds]
        print(f"{mode}: {results[mode]}", flush=True)
    rows, summary = [], {}
    for mode, runs in results.items():
        med = {
            k: statistics.median(r[k] for r in runs)
            for k in ("wall_s", "frames", "fps", "updates_per_s")
        }
        solved = sum(r["solved"] for r in runs)
        summary[mode] = {**med, "solved": solved, "runs": runs}
        rows.append(
            [
                mode,
                MODES[mode],
                f"{solved}/{len(runs)}",
                f"{med['fps']:,.0f}",
                f"{med['updates_per_s']:.0f}",
                f"{med['wall_s']:.1f}",
                f"{med['frames']:,.0f}",
            ]
        )
    print()
    print_table(
        ["mode", "config", "solved", "frames/s", "updates/s", "wall s to 475", "frames to 475"],
        rows,
    )
    if args.multinode:
        multi = run_multinode()
        summary["multinode"] = multi
        print()
        print_table(
            ["mode (3-node cluster)", "frames", "applied", "dropped", "replicas identical", "ok"],
            [
                [
                    mode,
                    f"{multi[mode]['frames']}/{multi[mode]['expected_frames']}",
                    str(multi[mode]["applied"]),
                    str(multi[mode]["dropped"]),
                    str(multi[mode]["replicas_identical"]),
                    "yes" if multi["checks"][mode] else "NO",
                ]
                for mode in ("sync", "async", "decentralized")
            ],
        )
    path = write_json(
        "scheme_modes", {"machine": machine(), "args": vars(args), "results": summary}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
