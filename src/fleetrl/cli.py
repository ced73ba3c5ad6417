"""``fleetrl`` command line: train, eval, bench.

fleetrl train CONFIG [key=value ...] [--run-dir DIR]   (a YAML file, or a shipped config's name)
fleetrl train --resume RUN_DIR [key=value ...]
fleetrl eval RUN_DIR_OR_CHECKPOINT [--episodes N] [--seed S] [--video OUT.mp4]
fleetrl tune CONFIG [key=value ...] --search 'ppo.lr=loguniform(1e-4,1e-2)' [--samples N] ...
fleetrl tune --resume SWEEP_DIR
fleetrl report RUN_DIR [--plot OUT.png | --no-plot]
fleetrl configs [show NAME]      (the shipped configs: train one with fleetrl train NAME)
fleetrl bench NAME [args ...]   (from a repository checkout: see BENCHMARKS)

Start-up: this module imports neither torch, torchrl nor Ray (``fleetrl --help``
answers at once). ``fleetrl train`` reads the config's few keys that say
whether the run needs Ray before anything heavy is imported, and starts Ray in
the background (:class:`~fleetrl.distributed.runtime.RayStart`), so that Ray's processes
come up while this process imports torch, checks the config and builds the
networks.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleetrl.config import EvalActions
from fleetrl.errors import CheckpointError, ConfigError, FleetError, WorkerLostError

__all__ = ["BENCHMARKS", "benchmark_script", "build_parser", "main", "sweep_config"]


def _start_ray_early(args: argparse.Namespace, overrides: list[str], config: Any) -> Any:
    """Start Ray in the background when the run will need it, before the heavy imports.

    ``config``: the screened config of a new run; a resumed run's is read from its
    ``config.yaml`` with the overrides, unchecked (its full check follows, and says what is
    wrong with it)."""
    if config is None:
        from fleetrl.setup.parse import parse_config, read_yaml_mapping

        try:
            data = read_yaml_mapping(Path(args.resume) / "config.yaml", "--resume")
        except ConfigError:
            return None  # the resume says what is wrong
        config, _ = parse_config(data, overrides)
    address = config.collector.address
    if not config.uses_ray or not (address is None or isinstance(address, str)):
        return None
    from fleetrl.distributed.runtime import RayStart

    return RayStart({"address": address})


def _train(args: argparse.Namespace) -> int:
    overrides = [args.config] if args.resume and args.config and "=" in args.config else []
    overrides += args.overrides
    # a new run's config is screened first: a typo, a value out of range, a missing file or
    # a bad override is refused before torch, torchrl or Ray is imported, and Ray started
    from fleetrl.setup.screen import screen_file  # imports no torch

    config = None if args.resume else screen_file(args.config, args.overrides)
    ray_start = _start_ray_early(args, overrides, config)
    try:
        code = _run_training(args, overrides, config)
    except BaseException:
        # the run's own error is the one to report, at once: the early Ray start is nobody's
        # now (its own error, if it failed too, says nothing more), and is not waited for
        if ray_start is not None:
            ray_start.abandon()
        raise
    if ray_start is not None and ray_start.wait():  # this process started Ray: it stops it
        import ray

        ray.shutdown()
    return code


def _run_training(args: argparse.Namespace, overrides: list[str], config: Any) -> int:
    """Train (``config``: a new run's screened config; None: resume ``args.resume``)."""
    from fleetrl.distributed.runtime import pin_threads

    pin_threads(1)  # imports torch: after Ray's start has begun
    from fleetrl.run.trainer import Trainer
    from fleetrl.setup.resume import RunComplete
    from fleetrl.setup.verify import check_config

    if args.resume:
        try:
            trainer = Trainer.from_run_dir(args.resume, overrides)
        except RunComplete as done:  # no failure: a supervisor that resumes until 0 stops here
            print(done)
            return 0
    else:
        # the env's checks: the screen's rules passed already and are not run again
        trainer = Trainer(check_config(config, screened=True), run_dir=args.run_dir)
    print(f"run directory: {trainer.run_dir}")
    try:
        last = trainer.train()
    except WorkerLostError as err:  # e.g. no node left to host a replacement: resume later
        from fleetrl.run.checkpoint import latest_checkpoint

        newest = latest_checkpoint(trainer.run_dir)
        kept = f"its newest checkpoint is {newest}" if newest else "it wrote no checkpoint yet"
        print(
            f"fleetrl train: {err}\nfleetrl train: the run stopped at {trainer.frames:,} frames; "
            f"{kept}; continue with: fleetrl train --resume {trainer.run_dir}",
            file=sys.stderr,
        )
        return 2
    if trainer.interrupted is not None:
        print(
            f"fleetrl train: stopped by {trainer.interrupted.name} at {trainer.frames:,} frames; "
            f"checkpoint written; continue with: fleetrl train --resume {trainer.run_dir}",
            file=sys.stderr,
        )
        return 128 + int(trainer.interrupted)  # the shell's code for "ended by this signal"
    print(
        f"frames {trainer.frames:,}  iterations {trainer.iterations}  episodes {trainer.episodes}  "
        f"train return {last.get('train/episode_return', float('nan')):.1f}  "
        f"fps {last.get('time/fps', float('nan')):,.0f}  "
        f"start-up {trainer.startup_s or float('nan'):.2f} s"
    )
    if trainer.reached_target:
        print(
            f"target return {trainer.config.trainer.target_return} reached at "
            f"{trainer.frames:,} frames, judged on {trainer.target_judged_on()}"
        )
    if trainer.eval_history:
        frames, value = trainer.eval_history[-1]
        when = "the final policy"  # or an earlier one: the summary says which
        if frames != trainer.frames:
            when = f"not the final policy's, at {trainer.frames:,} frames"
        print(f"last evaluation return {value:.1f} at {frames:,} frames ({when})")
    if trainer.last_checkpoint is not None:
        from fleetrl.run.checkpoint import file_size

        print(f"checkpoint {trainer.last_checkpoint.name}: {file_size(trainer.last_checkpoint)}")
    print(f"logs, checkpoints and learning_curve.png in {trainer.run_dir}")
    return 0


STATE_MISFIT = (
    "checkpoint {path} is invalid: its algorithm state does not fit a {algorithm} "
    "built from its own config ({reason}); pass a checkpoint written by fleetrl train"
)
GROUPED_VIDEO_MSG = (
    "--video={video!r} is invalid with env.id={env_id!r}: videos film gymnasium envs and "
    "PettingZoo envs (mpe2:...), not VMAS scenarios yet (VMAS draws through pyglet); leave "
    "out --video to evaluate the team return"
)


def _report(args: argparse.Namespace) -> int:
    from fleetrl.run.report import report

    print(report(args.run, plot=None if args.no_plot else args.plot))
    return 0


def sweep_config(args: argparse.Namespace) -> Any:
    """The checked config of ``fleetrl tune CONFIG [overrides] [flags]``: the file's, its
    ``tune`` section set by the flags (``--search`` adds to ``tune.search``)."""
    from fleetrl.setup.load import config_from_dict
    from fleetrl.setup.screen import read_config_file

    data = read_config_file(args.config)  # a file, or a shipped config's name
    section = data.setdefault("tune", {})
    if not isinstance(section, dict):
        raise ConfigError([f"tune={section!r} is invalid: must be a mapping of tune keys"])
    search = section.setdefault("search", {})
    if not isinstance(search, dict):
        raise ConfigError([f"tune.search={search!r} is invalid: must be a mapping"])
    for text in args.search:
        key, _, spec = text.partition("=")
        search[key.strip()] = spec.strip()
    flags = {
        "samples": args.samples,
        "scheduler": args.scheduler,
        "searcher": args.searcher,
        "metric": args.metric,
        "mode": args.mode,
        "max_concurrent": args.max_concurrent,
        "dir": args.dir,
    }
    section.update({k: v for k, v in flags.items() if v is not None})
    return config_from_dict(data, args.overrides)


def _tune(args: argparse.Namespace) -> int:
    from fleetrl.distributed.runtime import pin_threads

    pin_threads(1)
    from fleetrl.run.sweep import tune

    result = tune(resume=args.resume) if args.resume else tune(sweep_config(args))
    print(result.table())
    if result.best is not None:
        print(f"best config: {result.best_config} (train it: fleetrl train {result.best_config})")
    print(f"trials.csv, learning_curves.png and each trial's run directory in {result.directory}")
    if result.interrupted:
        print(
            f"fleetrl tune: stopped before every trial finished; continue with: "
            f"fleetrl tune --resume {result.directory}",
            file=sys.stderr,
        )
        return 130
    if result.errors:
        print(
            f"fleetrl tune: {len(result.errors)} of {len(result.trials)} trials failed; "
            "their error files are in the table",
            file=sys.stderr,
        )
        return 1
    return 0


UNKNOWN_CONFIG_MSG = "fleetrl configs show {name}: no shipped config has that name; {hint}"


def _configs(args: argparse.Namespace) -> int:
    from fleetrl.setup.shipped import shipped_config, shipped_configs

    if args.action == "show":
        path = shipped_config(args.name)
        if path is None:
            import difflib

            names = [c.name for c in shipped_configs()]
            close = difflib.get_close_matches(args.name, names, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else "fleetrl configs lists them"
            print(UNKNOWN_CONFIG_MSG.format(name=args.name, hint=hint), file=sys.stderr)
            return 2
        print(path.read_text(), end="")
        return 0
    configs = shipped_configs()
    width = max(len(c.name) for c in configs) + 2
    print(f"{'name':<{width}} {'algo':<7} {'env':<24} reaches (measured by benchmarks/)")
    for config in configs:
        print(config.line(width))
    print(
        f"\n{len(configs)} configs in {configs[0].path.parent}\n"
        "train one: fleetrl train NAME [key=value ...]; copy one to edit: "
        "fleetrl configs show NAME > my.yaml"
    )
    return 0


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0]}" if lines else type(err).__name__


