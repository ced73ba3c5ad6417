"""``fleetrl report RUN``: where a run's time went, read back from its ``metrics.csv``.

A run directory's rows hold, per iteration, the seconds each part of the iteration took
(the ``time/`` columns of the metric schema, :mod:`fleetrl.learners.report`). The report
sums them over the run and over a few equal spans of it:

- a summary: frames, iterations, wall time, frames/s, the last and best training return,
  the last evaluation, the policy lag, dropped batches and gradients, restarts;
- frames/s over time (the run cut into spans of iterations);
- the time breakdown: each part's total seconds and share of the wall time since
  ``train()`` began (``time/elapsed_s``, summed over resumes): "loop" is the rest of the
  iterations, "evaluate" and "checkpoint" the trainer's work between them
  (``time/eval_s``, ``time/checkpoint_s``), "outside" the rest (start-up, metrics);
- collection part by part (:data:`COLLECTION`: env stepping, policy, building and
  packing, weights, transfer, unpacking; :mod:`fleetrl.collectors.timing`), each part's
  seconds and share of their sum: the collectors' own time, which with prefetching
  overlaps learning (per worker is in ``RayCollector.stats()``, not in ``metrics.csv``);
- the update part by part (:data:`LEARNING`: preparing batches, e.g. GAE, and the
  optimizer steps), as shares of the learn time (gradient workers: of the gradients,
  which hold the preparation);
- a stacked plot of the parts' seconds per iteration against frames (``time.png``).

Examples:
    >>> rows = [
    ...     {"train/frames": 100.0, "time/iteration_s": 1.0, "time/collect_s": 0.6,
    ...      "time/learn_s": 0.3, "time/broadcast_s": 0.0},
    ...     {"train/frames": 200.0, "time/iteration_s": 1.0, "time/collect_s": 0.4,
    ...      "time/learn_s": 0.5, "time/broadcast_s": 0.0},
    ... ]
    >>> [(p.name, round(p.seconds, 2), round(p.share, 2)) for p in breakdown(rows)]
    [('collect', 1.0, 0.5), ('learn', 0.8, 0.4), ('loop', 0.2, 0.1)]
    >>> rows[0] |= {"time/env_s": 0.3, "time/policy_s": 0.1, "time/pack_s": 0.1}
    >>> rows[1] |= {"time/env_s": 0.3, "time/policy_s": 0.1, "time/pack_s": 0.1}
    >>> [(p.name, round(p.seconds, 2), round(p.share, 2)) for p in collection(rows)]
    [('env', 0.6, 0.6), ('policy', 0.2, 0.2), ('pack', 0.2, 0.2)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from fleetrl.collectors.video import output_file_problems
from fleetrl.errors import ConfigError
from fleetrl.run.metrics import read_metrics

__all__ = [
    "BETWEEN",
    "COLLECTION",
    "LEARNING",
    "PARTS",
    "Part",
    "breakdown",
    "collection",
    "learning",
    "plot_time",
    "report",
    "segment_starts",
    "spans",
    "wall_seconds",
]

#: the parts of an iteration, each a ``time/`` column, in the order they are shown
PARTS = {
    "collect": "time/collect_s",
    "learn": "time/learn_s",
    "gradients": "time/grad_s",
    "apply": "time/update_s",
    "publish": "time/broadcast_s",
}
#: the parts between iterations that the trainer times, each a ``time/`` column
BETWEEN = {"evaluate": "time/eval_s", "checkpoint": "time/checkpoint_s"}
#: collection part by part (:mod:`fleetrl.collectors.timing`), each a ``time/`` column
COLLECTION = {
    "env": "time/env_s",
    "policy": "time/policy_s",
    "pack": "time/pack_s",
    "weights": "time/weights_s",
    "transfer": "time/transfer_s",
    "unpack": "time/unpack_s",
}
#: the update part by part, each a ``time/`` column
LEARNING = {"prepare": "time/prepare_s", "optimize": "time/optimize_s"}
PNG_MSG = "{key}={value!r} is invalid: the plot is a PNG file, its name ends in .png"
NO_RUN_MSG = (
    "run={run!r} is invalid: {why}; pass a run directory written by fleetrl train (it holds "
    "metrics.csv)"
)


@dataclass(frozen=True)
class Part:
    """One part of the iterations' time: its total seconds and share of their sum."""

    name: str
    seconds: float
    share: float


