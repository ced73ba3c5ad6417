#!/usr/bin/env bash
# fleetrl's GPU program (issue 40): everything that needs a GPU, in one go on the device
# machine (one H100 or H200, 16 cores, 128 GiB, no network), from the repository's root, as
# the last call that benchmarks/gpu_prepare.py prints:
#
#   bash benchmarks/gpu_program.sh                                     # there
#   GPU_PROGRAM_DRY=1 OUT=/tmp/gpu-out bash benchmarks/gpu_program.sh  # here: CPU, ~5 min
#
# 0. setup: installs the carried wheels (.whl/run, with Ray re-joined from its parts when
#    it was split over two calls) into /tmp/site; fleetrl itself runs from src/ (PYTHONPATH,
#    no pip); BLAS and OpenMP get one thread (collectors are processes, a core each); facts
#    of the machine (nvidia-smi, torch and CUDA, cores, memory, versions) are recorded;
# 1. tests: pytest -m cuda over the test files that carry the marker
#    (tests/integration/test_cuda.py, and any other);
# 2. learner: benchmarks/learner_throughput.py --device cuda: eager and CUDA graphs on the
#    cases that need no MuJoCo (ppo_atari first: the CNN is where a GPU tells);
# 3. inference: benchmarks/inference_server.py on Pong with 8, 14, 4, 2 and 1 env workers
#    (the target's counts first), one run each under its own cap, N raw loops against local
#    inference and a CUDA server;
# 4. learner_compiled: the learner benchmark again with --compile on ppo_atari (compiling
#    takes tens of seconds a contestant: a run of its own, so that it cannot cost the first
#    its figures);
# 5. appo: fleetrl train configs/appo_atari.yaml on Breakout (the game of the Atari learning
#    page, benchmarks/atari_learning.py) with a CUDA learner and 14 CPU collectors,
#    for the time left, then stopped by SIGINT (a checkpoint, metrics.csv, the curve).
#
# Each part runs under its own time budget (timeout), and a part runs whatever the one
# before did; the whole takes GPU_PROGRAM_BUDGET_S (540 s), setup included, leaving the
# 600-s call a minute of slack. summary.json is rewritten after every part.
#
# Under $OUT (7 files; a call brings 8 back): summary.json (machine facts, each part's
# status, wall time and figures), program.log (everything printed), learner_throughput.json,
# inference_scaling.json, appo_metrics.csv, appo_learning_curve.png and extras.tgz (pytest's
# JUnit XML, each inference run's JSON, the APPO run's config, events and report).
#
# Budgets and sizes can be changed by environment variables (GPU_*), e.g. to rerun one
# part: GPU_PARTS="appo" bash benchmarks/gpu_program.sh. Exit status: 0 when every part was
# ok (the APPO run counts as ok when stopped at its budget with its metrics written), 1 when
# one was not, 3 when the wheels could not be installed.

set -u -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2

DRY=${GPU_PROGRAM_DRY:-0}  # 1: every part for seconds, on the CPU, with what $PY has
PY=${GPU_PYTHON:-python3}
OUT=${OUT:-/tmp/fleetrl-gpu-out}
SCRATCH=${GPU_SCRATCH:-/tmp/fleetrl-gpu}  # the benchmarks' copies and the runs
SITE=${GPU_SITE:-/tmp/site}                # where the wheels are installed
WHEELS=${GPU_WHEELS-$ROOT/.whl/run}        # carried by the program's call ('': none)
STASH=${GPU_STASH:-/tmp/fleetrl-whl}       # Ray's first part, left by the first call

if [[ $DRY == 1 ]]; then
    DEVICE=cpu
    PARTS=${GPU_PARTS-tests learner inference appo}  # learner_compiled: minutes on 2 cores
    WHEELS=${GPU_WHEELS:-}  # here: $PY's own packages, unless wheels are named
    TOTAL=${GPU_PROGRAM_BUDGET_S:-360}
    TESTS_S=${GPU_TESTS_S:-60} LEARNER_S=${GPU_LEARNER_S:-60}
    INFERENCE_S=${GPU_INFERENCE_S:-130} APPO_MAX_S=${GPU_APPO_S:-100}
    INFERENCE_RUN_S=${GPU_INFERENCE_RUN_S:-130}
    LEARNER_ARGS=${GPU_LEARNER_ARGS:---cases appo_cartpole --rounds 1}
    COMPILED_S=${GPU_COMPILED_S:-120}  # compiling on 2 cores: minutes
    COMPILED_ARGS=${GPU_COMPILED_ARGS:---compile --cases appo_cartpole --rounds 1}
    WORKLOAD=${GPU_INFERENCE_WORKLOAD:-cartpole}
    WORKERS=${GPU_INFERENCE_WORKERS:-1}
    INFERENCE_ARGS=${GPU_INFERENCE_ARGS:---envs 2 --steps 8 --batches 1 --rounds 1 --trips 20}
    COLLECTORS=${GPU_APPO_COLLECTORS:-1}
    APPO_ARGS=${GPU_APPO_ARGS:-env.num_envs=2 collector.frames_per_batch=64}
