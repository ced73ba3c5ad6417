"""Recurrent training through time: sequences cut exactly, burn-in without gradient, the
networks recomputed as they acted, a memory task only BPTT can learn, and bad input refused."""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import ProbabilisticTensorDictModule, TensorDictModule, TensorDictSequential
from torch import nn
from torchrl.modules import LSTMModule, ProbabilisticActor, ValueOperator, set_recurrent_mode

from fleetrl import ConfigError, SyncDataCollector
from fleetrl.algorithms import (
    A2C,
    APPO,
    IMPALA,
    PPO,
    A2CConfig,
    APPOConfig,
    IMPALAConfig,
    PPOConfig,
)
from fleetrl.algorithms.sequences import LOSS_MASK_KEY, Sequences, is_recurrent
from fleetrl.envs.probe import env_spec
from fleetrl.keys import DONE_KEY, MASK_KEY
from fleetrl.setup.load import config_from_dict

LOCAL = ["collector.num_collectors=0", "logging.tensorboard=false", "logging.progress_bar=false"]


def row_batch(steps: int = 7, done_at: tuple[int, ...] = (2,)) -> TensorDict:
    """Two env rows of ``steps`` steps; ``x`` is 10 * row + step; episodes end at ``done_at``
    (row 0) and the collector marked each episode's first step ``is_init``."""
    x = torch.arange(steps).float() + 10 * torch.arange(2).float()[:, None]
    done = torch.zeros(2, steps, 1, dtype=torch.bool)
    done[0, list(done_at)] = True
    is_init = torch.zeros(2, steps, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[0, [t + 1 for t in done_at if t + 1 < steps]] = True
    return TensorDict({"x": x, "is_init": is_init, ("next", "done"): done}, [2, steps])


def test_rows_split_into_padded_sequences_with_exact_masks():
    seqs = Sequences(seq_len=3).split(row_batch())
    assert seqs.shape == (6, 3)  # ceil(7 / 3) = 3 sequences per row
    assert seqs["x"][:3].tolist() == [[0, 1, 2], [3, 4, 5], [6, 6, 6]]  # padded with its last
    assert seqs[LOSS_MASK_KEY].tolist() == [[True] * 3, [True] * 3, [True, False, False]] * 2
    # each sequence starts from its stored state; the episode starting at step 3 does too
    init = seqs["is_init"][..., 0].int().tolist()
    assert init[:3] == [[1, 0, 0], [1, 0, 0], [1, 0, 0]]
    assert init[3:] == [[1, 0, 0], [1, 0, 0], [1, 0, 0]]
    mid = Sequences(seq_len=4).split(row_batch(done_at=(1, 5)))
    assert mid["is_init"][0, :, 0].tolist() == [True, False, True, False]  # episode at step 2
    # steps 4, 5, 6 and padding: its start, and the episode at step 6
    assert mid["is_init"][1, :, 0].tolist() == [True, False, True, False]


def test_burn_in_overlaps_sequences_so_each_step_is_trained_once():
    seqs = Sequences(seq_len=4, burn_in=2).split(row_batch(steps=5, done_at=()))
    assert seqs.shape == (6, 4)  # stride 2: ceil(5 / 2) = 3 sequences per row
    # steps before the row's first are padding; each sequence's first real step is is_init
    assert seqs["x"][:3].tolist() == [[0, 0, 0, 1], [0, 1, 2, 3], [2, 3, 4, 4]]
    assert seqs[LOSS_MASK_KEY][:3].int().tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 0]]
    assert seqs["is_init"][:3, :, 0].int().tolist() == [[0, 0, 1, 0], [1, 0, 0, 0], [1, 0, 0, 0]]
    trained = seqs["x"][seqs[LOSS_MASK_KEY]]
    assert sorted(trained.tolist()) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]