def _total(rows: list[dict[str, float]], column: str) -> float:
    """The sum of a column's finite cells (nan: a part this learner does not have)."""
    return sum(v for r in rows if math.isfinite(v := r.get(column, math.nan)))


def wall_seconds(rows: list[dict[str, float]]) -> list[float]:
    """Each row's share of the wall time: the growth of ``time/elapsed_s`` since the row
    before in its segment (one ``train()``: a run and each resume of it), and for the first
    row of a segment its own value, start-up included; a row without it counts its
    ``time/iteration_s``. ``time/elapsed_s`` is taken before the row's evaluation, so the
    last row of each segment adds its ``time/eval_s``. Segments are told apart by
    :func:`segment_starts`."""
    out, before = [], 0.0
    starts = segment_starts(rows)
    for i, r in enumerate(rows):
        before = 0.0 if starts[i] else before
        elapsed = r.get("time/elapsed_s", math.nan)
        if not math.isfinite(elapsed):
            out.append(_finite(r, "time/iteration_s"))
            continue
        out.append(elapsed - before if elapsed >= before else elapsed)
        before = elapsed
        if i + 1 == len(rows) or starts[i + 1]:  # the segment's last row
            out[-1] += _finite(r, "time/eval_s")
    return out


def segment_starts(rows: list[dict[str, float]]) -> list[bool]:
    """Whether each row is the first of a segment, the rows of one ``train()``.

    Each row holds the frames its ``train()`` started from, exactly: ``time/fps`` is the
    frames since then over ``time/elapsed_s``. A resume starts from its checkpoint's frames
    and the CSV keeps no row past them, so a segment's start differs from the one before it,
    even where the resume's first ``time/elapsed_s`` is larger than the last one kept.
    Rows without those columns (older files) start a segment where ``time/elapsed_s`` goes
    down.

    Examples:
        >>> rows = [{"train/frames": f, "time/elapsed_s": e, "time/fps": f / e}
        ...         for f, e in [(100.0, 3.0), (200.0, 6.0)]]
        >>> rows.append({"train/frames": 300.0, "time/elapsed_s": 8.0, "time/fps": 100 / 8})
        >>> segment_starts(rows), wall_seconds(rows)
        ([True, False, True], [3.0, 3.0, 8.0])
    """
    out, start, elapsed = [], math.nan, math.nan
    for r in rows:
        now = r.get("time/elapsed_s", math.nan)
        began = r.get("train/frames", math.nan) - r.get("time/fps", math.nan) * now
        if math.isfinite(began) and math.isfinite(start):
            # frames are whole: the product's rounding is far below half a frame
            out.append(abs(began - start) > 0.5)
        elif math.isfinite(now) and math.isfinite(elapsed):
            out.append(now < elapsed)
        else:
            out.append(not out)  # the first row; otherwise nothing says a resume happened
        start = began if math.isfinite(began) else start
        elapsed = now if math.isfinite(now) else elapsed
    return out


def breakdown(rows: list[dict[str, float]]) -> list[Part]:
    """Each part's seconds over ``rows`` and its share of the wall time; "loop" is the rest
    of the iterations, "evaluate" and "checkpoint" the trainer's work between them, and
    "outside" the rest of the wall time (start-up, metrics). Parts that took no time are
    left out."""
    wall = sum(wall_seconds(rows))
    iterations = _total(rows, "time/iteration_s")
    parts = [(name, _total(rows, column)) for name, column in PARTS.items()]
    parts = [(name, s) for name, s in parts if s > 0]
    between = [(name, _total(rows, column)) for name, column in BETWEEN.items()]
    parts += [("loop", iterations - sum(s for _, s in parts)), *between]
    parts.append(("outside", wall - iterations - sum(s for _, s in between)))
    return [Part(name, s, s / wall if wall > 0 else math.nan) for name, s in parts if s > 1e-9]