else
    DEVICE=cuda
    # the order: what has no figure yet first (inference), what has two runs' last (appo)
    PARTS=${GPU_PARTS-tests learner inference learner_compiled appo}
    TOTAL=${GPU_PROGRAM_BUDGET_S:-540}
    # budgets from the H200 runs: tests 47 s; the learner's 4 cases x 3 rounds 41 s (6 x 5
    # did not finish in 45 s); compiling ppo_atari 65 s (appo_cartpole never finished in 80)
    TESTS_S=${GPU_TESTS_S:-90} LEARNER_S=${GPU_LEARNER_S:-80} COMPILED_S=${GPU_COMPILED_S:-90}
    INFERENCE_S=${GPU_INFERENCE_S:-240} APPO_MAX_S=${GPU_APPO_S:-600}
    LEARNER_ARGS=${GPU_LEARNER_ARGS:---cudagraphs --rounds 3 --cases ppo_atari appo_cartpole dqn_cartpole ppo_cartpole impala_cartpole a2c_cartpole}
    COMPILED_ARGS=${GPU_COMPILED_ARGS:---compile --rounds 3 --cases ppo_atari}
    WORKLOAD=${GPU_INFERENCE_WORKLOAD:-pong}
    # the target's counts first (>= 2x local at 8+ workers), then the curve's other points
    WORKERS=${GPU_INFERENCE_WORKERS:-8 14 4 2 1}
    INFERENCE_RUN_S=${GPU_INFERENCE_RUN_S:-120}  # one worker count at most
    # the target's contestants (raw loops, local inference, a CUDA server over shared
    # memory); the CPU server and Ray-call rows are the CPU page's (inference_server.md)
    INFERENCE_ARGS=${GPU_INFERENCE_ARGS:---modes local server-cuda --envs 8 --steps 32 --batches 4 --rounds 3 --trips 200}
    COLLECTORS=${GPU_APPO_COLLECTORS:-14}  # 16 cores: 14 collectors, the learner, the rest
    APPO_ARGS=${GPU_APPO_ARGS:-}
fi
# one test's limit (pytest-timeout, which prints where it hung): under the part's budget,
# so that a hanging test costs only itself and the others still report
TEST_TIMEOUT_S=${GPU_TEST_TIMEOUT_S:-45}
# the test files that carry the cuda marker: collecting all of tests/ would only add the
# collection errors of modules whose packages (envpool, MuJoCo, Optuna...) are not there
TEST_PATHS=${GPU_TEST_PATHS:-$(grep -rlE 'mark\.cuda\b' tests --include='test_*.py' | sort)}
RESERVE_S=${GPU_RESERVE_S:-15}  # kept back for packing up after the last part
START=$SECONDS
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

mkdir -p "$OUT" "$SCRATCH"
LOG=$OUT/program.log
: >"$SCRATCH/parts.tsv"
exec > >(tee -a "$LOG") 2>&1  # everything printed is in program.log too
TEE=$!

say() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*"; }

left_s() { echo $((TOTAL - (SECONDS - START) - RESERVE_S)); }

# part NAME BUDGET GRACE SIGNAL COMMAND...: COMMAND under `timeout`, sent SIGNAL at
# BUDGET-GRACE s and killed at BUDGET s (both cut to the time left); its status recorded.
# SIGNAL INT goes to COMMAND alone (fleetrl train stops cleanly on it, and shuts Ray down);
# TERM goes to its whole process group (Ray's processes included).
part() {
    local name=$1 budget=$2 grace=$3 signal=$4
    shift 4
    local left
    left=$(left_s)
    ((budget > left)) && budget=$left
    if ((budget - grace < 5)); then
        say "== $name: skipped, ${left}s left"
        record "$name" skipped "" 0 "$budget" "$*"
        summary
        return 0
    fi
    say "== $name (budget ${budget}s): $*"
    local fg=() t0=$EPOCHREALTIME rc
    [[ $signal == INT ]] && fg=(--foreground)
    timeout "${fg[@]}" --signal="$signal" --kill-after="$grace" $((budget - grace)) "$@" </dev/null
    rc=$?
    local wall
    wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    local status=failed
    case $rc in
        0) status=ok ;;
        124) status=timeout ;;
        137) status=killed ;;
    esac
    say "== $name: $status (exit $rc) in ${wall}s"
    record "$name" "$status" "$rc" "$wall" "$budget" "$*"
    summary
    return 0
}

