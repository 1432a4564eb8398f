"""What `peers.py` and `gpu.py` measure our training loop against, with the
settings every arm of a suite shares, and what `gpu.py`'s arms add: an arm
name's device and switches (`on_device`), floors whose updates run on the GPU.

Stable-Baselines3's SAC, DQN and TD3 on those settings, and the floor: the
same network updates in a bare PyTorch loop on random batches (each written as
lean as eager PyTorch allows), plus the bare env steps with random actions: no
acting forward pass, no replay buffer."""

from __future__ import annotations

from typing import Callable, Tuple

import numpy as np
from harness import Arm

SAC_ENV, DQN_ENV, ATARI_GAME = "Hopper-v5", "CartPole-v1", "MsPacman"
SAC_BATCH, DQN_BATCH, ATARI_BATCH = 256, 32, 32
SAC_LEARNING_STARTS, DQN_LEARNING_STARTS, ATARI_LEARNING_STARTS = 1000, 1000, 1600
DQN_TRAIN_EVERY = 4
DQN_EPSILON = [(0, 1.0), (10000, 0.02)]
DQN_TARGET_UPDATE = 500


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


# SB3's SAC and TD3 on Hopper take the settings the package's SAC and TD3
# arms use (the same networks, batch, learning rate and replay ratio).
SB3_CONTINUOUS_SETTINGS = {
    "learning_rate": 3e-4,
    "buffer_size": 1_000_000,
    "learning_starts": SAC_LEARNING_STARTS,
    "batch_size": SAC_BATCH,
    "tau": 0.005,
    "gamma": 0.99,
    "train_freq": 1,
    "gradient_steps": 1,
}


def sb3_sac(device: str = "cpu"):
    import gymnasium as gym
    from stable_baselines3 import SAC

    return SAC(
        "MlpPolicy",
        gym.make(SAC_ENV),
        **SB3_CONTINUOUS_SETTINGS,
        policy_kwargs={"net_arch": [256, 256]},
        seed=0,
        device=device,
    )


def sb3_dqn():
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


def sb3_td3():
    import gymnasium as gym
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    env = gym.make(SAC_ENV)
    act_dim = env.action_space.shape[0]
    return TD3(
        "MlpPolicy",
        env,
        **SB3_CONTINUOUS_SETTINGS,
        action_noise=NormalActionNoise(np.zeros(act_dim), 0.1 * np.ones(act_dim)),
        policy_delay=2,
        target_policy_noise=0.2,
        target_noise_clip=0.5,
        policy_kwargs={"net_arch": [256, 256]},
        seed=0,
        device="cpu",
    )


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


def on_device(config, name: str):
    """`config` as a `gpu.py` arm's name asks (`<replay>-<device>[-graph]
    [-act]`): the Learner on the GPU (`-gpu`) or the CPU (`-cpu`), updates
    replayed from CUDA graphs, acting on the Learner's device. A `peers.py`
    arm's name (no device) leaves it as it is."""
    device = name.split("-")[1] if "-" in name else None
    if device not in ("cpu", "gpu"):
        return config
    config = config.training(
        cuda_graph_updates="-graph" in name,
        act_on_learner_device=name.endswith("-act"),
    )
    return config.learners(num_gpus_per_learner=1 if device == "gpu" else 0)


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


class DeviceFloorArm(FloorArm):
    """A floor whose update runs asynchronously on the GPU: each chunk waits for
    its last kernel, so the chunk's time holds all of its work."""

    def run(self, steps: int) -> Tuple[int, int]:
        counts = super().run(steps)
        synchronize()
        return counts


def graph_captured(update):
    """`update` captured once in a CUDA graph (after warm-up passes on a side
    stream, as torch.cuda.graphs requires); returns the graph's replay."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            update()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        update()
    return graph.replay


def _mlp(sizes, activation):
    import torch.nn as nn

    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


def q_values(nets, obs, actions):
    """Each critic's Q-values of the pairs [obs, actions]."""
    import torch

    x = torch.cat([obs, actions], dim=-1)
    return [net(x).squeeze(-1) for net in nets]


def random_batch(obs_dim: int, act_dim: int, batch: int):
    """A fixed random batch: obs, next obs, actions in [-1, 1), rewards and
    not-done flags (on the current default device)."""
    import torch

    obs, next_obs = torch.randn(batch, obs_dim), torch.randn(batch, obs_dim)
    actions = torch.rand(batch, act_dim) * 2 - 1
    return obs, next_obs, actions, torch.randn(batch), torch.ones(batch)


def laber_draws(surrogates, batch: int):
    """LaBER's sub-sample of a large batch: `batch` rows drawn with
    replacement in proportion to `surrogates`, and their LaBER-mean weights
    `mean(s) / s_i`."""
    import torch

    rows = torch.multinomial(surrogates, batch, replacement=True)
    return rows, surrogates.mean() / surrogates[rows]


