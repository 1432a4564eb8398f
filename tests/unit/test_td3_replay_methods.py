"""TD3's Learner with ReLo and LaBER replay (issue 65), on crafted batches.

Critics with zero weights and a chosen output bias make every `Q` a known
number, so the target `y` and each item's losses and surrogates are computed
here by hand. ReLo must send `[|delta|, online loss, target loss, position]`
rows and leave the update exactly PER's; LaBER must score the large batch,
step each critic on its own weighted draw and the actor on its uniform rows
only, and draw the same rows after a restore.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from rllib_ners.algorithms.common.config.buffer_types import FAST_BUFFER_TYPE
from rllib_ners.algorithms.common.learner.deferred_updates import (
    DEFER_METRICS,
    REPLAY_FEEDBACK,
)
from rllib_ners.algorithms.common.learner.lap_losses import huber
from rllib_ners.algorithms.common.learner.replay_methods import (
    LABER_GENERATOR_STATE,
    LargeBatchSubsampler,
)
from rllib_ners.algorithms.td3 import DDPGConfig, TD3Config
from rllib_ners.algorithms.td3.torch.td3_torch_learner import TD3TorchLearner
from rllib_ners.replay_buffers.feedback import LABER_SURROGATES, RELO_LOSSES
from rllib_ners.utils.update_graphs import EagerStandInGraph

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
MID = DEFAULT_MODULE_ID
GAMMA = 0.99
# Crafted critics: online Q_1, Q_2 and target Q'_1, Q'_2 (constants).
ONLINE, TARGET = (0.5, -1.0), (1.0, 2.0)
REWARDS = np.array([1.0, -0.5, 2.0, 0.25], np.float32)
TERMINATEDS = np.array([False, True, False, False])
POSITIONS = np.array([2, 0, 3, 1])


def _learner(sampler, config_class=TD3Config, seed=7, **training):
    config = (
        config_class()
        .environment(observation_space=OBS, action_space=ACTIONS)
        .rl_module(model_config={"fcnet_hiddens": [16, 16]})
        .debugging(seed=seed)
        .training(
            gamma=GAMMA,
            replay_buffer_config={
                "type": FAST_BUFFER_TYPE,
                "alpha": 0.5,
                "beta": 0.4,
                "sampler": sampler,
                "laber_m": 2,
            },
            **training,
        )
    )
    torch.manual_seed(0)
    return config.build_learner(spaces={MID: (OBS, ACTIONS)})


def _batch(rows, seed=0, rewards=None, terminateds=None, positions=True):
    rng = np.random.default_rng(seed)
    columns = {
        "obs": rng.uniform(-1, 1, (rows, 3)).astype(np.float32),
        "new_obs": rng.uniform(-1, 1, (rows, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (rows, 2)).astype(np.float32),
        "rewards": (
            rng.normal(size=rows).astype(np.float32) if rewards is None else rewards
        ),
        "terminateds": (rng.random(rows) < 0.2 if terminateds is None else terminateds),
        "truncateds": np.zeros(rows, bool),
        "weights": np.linspace(0.5, 1.0, rows).astype(np.float32),
        "n_step": np.ones(rows, np.int64),
    }
    if positions:
        columns["sample_position"] = np.arange(rows)
    return MultiAgentBatch({MID: SampleBatch(columns)}, env_steps=rows)


def _constant(network, value):
    """Zero weights, output bias `value`: the network outputs `value`."""
    linears = [m for m in network.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for linear in linears:
            linear.weight.zero_()
            linear.bias.zero_()
        linears[-1].bias.fill_(value)


def _craft(module, *, online=True):
    if online:
        for critic, value in zip(module.critics(), ONLINE):
            _constant(critic, value)
    for critic, value in zip(module.critics(target=True), TARGET):
        _constant(critic, value)


def _hand_target(module, rewards, terminateds):
    """`y = r + gamma (1 - d) min_k Q'_k` for the crafted target critics."""
    q_next = min(TARGET[: len(module.critics())])
    return (
        torch.as_tensor(rewards)
        + GAMMA * (1.0 - torch.as_tensor(terminateds).float()) * q_next
    )


def _feedback(learner, batch):
    results = learner.update(batch=batch, timesteps={}, **{DEFER_METRICS: True})
    return torch.as_tensor(results[REPLAY_FEEDBACK][MID])


def test_the_learner_declares_relo_and_laber_feedback():
    layouts = TD3TorchLearner.replay_feedback_layouts
    assert RELO_LOSSES in layouts and LABER_SURROGATES in layouts


@pytest.mark.parametrize("config_class", [TD3Config, DDPGConfig], ids=["td3", "ddpg"])
@pytest.mark.parametrize("kind", ["mse", "huber"])
def test_relo_rows_are_the_online_and_target_losses(config_class, kind):
    learner = _learner("relo", config_class, critic_loss=kind)
    module = learner.module[MID].unwrapped()
    _craft(module)
    batch = _batch(4, rewards=REWARDS, terminateds=TERMINATEDS)
    batch.policy_batches[MID]["sample_position"] = POSITIONS
    rows = _feedback(learner, batch)

    y = _hand_target(module, REWARDS, TERMINATEDS)
    critics = len(module.critics())
    loss = (lambda d: d.pow(2)) if kind == "mse" else huber
    online = sum(loss(value - y) for value in ONLINE[:critics]) / critics
    target = sum(loss(value - y) for value in TARGET[:critics]) / critics
    delta = torch.stack([(value - y).abs() for value in ONLINE[:critics]]).amax(0)
    assert rows.shape == (4, 4)
    torch.testing.assert_close(rows[:, 0], delta)
    torch.testing.assert_close(rows[:, 1], online)
    torch.testing.assert_close(rows[:, 2], target)
    torch.testing.assert_close(rows[:, 3], torch.as_tensor(POSITIONS).float())


def test_relo_without_positions_numbers_the_rows():
    learner = _learner("relo")
    _craft(learner.module[MID].unwrapped())
    rows = _feedback(learner, _batch(4, positions=False))
    torch.testing.assert_close(rows[:, 3], torch.arange(4.0))


def test_relo_updates_exactly_as_per(one_torch_thread):
    relo, per = _learner("relo"), _learner("priority")
    relo_module, per_module = (x.module[MID].unwrapped() for x in (relo, per))
    for step in range(3):  # the default policy delay 2: the actor steps once
        batch = _batch(32, seed=step)
        torch.manual_seed(100 + step)
        relo_rows = _feedback(relo, copy.deepcopy(batch))
        torch.manual_seed(100 + step)
        per_rows = _feedback(per, batch)
        torch.testing.assert_close(relo_rows[:, 0], per_rows, rtol=0, atol=0)
        for a, b in zip(relo_module.parameters(), per_module.parameters()):
            assert torch.equal(a, b)
            assert (a.grad is None) == (b.grad is None)
            if a.grad is not None:
                assert torch.equal(a.grad, b.grad)
    assert relo.update_counts[MID] == per.update_counts[MID] == 3


@pytest.mark.parametrize("sampler", ["relo", "laber"])
def test_relo_and_laber_need_a_per_item_critic_loss(sampler):
    for kind in ("mse", "huber"):
        learner = _learner(sampler, critic_loss=kind)
        assert (learner.laber is not None) == (sampler == "laber")
    with pytest.raises(ValueError, match="critic_loss='mse'"):
        _learner(sampler, critic_loss="pal")


def _replay_draws(state, surrogates, num, *, actor_rows_of=None):
    """The rows a Learner whose sub-sampler had `state` draws: each critic's
    (rows, weights), then the actor's uniform rows if `actor_rows_of` (the
    large batch's size)."""
    subsampler = LargeBatchSubsampler(2, "mean", seed=None)
    subsampler.set_state(state)
    draws = [subsampler.draw(s, num) for s in surrogates]
    actor_rows = None
    if actor_rows_of is not None:
        actor_rows = subsampler.uniform(actor_rows_of, num, torch.device("cpu"))
    return draws, actor_rows


