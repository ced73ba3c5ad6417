"""The kinds of network and distribution an algorithm's section names, and their checks.

Plain data, no torch: a config is parsed and checked (:mod:`fleetrl.algorithms.sections`)
before torch is imported. The networks they name are built in
:mod:`fleetrl.networks.models`; sequences in :mod:`fleetrl.algorithms.sequences`.

Examples:
    >>> ModelKind("lstm").recurrent, ModelKind.CNN.recurrent
    (True, False)
    >>> core_only_problems("ppo", "mlp", "auto", [32])[0][0]
    'head_sizes'
"""

from __future__ import annotations

import enum
from typing import Any

__all__ = [
    "BURN_IN_MSG",
    "CORE_ONLY_MSG",
    "SEQ_LEN_MSG",
    "ActionDistribution",
    "ModelKind",
    "TorsoKind",
    "core_only_problems",
]

SEQ_LEN_MSG = "must be >= 1 (steps per sequence a recurrent policy is trained on)"
BURN_IN_MSG = "must be >= 0 and < seq_len ({seq_len}): burn-in steps are part of each sequence"


class ModelKind(str, enum.Enum):
    """The default network family (``<algo>.model``)."""

    AUTO = "auto"
    MLP = "mlp"
    CNN = "cnn"
    IMPALA = "impala"
    LSTM = "lstm"
    GRU = "gru"

    @property
    def recurrent(self) -> bool:
        """A recurrent core on the torso (trained on sequences: on-policy algorithms only)."""
        return self in (ModelKind.LSTM, ModelKind.GRU)


class TorsoKind(str, enum.Enum):
    """The torso under the recurrent core of ``model: lstm`` or ``gru`` (``<algo>.torso``)."""

    AUTO = "auto"  # cnn for 3-D uint8 observations with discrete actions, mlp otherwise
    MLP = "mlp"
    CNN = "cnn"
    IMPALA = "impala"


CORE_ONLY_MSG = (
    "{algo}.{key}={value} is read only under a recurrent core: set {algo}.model=lstm or gru, "
    "or {fix}"
)
#: how each key read only under a recurrent core says what a feed-forward network uses
CORE_ONLY_FIX = {
    "torso": "for a feed-forward network choose it with {algo}.model={value} (and leave "
    "{algo}.torso=auto)",
    "head_sizes": "set a feed-forward network's layers with {algo}.hidden_sizes",
}


def core_only_problems(
    algo: str, model: str | ModelKind, torso: str | TorsoKind, head_sizes: Any
) -> list[tuple[str, str]]:
    """``(key, problem)`` for each key set that only a recurrent core reads, under a
    feed-forward ``model``: the section's checks and the constructors say the same."""
    if ModelKind(model).recurrent:
        return []
    found = []
    if TorsoKind(torso) is not TorsoKind.AUTO:
        found.append(("torso", repr(TorsoKind(torso).value), TorsoKind(torso).value))
    if head_sizes:
        found.append(("head_sizes", str(list(head_sizes)), None))
    problems = []
    for key, shown, raw in found:
        fix = CORE_ONLY_FIX[key].format(algo=algo, value=raw)
        problems.append((key, CORE_ONLY_MSG.format(algo=algo, key=key, value=shown, fix=fix)))
    return problems


class ActionDistribution(str, enum.Enum):
    """The policy's distribution over continuous actions (``ppo.distribution``)."""

    TANH_NORMAL = "tanh_normal"  # state-dependent std, squashed into the bounds
    NORMAL = "normal"  # CleanRL's: state-independent log-std, clipped at the env