def _measured(rows: list[dict[str, float]], parts: dict[str, str]) -> list[tuple[str, float]]:
    """Each part with a finite cell in ``rows`` (a run from before the column, or a mode
    without the part, has none), and its seconds."""
    return [
        (name, _total(rows, column))
        for name, column in parts.items()
        if any(math.isfinite(r.get(column, math.nan)) for r in rows)
    ]


def collection(rows: list[dict[str, float]]) -> list[Part]:
    """Collection part by part over ``rows`` (:data:`COLLECTION`), each part's seconds and
    share of their sum; empty when no part was measured (a run from before them)."""
    parts = _measured(rows, COLLECTION)
    whole = sum(s for _, s in parts)
    return [Part(name, s, s / whole if whole > 0 else math.nan) for name, s in parts]


def learning(rows: list[dict[str, float]]) -> tuple[str, list[Part]]:
    """The update part by part over ``rows`` (:data:`LEARNING`): the part of the iteration
    it splits ("learn"; gradient workers: "gradients", of which preparing is a part) and
    each part's seconds and share of it; no parts when none was measured."""
    name, whole = "learn", _total(rows, PARTS["learn"])
    if not whole > 0:
        name, whole = "gradients", _total(rows, PARTS["gradients"])
    parts = _measured(rows, LEARNING)
    return name, [Part(p, s, s / whole if whole > 0 else math.nan) for p, s in parts]


def _table(parts: list[Part]) -> list[str]:
    return [
        f"  {'part':<10} {'seconds':>10} {'share':>7}",
        *(f"  {p.name:<10} {p.seconds:>10,.2f} {_num(p.share, '.1%'):>7}" for p in parts),
    ]


def spans(rows: list[dict[str, float]], count: int = 5) -> list[tuple[int, int, float]]:
    """The run cut into up to ``count`` spans of consecutive iterations: (first frame, last
    frame, frames/s over the span's wall time)."""
    out = []
    walls = wall_seconds(rows)
    size = max(1, math.ceil(len(rows) / count))
    before = 0.0
    for start in range(0, len(rows), size):
        end = rows[start : start + size][-1].get("train/frames", math.nan)
        seconds = sum(walls[start : start + size])
        out.append((int(before), int(end), (end - before) / seconds if seconds > 0 else math.nan))
        before = end
    return out


def _rows(run: Path) -> list[dict[str, float]]:
    if not run.is_dir():
        raise ConfigError([NO_RUN_MSG.format(run=str(run), why="it is not a directory")])
    path = run / "metrics.csv"
    if not path.is_file():
        raise ConfigError([NO_RUN_MSG.format(run=str(run), why="it holds no metrics.csv")])
    rows = [r for r in read_metrics(path) if "train/frames" in r]
    if not rows:
        raise ConfigError([NO_RUN_MSG.format(run=str(run), why="its metrics.csv has no rows yet")])
    return rows


def _last(rows: list[dict[str, float]], column: str) -> float:
    return next(
        (v for r in reversed(rows) if math.isfinite(v := r.get(column, math.nan))), math.nan
    )


def _max(rows: list[dict[str, float]], column: str) -> float:
    values = [v for r in rows if math.isfinite(v := r.get(column, math.nan))]
    return max(values) if values else math.nan


def _mean(rows: list[dict[str, float]], column: str) -> float:
    values = [v for r in rows if math.isfinite(v := r.get(column, math.nan))]
    return sum(values) / len(values) if values else math.nan


def _num(value: float, spec: str = ",.1f") -> str:
    return "-" if not math.isfinite(value) else format(value, spec)