record() {  # name status rc wall_s budget_s command
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$SCRATCH/parts.tsv"
}

summary() {  # $OUT/summary.json from the facts, the parts' records and their result files
    OUT=$OUT SCRATCH=$SCRATCH STARTED=$STARTED ELAPSED=$((SECONDS - START)) TOTAL=$TOTAL \
        DRY=$DRY "$PY" - <<'PYEOF' || say "summary.json not written"
import csv, json, os, xml.etree.ElementTree as ET
from pathlib import Path

out, scratch = Path(os.environ["OUT"]), Path(os.environ["SCRATCH"])
facts = scratch / "facts.json"
parts = []
for row in csv.reader((scratch / "parts.tsv").open(), delimiter="\t"):
    name, status, rc, wall, budget, command = row
    parts.append({"name": name, "status": status, "exit": int(rc) if rc else None,
                  "wall_s": float(wall), "budget_s": int(budget), "command": command})

def detail(name):
    """A part's figures at a glance (the full ones are in its own file)."""
    try:
        if name == "tests":
            suite = ET.parse(scratch / "pytest_cuda.xml").getroot()
            suite = suite if suite.tag == "testsuite" else suite[0]
            return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
        if name.startswith("learner"):
            runs = json.loads((out / "learner_throughput.json").read_text())["runs"]
            cases = runs[name]["cases"]
            return {c: v.get("error") or {m: round(ms, 3) for m, ms in v["ms_per_step"].items()}
                    for c, v in cases.items()}
        if name.startswith("inference_w"):
            runs = json.loads((out / "inference_scaling.json").read_text())["runs"]
            workers = int(name.removeprefix("inference_w"))
            for run in runs:
                for res in run["results"]:
                    if res["workers"] == workers:
                        return {k: {"fps": round(r["fps"]), "x_local": r.get("x_local")}
                                for k, r in res["rows"].items()} | {"errors": run["errors"]}
        if name == "appo":
            rows = list(csv.DictReader((out / "appo_metrics.csv").open()))
            last = rows[-1]
            keys = ("train/frames", "train/episode_return", "time/fps", "time/elapsed_s",
                    "train/dropped_batches", "time/updates_per_s")
            return {"rows": len(rows), **{k: last.get(k) for k in keys}}
    except Exception as err:  # a part that wrote nothing: its status says why
        return {"unavailable": f"{type(err).__name__}: {err}"}
    return None

for p in parts:
    if p["status"] != "skipped":
        p["detail"] = detail(p["name"])
summary = {
    "program": "benchmarks/gpu_program.sh",
    "dry": os.environ["DRY"] == "1",
    "started": os.environ["STARTED"],
    "elapsed_s": int(os.environ["ELAPSED"]),
    "budget_s": int(os.environ["TOTAL"]),
    "machine": json.loads(facts.read_text()) if facts.exists() else None,
    "parts": parts,
    "files": sorted(p.name for p in out.iterdir()),
}
(out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
PYEOF
}

# ---------------------------------------------------------------- 0. setup
setup() {
    export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMEXPR_NUM_THREADS=1
    export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 RAY_USAGE_STATS_ENABLED=0
    export TORCHINDUCTOR_CACHE_DIR=$SCRATCH/inductor
    if [[ -n $WHEELS && -f $WHEELS/SHA256SUMS ]]; then
        local parts=() joined
        shopt -s nullglob
        parts=("$STASH"/*.part-* "$WHEELS"/*.part-*)
        shopt -u nullglob
        if ((${#parts[@]})); then  # Ray over two calls: its first part waits in $STASH
            joined=$SCRATCH/wheels/$(basename "${parts[-1]%.part-*}")
            mkdir -p "$SCRATCH/wheels"
            if [[ ! -f $STASH/$(basename "$joined").part-00 ]]; then
                say "Ray's first part is not in $STASH: this is not the machine the first call" \
                    "left it on (warm 30 s). Make the first call again, then this one at once."
                exit 3
            fi
            local name i
            name=$(basename "$joined")
            for i in $(printf '%s\n' "${parts[@]##*.part-}" | sort -u); do
                if [[ -f $STASH/$name.part-$i ]]; then cat "$STASH/$name.part-$i"; else
                    cat "$WHEELS/$name.part-$i"; fi
            done >"$joined"
            (cd "$(dirname "$joined")" && grep "  $(basename "$joined")\$" "$WHEELS/SHA256SUMS" |
                sha256sum -c -) || {
                say "Ray's wheel re-joined from its parts does not match SHA256SUMS"
                exit 3
            }
        fi
        say "installing $(ls "$WHEELS"/*.whl ${joined:+"$joined"} | wc -l) wheels into $SITE"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "$WHEELS"/*.whl ${joined:+"$joined"} || {
            say "pip install failed"
            exit 3
        }
        export PYTHONPATH=$ROOT/src:$SITE
    else
        say "no wheels (${WHEELS:-none named}): $PY's own packages are used"
        export PYTHONPATH=$ROOT/src
    fi
    # the benchmarks write their results beside themselves: copies, so the tree stays clean
    rm -rf "$SCRATCH/tree"
    mkdir -p "$SCRATCH/tree/benchmarks"
    cp benchmarks/*.py "$SCRATCH/tree/benchmarks/"
    ln -s "$ROOT/configs" "$SCRATCH/tree/configs"
    nvidia-smi 2>&1 | head -20
    ROOT=$ROOT SCRATCH=$SCRATCH DRY=$DRY "$PY" - <<'PYEOF'
import importlib.metadata, json, os, platform, re, shutil, subprocess, sys
from pathlib import Path

def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except Exception as err:
        return f"unavailable: {type(err).__name__}: {err}"

def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None

root, scratch = Path(os.environ["ROOT"]), Path(os.environ["SCRATCH"])
facts = {
    "kernel": platform.release(),
    "cpu_count": os.cpu_count(),
    "cpus_usable": len(os.sched_getaffinity(0)),
    "cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                       if l.startswith("model name")), platform.processor()),
    "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    "dev_shm_gib": round(shutil.disk_usage("/dev/shm").total / 2**30, 1),
    "tmp_free_gib": round(shutil.disk_usage("/tmp").free / 2**30, 1),
    "python": sys.version.split()[0],
    "python_executable": sys.executable,
    "nvidia_smi": run("nvidia-smi", "--query-gpu=name,memory.total,driver_version,"
                      "clocks.max.sm,power.limit", "--format=csv,noheader"),
    "torch_pinned_by_fleetrl": re.search(r'"torch([^"]*)"', (root / "pyproject.toml").read_text())[1],
    "source": (root / ".whl/run/SOURCE").read_text().strip()
              if (root / ".whl/run/SOURCE").exists() else None,
    "versions": {n: version(n) for n in ("torch", "triton", "numpy", "ray", "tensordict",
                 "torchrl", "gymnasium", "ale-py", "pytest", "opencv-python-headless")},
    "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "PYTHONPATH")},
}
try:
    import torch
    facts["torch"] = torch.__version__
    facts["torch_cuda"] = torch.version.cuda
    facts["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        facts["gpu"] = {"name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                        "capability": f"{p.major}.{p.minor}", "sms": p.multi_processor_count}
    import fleetrl, ray, tensordict, torchrl  # what every part needs
    facts["imports"] = "ok"
except Exception as err:
    facts["imports"] = f"{type(err).__name__}: {err}"
(scratch / "facts.json").write_text(json.dumps(facts, indent=2))
print(json.dumps(facts, indent=2))
PYEOF
    record setup ok 0 "$((SECONDS - START))" "$TOTAL" "install, facts"
    summary
}

# ---------------------------------------------------------------- 1. tests
tests() {
    # shellcheck disable=SC2086  # TEST_PATHS: paths, split on purpose
    part tests "$TESTS_S" 15 TERM "$PY" -m pytest -m cuda $TEST_PATHS -p no:cacheprovider -q \
        -v -rA --continue-on-collection-errors --timeout="$TEST_TIMEOUT_S" -o addopts="" \
        --junitxml="$SCRATCH/pytest_cuda.xml"
}

# ---------------------------------------------------------------- 2. learner
learner_run() {  # NAME BUDGET ARGS: one run of the learner benchmark; both runs in one file
    local name=$1 budget=$2 args=$3 bench=$SCRATCH/tree/benchmarks
    # shellcheck disable=SC2086  # ARGS: options, split on purpose
    part "$name" "$budget" 15 TERM "$PY" "$bench/learner_throughput.py" --device "$DEVICE" \
        $args --out "gpu_$name"
    SCRATCH=$SCRATCH OUT=$OUT "$PY" - <<'PYEOF'
import json, os
from pathlib import Path
results = Path(os.environ["SCRATCH"]) / "tree/benchmarks/results"
runs = {p.stem.removeprefix("gpu_"): json.loads(p.read_text())
        for p in sorted(results.glob("gpu_learner*.json"))}
Path(os.environ["OUT"], "learner_throughput.json").write_text(json.dumps({"runs": runs}, indent=1))
PYEOF
    summary
}

learner() { learner_run learner "$LEARNER_S" "$LEARNER_ARGS"; }

learner_compiled() { learner_run learner_compiled "$COMPILED_S" "$COMPILED_ARGS"; }

# ---------------------------------------------------------------- 3. inference
inference() {
    local bench=$SCRATCH/tree/benchmarks until=$((SECONDS + INFERENCE_S)) n budget
    for n in $WORKERS; do  # a run per worker count, each capped: one slow count costs itself
        budget=$((until - SECONDS))
        ((budget > INFERENCE_RUN_S)) && budget=$INFERENCE_RUN_S
        # shellcheck disable=SC2086
        part "inference_w$n" "$budget" 15 TERM "$PY" "$bench/inference_server.py" \
            --workloads "$WORKLOAD" --workers "$n" --no-torchrl --tag "_gpu_w$n" $INFERENCE_ARGS
        SCRATCH=$SCRATCH OUT=$OUT "$PY" - <<'PYEOF'
import json, os
from pathlib import Path
results = sorted((Path(os.environ["SCRATCH"]) / "tree/benchmarks/results").glob(
    "inference_server_gpu_w*.json"), key=lambda p: int(p.stem.rsplit("_w", 1)[1]))
runs = [json.loads(p.read_text()) for p in results]
Path(os.environ["OUT"], "inference_scaling.json").write_text(json.dumps({"runs": runs}, indent=1))
PYEOF
        summary
    done
}

# ---------------------------------------------------------------- 4. appo
appo() {
    local run=$SCRATCH/appo_breakout
    rm -rf "$run"
    # the time left, to the end: SIGINT stops it after the iteration (a checkpoint, the
    # metrics, the curve) and 45 s are left for that and Ray's shutdown. Batches lag by up to
    # one round of the collectors' (8 updates each): max_learn_lag keeps two rounds.
    # shellcheck disable=SC2086
    part appo "$APPO_MAX_S" 45 INT "$PY" -m fleetrl.cli train configs/appo_atari.yaml \
        --run-dir "$run" env.id=ALE/Breakout-v5 trainer.device="$DEVICE" collector.num_collectors="$COLLECTORS" \
        appo.max_learn_lag=$((16 * COLLECTORS)) trainer.total_frames=20000000 \
        trainer.test_every=0 trainer.checkpoint_every=0 logging.progress_bar=false $APPO_ARGS
    cp "$run/metrics.csv" "$OUT/appo_metrics.csv" 2>/dev/null
    cp "$run/learning_curve.png" "$OUT/appo_learning_curve.png" 2>/dev/null
    if [[ -f $run/metrics.csv ]]; then
        "$PY" -m fleetrl.cli report "$run" --no-plot >"$SCRATCH/appo_report.txt" 2>&1
        cat "$SCRATCH/appo_report.txt"
        # stopped at its budget (timeout's 124) with its metrics on disk: what was asked
        sed -i 's/^\(appo\t\)timeout\t124\t/\1ok\t124\t/' "$SCRATCH/parts.tsv"
    fi
    summary
}

# ---------------------------------------------------------------- run
say "fleetrl GPU program: dry=$DRY device=$DEVICE budget=${TOTAL}s parts: $PARTS; out: $OUT"
setup
for p in $PARTS; do
    "$p"
done
tar -czf "$OUT/extras.tgz" -C "$SCRATCH" --ignore-failed-read \
    pytest_cuda.xml facts.json parts.tsv appo_report.txt tree/benchmarks/results \
    --exclude='checkpoints' appo_breakout 2>/dev/null
summary
say "done in $((SECONDS - START))s: $(ls "$OUT" | tr '\n' ' ')"
failed=$(awk -F'\t' '$2 != "ok" { printf "%s%s", sep, $1; sep = " " }' "$SCRATCH/parts.tsv")
[[ -n $failed ]] && say "not ok: $failed"
exec >&- 2>&-
wait "$TEE"  # program.log whole before the call returns
[[ -z $failed ]]  # the exit status: 0 when every part was ok
