"""The RLlib peer of ``atari_throughput.py``: its env runners on the same Pong and policy size.

RLlib runs in its own virtualenv (``common.ensure_rllib_venv``, with ale-py at
our version and OpenCV for its Atari wrappers added), in a subprocess running
``rllib_atari_sampler.py``; this module starts it, reads its JSON and compares
it with fleetrl's rows. A peer that cannot run here is recorded with the
reason, never fatal.

The RLlib rows are measured in their own process after fleetrl's, not paired
round by round with them: the ratios are of medians.
"""

from __future__ import annotations

from pathlib import Path

from common import ensure_rllib_venv, print_table, run_json

SAMPLER = Path(__file__).resolve().parent / "rllib_atari_sampler.py"
LABELS = {
    "local_random": "rllib: local env runner, {envs} envs, random actions",
    "local": "rllib: local env runner, {envs} envs",
    "remote": "rllib: {runners} remote env runners x {envs} envs",
}


def atari_requirements() -> list[str]:
    """What RLlib's Atari wrappers need beyond ray[rllib]: ale-py as ours, OpenCV."""
    import ale_py

    return [f"ale-py=={ale_py.__version__}", "opencv-python-headless"]


def run_rllib(args, num_runners: int) -> dict:
    """Install RLlib's venv if missing, sample Pong there; the sampler's JSON.

    Raises ``RuntimeError`` with the sampler's stderr tail when it fails.
    """
    python = ensure_rllib_venv(atari_requirements())
    cmd = [
        str(python),
        str(SAMPLER),
        f"--envs={args.envs}",
        f"--steps={args.steps}",
        f"--rounds={args.rllib_rounds}",
        f"--runners={num_runners}",
    ]
    print(f"rllib: {' '.join(cmd[1:])}", flush=True)
    return run_json(cmd)[0]


def best_of(rows: dict[str, float], prefix: str) -> tuple[str | None, float | None]:
    """The fastest row whose key starts with ``prefix``."""
    keys = [k for k in rows if k.startswith(prefix)]
    if not keys:
        return None, None
    best = max(keys, key=rows.get)
    return best, rows[best]


def rllib_ratios(single: dict | None, ray_res: dict | None, rllib: dict) -> dict:
    """fleetrl's best SyncDataCollector and RayCollector rows over RLlib's, like for like."""
    med = rllib["agent_steps_per_s"]
    sync_key, sync = best_of(single["agent_steps_per_s"], "fleetrl_") if single else (None, None)
    ray_key, ray_v = best_of(ray_res["agent_steps_per_s"], "ray_") if ray_res else (None, None)
    # the same kind of engine as RLlib's: ALE in a gymnasium vector env, preprocessed in Python
    gym_v = single["agent_steps_per_s"].get("fleetrl_gymnasium") if single else None
    return {
        "fleetrl_sync_row": sync_key,
        "fleetrl_ray_row": ray_key,
        "fleetrl_sync_vs_rllib_local": sync / med["local"] if sync else None,
        "fleetrl_ray_vs_rllib_remote": ray_v / med["remote"] if ray_v else None,
        "fleetrl_gymnasium_vs_rllib_local": gym_v / med["local"] if gym_v else None,
    }


def rllib_phase(args, num_runners: int, single: dict | None, ray_res: dict | None) -> dict:
    """The peer's result for the JSON: rows, model, ratios; or ``not_run`` with the reason."""
    try:
        rllib = run_rllib(args, num_runners)
    except Exception as err:  # no RLlib here (install, import or run failed): say why
        reason = f"{type(err).__name__}: {err}"
        print(f"rllib: not run ({reason.splitlines()[0]})", flush=True)
        return {"not_run": reason}
    rllib["ratios"] = rllib_ratios(single, ray_res, rllib)
    return rllib


def report_rllib(res: dict, frame_skip: int) -> None:
    """The RLlib rows and the ratios of fleetrl's best rows to them."""
    if "not_run" in res:
        print(f"\nRLlib: not run: {res['not_run'].splitlines()[-1]}")
        return
    a = res["args"]
    m = res["model"]
    print(
        f"\nRLlib {res['versions']['ray']} env runners, same Pong ({a['envs']} envs each), "
        f"obs {m['observation_space']['shape']} {m['observation_space']['dtype']}, "
        f"conv {[w[0] for w in m['conv_weights']]} + {m['linear_weights'][0][0]}, "
        f"1 torch thread per process"
    )
    rows = [
        [
            LABELS[k].format(envs=a["envs"], runners=a["runners"]),
            f"{v:,.0f}",
            f"{v * frame_skip:,.0f}",
        ]
        for k, v in res["agent_steps_per_s"].items()
    ]
    print_table(["contestant", "agent steps/s", "emulator frames/s"], rows)
    r = res["ratios"]
    for key, row, peer in (
        ("fleetrl_sync_vs_rllib_local", "fleetrl_sync_row", "local env runner"),
        ("fleetrl_ray_vs_rllib_remote", "fleetrl_ray_row", "remote env runners"),
        ("fleetrl_gymnasium_vs_rllib_local", None, "local env runner, same kind of engine"),
    ):
        value = r[key]
        text = f"{value:.2f}x" if value is not None else "- (fleetrl row not measured in this run)"
        name = f"fleetrl best ({r[row] or '-'})" if row else "fleetrl_gymnasium"
        print(f"{name} / RLlib {peer}: {text}")
