"""Our training loop against Stable-Baselines3, stock RLlib and the bare math.

Every arm of a suite does the same work: the same networks (sizes and
activations), batch, learning rate, updates per env step, learning start and
one env in one process with one torch thread. The arms live in this process
and take turns, round by round (the order rotating every round), each timing
one chunk of `--steps` env steps, so that whatever else loads the machine hits
them alike. Printed per arm: env steps/s (wall clock) and per CPU second of the
process, updates/s, and the ratios to Stable-Baselines3 and to the floor, the
median over the rounds. For the NERS arms also the sampler's own parts over
all rounds: scoring each replayed batch and the REINFORCE steps (calls, ms per
call, ms per env step). For the arms on our training loop, where each env step
goes: the loop's own section timers (sampling, adding to the buffer, replay
sampling, the Learner update, priorities, weight sync) summed over all rounds,
in ms per env step.

The floor is the same network updates in a bare PyTorch loop on random
batches (each written as lean as eager PyTorch allows), plus the bare env steps
with random actions: no acting forward pass, no replay buffer.

Suites
------
sac      Hopper-v5; SAC's usual settings: actor and twin critics 256-256 ReLU
         MLPs (critics on [s, a]), batch 256, Adam 3e-4, tau 0.005, one update
         per env step from step 1000, 1M-transition buffer.
         sb3      Stable-Baselines3 SAC
         ners     NERSSACConfig, the NERS buffer (alpha 0.6, beta 0.4)
         per      NERSSACConfig, our prioritised buffer (alpha 0.6, beta 0.4)
         uniform  NERSSACConfig, our buffer with alpha 0
         lap      NERSSACConfig, LAP (alpha 0.4, min_priority 1, beta 0;
                  Huber critics)
         rllib    stock RLlib SACConfig with its PrioritizedEpisodeReplayBuffer
                  and its default module (256-256, but multi-stream critics:
                  RLlib 2.60 builds no [s, a] critic)
         uniform-vec8  as uniform, 8 envs per EnvRunner (8 updates per vector
                  step: the same replay ratio per env step)
         floor    bare SAC updates + bare env steps
dqn      CartPole-v1; DQN with a 256-256 tanh Q-network, batch 32, Adam 5e-4,
         one update per 4 env steps from step 1000, epsilon 1 -> 0.02 over 10k
         env steps, target sync every 500 env steps, no dueling, no double Q,
         1-step targets (Stable-Baselines3's DQN has neither).
         sb3      Stable-Baselines3 DQN
         ners     NERSDQNConfig (NERS buffer, alpha 0.6, beta 0.4)
         per      RainbowDQNConfig with our prioritised buffer
         uniform  RainbowDQNConfig with our buffer, alpha 0
         rllib    stock RLlib DQNConfig with its PrioritizedEpisodeReplayBuffer
         per-vec8 as per, 8 envs per EnvRunner (2 updates per vector step)
         floor    bare DQN updates + bare env steps
td3      Hopper-v5; the TD3 paper's settings: actor and twin critics 256-256
         ReLU MLPs (critics on [s, a]), batch 256, Adam 3e-4, tau 0.005,
         target noise 0.2 clipped at 0.5, policy delay 2, exploration noise
         0.1, one update per env step from step 1000, 1M-transition buffer.
         sb3      Stable-Baselines3 TD3
         ners     TD3Config with the NERS buffer (alpha 0.6, beta 0.4)
         per      TD3Config, our prioritised buffer (alpha 0.6, beta 0.4)
         lap      TD3Config, LAP (our buffer, alpha 0.4, min_priority 1,
                  beta 0; Huber loss)
         uniform  TD3Config, our buffer with alpha 0
         floor    bare TD3 updates + bare env steps
atari    MsPacman, data-efficient Rainbow as the NERS reference runs it (one
         update of 32 per env step, from step 1600); Stable-Baselines3 has no
         Rainbow.
         ners     NERS-Rainbow;  per  PER-Rainbow
         floor    the same RLModule's updates (the Learner's own `_update`: its
                  forward pass, C51 loss, backward and Adam) on random batches,
                  plus bare env steps

How to run
----------
    pip install -e ".[bench]"
    python benchmarks/peers.py --suite sac
    python benchmarks/peers.py --suite dqn --rounds 5 --steps 2000
    python benchmarks/peers.py --suite atari --arms ners per floor
    python benchmarks/peers.py --suite td3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

SUITES = {
    "sac": ("sb3", "ners", "per", "uniform", "rllib", "uniform-vec8", "floor", "lap"),
    "dqn": ("sb3", "ners", "per", "uniform", "rllib", "per-vec8", "floor"),
    "atari": ("ners", "per", "floor"),
    "td3": ("sb3", "ners", "per", "lap", "uniform", "floor"),
}
DEFAULT_STEPS = {"sac": 300, "dqn": 2000, "atari": 400, "td3": 300}
SAC_ENV, DQN_ENV, ATARI_GAME = "Hopper-v5", "CartPole-v1", "MsPacman"
SAC_BATCH, DQN_BATCH, ATARI_BATCH = 256, 32, 32
SAC_LEARNING_STARTS, DQN_LEARNING_STARTS, ATARI_LEARNING_STARTS = 1000, 1000, 1600
DQN_TRAIN_EVERY = 4
DQN_EPSILON = [(0, 1.0), (10000, 0.02)]
DQN_TARGET_UPDATE = 500


# ------------------------------------------------------------------ arms
class Arm:
    """Something that trains: `warm_up()` once, then `run(steps)` chunks."""

    batch_size = 1

    def warm_up(self) -> None:
        """Past the learning start, then one chunk with updates."""

    def run(self, steps: int) -> Tuple[int, int]:
        """Trains about `steps` env steps; returns (env steps, updates) taken."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class RLlibArm(Arm):
    """An RLlib algorithm; one chunk is one `train()` iteration. It warms up
    until the config's own learning start has passed (the first iteration with
    updates, then one more)."""

    def __init__(self, config, steps: int, batch_size: int):
        self.config = (
            config.env_runners(num_env_runners=0)
            .reporting(
                min_sample_timesteps_per_iteration=steps,
                min_time_s_per_iteration=0,
            )
            .debugging(seed=0)
        )
        self.batch_size = batch_size
        self.algo = None
        self.counts = (0, 0)
        # Our training loop's section timers over the measured rounds.
        self.loop_times: Dict[str, List[float]] = {}

    def build(self):
        """The algorithm (subclasses change it before it trains)."""
        return self.config.build_algo()

    def warm_up(self) -> None:
        self.algo = self.build()
        while self._read(self.algo.train())[1] == 0:
            pass
        self._read(self.algo.train())
        self.sampler_times = _time_sampler_parts(self.algo)
        self.measured_from = self.counts[0]

    def _read(self, result) -> Tuple[int, int]:
        from ray.rllib.utils.metrics import (
            ALL_MODULES,
            ENV_RUNNER_RESULTS,
            LEARNER_RESULTS,
            NUM_ENV_STEPS_SAMPLED_LIFETIME,
            NUM_ENV_STEPS_TRAINED_LIFETIME,
        )

        env_steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
        trained = int(
            result.get(LEARNER_RESULTS, {})
            .get(ALL_MODULES, {})
            .get(NUM_ENV_STEPS_TRAINED_LIFETIME, 0)
        )
        before, self.counts = self.counts, (env_steps, trained // self.batch_size)
        return self.counts[0] - before[0], self.counts[1] - before[1]

    def run(self, steps: int) -> Tuple[int, int]:
        with loop_sections_into(self.loop_times):
            return self._read(self.algo.train())

    def close(self) -> None:
        if self.algo is not None:
            self.algo.stop()


def loop_section_labels() -> Dict[str, str]:
    """The sections our training loop times (RLlib's timer keys), as printed."""
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_SAMPLING_TIMER,
        LEARNER_UPDATE_TIMER,
        REPLAY_BUFFER_ADD_DATA_TIMER,
        REPLAY_BUFFER_SAMPLE_TIMER,
        REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
        SYNCH_WORKER_WEIGHTS_TIMER,
    )

    return {
        ENV_RUNNER_SAMPLING_TIMER: "sampling",
        REPLAY_BUFFER_ADD_DATA_TIMER: "buffer add",
        REPLAY_BUFFER_SAMPLE_TIMER: "replay sample",
        LEARNER_UPDATE_TIMER: "Learner update",
        REPLAY_BUFFER_UPDATE_PRIOS_TIMER: "priorities",
        SYNCH_WORKER_WEIGHTS_TIMER: "weight sync",
    }