@pytest.mark.parametrize("config_class", [TD3Config, DDPGConfig], ids=["td3", "ddpg"])
@pytest.mark.parametrize("kind", ["mse", "huber"])
def test_laber_rows_are_the_surrogates_and_the_draw_counts(config_class, kind):
    learner = _learner("laber", config_class, critic_loss=kind, policy_delay=1)
    module = learner.module[MID].unwrapped()
    _craft(module)
    batch = _batch(4, rewards=REWARDS, terminateds=TERMINATEDS)
    batch.policy_batches[MID]["sample_position"] = POSITIONS
    state = learner.laber.get_state()
    rows = _feedback(learner, batch)

    y = _hand_target(module, REWARDS, TERMINATEDS)
    critics = len(module.critics())
    surrogate = (
        (lambda d: d.abs()) if kind == "mse" else (lambda d: d.abs().clamp(max=1))
    )
    per_critic = [surrogate(value - y) for value in ONLINE[:critics]]
    draws, actor_rows = _replay_draws(state, per_critic, 2, actor_rows_of=4)
    drawn = torch.cat([idx for idx, _ in draws] + [actor_rows])
    assert rows.shape == (4, 3)
    torch.testing.assert_close(rows[:, 0], sum(per_critic) / critics)
    torch.testing.assert_close(rows[:, 1], torch.bincount(drawn, minlength=4).float())
    assert rows[:, 1].sum() == 2 * (critics + 1)  # B = 4 // m per draw
    torch.testing.assert_close(rows[:, 2], torch.as_tensor(POSITIONS).float())


