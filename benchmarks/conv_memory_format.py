"""The pixel torsos' memory order: a learner step and an inference pass, each way.

fleetrl's conv torsos (``fleetrl.networks.models``) hand their frames to the convolutions
in ``channels_last`` order where a CPU forward records gradients (the learner's), and in
the default order otherwise (acting, a batch's targets). This measures both choices on
the shipped torsos, one torch thread, as the learner and the workers run:

- **learner step**: a forward with gradients of ``--minibatch`` uint8 frame stacks
  (4x84x84) through the torso and a linear head, the backward pass and an Adam step:
  the torso as fleetrl calls it (``channels_last``) against its layers called on the
  same frames in the default order (the raw limit before this change);
- **inference**: a forward without gradients of ``--inference-batch`` stacks (a batch's
  targets; acting is the same at a few envs), in either order.

Paired rounds: each round times every contestant once, back to back, after a warm-up;
medians over rounds, and each ratio the median of the rounds' ratios (default time over
the other). The weights and inputs are the same for both.

    python benchmarks/conv_memory_format.py                       # Nature CNN and IMPALA
    python benchmarks/conv_memory_format.py --torsos nature --rounds 5

Writes ``benchmarks/results/conv_memory_format.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from common import machine, paired_ratio, print_table, write_json
from fleetrl.networks.models import ImpalaTorso, NatureTorso

TORSOS = {"nature": NatureTorso, "impala": ImpalaTorso}
SHAPE = (4, 84, 84)


def learner_steps(cls: type, minibatch: int) -> dict[str, Callable[[], None]]:
    """The two ways of one learner step, on copies of one torso and head."""
    frames = torch.randint(0, 256, (minibatch, *SHAPE), dtype=torch.uint8)
    steps = {}
    for name in ("default", "channels_last"):
        torch.manual_seed(0)
        torso = cls(SHAPE)
        head = nn.Linear(torso.out_features, 6)
        optimizer = torch.optim.Adam([*torso.parameters(), *head.parameters()], lr=2.5e-4)

        def step(torso=torso, head=head, optimizer=optimizer, name=name) -> None:
            if name == "channels_last":  # as fleetrl's torso does with gradients on
                features = torso(frames)
            else:  # the same layers on the frames in the default order
                features = torso.net(frames.float() * (1.0 / 255.0))
            loss = head(features).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        steps[name] = step
    return steps


def inference_passes(cls: type, batch: int) -> dict[str, Callable[[], None]]:
    """A forward without gradients in either order (fleetrl keeps the default one)."""
    torch.manual_seed(0)
    torso = cls(SHAPE)
    x = torch.randint(0, 256, (batch, *SHAPE), dtype=torch.uint8).float() * (1.0 / 255.0)

    @torch.no_grad()
    def default() -> None:
        torso.net(x)

    @torch.no_grad()
    def channels_last() -> None:  # the reorder of the frames counted, as a torso would pay it
        torso.net(x.contiguous(memory_format=torch.channels_last))

    return {"default": default, "channels_last": channels_last}


def timed(contestants: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each contestant, one call each per round (after a warm-up)."""
    for fn in contestants.values():
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in contestants}
    for _ in range(rounds):
        for name, fn in contestants.items():
            start = time.perf_counter()
            fn()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torsos", nargs="+", default=list(TORSOS), choices=list(TORSOS))
    parser.add_argument("--minibatch", type=int, default=256)
    parser.add_argument("--inference-batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows, runs = [], []
    for torso in args.torsos:
        for what, contestants in (
            (f"learner step ({args.minibatch})", learner_steps(TORSOS[torso], args.minibatch)),
            (
                f"inference ({args.inference_batch})",
                inference_passes(TORSOS[torso], args.inference_batch),
            ),
        ):
            s = timed(contestants, args.rounds)
            ms = {name: 1000 * statistics.median(v) for name, v in s.items()}
            # how much faster channels_last is: default seconds over channels_last seconds
            ratio = paired_ratio(s["default"], s["channels_last"])
            fleetrl = "channels_last" if what.startswith("learner") else "default"
            runs.append({"torso": torso, "what": what, "ms": ms, "speedup": ratio,
                         "fleetrl": fleetrl})  # fmt: skip
            rows.append([torso, what, f"{ms['default']:.1f}", f"{ms['channels_last']:.1f}",
                         f"{ratio:.2f}x", fleetrl])  # fmt: skip
    print_table(
        [
            "torso",
            "pass",
            "default ms",
            "channels_last ms",
            "channels_last speedup",
            "fleetrl uses",
        ],
        rows,
        title="The pixel torsos' memory order: medians over paired rounds, one torch thread",
    )
    write_json(
        "conv_memory_format",
        {"machine": machine(), "args": vars(args), "runs": runs},
    )


if __name__ == "__main__":
    main()