def _eval(args: argparse.Namespace) -> int:
    import torch
    from torchrl.envs.utils import ExplorationType

    from fleetrl.algorithms.base import NetworkMisfit
    from fleetrl.envs.make import create_env_fn
    from fleetrl.envs.registry import EnvKind, lookup_id
    from fleetrl.run.checkpoint import CUSTOM_MODULES_HINT, load_checkpoint, newest_checkpoint
    from fleetrl.run.evaluate import eval_exploration, evaluate
    from fleetrl.setup.build import make_algorithm
    from fleetrl.setup.load import config_from_dict

    video = None
    if args.video is not None:  # a path that cannot be written fails before any work
        from fleetrl.collectors.video import check_video_path

        video = check_video_path(args.video, "--video")
    episodes = args.episodes or (1 if video else 20)
    target = Path(args.target)
    if target.is_dir():  # a run directory: its newest checkpoint that loads
        path, state = newest_checkpoint(target / "checkpoints")
    else:
        path, state = target, load_checkpoint(target)
    try:
        config = config_from_dict(state["config"])
    except ConfigError as err:  # e.g. a key renamed since the run: say whose config it is
        raise ConfigError([f"the config in checkpoint {path}: {p}" for p in err.problems]) from None
    if video is not None and lookup_id(str(config.env.id))[0] is EnvKind.VMAS:  # before any episode
        raise ConfigError([GROUPED_VIDEO_MSG.format(video=str(video), env_id=config.env.id)])
    spec = create_env_fn(config.env)  # an Atari run evaluates with its engine and preprocessing
    exploration = eval_exploration(config, args.actions)  # default: the run's trainer.eval_actions
    algorithm = make_algorithm(config)  # unseeded: the checkpoint's weights are loaded next
    try:
        algorithm.load_state_dict(state["algorithm"])
    except NetworkMisfit as err:  # other networks than the config builds: say it and why
        raise CheckpointError(
            STATE_MISFIT.format(path=path, algorithm=config.algorithm, reason=err)
            + CUSTOM_MODULES_HINT
        ) from None
    except (KeyError, RuntimeError, TypeError, ValueError) as err:  # torch's size/key mismatches
        raise CheckpointError(
            STATE_MISFIT.format(path=path, algorithm=config.algorithm, reason=_first_line(err))
        ) from None
    if video is not None:
        from fleetrl.collectors.video import record_video

        recorded = record_video(
            algorithm.policy,
            spec,
            video,
            num_episodes=episodes,
            seed=args.seed,
            max_episode_steps=config.env.max_episode_steps,
            exploration_type=exploration,
        )
        returns = torch.tensor(recorded.returns)
    else:
        returns = evaluate(
            algorithm.policy,
            spec,
            episodes,
            seed=args.seed,
            max_episode_steps=config.env.max_episode_steps,
            exploration_type=exploration,
        )
    acting = "deterministic" if exploration is ExplorationType.DETERMINISTIC else "sampled"
    print(
        f"{path}: {config.algorithm} on {config.env.id}, {episodes} episodes, {acting} actions: "
        f"mean return {returns.mean():.2f} +- {returns.std(unbiased=False):.2f}"
    )
    if video is not None:
        print(
            f"video {video}: {recorded.frames} frames ({recorded.height}x{recorded.width}, "
            f"{recorded.fps:g} fps), episode lengths {recorded.lengths}"
        )
    return 0