def print_loop_sections(name: str, arm: Arm) -> None:
    """One line: where an RLlib arm's measured env steps spent their time, per
    section of our training loop (nothing for other arms)."""
    loop_times = getattr(arm, "loop_times", None)
    if not loop_times:
        return
    steps = arm.counts[0] - arm.measured_from
    cells = [
        f"{label} {1e3 * loop_times[key][1] / max(steps, 1):.3f}"
        for key, label in loop_section_labels().items()
        if loop_times.get(key, [0])[0]
    ]
    print(
        f"{name}: loop sections, ms per env step: {', '.join(cells)} "
        f"({steps} measured env steps, all rounds)"
    )


@contextlib.contextmanager
def loop_sections_into(tally: Dict[str, List[float]]):
    """Inside the block, every iteration of our training loop adds its
    section timers' calls and seconds to `tally` ({key: [calls, seconds]}),
    as the loop logs them (an iteration on RLlib's own loop adds nothing)."""
    from rllib_ners.algorithms.common import replay_loop

    times_class = replay_loop._SectionTimes
    log_into = times_class.log_into

    def log_and_tally(times, metrics):
        for key, seconds in times.seconds.items():
            calls = tally.setdefault(key, [0, 0.0])
            calls[0] += times.calls[key]
            calls[1] += seconds
        log_into(times, metrics)

    times_class.log_into = log_and_tally
    try:
        yield
    finally:
        times_class.log_into = log_into


