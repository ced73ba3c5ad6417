"""Start-up order: the Trainer starts Ray, with workers that preload fleetrl, before its learner.

Runs in a fresh process: the session's Ray (``ray_session``) is already up, and a
Trainer only starts a Ray that is not running.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fleetrl.startup import PRELOAD_MODULES

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, math, sys, time
from pathlib import Path

import ray

from fleetrl import Trainer, load_config
from fleetrl.errors import ConfigError


@ray.remote(num_cpus=0)
def preloaded(modules):
    # defined here, pickled by value: this task itself imports nothing from fleetrl
    return [m in sys.modules for m in modules]


out, run = {}, Path(sys.argv[1])
config = load_config("configs/ppo_cartpole.yaml", [
    "env.num_envs=2", "collector.frames_per_batch=256", "trainer.total_frames=256",
    "trainer.test_every=0", "trainer.checkpoint_every=0", "logging.progress_bar=false",
    "logging.tensorboard=false", "logging.plot=false"])

# a constructor that refuses the run after Ray started leaves no Ray behind
taken = run / "taken"
taken.mkdir(parents=True)
(taken / "config.yaml").write_text("algorithm: ppo\n")
try:
    Trainer(config, run_dir=taken)
except ConfigError as err:
    out["refused"] = str(err)
out["ray_after_refusal"] = ray.is_initialized()

start = time.perf_counter()
trainer = Trainer(config, run_dir=run / "run")
out["ray_after_constructor"] = ray.is_initialized()
out["preloaded"] = ray.get(preloaded.remote(json.loads(sys.argv[2])))
metrics = trainer.train()
out["wall_s"] = time.perf_counter() - start
out["frames"] = metrics["train/frames"]
out["startup_s"] = trainer.startup_s
out["ray_after_train"] = ray.is_initialized()
print(json.dumps(out))
"""


def test_trainer_starts_ray_with_preloading_workers_before_training_and_stops_it(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), json.dumps(list(PRELOAD_MODULES))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "holds a run already" in out["refused"]
    assert out["ray_after_refusal"] is False
    # Ray is up once the constructor returns, before train() starts the collectors
    assert out["ray_after_constructor"] is True
    # and its workers imported the collector actor's module as they started
    assert out["preloaded"] == [True] * len(PRELOAD_MODULES)
    assert out["frames"] == 256
    assert 0 < out["startup_s"] < out["wall_s"]
    # the Trainer shuts down the Ray it started
    assert out["ray_after_train"] is False
