"""Every key of a fleetrl batch, named once.

Batches use torchrl's keys and layout, so torchrl loss modules, value
estimators and replay buffers work on them unchanged (see the batch layout
in the docs); fleetrl adds the ``("collector", ...)`` tags and the running
episode columns. Every module names a batch key through these constants.

Examples:
    >>> MASK_KEY, TRANSITION_KEYS[:2]
    (('collector', 'mask'), ('observation', 'action'))
"""

from __future__ import annotations

from typing import TypeAlias

#: a TensorDict key: a name, or a tuple of names into nested TensorDicts
NestedKey: TypeAlias = str | tuple[str, ...]

__all__ = [
    "ACTION_KEY",
    "ACTION_LOG_PROB_KEY",
    "DISCOUNTED_RETURN_KEY",
    "DONE_FLAGS",
    "DONE_KEY",
    "DONE_NAME",
    "EPISODE_END_KEY",
    "EPISODE_LENGTH_KEY",
    "EPISODE_RETURN_KEY",
    "GROUP_END_KEY",
    "GROUP_RETURN_KEY",
    "IS_INIT_KEY",
    "MASK_KEY",
    "NEXT_OBSERVATION_KEY",
    "OBSERVATION_KEY",
    "POLICY_VERSION_KEY",
    "REWARD_KEY",
    "REWARD_NAME",
    "STATE_KEY",
    "TERMINATED_KEY",
    "TERMINATED_NAME",
    "TRAJ_IDS_KEY",
    "TRANSITION_KEYS",
    "TRUNCATED_KEY",
    "TRUNCATED_NAME",
    "WORKER_ID_KEY",
    "NestedKey",
]

OBSERVATION_KEY = "observation"
ACTION_KEY = "action"
#: a multi-agent env's global state (PettingZoo's ``state()``): what a centralised critic may read
STATE_KEY = "state"
#: the acting policy's log-probability of its action (V-trace's behaviour policy, PPO's old one)
ACTION_LOG_PROB_KEY = "action_log_prob"
#: torchrl's flag of a recurrent policy's input: True at an episode's first step, where the
#: recurrent core starts from a zero state
IS_INIT_KEY = "is_init"
#: the leaf names of a step's reward and done flags: under ``"next"`` (the keys below) and,
#: in a multi-agent env, in each agent group (``("next", group, "reward")``)
REWARD_NAME = "reward"
DONE_NAME = "done"
TERMINATED_NAME = "terminated"
TRUNCATED_NAME = "truncated"
#: the leaf names of the three done flags
DONE_FLAGS = (DONE_NAME, TERMINATED_NAME, TRUNCATED_NAME)
NEXT_OBSERVATION_KEY = ("next", OBSERVATION_KEY)
REWARD_KEY = ("next", REWARD_NAME)
#: terminated or truncated: the episode ended at this step
DONE_KEY = ("next", DONE_NAME)
TERMINATED_KEY = ("next", TERMINATED_NAME)
TRUNCATED_KEY = ("next", TRUNCATED_NAME)
#: the running return and length of the episode, its totals at the step that ends it
EPISODE_RETURN_KEY = ("next", "episode_return")
EPISODE_LENGTH_KEY = ("next", "episode_length")
#: agent groups (a multi-agent env, :mod:`fleetrl.collectors.local.grouped`): the team's episode
#: ended at this step (torchrl's trajectory end: any done of the env); ("next", "done") is
#: the env's own key there, when it has one
EPISODE_END_KEY = ("next", "episode_end")
#: agent groups: per group name, the group's running return (its agents' mean reward summed
#: over the group's episode) and whether the group's episode ended at this step
GROUP_RETURN_KEY = ("next", "group_return")
GROUP_END_KEY = ("next", "group_end")
#: each env's running discounted return (reward scaling's statistic; fleetrl.networks.normalization)
DISCOUNTED_RETURN_KEY = ("next", "discounted_return")
#: which steps of a padded batch were collected (a sync round with preemption, whole trajectories)
MASK_KEY = ("collector", "mask")
#: the version of the weights that acted (the learner's optimizer-step count)
POLICY_VERSION_KEY = ("collector", "policy_version")
WORKER_ID_KEY = ("collector", "worker_id")
TRAJ_IDS_KEY = ("collector", "traj_ids")

#: what an off-policy loss reads from a transition (policy outputs are not stored)
TRANSITION_KEYS = (
    OBSERVATION_KEY,
    ACTION_KEY,
    NEXT_OBSERVATION_KEY,
    REWARD_KEY,
    DONE_KEY,
    TERMINATED_KEY,
    TRUNCATED_KEY,
)