#: the scripts ``fleetrl bench NAME`` runs, from the checkout's ``benchmarks/`` folder
BENCHMARKS = (
    "atari_learning",
    "atari_peer",
    "atari_throughput",
    "collector_throughput",
    "conv_memory_format",
    "decoupled",
    "elastic_fleet",
    "fleet_scale",
    "inference_server",
    "learner_throughput",
    "marl",
    "memory",
    "mujoco_collection",
    "mujoco_learning",
    "node_loss",
    "normalization_overhead",
    "ray_throughput",
    "scheme_modes",
    "startup",
    "sweep_best",
    "time_to_solve",
    "video_cost",
    "wire_unpack",
    "worker_memory",
)

NEEDS_CHECKOUT = (
    "fleetrl bench {name}: the benchmark scripts are not part of the installed package; they "
    "live in the benchmarks/ folder of a fleetrl repository checkout, and neither the current "
    "directory ({cwd}) nor the checkout this fleetrl was installed from holds {script}. Clone "
    "the repository, install it from there (make venv, or pip install torch==2.13.0 then "
    "pip install -e '.[dev]'), and run fleetrl bench {name} from its root"
)


def benchmark_script(name: str) -> Path | None:
    """Where benchmark ``name`` is: in ``./benchmarks`` (run from a checkout's root), else in
    the checkout this package was installed from in editable mode (src layout); None when
    this fleetrl is installed from a wheel, away from any checkout."""
    here = Path("benchmarks") / f"{name}.py"
    installed_from = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    return next((p for p in (here, installed_from) if p.is_file()), None)


