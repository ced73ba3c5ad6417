"""The algorithm classes by name: a config's ``algorithm`` -> the class that trains it.

Each class knows its config section (``config_class``, from
:data:`fleetrl.algorithms.sections.SECTIONS`, which is looked up without torch),
whether it learns on-policy and whether it starts with random actions; a run builds it
with :func:`fleetrl.setup.build.make_algorithm`.

Examples:
    >>> from fleetrl.algorithms.sections import SECTIONS
    >>> all(ALGORITHMS[name].config_class is cls for name, cls in SECTIONS.items())
    True
    >>> ALGORITHMS["dqn"].on_policy, MULTI_AGENT_ALGORITHMS
    (False, ('mappo', 'ippo'))
"""

from __future__ import annotations

from fleetrl.algorithms.a2c import A2C
from fleetrl.algorithms.appo import APPO
from fleetrl.algorithms.base import Algorithm
from fleetrl.algorithms.dqn import DQN
from fleetrl.algorithms.impala import IMPALA
from fleetrl.algorithms.mappo import IPPO, MAPPO
from fleetrl.algorithms.ppo import PPO
from fleetrl.algorithms.sac import SAC
from fleetrl.algorithms.sections import MULTI_AGENT

__all__ = ["ALGORITHMS", "MULTI_AGENT_ALGORITHMS"]

#: the one registry of algorithm classes, in the order of the sections' registry; MAPPO and
#: IPPO train multi-agent envs (a run's EnvSpec carries their torchrl specs), the others
#: single-agent ones
ALGORITHMS: dict[str, type[Algorithm]] = {
    cls.name: cls for cls in (PPO, A2C, DQN, SAC, IMPALA, APPO, MAPPO, IPPO)
}

#: the algorithms that train an agent group of a multi-agent env (``EnvSpec.grouped``)
MULTI_AGENT_ALGORITHMS: tuple[str, ...] = MULTI_AGENT