def report(run: str | Path, *, plot: str | Path | None = "") -> str:
    """The report of the run directory ``run`` as text; writes the stacked-time plot to
    ``plot`` (``""``: ``RUN/time.png``; None: no plot). A directory without rows is a
    ConfigError naming it."""
    run = Path(run)
    path = None if plot is None else Path(plot) if plot else run / "time.png"
    problems = [] if path is None else output_file_problems(path, "--plot", ".png", PNG_MSG)
    rows = _rows(run)  # a run that is not one is named first
    if problems:
        raise ConfigError(problems)
    frames = rows[-1]["train/frames"]
    seconds = sum(wall_seconds(rows))
    lines = [
        f"run {run}: {len(rows)} iteration{'s' * (len(rows) != 1)}, {frames:,.0f} frames in "
        f"{seconds:,.1f} s ({_num(frames / seconds if seconds else math.nan, ',.0f')} frames/s)",
        f"training return: last {_num(_last(rows, 'train/episode_return'))}, "
        f"best {_num(_max(rows, 'train/episode_return'))}; last evaluation "
        f"{_num(_last(rows, 'eval/return_mean'))}",
        f"policy lag (optimizer steps): mean {_num(_mean(rows, 'train/policy_lag'), '.2f')}, "
        f"max {_num(_max(rows, 'train/policy_lag_max'), '.0f')}; dropped batches "
        f"{_num(_total(rows, 'train/dropped_batches'), '.0f')}, dropped gradients "
        f"{_num(_total(rows, 'train/dropped_gradients'), '.0f')}, gradient workers restarted "
        f"{_num(_last(rows, 'train/grad_workers_restarted'), '.0f')}",
        "",
        "frames/s over the run:",
        *(f"  {a:>12,} - {b:>12,}  {_num(fps, ',.0f'):>10}" for a, b, fps in spans(rows)),
        "",
        f"where the time went ({seconds:,.1f} s of training, start-up included):",
        *_table(breakdown(rows)),
    ]
    collected = collection(rows)
    if collected:
        lines += [
            "",
            f"collection, part by part ({sum(p.seconds for p in collected):,.2f} s of the "
            f"collectors' own time; the learner waited {_total(rows, PARTS['collect']):,.2f} s "
            "for batches):",
            *_table(collected),
        ]
    whole, learned = learning(rows)
    if learned:
        lines += ["", f"{whole}, part by part:", *_table(learned)]
    if path is not None:
        plot_time(rows, path, title=f"{run.name}: seconds per iteration")
        lines += ["", f"plot: {path}"]
    return "\n".join(lines)


def plot_time(rows: list[dict[str, float]], path: Path, *, title: str) -> Path:
    """Each part's seconds per iteration, stacked, against frames, into ``path`` (a PNG)."""
    import matplotlib  # only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["train/frames"] for r in rows]
    walls = wall_seconds(rows)
    columns = {name: [_finite(r, c) for r in rows] for name, c in PARTS.items()}
    inside = [sum(v[i] for v in columns.values()) for i in range(len(rows))]
    columns["loop"] = [max(0.0, _finite(r, "time/iteration_s") - s) for r, s in zip(rows, inside)]
    for name, column in BETWEEN.items():
        columns[name] = [_finite(r, column) for r in rows]
    between = [sum(_finite(r, c) for c in BETWEEN.values()) for r in rows]
    columns["outside"] = [
        max(0.0, w - _finite(r, "time/iteration_s") - b) for r, w, b in zip(rows, walls, between)
    ]
    shown = [p.name for p in breakdown(rows)]
    stacks = [columns[name] for name in shown]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.stackplot(x, *stacks, labels=shown)
    ax.set_xlabel("frames")
    ax.set_ylabel("wall seconds per iteration")
    ax.set_title(title)
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _finite(row: dict[str, float], column: str) -> float:
    value = row.get(column, math.nan)
    return value if math.isfinite(value) else 0.0