def laber_critic_loss(critics, obs, actions, target, batch: int, huber: bool):
    """LaBER's critic loss on a large batch, and the policy's `batch` uniform
    rows of `obs`: each critic's surrogate (the per-item loss's gradient norm
    w.r.t. Q: `min(|Q - y|, 1)` for the Huber loss, `|Q - y|` for the squared
    error) on every row without gradients, then its weighted loss on its own
    rows (`laber_draws`)."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        errors = [(q - target).abs() for q in q_values(critics, obs, actions)]
        draws = [laber_draws(e.clamp(max=1.0) if huber else e, batch) for e in errors]
    loss = 0.0
    for critic, (rows, weights) in zip(critics, draws):
        (q,) = q_values([critic], obs[rows], actions[rows])
        if huber:
            per_item = F.huber_loss(q, target[rows], reduction="none")
        else:
            per_item = (q - target[rows]) ** 2
        loss = loss + (weights * per_item).mean()
    return loss, obs[torch.randint(len(obs), (batch,))]


def sac_floor_update(
    obs_dim: int,
    act_dim: int,
    batch: int = SAC_BATCH,
    device: str = "cpu",
    capturable: bool = False,
    laber_m: int = 1,
):
    """One SAC update (RLlib's losses: Huber critics, squashed Gaussian, learned
    temperature) on a fixed random batch, with the fewest passes eager PyTorch
    needs: one backward, critics frozen for the policy loss, fused Adam,
    foreach Polyak. `capturable`: Adam keeps its step on the device, so the
    update can be captured in a CUDA graph (`benchmarks/gpu.py`).

    `laber_m` > 1: LaBER's update (`laber_sac_update`'s passes) on a large
    batch of `laber_m * batch` rows: the target and every critic's surrogate
    `min(|Q - y|, 1)` on all rows without gradients, then each critic on its
    own `batch` rows drawn in proportion (weighted), the policy on `batch`
    uniform rows."""
    import copy
    import math

    import torch
    import torch.nn.functional as F

    with torch.device(device):
        actor = _mlp([obs_dim, 256, 256, 2 * act_dim], torch.nn.ReLU)
        critics = [_mlp([obs_dim + act_dim, 256, 256, 1], torch.nn.ReLU) for _ in "12"]
        log_alpha = torch.zeros(1, requires_grad=True)
        obs, next_obs, actions, rewards, not_done = random_batch(
            obs_dim, act_dim, batch * laber_m
        )
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

    def update():
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            next_actions, next_logp = policy(next_obs)
            q_next = torch.min(*q_values(targets, next_obs, next_actions))
            target = rewards + 0.99 * not_done * (q_next - alpha * next_logp)
        if laber_m == 1:
            q1, q2 = q_values(critics, obs, actions)
            critic_loss = F.huber_loss(q1, target) + F.huber_loss(q2, target)
            actor_obs = obs
        else:
            critic_loss, actor_obs = laber_critic_loss(
                critics, obs, actions, target, batch, huber=True
            )
        new_actions, logp = policy(actor_obs)
        for p in critic_params:
            p.requires_grad = False
        q_new = torch.min(*q_values(critics, actor_obs, new_actions))
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


def td3_floor_update(
    obs_dim: int, act_dim: int, batch: int = SAC_BATCH, laber_m: int = 1
):
    """One TD3 update (the paper's: smoothed clipped double-Q target, both
    critics on the squared error, the actor and the Polyak update every 2nd
    update) on a fixed random batch, as lean as eager PyTorch allows: fused
    Adam, critics frozen for the actor's pass, foreach Polyak. `laber_m` > 1:
    LaBER's update on `laber_m * batch` rows, as `sac_floor_update`'s."""
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
    obs, next_obs, actions, rewards, not_done = random_batch(
        obs_dim, act_dim, batch * laber_m
    )
    count = [0]

    def update():
        count[0] += 1
        with torch.no_grad():
            noise = (torch.randn(len(obs), act_dim) * 0.2).clamp(-0.5, 0.5)
            next_actions = (torch.tanh(targets[0](next_obs)) + noise).clamp(-1, 1)
            q_next = torch.min(*q_values(targets[1:], next_obs, next_actions))
            target = rewards + 0.99 * not_done * q_next
        if laber_m == 1:
            q1, q2 = q_values(critics, obs, actions)
            critic_loss = ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean()
            actor_obs = obs
        else:
            critic_loss, actor_obs = laber_critic_loss(
                critics, obs, actions, target, batch, huber=False
            )
        critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_optimizer.step()
        if count[0] % 2:
            return
        for p in critic_params:
            p.requires_grad = False
        (q_new,) = q_values(critics[:1], actor_obs, torch.tanh(actor(actor_obs)))
        actor_loss = -q_new.mean()
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


def atari_floor_update(config, game: str = ATARI_GAME, batch: int = ATARI_BATCH):
    """The Learner's own update (`_update`: the RLModule's forward pass, the C51
    loss, backward, Adam) on a fixed random batch of stacked frames."""
    import gymnasium as gym
    import torch
    from ray.rllib.core import DEFAULT_MODULE_ID

    from rllib_ners.env.atari import make_atari_env
    from rllib_ners.utils.deferred_metrics import DeferredMetrics

    env = make_atari_env({"game": game})
    frames = env.observation_space
    # The module sees 4 stacked frames (the EnvRunner's frame stacking).
    stacked = gym.spaces.Box(0, 255, frames.shape[:-1] + (4,), frames.dtype)
    learner = config.build_learner(
        spaces={DEFAULT_MODULE_ID: (stacked, env.action_space)}
    )
    learner.metrics = DeferredMetrics()
    # The batch on the Learner's device (a GPU Learner's, in benchmarks/gpu.py).
    device = next(learner.module[DEFAULT_MODULE_ID].parameters()).device
    shape = (batch, 84, 84, 4)
    with torch.device(device):
        batch = {
            DEFAULT_MODULE_ID: {
                "obs": torch.randint(0, 255, shape, dtype=torch.uint8),
                "new_obs": torch.randint(0, 255, shape, dtype=torch.uint8),
                "actions": torch.randint(env.action_space.n, (batch,)),
                "rewards": torch.randn(batch),
                "terminateds": torch.zeros(batch, dtype=torch.bool),
                "truncateds": torch.zeros(batch, dtype=torch.bool),
                "weights": torch.ones(batch),
                "n_step": torch.full((batch,), 20),
            }
        }

    def update():
        learner._update(batch)
        learner.metrics = DeferredMetrics()

    return update