def test_padding_of_a_preempted_row_stays_out_and_empty_sequences_are_dropped():
    batch = row_batch(steps=6, done_at=())
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 2:] = False  # row 1 was preempted after 2 steps
    batch.set(MASK_KEY, mask)
    seqs = Sequences(seq_len=2).split(batch)
    assert seqs.shape == (4, 2)  # row 1's two empty sequences dropped
    assert seqs["x"].tolist() == [[0, 1], [2, 3], [4, 5], [10, 11]]
    assert bool(seqs[LOSS_MASK_KEY].all())


def lstm_ppo(**config) -> PPO:
    torch.manual_seed(0)
    return PPO(PPOConfig(model="lstm", recurrent_size=16, **config), env_spec("CartPole-v1"))


def collected(algo, frames: int = 96, num_envs: int = 4):
    with SyncDataCollector(
        "CartPole-v1", algo.policy, frames_per_batch=frames, num_envs=num_envs
    ) as collector:
        collector.set_seed(0)
        return collector.next()


@pytest.mark.parametrize("burn_in", [0, 3])
def test_sequences_recompute_the_log_probs_the_policy_acted_with(burn_in):
    """Stored states, is_init and burn-in right: before any update, the networks run over
    each sequence in recurrent mode give the collector's log-probabilities at every step."""
    ppo = lstm_ppo(seq_len=8, burn_in=burn_in, num_mini_batch=1)
    batch = collected(ppo)
    assert batch.shape == (4, 24) and bool(batch["is_init"][:, 1:].any())  # episodes end inside
    data = ppo.prepare(batch)
    assert data.shape == (4 * math.ceil(24 / (8 - burn_in)), 8)
    flat, _, log_prob, _, _ = ppo.forward_heads(data)
    assert flat.shape == (96,)
    torch.testing.assert_close(log_prob, flat["action_log_prob"], atol=1e-5, rtol=0)


def test_burn_in_steps_get_no_gradient():
    ppo = lstm_ppo(seq_len=6, burn_in=2, num_mini_batch=1)
    data = ppo.prepare(collected(ppo))
    obs = data["observation"].clone().requires_grad_(True)
    data.set("observation", obs)
    loss, _ = ppo.loss(data)
    loss.backward()
    grad = obs.grad.abs().sum(-1)
    assert bool((grad[:, :2] == 0).all())  # burn-in: run without gradient
    assert bool((grad[:, 2:][data[LOSS_MASK_KEY][:, 2:]] > 0).all())


def test_minibatches_shuffle_whole_sequences():
    ppo = lstm_ppo(seq_len=8, num_mini_batch=3)
    data = ppo.prepare(collected(ppo))
    parts = list(ppo.minibatches(data))
    assert [p.shape for p in parts] == [torch.Size([4, 8])] * 3
    got = sorted(tuple(s) for p in parts for s in p["observation"][..., 0].tolist())
    assert got == sorted(tuple(s) for s in data["observation"][..., 0].tolist())


@pytest.mark.parametrize(
    ("cls", "config"),
    [
        (A2C, A2CConfig(model="gru", normalize_advantage=True)),
        (IMPALA, IMPALAConfig(model="lstm", normalize_advantage=True)),
        (APPO, APPOConfig(model="gru", num_mini_batch=2, burn_in=3)),
    ],
    ids=["a2c", "impala", "appo"],
)
def test_every_on_policy_algorithm_trains_on_sequences(cls, config):
    torch.manual_seed(0)
    algo = cls(config, env_spec("CartPole-v1"))
    assert algo.sequences is not None and is_recurrent(algo.critic)
    info = algo.learn(collected(algo))
    assert algo.num_updates == algo.steps_per_batch
    assert all(torch.isfinite(torch.tensor(v)) for v in info.values())


# --- a memory task: the reward at step 1 depends on the observation at step 0 only --------