def _time_sampler_parts(algo) -> Dict[str, List[float]]:
    """With a NERS Learner: wraps its scoring of replayed batches and its
    REINFORCE step with timers ({part: [calls, seconds]}), else empty."""
    learner = getattr(algo.learner_group, "_learner", None)
    parts: Dict[str, List[float]] = {}
    if learner is None or getattr(learner, "ners_scorer", None) is None:
        return parts
    for part, name in (("scoring", "ners_score"), ("REINFORCE", "ners_reinforce")):
        parts[part] = [0, 0.0]
        method = getattr(learner, name)

        def timed(*args, _method=method, _tally=parts[part], **kwargs):
            start = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                _tally[0] += 1
                _tally[1] += time.perf_counter() - start

        setattr(learner, name, timed)
    return parts


class SB3Arm(Arm):
    """A Stable-Baselines3 model; one chunk is one `learn(steps)` call."""

    def __init__(self, make_model: Callable, learning_starts: int, batch_size: int):
        self.make_model = make_model
        self.learning_starts = learning_starts
        self.batch_size = batch_size
        self.model = None

    def warm_up(self) -> None:
        self.model = self.make_model()
        self.model.learn(self.learning_starts + 200, reset_num_timesteps=False)

    def run(self, steps: int) -> Tuple[int, int]:
        env0, updates0 = self.model.num_timesteps, self.model._n_updates
        self.model.learn(steps, reset_num_timesteps=False)
        return self.model.num_timesteps - env0, self.model._n_updates - updates0


class FloorArm(Arm):
    """Bare env steps with random actions, and `update()` every `every` steps."""

    def __init__(self, make_env: Callable, update: Callable, every: float):
        self.env = make_env()
        self.update = update
        self.every = every
        self.owed = 0.0

    def warm_up(self) -> None:
        self.env.reset(seed=0)
        self.env.action_space.seed(0)
        self.run(200)

    def run(self, steps: int) -> Tuple[int, int]:
        env, updates = self.env, 0
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
            self.owed += 1.0 / self.every
            while self.owed >= 1.0:
                self.update()
                self.owed -= 1.0
                updates += 1
        return steps, updates


