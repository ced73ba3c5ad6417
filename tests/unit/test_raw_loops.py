"""``benchmarks/common.py``'s lean raw loop (the collector benchmark's limit) keeps the
episode contract and draws as torch's ``Categorical`` does (no timing here)."""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from common import LeanRawLoop, categorical_policy, mlp


def test_the_lean_raw_loop_keeps_transitions_within_episodes():
    torch.manual_seed(0)
    loop = LeanRawLoop(mlp(), num_envs=3, steps=120)
    try:
        loop.run(120)
        done, nxt, obs = loop.done_buf, loop.next_obs_buf, loop.obs_buf
        assert done.sum() >= 3  # episodes ended inside the batch
        ongoing = ~done[:-1]
        # an ongoing episode's next observation is what the policy saw next; an ended one's
        # is its final observation, not the reset one that follows
        assert torch.equal(nxt[:-1][ongoing], obs[1:][ongoing])
        ended = done[:-1]
        assert not torch.equal(nxt[:-1][ended], obs[1:][ended])
        assert (obs[1:][ended].abs() <= 0.05).all()  # CartPole's resets are within +-0.05
    finally:
        loop.shutdown()


def test_the_lean_raw_draw_is_torchs_categorical():
    torch.manual_seed(0)
    net = mlp()
    loop = LeanRawLoop(net, num_envs=4, steps=8)
    try:
        obs_np = loop.obs_np.copy()
        torch.manual_seed(5)
        loop.run(1)
        policy = categorical_policy(net)
        torch.manual_seed(5)
        with torch.inference_mode(), set_exploration_type(ExplorationType.RANDOM):
            want = policy(TensorDict({"observation": torch.from_numpy(obs_np)}, [4]))
        assert torch.equal(loop.act_buf[0], want["action"])
        assert torch.equal(loop.logp_buf[0], want["action_log_prob"])
    finally:
        loop.shutdown()
