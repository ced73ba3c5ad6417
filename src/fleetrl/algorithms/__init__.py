"""Algorithms on torchrl loss modules: a shared :class:`Algorithm` API, one file each.

Their config sections (``PPOConfig``, ...) are in :mod:`fleetrl.algorithms.sections`,
which imports no torch: a config is parsed and checked before torch is. The names below
are imported when first used (PEP 562), so ``from fleetrl.algorithms import PPOConfig``
loads no torch either, and ``from fleetrl.algorithms import PPO`` loads what PPO needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetrl._lazy import lazy_exports

_SECTIONS = "fleetrl.algorithms.sections"
#: public name -> the module that defines it
_EXPORTS = {
    "A2C": "fleetrl.algorithms.a2c",
    "A2CConfig": _SECTIONS,
    "ALGORITHMS": "fleetrl.algorithms.registry",
    "APPO": "fleetrl.algorithms.appo",
    "APPOConfig": _SECTIONS,
    "Algorithm": "fleetrl.algorithms.base",
    "DQN": "fleetrl.algorithms.dqn",
    "DQNConfig": _SECTIONS,
    "IMPALA": "fleetrl.algorithms.impala",
    "IMPALAConfig": _SECTIONS,
    "IPPO": "fleetrl.algorithms.mappo",
    "IPPOConfig": _SECTIONS,
    "MAPPO": "fleetrl.algorithms.mappo",
    "MAPPOConfig": _SECTIONS,
    "MULTI_AGENT_ALGORITHMS": "fleetrl.algorithms.registry",
    "PPO": "fleetrl.algorithms.ppo",
    "PPOConfig": _SECTIONS,
    "SAC": "fleetrl.algorithms.sac",
    "SACConfig": _SECTIONS,
    "SECTIONS": _SECTIONS,
}

__all__ = [
    "A2C",
    "ALGORITHMS",
    "APPO",
    "DQN",
    "IMPALA",
    "IPPO",
    "MAPPO",
    "MULTI_AGENT_ALGORITHMS",
    "PPO",
    "SAC",
    "SECTIONS",
    "A2CConfig",
    "APPOConfig",
    "Algorithm",
    "DQNConfig",
    "IMPALAConfig",
    "IPPOConfig",
    "MAPPOConfig",
    "PPOConfig",
    "SACConfig",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # what type checkers and IDEs see
    from fleetrl.algorithms.a2c import A2C
    from fleetrl.algorithms.appo import APPO
    from fleetrl.algorithms.base import Algorithm
    from fleetrl.algorithms.dqn import DQN
    from fleetrl.algorithms.impala import IMPALA
    from fleetrl.algorithms.mappo import IPPO, MAPPO
    from fleetrl.algorithms.ppo import PPO
    from fleetrl.algorithms.registry import ALGORITHMS, MULTI_AGENT_ALGORITHMS
    from fleetrl.algorithms.sac import SAC
    from fleetrl.algorithms.sections import (
        SECTIONS,
        A2CConfig,
        APPOConfig,
        DQNConfig,
        IMPALAConfig,
        IPPOConfig,
        MAPPOConfig,
        PPOConfig,
        SACConfig,
    )