# ------------------------------------------------------------- floors
def _mlp(sizes, activation):
    import torch.nn as nn

    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


def sac_floor_update(
    obs_dim: int,
    act_dim: int,
    batch: int = SAC_BATCH,
    device: str = "cpu",
    capturable: bool = False,
):
    """One SAC update (RLlib's losses: Huber critics, squashed Gaussian, learned
    temperature) on a fixed random batch, with the fewest passes eager PyTorch
    needs: one backward, critics frozen for the policy loss, fused Adam,
    foreach Polyak. `capturable`: Adam keeps its step on the device, so the
    update can be captured in a CUDA graph (`benchmarks/gpu.py`)."""
    import copy
    import math

    import torch
    import torch.nn.functional as F

    with torch.device(device):
        actor = _mlp([obs_dim, 256, 256, 2 * act_dim], torch.nn.ReLU)
        critics = [_mlp([obs_dim + act_dim, 256, 256, 1], torch.nn.ReLU) for _ in "12"]
        log_alpha = torch.zeros(1, requires_grad=True)
        obs, next_obs = torch.randn(batch, obs_dim), torch.randn(batch, obs_dim)
        actions = torch.rand(batch, act_dim) * 2 - 1
        rewards, not_done = torch.randn(batch), torch.ones(batch)
    targets = [copy.deepcopy(critic) for critic in critics]
    critic_params = [p for critic in critics for p in critic.parameters()]
    target_params = [p for target in targets for p in target.parameters()]
    params = list(actor.parameters()) + critic_params + [log_alpha]
    optimizer = torch.optim.Adam(
        params, lr=3e-4, eps=1e-7, fused=True, capturable=capturable
    )

    def policy(x):
        mean, log_std = actor(x).chunk(2, dim=-1)
        std = log_std.clamp(-20, 2).exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        z = (u - mean) / std
        logp = (-0.5 * z**2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - torch.log(1 - a * a + 1e-6).sum(-1)
        return a, logp

    def q_values(nets, o, a):
        x = torch.cat([o, a], dim=-1)
        return [net(x).squeeze(-1) for net in nets]

    def update():
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            next_actions, next_logp = policy(next_obs)
            q_next = torch.min(*q_values(targets, next_obs, next_actions))
            target = rewards + 0.99 * not_done * (q_next - alpha * next_logp)
        q1, q2 = q_values(critics, obs, actions)
        critic_loss = F.huber_loss(q1, target) + F.huber_loss(q2, target)
        new_actions, logp = policy(obs)
        for p in critic_params:
            p.requires_grad = False
        q_new = torch.min(*q_values(critics, obs, new_actions))
        for p in critic_params:
            p.requires_grad = True
        actor_loss = (alpha * logp - q_new).mean()
        alpha_loss = -(log_alpha * (logp.detach() - act_dim)).mean()
        optimizer.zero_grad(set_to_none=True)
        (critic_loss + actor_loss + alpha_loss).backward()
        optimizer.step()
        with torch.no_grad():
            new_targets = torch._foreach_mul(critic_params, 0.005)
            torch._foreach_add_(new_targets, torch._foreach_mul(target_params, 0.995))
            torch._foreach_copy_(target_params, new_targets)

    return update


def td3_floor_update(obs_dim: int, act_dim: int, batch: int = SAC_BATCH):
    """One TD3 update (the paper's: smoothed clipped double-Q target, both
    critics on the squared error, the actor and the Polyak update every 2nd
    update) on a fixed random batch, as lean as eager PyTorch allows: fused
    Adam, critics frozen for the actor's pass, foreach Polyak."""
    import copy

    import torch

    actor = _mlp([obs_dim, 256, 256, act_dim], torch.nn.ReLU)
    critics = [_mlp([obs_dim + act_dim, 256, 256, 1], torch.nn.ReLU) for _ in "12"]
    nets = [actor] + critics
    targets = [copy.deepcopy(net) for net in nets]
    critic_params = [p for critic in critics for p in critic.parameters()]
    params = [p for net in nets for p in net.parameters()]
    target_params = [p for target in targets for p in target.parameters()]
    critic_optimizer = torch.optim.Adam(critic_params, lr=3e-4, fused=True)
    actor_optimizer = torch.optim.Adam(actor.parameters(), lr=3e-4, fused=True)
    obs, next_obs = torch.randn(batch, obs_dim), torch.randn(batch, obs_dim)
    actions = torch.rand(batch, act_dim) * 2 - 1
    rewards, not_done = torch.randn(batch), torch.ones(batch)
    count = [0]

    def q_values(nets, o, a):
        x = torch.cat([o, a], dim=-1)
        return [net(x).squeeze(-1) for net in nets]

    def update():
        count[0] += 1
        with torch.no_grad():
            noise = (torch.randn(batch, act_dim) * 0.2).clamp(-0.5, 0.5)
            next_actions = (torch.tanh(targets[0](next_obs)) + noise).clamp(-1, 1)
            q_next = torch.min(*q_values(targets[1:], next_obs, next_actions))
            target = rewards + 0.99 * not_done * q_next
        q1, q2 = q_values(critics, obs, actions)
        critic_loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
        critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_optimizer.step()
        if count[0] % 2:
            return
        for p in critic_params:
            p.requires_grad = False
        actor_loss = -q_values(critics[:1], obs, torch.tanh(actor(obs)))[0].mean()
        for p in critic_params:
            p.requires_grad = True
        actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_optimizer.step()
        with torch.no_grad():
            torch._foreach_lerp_(target_params, params, 0.005)

    return update


def dqn_floor_update(obs_dim: int, num_actions: int, batch: int = DQN_BATCH):
    """One DQN update (Huber loss on 1-step targets, a target network synced
    every 500 env steps) on a fixed random batch, fused Adam."""
    import copy

    import torch
    import torch.nn.functional as F

    q_net = _mlp([obs_dim, 256, 256, num_actions], torch.nn.Tanh)
    target_net = copy.deepcopy(q_net)
    optimizer = torch.optim.Adam(q_net.parameters(), lr=5e-4, fused=True)
    obs, next_obs = torch.randn(batch, obs_dim), torch.randn(batch, obs_dim)
    actions = torch.randint(num_actions, (batch,))
    rewards, not_done = torch.randn(batch), torch.ones(batch)
    count = [0]

    def update():
        with torch.no_grad():
            target = rewards + 0.99 * not_done * target_net(next_obs).max(-1).values
        q = q_net(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = F.huber_loss(q, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        count[0] += 1
        if count[0] % (DQN_TARGET_UPDATE // DQN_TRAIN_EVERY) == 0:
            target_net.load_state_dict(q_net.state_dict())

    return update


def atari_floor_update(config):
    """The Learner's own update (`_update`: the RLModule's forward pass, the C51
    loss, backward, Adam) on a fixed random batch of stacked frames."""
    import gymnasium as gym
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    from rllib_ners.env.atari import make_atari_env
    from rllib_ners.utils.deferred_metrics import DeferredMetrics

    env = make_atari_env({"game": ATARI_GAME})
    frames = env.observation_space
    # The module sees 4 stacked frames (the EnvRunner's frame stacking).
    stacked = gym.spaces.Box(0, 255, frames.shape[:-1] + (4,), frames.dtype)
    learner = config.build_learner(
        spaces={DEFAULT_MODULE_ID: (stacked, env.action_space)}
    )
    learner.metrics = DeferredMetrics()
    # The batch on the Learner's device (a GPU Learner's, in benchmarks/gpu.py).
    device = next(learner.module[DEFAULT_MODULE_ID].parameters()).device
    shape = (ATARI_BATCH, 84, 84, 4)
    with torch.device(device):
        batch = {
            DEFAULT_MODULE_ID: {
                "obs": torch.randint(0, 255, shape, dtype=torch.uint8),
                "new_obs": torch.randint(0, 255, shape, dtype=torch.uint8),
                "actions": torch.randint(env.action_space.n, (ATARI_BATCH,)),
                "rewards": torch.randn(ATARI_BATCH),
                "terminateds": torch.zeros(ATARI_BATCH, dtype=torch.bool),
                "truncateds": torch.zeros(ATARI_BATCH, dtype=torch.bool),
                "weights": torch.ones(ATARI_BATCH),
                "n_step": torch.full((ATARI_BATCH,), 20),
            }
        }

    def update():
        learner._update(batch)
        learner.metrics = DeferredMetrics()

    return update


# ------------------------------------------------------------- suites
def sac_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    import gymnasium as gym
    from ray.rllib.algorithms.sac import SACConfig

    from rllib_ners.algorithms.ners_sac.presets import sac_config

    arms: Dict[str, Arm] = {}
    for name in names:
        if name == "sb3":
            arms[name] = SB3Arm(_sb3_sac, SAC_LEARNING_STARTS, SAC_BATCH)
        elif name == "floor":
            env = gym.make(SAC_ENV)
            update = sac_floor_update(
                env.observation_space.shape[0], env.action_space.shape[0]
            )
            arms[name] = FloorArm(lambda: gym.make(SAC_ENV), update, every=1)
        elif name == "rllib":
            config = sac_config(
                SAC_ENV,
                replay="per",
                learning_starts=SAC_LEARNING_STARTS,
                config=SACConfig(),
            ).training(
                replay_buffer_config={
                    "type": "PrioritizedEpisodeReplayBuffer",
                    "capacity": 1_000_000,
                    "alpha": 0.6,
                    "beta": 0.4,
                }
            )
            arms[name] = RLlibArm(config, steps, SAC_BATCH)
        else:
            replay, _, vec = name.partition("-vec")
            config = sac_config(
                SAC_ENV, replay=replay, learning_starts=SAC_LEARNING_STARTS
            )
            if vec:
                config = config.env_runners(num_envs_per_env_runner=int(vec))
            arms[name] = RLlibArm(config, steps, SAC_BATCH)
    return arms


def _sb3_sac(device: str = "cpu"):
    import gymnasium as gym
    from stable_baselines3 import SAC

    return SAC(
        "MlpPolicy",
        gym.make(SAC_ENV),
        learning_rate=3e-4,
        buffer_size=1_000_000,
        learning_starts=SAC_LEARNING_STARTS,
        batch_size=SAC_BATCH,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        policy_kwargs={"net_arch": [256, 256]},
        seed=0,
        device=device,
    )


def _dqn_config(config, buffer: dict):
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return (
        config.environment(DQN_ENV)
        .env_runners(rollout_fragment_length=DQN_TRAIN_EVERY)
        .training(
            lr=5e-4,
            gamma=0.99,
            train_batch_size_per_learner=DQN_BATCH,
            training_intensity=DQN_BATCH / DQN_TRAIN_EVERY,
            n_step=1,
            double_q=False,
            dueling=False,
            epsilon=DQN_EPSILON,
            target_network_update_freq=DQN_TARGET_UPDATE,
            num_steps_sampled_before_learning_starts=DQN_LEARNING_STARTS,
            replay_buffer_config=buffer,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256],
                fcnet_activation="tanh",
                head_fcnet_hiddens=[256],
                head_fcnet_activation="tanh",
            )
        )
    )


def dqn_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    import gymnasium as gym
    from ray.rllib.algorithms.dqn import DQNConfig

    from rllib_ners import NERSDQNConfig, RainbowDQNConfig

    fast = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
    arms: Dict[str, Arm] = {}
    for name in names:
        if name == "sb3":
            arms[name] = SB3Arm(_sb3_dqn, DQN_LEARNING_STARTS, DQN_BATCH)
            continue
        if name == "floor":
            env = gym.make(DQN_ENV)
            update = dqn_floor_update(
                env.observation_space.shape[0], env.action_space.n
            )
            arms[name] = FloorArm(
                lambda: gym.make(DQN_ENV), update, every=DQN_TRAIN_EVERY
            )
            continue
        buffer = {"capacity": 50_000, "alpha": 0.6, "beta": 0.4}
        if name == "ners":
            config = _dqn_config(NERSDQNConfig(), buffer)
        elif name == "rllib":
            buffer["type"] = "PrioritizedEpisodeReplayBuffer"
            config = _dqn_config(DQNConfig(), buffer)
        else:
            replay, _, vec = name.partition("-vec")
            buffer.update(type=fast, alpha=0.6 if replay == "per" else 0.0)
            config = _dqn_config(RainbowDQNConfig(), buffer)
            if vec:
                config = config.env_runners(
                    num_envs_per_env_runner=int(vec),
                    rollout_fragment_length=max(1, DQN_TRAIN_EVERY // int(vec)),
                )
        arms[name] = RLlibArm(config, steps, DQN_BATCH)
    return arms


def _sb3_dqn():
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN

    model = DQN(
        "MlpPolicy",
        gym.make(DQN_ENV),
        learning_rate=5e-4,
        buffer_size=50_000,
        learning_starts=DQN_LEARNING_STARTS,
        batch_size=DQN_BATCH,
        gamma=0.99,
        train_freq=DQN_TRAIN_EVERY,
        gradient_steps=1,
        target_update_interval=DQN_TARGET_UPDATE,
        policy_kwargs={"net_arch": [256, 256], "activation_fn": torch.nn.Tanh},
        seed=0,
        device="cpu",
    )
    # Epsilon over env steps, as the RLlib arms' schedule (SB3's own schedule
    # runs over the fraction of each learn() call's total).
    (t0, eps0), (t1, eps1) = DQN_EPSILON
    model.exploration_schedule = lambda _: float(
        np.interp(model.num_timesteps, [t0, t1], [eps0, eps1])
    )
    return model


def td3_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    import gymnasium as gym

    from rllib_ners.algorithms.td3.presets import td3_config

    arms: Dict[str, Arm] = {}
    for name in names:
        if name == "sb3":
            arms[name] = SB3Arm(_sb3_td3, SAC_LEARNING_STARTS, SAC_BATCH)
        elif name == "floor":
            env = gym.make(SAC_ENV)
            update = td3_floor_update(
                env.observation_space.shape[0], env.action_space.shape[0]
            )
            arms[name] = FloorArm(lambda: gym.make(SAC_ENV), update, every=1)
        else:
            config = td3_config(
                SAC_ENV, replay=name, learning_starts=SAC_LEARNING_STARTS
            )
            arms[name] = RLlibArm(config, steps, SAC_BATCH)
    return arms


def _sb3_td3():
    import gymnasium as gym
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    env = gym.make(SAC_ENV)
    act_dim = env.action_space.shape[0]
    return TD3(
        "MlpPolicy",
        env,
        learning_rate=3e-4,
        buffer_size=1_000_000,
        learning_starts=SAC_LEARNING_STARTS,
        batch_size=SAC_BATCH,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        action_noise=NormalActionNoise(np.zeros(act_dim), 0.1 * np.ones(act_dim)),
        policy_delay=2,
        target_policy_noise=0.2,
        target_noise_clip=0.5,
        policy_kwargs={"net_arch": [256, 256]},
        seed=0,
        device="cpu",
    )


def atari_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow

    arms: Dict[str, Arm] = {}
    for name in names:
        if name == "floor":
            from rllib_ners.env.atari import make_atari_env

            config = atari_data_efficient_rainbow(ATARI_GAME, replay="per")
            arms[name] = FloorArm(
                lambda: make_atari_env({"game": ATARI_GAME}),
                atari_floor_update(config),
                every=1,
            )
        else:
            config = atari_data_efficient_rainbow(
                ATARI_GAME, replay=name, learning_starts=ATARI_LEARNING_STARTS
            )
            arms[name] = RLlibArm(config, steps, ATARI_BATCH)
    return arms


BUILDERS = {
    "sac": sac_arms,
    "dqn": dqn_arms,
    "atari": atari_arms,
    "td3": td3_arms,
}


# -------------------------------------------------------------- main
def measure(arms: Dict[str, Arm], rounds: int, steps: int) -> Dict[str, dict]:
    """Rounds of one chunk per arm, the order rotating; per-chunk rates."""
    rates = {name: {"wall": [], "cpu": [], "updates": []} for name in arms}
    names = list(arms)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            wall0, cpu0 = time.perf_counter(), time.process_time()
            env_steps, updates = arms[name].run(steps)
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            rates[name]["wall"].append(env_steps / wall)
            rates[name]["cpu"].append(env_steps / cpu)
            rates[name]["updates"].append(updates / wall)
        print(f"round {round_index + 1}/{rounds} done", flush=True)
    return {
        name: {key: statistics.median(values) for key, values in rate.items()}
        for name, rate in rates.items()
    }


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo` on Linux), else the platform's."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def report(
    suite: str, median: Dict[str, dict], args, load_before, arms: Dict[str, Arm]
) -> None:
    load_after = os.getloadavg()
    print(
        f"\n{suite}: median of {args.rounds} rounds x {args.steps} env steps per "
        f"arm; {cpu_model()}, {os.cpu_count()} "
        f"cores, 1 torch thread; load average before {load_before[0]:.2f}, after "
        f"{load_after[0]:.2f}"
    )
    sb3 = median.get("sb3")
    floor = median.get("floor")
    for name, arm in arms.items():
        print_loop_sections(name, arm)
        parts = getattr(arm, "sampler_times", None)
        if not parts:
            continue
        steps = arm.counts[0] - arm.measured_from
        for part, (calls, seconds) in parts.items():
            print(
                f"{name}: {part} {int(calls)} calls, "
                f"{1e3 * seconds / max(calls, 1):.2f} ms each, "
                f"{1e3 * seconds / max(steps, 1):.3f} ms per env step "
                f"({steps} measured env steps, all rounds)"
            )
    header = ["arm", "env steps/s", "env steps / CPU s", "updates/s"]
    if sb3:
        header += ["vs SB3 (wall)", "vs SB3 (CPU)"]
    if floor:
        header += ["vs floor (wall)", "vs floor (CPU)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, rate in median.items():
        cells = [
            name,
            f"{rate['wall']:.1f}",
            f"{rate['cpu']:.1f}",
            f"{rate['updates']:.1f}",
        ]
        for ref in (sb3, floor):
            if ref:
                cells.append(f"{rate['wall'] / ref['wall']:.2f}x")
                cells.append(f"{rate['cpu'] / ref['cpu']:.2f}x")
        print("| " + " | ".join(cells) + " |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="sac")
    parser.add_argument("--arms", nargs="+", help="a subset of the suite's arms")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, help="env steps per arm and round")
    args = parser.parse_args(argv)
    args.steps = args.steps or DEFAULT_STEPS[args.suite]
    names = args.arms or list(SUITES[args.suite])
    unknown = set(names) - set(SUITES[args.suite])
    if unknown:
        parser.error(f"unknown arms for --suite {args.suite}: {sorted(unknown)}")

    import ray
    import torch

    from rllib_ners.cli.quiet import silence_known_noise

    silence_known_noise()
    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    load_before = os.getloadavg()
    arms = BUILDERS[args.suite](names, args.steps)
    try:
        for name, arm in arms.items():
            print(f"warming up {name}", flush=True)
            arm.warm_up()
        median = measure(arms, args.rounds, args.steps)
    finally:
        for arm in arms.values():
            arm.close()
        ray.shutdown()
    report(args.suite, median, args, load_before, arms)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