def test_laber_without_an_actor_step_counts_the_critics_draws_only():
    learner = _learner("laber")  # policy delay 2: no actor step in update 1
    _craft(learner.module[MID].unwrapped())
    rows = _feedback(learner, _batch(8))
    assert rows[:, 1].sum() == 2 * 4


def test_laber_with_equal_surrogates_weighs_every_drawn_row_one():
    learner = _learner("laber")
    module = learner.module[MID].unwrapped()
    _craft(module)
    draws, draw = [], learner.laber.draw

    def recording_draw(surrogates, num):
        draws.append(draw(surrogates, num))
        return draws[-1]

    learner.laber.draw = recording_draw
    rewards, terminateds = np.full(8, 0.5, np.float32), np.zeros(8, bool)
    results = learner.update(
        batch=_batch(8, rewards=rewards, terminateds=terminateds), timesteps={}
    )
    y = 0.5 + GAMMA * min(TARGET)
    # Unweighted mean over each critic's rows (all rows share one error).
    expected = sum((value - y) ** 2 for value in ONLINE)
    assert float(results[MID]["qf_loss"].peek()) == pytest.approx(expected, rel=1e-6)
    # One draw per critic, of B = 8 / 2 rows, each weighing 1.
    assert len(draws) == 2
    for _, weights in draws:
        torch.testing.assert_close(weights, torch.ones(4))


def test_laber_steps_each_critic_on_its_rows_and_the_actor_on_its_own(
    one_torch_thread,
):
    learner = _learner("laber", policy_delay=1)
    module = learner.module[MID].unwrapped()
    _craft(module, online=False)  # random online critics, known target
    batch = _batch(8, seed=5)
    columns = batch.policy_batches[MID]
    obs, actions = (torch.as_tensor(columns[k]) for k in ("obs", "actions"))
    y = _hand_target(module, columns["rewards"], columns["terminateds"])
    critics = [copy.deepcopy(c) for c in module.critics()]
    actor = copy.deepcopy(module.pi)
    state = learner.laber.get_state()
    learner.update(batch=batch, timesteps={})

    def q(critic, o, a):
        return critic(torch.cat([o, a], -1)).squeeze(-1)

    with torch.no_grad():
        surrogates = [(q(c, obs, actions) - y).abs() for c in critics]
    draws, actor_rows = _replay_draws(state, surrogates, 4, actor_rows_of=8)
    for critic, ours, (rows, weights) in zip(critics, module.critics(), draws):
        loss = torch.mean(
            weights * (q(critic, obs[rows], actions[rows]) - y[rows]) ** 2
        )
        loss.backward()
        for p, mine in zip(critic.parameters(), ours.parameters()):
            torch.testing.assert_close(mine.grad, p.grad, rtol=1e-5, atol=1e-7)
    # The actor's loss on its uniform rows, against the critic just stepped.
    stepped = copy.deepcopy(module.qf)
    actor_obs = obs[actor_rows]
    (-q(stepped, actor_obs, actor(actor_obs)).mean()).backward()
    for p, mine in zip(actor.parameters(), module.pi.parameters()):
        torch.testing.assert_close(mine.grad, p.grad, rtol=1e-5, atol=1e-7)


def test_laber_needs_a_multiple_of_m_rows():
    learner = _learner("laber")
    with pytest.raises(ValueError, match="laber_m=2"):
        learner.update(batch=_batch(7), timesteps={})


@pytest.mark.parametrize("sampler", ["relo", "laber"])
def test_only_laber_updates_without_captured_graphs(sampler):
    learner = _learner(sampler, cuda_graph_updates=True)
    learner.host_reads = False  # the gradient step a GPU Learner takes
    learner.make_update_graph = EagerStandInGraph  # a graph on the CPU
    learner.update(batch=_batch(8), timesteps={}, **{DEFER_METRICS: True})
    # LaBER draws its rows on the host mid-update: nothing to capture.
    assert (learner.update_graphs is None) == (sampler == "laber")


def test_a_restored_laber_learner_draws_the_same_rows(one_torch_thread):
    original = _learner("laber")
    original.update(batch=_batch(8, seed=1), timesteps={})
    state = original.get_state()
    assert LABER_GENERATOR_STATE in state
    assert LABER_GENERATOR_STATE not in original.get_state(
        not_components=LABER_GENERATOR_STATE
    )
    restored = _learner("laber", seed=11)  # another seed: other draws unrestored
    restored.set_state(state)
    for step in (2, 3):
        batch = _batch(8, seed=step)
        torch.manual_seed(step)
        restored_rows = _feedback(restored, copy.deepcopy(batch))
        torch.manual_seed(step)
        original_rows = _feedback(original, batch)
        assert torch.equal(restored_rows, original_rows)
    for a, b in zip(
        restored.module[MID].unwrapped().parameters(),
        original.module[MID].unwrapped().parameters(),
    ):
        assert torch.equal(a, b)
