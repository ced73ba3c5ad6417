"""EnvSpec: what a run needs to know about its env, read once from one built env.

The spaces (observation shape and dtype, discrete actions or the action
bounds), and the facts of the engine that steps it. A run computes one
:class:`EnvSpec` when it starts (:func:`~fleetrl.envs.probe.env_spec`, which builds
one env of the configured engine and closes it) and passes it down: the checks of the
config, the default networks of the algorithm, the evaluation. No later step builds an
env to read its spaces.

This module imports no engine: the algorithms that take an :class:`EnvSpec` load none of
the env engines with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fleetrl.config import EnvEngine
from fleetrl.envs.grouped import GroupedSpecs

__all__ = ["EnvSpec"]


@dataclass
class EnvSpec:
    """The spaces of an env and the facts of its engine.

    Continuous actions carry their bounds; discrete ones their count. A pixel
    observation (3-D ``uint8``, channels first) is what ``model: auto`` gives a CNN.
    """

    obs_dim: int
    num_actions: int | None  # discrete: number of actions; continuous: None
    action_dim: int
    action_low: torch.Tensor | None
    action_high: torch.Tensor | None
    obs_shape: tuple[int, ...] = ()
    obs_dtype: torch.dtype = torch.float32  # torch.uint8 for a uint8 Box observation (pixels)
    #: the env's name (a gymnasium id, or the spec's), for messages
    env_id: str = ""
    #: the engine that steps it (None: an env built by the user)
    engine: EnvEngine | None = None
    #: integer actions that are not one Discrete: a MultiDiscrete or MultiBinary space
    integer_actions: bool = False
    #: a multi-agent env's torchrl specs (None: a single-agent env); the fields above then
    #: describe one agent of its first group
    groups: GroupedSpecs | None = None

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None

    @property
    def grouped(self) -> bool:
        """A multi-agent env in torchrl's grouped layout (:mod:`fleetrl.envs.grouped`)."""
        return self.groups is not None

    @property
    def pixels(self) -> bool:
        """A stack of uint8 images, channels first: what ``model: auto`` gives a CNN."""
        return len(self.obs_shape) == 3 and self.obs_dtype == torch.uint8