def memory_actor() -> ProbabilisticActor:
    """An LSTM policy whose input weights start at zero: its state holds nothing of the cue
    until a gradient through time from step 1's loss reaches step 0's input."""
    lstm = LSTMModule(input_size=2, hidden_size=8, in_key="observation", out_key="memory")
    nn.init.zeros_(lstm.lstm.weight_ih_l0)
    head = TensorDictModule(nn.Linear(8, 2), in_keys=["memory"], out_keys=["logits"])
    return ProbabilisticActor(
        TensorDictSequential(lstm, head),
        in_keys=["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )


def memory_episodes(actor: nn.Module, envs: int, generator: torch.Generator) -> TensorDict:
    """``envs`` two-step episodes: step 0 shows a cue (+1 or -1), step 1 shows nothing and
    pays 1 when the action says the cue's sign. Laid out as a collector's batch."""
    cue = torch.randint(0, 2, (envs,), generator=generator) * 2.0 - 1
    obs = torch.stack([torch.stack([cue, torch.ones(envs)], -1), torch.zeros(envs, 2)], 1)
    h = torch.zeros(envs, 1, 8)
    states, steps = (h, h.clone()), []
    with torch.no_grad():
        for t in range(2):
            td = TensorDict(
                {
                    "observation": obs[:, t],
                    "recurrent_state_h": states[0],
                    "recurrent_state_c": states[1],
                    "is_init": torch.full((envs, 1), t == 0),
                },
                [envs],
            )
            out = actor(td)
            states = (out["next", "recurrent_state_h"], out["next", "recurrent_state_c"])
            steps.append(out)
    batch = torch.stack(steps, 1)
    reward = torch.zeros(envs, 2, 1)
    reward[:, 1, 0] = (batch["action"][:, 1] == (cue > 0).long()).float()
    done = torch.zeros(envs, 2, 1, dtype=torch.bool)
    done[:, 1] = True
    batch.set(("next", "observation"), torch.zeros(envs, 2, 2))
    batch.set(("next", "reward"), reward)
    batch.set(DONE_KEY, done)
    batch.set(("next", "terminated"), done.clone())
    batch.set(("next", "truncated"), torch.zeros_like(done))
    return batch


def memory_accuracy(seq_len: int) -> float:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    critic = ValueOperator(nn.Linear(2, 1), in_keys=["observation"])
    config = PPOConfig(seq_len=seq_len, lr=3e-3, num_epochs=4, num_mini_batch=1, gamma=1.0)
    ppo = PPO(config, env_spec("CartPole-v1"), actor=memory_actor(), critic=critic)
    for _ in range(60):
        ppo.learn(memory_episodes(ppo.actor, 64, generator))
    test = memory_episodes(ppo.actor, 512, generator)
    return float(test["next", "reward"][:, 1].mean())


def test_only_gradients_through_time_learn_to_remember():
    assert memory_accuracy(seq_len=2) > 0.95
    assert memory_accuracy(seq_len=1) < 0.65


# --- bad input ------------------------------------------------------------------------------

BAD = [
    (
        "ppo",
        "ppo.seq_len=0",
        "ppo.seq_len=0 is invalid: must be >= 1 (steps per sequence a recurrent policy is "
        "trained on)",
    ),
    (
        "a2c",
        "a2c.burn_in=16",
        "a2c.burn_in=16 is invalid: must be >= 0 and < seq_len (16): burn-in steps are part "
        "of each sequence",
    ),
    (
        "dqn",
        "dqn.model=lstm",
        "dqn.model='lstm' is invalid: must be 'auto', 'mlp', 'cnn' or 'impala': dqn learns "
        "from single transitions of its replay buffer, not sequences, so it cannot train a "
        "recurrent network (recurrent policies train with ppo, a2c, impala or appo)",
    ),
]


@pytest.mark.parametrize(("algorithm", "override", "problem"), BAD, ids=[b[1] for b in BAD])
def test_bad_sequence_settings_are_refused_by_key_and_value(algorithm, override, problem):
    data = {"algorithm": algorithm, "env": {"id": "CartPole-v1", "num_envs": 4}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data, [*LOCAL, "collector.frames_per_batch=64", override])
    assert info.value.problems == [problem]


def test_sac_has_no_model_to_make_recurrent():
    data = {"algorithm": "sac", "env": {"id": "Pendulum-v1", "num_envs": 4}}
    with pytest.raises(ConfigError, match=r"sac.model is not a config key"):
        config_from_dict(data, [*LOCAL, "sac.model=lstm"])


def test_too_few_sequences_for_the_minibatches_is_refused():
    ppo = lstm_ppo(seq_len=16, num_mini_batch=8)
    data = ppo.prepare(collected(ppo, frames=32, num_envs=2))  # 2 rows of 16 steps
    with pytest.raises(ConfigError, match=r"ppo.num_mini_batch=8 is invalid for this batch: "):
        list(ppo.minibatches(data))


def test_a_recurrent_policy_keeps_the_configured_continuous_distribution():
    from torchrl.modules import IndependentNormal, TanhNormal

    pendulum = env_spec("Pendulum-v1")
    for distribution, expected in (("normal", IndependentNormal), ("tanh_normal", TanhNormal)):
        config = PPOConfig(model="lstm", recurrent_size=8, distribution=distribution)
        ppo = PPO(config, pendulum)
        assert is_recurrent(ppo.policy)
        heads = [m for m in ppo.policy.modules() if isinstance(m, ProbabilisticTensorDictModule)]
        assert [h.distribution_class for h in heads] == [expected]


def test_compiling_a_recurrent_network_is_refused_under_the_key_that_asked_for_it():
    for key in ("compile", "cudagraphs"):
        with pytest.raises(ConfigError) as info:
            PPO(
                PPOConfig(recurrent_size=8, **{key: True}),
                env_spec("CartPole-v1"),
                actor=memory_actor(),
            )
        assert info.value.problems[0].startswith(f"ppo.{key}=True is invalid with a recurrent ")


def test_replay_algorithms_refuse_a_recurrent_network_by_its_argument():
    from fleetrl import PolicyError
    from fleetrl.algorithms import DQN, SAC, DQNConfig, SACConfig

    lstm = LSTMModule(input_size=3, hidden_size=4, in_key="observation", out_key="memory")
    with pytest.raises(PolicyError, match=r"(?s)^actor=.* is recurrent .*: sac learns from single"):
        SAC(SACConfig(), env_spec("Pendulum-v1"), actor=lstm)
    with pytest.raises(PolicyError, match=r"(?s)^qnet=.* is recurrent .*: dqn learns from single"):
        DQN(DQNConfig(), env_spec("CartPole-v1"), qnet=lstm)


@pytest.mark.parametrize("model", ["lstm", "gru"])
def test_the_cores_plain_tensor_run_equals_torchrls_recurrent_mode(model):
    """run_core: the loss's run of a core over sequences gives torchrl's recurrent-mode
    outputs and gradients (episodes starting inside the sequences included)."""
    from fleetrl.algorithms.sequences import run_core

    torch.manual_seed(0)
    ppo = PPO(
        PPOConfig(model=model, recurrent_size=16, seq_len=12, num_mini_batch=1),
        env_spec("CartPole-v1"),
    )
    data = ppo.prepare(collected(ppo))
    assert bool(data["is_init"][:, 1:].any())  # stretches inside sequences
    torso, core = ppo.trunk.trunk
    with torch.no_grad():  # the core's own gradients are compared
        embedded = torso(data.clone())
    outputs, grads = [], []
    for run in (lambda td: run_core(core, td), core):
        core.zero_grad()
        with set_recurrent_mode(True):
            out = run(embedded.clone()).get("memory")
        out.pow(2).sum().backward()
        outputs.append(out.detach())
        grads.append([p.grad.clone() for p in core.parameters()])
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