def _bench(args: argparse.Namespace) -> int:
    script = benchmark_script(args.name)
    if script is None:
        print(
            NEEDS_CHECKOUT.format(
                name=args.name, cwd=Path.cwd(), script=f"benchmarks/{args.name}.py"
            ),
            file=sys.stderr,
        )
        return 2
    return subprocess.call([sys.executable, str(script), *args.rest])


def _check_train_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse combinations that would silently do something else (argparse exits with 2)."""
    config = args.config if args.config and "=" not in args.config else None
    if args.resume:
        if config:
            parser.error(
                f"{config} and --resume {args.resume}: give one; a resumed run keeps its own "
                "config.yaml (change a setting with key=value after --resume RUN_DIR)"
            )
        if args.run_dir:
            parser.error(
                f"--run-dir {args.run_dir} and --resume {args.resume}: give one; a resumed run "
                "writes to the directory it resumes"
            )
    elif not args.config:
        parser.error(
            "give a config file or a shipped config's name (e.g. ppo_cartpole; fleetrl configs "
            "lists them), or --resume RUN_DIR"
        )
    elif not config:
        parser.error(
            f"{args.config!r} is an override, not a config file: give the config file first, "
            "e.g. fleetrl train configs/ppo_cartpole.yaml ppo.lr=1e-3"
        )


def _check_tune_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.resume:
        given = [
            name
            for name, value in (
                ("a config file", args.config),
                ("overrides", args.overrides),
                ("--search", args.search),
                ("--samples", args.samples),
                ("--scheduler", args.scheduler),
                ("--searcher", args.searcher),
                ("--metric", args.metric),
                ("--mode", args.mode),
                ("--max-concurrent", args.max_concurrent),
                ("--dir", args.dir),
            )
            if value
        ]
        if given:
            parser.error(
                f"--resume {args.resume} continues a sweep as it was started: drop "
                f"{', '.join(given)}"
            )
    elif not args.config or "=" in args.config:
        parser.error("give a config file (e.g. configs/tune_ppo_cartpole.yaml), or --resume DIR")
    for text in args.search:
        if "=" not in text:
            parser.error(
                f"--search {text!r} is invalid: write KEY=DIST, e.g. "
                "--search 'ppo.lr=loguniform(1e-4, 1e-2)'"
            )


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``fleetrl`` argument parser and its subcommands' parsers, by name (the docs'
    command-line reference is generated from them)."""
    from fleetrl import __version__

    parser = argparse.ArgumentParser(
        prog="fleetrl", description="Distributed RL collection and training on Ray."
    )
    parser.add_argument("--version", action="version", version=f"fleetrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser(
        "train",
        help="train from a YAML config",
        description="Train from a YAML config, with key=value overrides, or resume a run.",
    )
    train.add_argument(
        "config",
        nargs="?",
        help="a YAML config file, or the name of a shipped config (fleetrl configs lists "
        "them) when no file of that name is here",
    )
    train.add_argument("overrides", nargs="*", help="key=value overrides, e.g. ppo.lr=1e-3")
    train.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    train.add_argument(
        "--run-dir", help="where to write logs and checkpoints (default: runs/<config name>_<time>)"
    )
    ev = sub.add_parser(
        "eval",
        help="evaluate a run's latest checkpoint (or a checkpoint file)",
        description="Evaluate a run's newest checkpoint that loads (or a checkpoint file), "
        "acting as the run's evaluations did (trainer.eval_actions), and optionally film the "
        "episodes.",
    )
    ev.add_argument("target", help="run directory or checkpoint file")
    ev.add_argument(
        "--episodes",
        type=int,
        default=None,
        help="episodes (default 20; with --video 1), episode i seeded seed + i",
    )
    ev.add_argument(
        "--actions",
        choices=[a.value for a in EvalActions],
        default=None,
        help="sample: actions drawn from the policy (as trained); deterministic: its "
        "deterministic action; auto: the algorithm's choice (default: the run's "
        "trainer.eval_actions)",
    )
    ev.add_argument("--seed", type=int, default=12345, help="seed of the first episode")
    ev.add_argument(
        "--video",
        metavar="OUT.mp4",
        help="record the episodes to this mp4 (one rgb_array env; reset frame + one per step)",
    )
    rep = sub.add_parser(
        "report",
        help="where a run's time went, from its metrics.csv",
        description="Summarize a run from its metrics.csv: frames, returns, lag, dropped "
        "work and restarts, frames/s over the run, and each part's share of the wall time "
        "(collect, learn, gradients, apply, publish, loop, evaluate, checkpoint, outside); "
        "writes a stacked plot of the parts' seconds per iteration.",
    )
    rep.add_argument("run", metavar="RUN_DIR", help="a run directory (it holds metrics.csv)")
    rep.add_argument(
        "--plot",
        metavar="OUT.png",
        default="",
        help="where to write the plot (default: RUN_DIR/time.png)",
    )
    rep.add_argument("--no-plot", action="store_true", help="print the report only")
    tn = sub.add_parser(
        "tune",
        help="sweep hyperparameters on Ray Tune",
        description="Run a hyperparameter sweep on Ray Tune: each trial a training run of "
        "CONFIG with the --search keys drawn from their distributions. The flags set the "
        "config's tune section (tune.samples, ...); --search adds to tune.search. Writes "
        "trials.csv, best.yaml, learning_curves.png and one run directory per trial.",
    )
    tn.add_argument("config", nargs="?", help="YAML config file (its tune: section is read)")
    tn.add_argument("overrides", nargs="*", help="key=value overrides of every trial's config")
    tn.add_argument(
        "--search",
        action="append",
        default=[],
        metavar="KEY=DIST",
        help="a key and its distribution: uniform(a,b), loguniform(a,b), randint(a,b), "
        "choice(v1,...) or grid(v1,...); repeat for more keys",
    )
    tn.add_argument("--samples", type=int, help="trials to run (tune.samples)")
    tn.add_argument("--scheduler", help="fifo, asha or pbt (tune.scheduler)")
    tn.add_argument("--searcher", help="random or optuna (tune.searcher)")
    tn.add_argument("--metric", help="the metrics.csv column to compare (tune.metric)")
    tn.add_argument("--mode", help="max or min (tune.mode)")
    tn.add_argument("--max-concurrent", type=int, help="trials at once (tune.max_concurrent)")
    tn.add_argument("--dir", help="where the sweep writes (tune.dir)")
    tn.add_argument("--resume", metavar="SWEEP_DIR", help="continue the sweep in SWEEP_DIR")
    cf = sub.add_parser(
        "configs",
        help="list the shipped configs, or print one",
        description="List the configs that ship with fleetrl: name, algorithm, env, and what "
        "each reaches in what time (from the benchmark results). 'fleetrl configs show NAME' "
        "prints one, to copy and edit: fleetrl configs show ppo_cartpole > my.yaml. Train "
        "one by its name: fleetrl train ppo_cartpole.",
    )
    cf.add_argument(
        "action", nargs="?", choices=["list", "show"], default="list", help="list (default) or show"
    )
    cf.add_argument("name", nargs="?", help="with show: the config's name (e.g. ppo_cartpole)")
    bench = sub.add_parser(
        "bench",
        help="run a benchmark script from a checkout's benchmarks/",
        description="Run a benchmark script from the benchmarks/ folder of a fleetrl "
        "repository checkout (the scripts are not installed with the package); the arguments "
        "after NAME go to the script.",
    )
    bench.add_argument(
        "name", choices=BENCHMARKS, metavar="NAME", help=f"one of: {', '.join(BENCHMARKS)}"
    )
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="the script's own arguments")
    return parser, {
        "train": train,
        "eval": ev,
        "report": rep,
        "tune": tn,
        "configs": cf,
        "bench": bench,
    }


