"""TD3's Learner makes the TD3 paper's update (Fujimoto et al. 2018, Alg. 1).

The reference below is the paper's update written out plainly, as the
authors' code runs it: the smoothed target action, the clipped double-Q
target, both critics on the squared error and one Adam step, then every
`policy_delay`-th update the actor on `-Q_1(s, pi(s))` with the critics just
stepped and the Polyak update of all targets. Ours and the reference start
from the same weights, see the same batches and the same torch seed; the
losses, gradients and weights agree to float rounding, update by update.
DDPG's settings (one critic, no smoothing, no delay), LAP's Huber loss and
PAL's loss are checked against their formulas on crafted errors.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from torch.nn import functional as F

from rllib_ners.algorithms.common.learner.lap_losses import huber, pal
from rllib_ners.algorithms.td3 import DDPGConfig, TD3Config
from rllib_ners.algorithms.td3.torch.td3_torch_learner import (
    ACTOR_OPTIMIZER,
    CRITIC_OPTIMIZER,
    critic_loss,
    priority_errors,
)

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
BATCH = 32
MID = DEFAULT_MODULE_ID


def _learner(config):
    config = config.environment(observation_space=OBS, action_space=ACTIONS).rl_module(
        model_config={"fcnet_hiddens": [16, 16]}
    )
    torch.manual_seed(0)
    return config.build_learner(spaces={MID: (OBS, ACTIONS)})


def _batch(seed: int):
    rng = np.random.default_rng(seed)
    columns = {
        "obs": rng.uniform(-1, 1, (BATCH, 3)).astype(np.float32),
        "new_obs": rng.uniform(-1, 1, (BATCH, 3)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (BATCH, 2)).astype(np.float32),
        "rewards": rng.normal(size=BATCH).astype(np.float32),
        "terminateds": rng.random(BATCH) < 0.2,
        "truncateds": np.zeros(BATCH, bool),
        "weights": np.ones(BATCH, np.float32),
        "n_step": np.ones(BATCH, np.int64),
    }
    return MultiAgentBatch({MID: SampleBatch(columns)}, env_steps=BATCH)


class PlainTD3:
    """The paper's update on copies of the learner's networks."""

    def __init__(self, module, config):
        self.actor = copy.deepcopy(module.pi)
        self.critics = [copy.deepcopy(module.qf)]
        self.target_actor = copy.deepcopy(module.target_pi)
        self.target_critics = [copy.deepcopy(module.target_qf)]
        if module.twin_q:
            self.critics.append(copy.deepcopy(module.qf_twin))
            self.target_critics.append(copy.deepcopy(module.target_qf_twin))
        critic_params = [p for critic in self.critics for p in critic.parameters()]
        self.critic_optimizer = torch.optim.Adam(critic_params, lr=config.critic_lr)
        self.actor_optimizer = torch.optim.Adam(
            self.actor.parameters(), lr=config.actor_lr
        )
        self.config = config
        self.iterations = 0

    @staticmethod
    def q(critic, obs, actions):
        return critic(torch.cat([obs, actions], dim=-1)).squeeze(-1)

    def update(self, columns):
        config = self.config
        self.iterations += 1
        obs, actions = (
            torch.as_tensor(columns["obs"]),
            torch.as_tensor(columns["actions"]),
        )
        next_obs = torch.as_tensor(columns["new_obs"])
        rewards = torch.as_tensor(columns["rewards"])
        not_done = 1.0 - torch.as_tensor(columns["terminateds"]).float()
        with torch.no_grad():
            next_actions = self.target_actor(next_obs)
            if config.target_noise > 0:
                noise = (torch.randn_like(next_actions) * config.target_noise).clamp(
                    -config.target_noise_clip, config.target_noise_clip
                )
                next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            target_q = torch.stack(
                [self.q(c, next_obs, next_actions) for c in self.target_critics]
            ).min(dim=0)[0]
            target_q = rewards + not_done * config.gamma * target_q
        current = [self.q(c, obs, actions) for c in self.critics]
        loss = sum(F.mse_loss(q, target_q) for q in current)
        self.critic_optimizer.zero_grad()
        loss.backward()
        grads = {id(p): p.grad.clone() for c in self.critics for p in c.parameters()}
        self.critic_optimizer.step()
        actor_loss = None
        if self.iterations % config.policy_delay == 0:
            actor_loss = -self.q(self.critics[0], obs, self.actor(obs)).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            pairs = zip(
                [self.actor] + self.critics, [self.target_actor] + self.target_critics
            )
            for net, target in pairs:
                for p, tp in zip(net.parameters(), target.parameters()):
                    tp.data.copy_(config.tau * p.data + (1 - config.tau) * tp.data)
        return loss.detach(), actor_loss, grads


def _assert_same_networks(module, plain):
    ours = [module.pi, module.qf, module.target_pi, module.target_qf]
    theirs = [
        plain.actor,
        plain.critics[0],
        plain.target_actor,
        plain.target_critics[0],
    ]
    if module.twin_q:
        ours += [module.qf_twin, module.target_qf_twin]
        theirs += [plain.critics[1], plain.target_critics[1]]
    for a, b in zip(ours, theirs):
        for p, q in zip(a.parameters(), b.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "config_class, settings",
    [(TD3Config, {}), (DDPGConfig, {}), (TD3Config, {"gamma": 0.9, "tau": 0.05})],
    ids=["td3", "ddpg", "td3-other-gamma-tau"],
)
# host_reads=False: the step a GPU Learner takes (no value read on the host).
@pytest.mark.parametrize("host_reads", [None, False], ids=["cpu-step", "gpu-step"])
def test_updates_equal_the_papers_update(
    config_class, settings, host_reads, one_torch_thread
):
    learner = _learner(config_class().training(**settings))
    learner.host_reads = host_reads
    module = learner.module[MID].unwrapped()
    plain = PlainTD3(module, learner.config)
    _assert_same_networks(module, plain)
    actor_updates = []
    for step in range(6):
        batch = _batch(step)
        torch.manual_seed(100 + step)
        results = learner.update(batch=batch, timesteps={})
        torch.manual_seed(100 + step)
        loss, actor_loss, _ = plain.update(batch.policy_batches[MID])
        ours = results[MID]
        torch.testing.assert_close(
            torch.as_tensor(float(ours["qf_loss"].peek())), loss, rtol=1e-5, atol=1e-6
        )
        if actor_loss is not None:
            torch.testing.assert_close(
                torch.as_tensor(float(ours["policy_loss"].peek())),
                actor_loss.detach(),
                rtol=1e-5,
                atol=1e-6,
            )
        _assert_same_networks(module, plain)
        # The counter's growth in this update: 1 when the actor was updated.
        counter = ours.get("num_actor_updates_lifetime")
        actor_updates.append(counter.peek() if counter is not None else 0.0)
    delay = learner.config.policy_delay
    assert learner.update_counts[MID] == 6
    assert actor_updates == [float((k + 1) % delay == 0) for k in range(6)]


def test_ddpg_is_td3_without_twin_smoothing_or_delay():
    config = DDPGConfig()
    assert (config.twin_q, config.target_noise, config.policy_delay) == (False, 0.0, 1)
    assert not hasattr(_learner(DDPGConfig()).module[MID].unwrapped(), "qf_twin")


def test_the_first_critic_gradients_equal_the_papers(one_torch_thread):
    learner = _learner(TD3Config())
    module = learner.module[MID].unwrapped()
    plain = PlainTD3(module, learner.config)
    batch = _batch(7)
    torch.manual_seed(3)
    _, _, plain_grads = plain.update(batch.policy_batches[MID])
    torch.manual_seed(3)
    learner.update(batch=batch, timesteps={})
    for critic, plain_critic in zip([module.qf, module.qf_twin], plain.critics):
        for p, q in zip(critic.parameters(), plain_critic.parameters()):
            torch.testing.assert_close(p.grad, plain_grads[id(q)], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("log_gradients", [False, True])
def test_gradient_norms_are_logged_as_rllib_logs_them(log_gradients, one_torch_thread):
    """RLlib's `postprocess_gradients` logs each optimizer's global gradient
    norm with `log_gradients` (or global-norm clipping), else nothing."""
    config = TD3Config().training(policy_delay=1)
    learner = _learner(config.reporting(log_gradients=log_gradients))
    results = learner.update(batch=_batch(3), timesteps={})[MID]
    module = learner.module[MID].unwrapped()
    for optimizer, networks in (
        (CRITIC_OPTIMIZER, [module.qf, module.qf_twin]),
        (ACTOR_OPTIMIZER, [module.pi]),
    ):
        key = f"gradients_{optimizer}_global_norm"
        assert (key in results) == log_gradients
        if log_gradients:
            grads = [p.grad for net in networks for p in net.parameters()]
            norm = torch.sqrt(sum((grad**2).sum() for grad in grads))
            torch.testing.assert_close(torch.as_tensor(results[key].peek()), norm)


@pytest.mark.parametrize("host_reads", [True, False], ids=["host", "no_host_reads"])
@pytest.mark.parametrize("skip_nan_gradients", [False, True])
def test_nan_gradients_are_zeroed_unless_rllibs_setting_skips_that(
    skip_nan_gradients, host_reads
):
    """RLlib's `apply_gradients`: nan gradients are set to zero (the first Adam
    step then moves nothing), or with `torch_skip_nan_gradients` stepped on
    as they are."""
    config = TD3Config().framework(torch_skip_nan_gradients=skip_nan_gradients)
    learner = _learner(config)
    learner.host_reads = host_reads
    batch = _batch(3)
    batch.policy_batches[MID]["rewards"][0] = np.nan
    learner.update(batch=batch, timesteps={})
    critic = learner.module[MID].unwrapped().qf
    finite = all(torch.isfinite(p).all() for p in critic.parameters())
    assert finite != skip_nan_gradients


def test_priorities_are_the_larger_twin_error():
    errors = [torch.tensor([1.0, -3.0, 0.5]), torch.tensor([-2.0, 1.0, 0.25])]
    torch.testing.assert_close(priority_errors(errors), torch.tensor([2.0, 3.0, 0.5]))
    torch.testing.assert_close(
        priority_errors(errors[:1]), torch.tensor([1.0, 3.0, 0.5])
    )


def test_lap_and_pal_losses_follow_their_formulas():
    errors = torch.tensor([0.5, -0.9, 2.0, -4.0])
    expected_huber = torch.tensor([0.125, 0.405, 1.5, 3.5])
    torch.testing.assert_close(huber(errors), expected_huber)
    alpha = 0.4
    expected_pal = torch.tensor(
        [0.125, 0.405, 2.0**1.4 / 1.4, 4.0**1.4 / 1.4], dtype=torch.float32
    )
    torch.testing.assert_close(pal(errors, alpha), expected_pal)
    weights = torch.ones(4)
    twin = [errors, errors * 0.5]
    lap = critic_loss(twin, weights, "huber", alpha)
    torch.testing.assert_close(lap, huber(errors).mean() + huber(errors * 0.5).mean())
    # PAL: divided by the mean of max(max_k |delta_k|, 1)^alpha, no gradient.
    normaliser = torch.tensor([1.0, 1.0, 2.0**0.4, 4.0**0.4]).mean()
    expected = (
        pal(errors, alpha).mean() + pal(errors * 0.5, alpha).mean()
    ) / normaliser
    torch.testing.assert_close(critic_loss(twin, weights, "pal", alpha), expected)
    mse = critic_loss(twin, torch.tensor([1.0, 0.5, 2.0, 1.0]), "mse", alpha)
    w = torch.tensor([1.0, 0.5, 2.0, 1.0])
    torch.testing.assert_close(
        mse, (w * errors.pow(2)).mean() + (w * (errors * 0.5).pow(2)).mean()
    )


def test_exploration_acts_randomly_then_with_clipped_noise():
    learner = _learner(TD3Config().training(random_timesteps=10, exploration_noise=0.3))
    module = learner.module[MID].unwrapped()
    obs = torch.zeros(500, 3)
    with torch.no_grad():
        random = module.forward_exploration({"obs": obs}, t=9)["actions"]
        noisy = module.forward_exploration({"obs": obs}, t=10)["actions"]
        greedy = module.forward_inference({"obs": obs})["actions"]
    assert random.min() >= -1 and random.max() <= 1
    assert random.std() > 0.5  # uniform over [-1, 1]: std 0.58
    assert noisy.min() >= -1 and noisy.max() <= 1
    deviation = (noisy - greedy).std()
    assert 0.2 < deviation < 0.35
    assert torch.equal(greedy, module.pi(obs))