def main(argv: list[str] | None = None) -> int:
    parser, commands = build_parser()
    train, ev = commands["train"], commands["eval"]
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may also come after options (e.g. after --run-dir)
    stray = [e for e in extra if e.startswith("-") or "=" not in e]
    if stray or (extra and args.command not in ("train", "tune")):
        parser.error(f"unrecognized arguments: {' '.join(stray or extra)}")
    if args.command == "train":
        args.overrides = [*args.overrides, *extra]
        _check_train_arguments(train, args)
    if args.command == "tune":
        args.overrides = [*args.overrides, *extra]
        _check_tune_arguments(commands["tune"], args)
    if args.command == "configs" and (args.action == "show") != (args.name is not None):
        commands["configs"].error(
            "give a name after show (fleetrl configs show ppo_cartpole), and none after list"
        )
    if args.command == "eval" and args.episodes is not None and args.episodes < 1:
        ev.error(f"--episodes {args.episodes} is invalid: must be >= 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # torchrl's INFO notes (e.g. each replay storage it allocates) are not the user's: its
    # level is read from RL_LOGGING_LEVEL when torchrl is first imported, after this
    os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")
    # fleetrl's own notes too (each checkpoint and its size, a resume, a compile, a video),
    # for this command only (main() also runs inside other programs, e.g. tests)
    ours = logging.getLogger("fleetrl")
    level = ours.level
    ours.setLevel(logging.INFO)
    try:
        run = {
            "train": _train,
            "eval": _eval,
            "report": _report,
            "tune": _tune,
            "configs": _configs,
            "bench": _bench,
        }
        return run[args.command](args)
    except FleetError as err:
        print(f"fleetrl {args.command}: {err}", file=sys.stderr)
        return 2
    finally:
        ours.setLevel(level)


if __name__ == "__main__":
    sys.exit(main())
