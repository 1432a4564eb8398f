"""The NERS scorer: state encoder, local net f_l, global net f_g, score net f_s.

For a set I of sampled transitions with features x_i (see `NERSScorer.features`):

    sigma_i = f_s([ f_l(x_i) , mean_{j in I} f_g(x_j) ])  in (0, 1)

The global context (the mean of f_g over the set) is what lets a transition's
score depend on what else was sampled with it (Oh et al., ICLR 2021, Eq. 3-4).
Pure torch, no Ray: unit-testable alone.

The scalar features (n-step return r, delta, q, t) span very different scales (q
in the thousands on some tasks), so with `feature_normalization="running"` each
is standardised by running statistics of every scored row before the tanh
squash (`update_scalar_statistics`); "none" feeds r, delta, q and
`t / timestep_scale` to tanh as they are (the reference code's semantics).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rllib_ners.ners.settings import NERSSettings
from rllib_ners.networks.conv_stack import ConvStack, fitting_cnn_kind
from rllib_ners.utils.mlp_layers import run_mlp_layers
from rllib_ners.utils.spaces import is_image_space

__all__ = ["NERSScorer", "build_state_encoder"]

# The scalar feature columns of a batch, in the order of the statistics.
SCALAR_COLUMNS = ("rewards", "delta", "q", "ts")
NUM_SCALAR_FEATURES = len(SCALAR_COLUMNS)
# The scorer's buffers holding their running statistics (float64).
SCALAR_STATISTICS = ("scalar_count", "scalar_mean", "scalar_m2")
# The least standard deviation a scalar feature is divided by ("running").
MIN_SCALAR_STD = 1e-6


def _mlp(sizes: Sequence[int], *, final_activation: bool) -> nn.Sequential:
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2 or final_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# On CPU the image encoder runs large batches (a REINFORCE step's 2 x 1280
# stacks) in chunks of this many images, which stay in the CPU caches and so
# run faster (`benchmarks/study_costs.py --tasks ms_pacman_100k` measures it); the
# values are the same. GPUs get the whole batch at once.
_CPU_IMAGE_CHUNK = 64


class _ImageEncoder(nn.Module):
    """The reference's feature net: the data-efficient CNN (two 5x5 stride-5
    convs, 32 and 64 channels), then an MLP. Images smaller than 25x25, which
    that CNN cannot take, get the "small" CNN (one 3x3 stride-1 conv, 16
    channels) instead. Takes channels-last images as RLlib stores them; uint8
    pixels are scaled to [0, 1], bool pixels are 0/1."""

    def __init__(self, shape: Sequence[int], hiddens: Sequence[int], out_dim: int):
        super().__init__()
        self.convs = ConvStack(shape, fitting_cnn_kind(shape, "data_efficient"))
        self.mlp = _mlp(
            [self.convs.output_dim, *hiddens, out_dim], final_activation=False
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.device.type == "cpu" and obs.shape[0] > _CPU_IMAGE_CHUNK:
            return torch.cat(
                [
                    self.mlp(self.convs.features(part))
                    for part in obs.split(_CPU_IMAGE_CHUNK)
                ]
            )
        return self.mlp(self.convs.features(obs))

    def forward_conv(self, obs: torch.Tensor) -> torch.Tensor:
        """The same net through `ConvStack.forward_conv` (what the tests compare
        `forward` with)."""
        return self.mlp(self.convs.forward_conv(obs))


class _VectorEncoder(nn.Module):
    def __init__(self, dim: int, hiddens: Sequence[int], out_dim: int):
        super().__init__()
        self.mlp = _mlp([dim, *hiddens, out_dim], final_activation=False)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return run_mlp_layers(self.mlp, obs.reshape(obs.shape[0], -1).float())


def build_state_encoder(
    observation_space: gym.Space, hiddens: Sequence[int], out_dim: int
) -> nn.Module:
    """CNN for image observations (H, W, C), MLP for everything flat."""
    if is_image_space(observation_space):
        return _ImageEncoder(observation_space.shape, hiddens, out_dim)
    if not isinstance(observation_space, gym.spaces.Box):
        raise ValueError(
            f"NERS's state encoder supports Box observation spaces (vectors or "
            f"H x W x C images), got {observation_space}. Flatten or preprocess the "
            f"observations (e.g. a gymnasium FlattenObservation wrapper)."
        )
    return _VectorEncoder(int(np.prod(observation_space.shape)), hiddens, out_dim)


class NERSScorer(nn.Module):
    """Scores a set of transitions: `sigma_i = f_s([f_l(x_i), mean_j f_g(x_j)])`,
    a local net of each transition's features and the mean of a global net over
    the set (Oh et al., ICLR 2021, Eq. 3-4).

    Args:
        observation_space: The environment's observation space.
        action_space: Discrete (one-hot or scaled index) or Box (raw vector).
        settings: The NERS settings (sizes, encoder choice, timestep scale...).
        external_encoder_dim: With `settings.encoder == "module"`, the size of the
            RLModule encoder output that will be passed in as `enc_obs`.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        settings: NERSSettings,
        *,
        external_encoder_dim: Optional[int] = None,
    ):
        super().__init__()
        self.settings = settings
        self.action_space = action_space
        if settings.encoder == "separate":
            self.encoder = build_state_encoder(
                observation_space, settings.encoder_hiddens, settings.encoder_out_dim
            )
            enc_dim = settings.encoder_out_dim
        else:
            if not external_encoder_dim:
                raise ValueError(
                    "NERS setting encoder='module' needs the RLModule's encoder output "
                    "size (external_encoder_dim)."
                )
            self.encoder = None
            enc_dim = int(external_encoder_dim)
        self.action_dim = self._action_feature_dim(
            action_space, settings.action_encoding
        )
        # [enc(s), a, r, enc(s'), delta, q, t]
        self.feature_dim = 2 * enc_dim + self.action_dim + NUM_SCALAR_FEATURES

        h = settings.hidden_size
        half = max(1, h // 2)
        # Same shapes as the reference implementation. `score_net` is f_s: an
        # MLP to the logit (`score_logit_net`), then a sigmoid.
        self.local_net = _mlp(
            [self.feature_dim, h, 2 * h, h, half], final_activation=False
        )
        self.global_net = _mlp(
            [self.feature_dim, h, 2 * h, h, half], final_activation=False
        )
        self.score_net = nn.Sequential(
            _mlp([2 * half, h, half, 1], final_activation=False), nn.Sigmoid()
        )
        # A linear path from the features straight to the logit, zero at
        # initialisation (so it changes no initial score). The reference's seven
        # default-initialised layers shrink the spread of the logit across items
        # ~2.4x each, and REINFORCE cannot grow it back; through this path the
        # gradient of log p_i is alpha * (x_i - E_p[x]): a per-item contrast.
        self.linear_skip = None
        if settings.linear_skip:
            self.linear_skip = nn.Linear(self.feature_dim, 1)
            nn.init.zeros_(self.linear_skip.weight)
            nn.init.zeros_(self.linear_skip.bias)
        # Running count, mean and sum of squared deviations (Welford) of the
        # scalar features; persistent buffers, so in `state_dict()` (and thus in
        # Learner checkpoints) and restored exactly.
        num = NUM_SCALAR_FEATURES
        self.register_buffer("scalar_count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("scalar_mean", torch.zeros(num, dtype=torch.float64))
        self.register_buffer("scalar_m2", torch.zeros(num, dtype=torch.float64))

    @property
    def score_logit_net(self) -> nn.Sequential:
        """f_s up to the score logit (`score_net` without its sigmoid)."""
        return self.score_net[0]

    @property
    def score_squash(self) -> nn.Module:
        """The sigmoid at the end of `score_net`: logit -> score in (0, 1)."""
        return self.score_net[1]

    @staticmethod
    def _action_feature_dim(action_space: gym.Space, encoding: str) -> int:
        if isinstance(action_space, gym.spaces.Discrete):
            return int(action_space.n) if encoding == "one_hot" else 1
        if isinstance(action_space, gym.spaces.Box):
            return int(np.prod(action_space.shape))
        raise ValueError(
            f"NERS supports Discrete or Box action spaces, got {action_space}."
        )

    # ------------------------------------------------------------- features
    def encode_actions(self, actions: torch.Tensor) -> torch.Tensor:
        if isinstance(self.action_space, gym.spaces.Discrete):
            n = int(self.action_space.n)
            index = actions.reshape(-1).long()
            if self.settings.action_encoding == "one_hot":
                return nn.functional.one_hot(index, n).float()
            return (index.float() / max(1, n - 1)).unsqueeze(-1)
        return actions.reshape(actions.shape[0], -1).float()

    @staticmethod
    def scalar_columns(batch: Dict[str, torch.Tensor]) -> torch.Tensor:
        """`[m, NUM_SCALAR_FEATURES]` float64: the batch's r, delta, q, t
        (`SCALAR_COLUMNS`)."""
        return torch.stack(
            [batch[name].reshape(-1).double() for name in SCALAR_COLUMNS], dim=-1
        )

    def scalar_moments(
        self, scalars: torch.Tensor, *, host_reads: Optional[bool] = None
    ) -> torch.Tensor:
        """`[count, sum, sum of squares]` of the finite rows of `scalars`, shifted
        by the running mean (numerically safer; the shift is the same on every
        Learner): what `update_scalar_statistics` sums over Learners.

        `host_reads` (default: for CPU tensors) drops non-finite rows after one
        check read on the host; without, they add zeros instead (the same
        moments up to float rounding, nothing read: a read stalls a GPU)."""
        finite_rows = torch.isfinite(scalars).all(dim=-1)
        if host_reads is None:
            host_reads = scalars.device.type == "cpu"
        if not host_reads:
            shifted = torch.where(
                finite_rows.unsqueeze(-1), scalars - self.scalar_mean, 0.0
            )
            count = finite_rows.sum().reshape(1).to(scalars.dtype)
            return torch.cat([count, shifted.sum(dim=0), shifted.square().sum(dim=0)])
        if not bool(finite_rows.all()):  # (one check; indexing would sync anyway)
            scalars = scalars[finite_rows]
        scalars = scalars - self.scalar_mean
        count = scalars.new_full((1,), scalars.shape[0])
        return torch.cat([count, scalars.sum(dim=0), scalars.square().sum(dim=0)])

    def update_scalar_statistics(
        self,
        batch: Dict[str, torch.Tensor],
        *,
        all_reduce_sum: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        scalars: Optional[torch.Tensor] = None,
        host_reads: Optional[bool] = None,
    ) -> None:
        """Merges a scored batch's r, delta, q, t into the running statistics
        (the parallel form of Welford's update; rows with a non-finite value are
        left out). A no-op with `feature_normalization="none"`.

        With `all_reduce_sum` (see `forward`) the batch spans several processes
        (the Learners' shards): their counts and sums are added up first, so every
        process merges the same numbers and keeps identical statistics.
        `scalars`: the batch's `scalar_columns`, if already built.
        `host_reads`: see `scalar_moments`.
        """
        if self.settings.feature_normalization == "none":
            return
        with torch.no_grad():
            if scalars is None:
                scalars = self.scalar_columns(batch)
            moments = self.scalar_moments(scalars, host_reads=host_reads)
            if all_reduce_sum is not None:
                moments = all_reduce_sum(moments)
            num = NUM_SCALAR_FEATURES
            count, total, squares = moments[0], moments[1 : 1 + num], moments[1 + num :]
            # Counts are whole numbers: clamp_min(1) only guards empty batches
            # (without a host sync, as `if count == 0` would need on a GPU).
            shifted_mean = total / count.clamp_min(1)  # batch mean - running mean
            batch_m2 = (squares - count * shifted_mean.square()).clamp_min(0.0)
            new_count = self.scalar_count + count
            self.scalar_m2 += batch_m2 + shifted_mean.square() * (
                self.scalar_count * count / new_count.clamp_min(1)
            )
            self.scalar_mean += shifted_mean * (count / new_count.clamp_min(1))
            self.scalar_count.copy_(new_count)

    def normalize_scalars(self, scalars: torch.Tensor) -> torch.Tensor:
        """r, delta, q, t (`[m, NUM_SCALAR_FEATURES]`) as they enter tanh:
        standardised by the running statistics ("running"; unchanged before the
        first update), or raw with `t / timestep_scale` ("none")."""
        scalars = scalars.double()
        if self.settings.feature_normalization == "none":
            # t scaled, r, delta, q as they are; nothing built from host values
            # (a host-to-device copy, which a CUDA graph cannot capture).
            timesteps = scalars[:, 3:] / self.settings.timestep_scale
            return torch.cat([scalars[:, :3], timesteps], dim=-1).float()
        count = self.scalar_count
        std = (self.scalar_m2 / count.clamp_min(1)).sqrt().clamp_min(MIN_SCALAR_STD)
        # Before any statistics (mean 0) the scalars pass unchanged.
        std = torch.where(count > 0, std, torch.ones_like(std))
        return ((scalars - self.scalar_mean) / std).float()

    def features(
        self,
        *,
        enc_obs: torch.Tensor,
        enc_next_obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        delta: torch.Tensor,
        q: torch.Tensor,
        timesteps: torch.Tensor,
        scalars: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """`tanh([enc(s_t), a_t, r_t, enc(s_t+n), delta_t, q_t, t_t])`, the four
        scalars normalised first (`normalize_scalars`; `scalars`: their
        `scalar_columns`, if already built)."""
        if scalars is None:
            scalars = self.scalar_columns(
                {"rewards": rewards, "delta": delta, "q": q, "ts": timesteps}
            )
        scalars = self.normalize_scalars(scalars)
        x = torch.cat(
            [
                enc_obs.float(),
                self.encode_actions(actions),
                scalars[:, :1],
                enc_next_obs.float(),
                scalars[:, 1:],
            ],
            dim=-1,
        )
        return torch.tanh(x)

    def featurize_batch(
        self,
        batch: Dict[str, torch.Tensor],
        encode: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        *,
        encoded: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
        scalars: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Features from a batch with `obs`, `new_obs`, `actions`, `rewards`,
        `delta`, `q`, `ts`. `encode` replaces the separate encoder (module mode);
        observations and next observations go through it in one call.
        `encoded`: the encodings of `obs` and `new_obs` already computed
        elsewhere (module mode: by the agent's own forward pass; separate mode:
        by this scorer's encoder, kept in an `EncodingCache`), used as they
        are, so nothing is encoded here. `scalars`: the batch's
        `scalar_columns`, if already built."""
        if encoded is not None:
            enc_obs, enc_next_obs = encoded
        else:
            encode = encode or self.encoder
            if encode is None:
                raise ValueError("NERSScorer in encoder='module' mode needs `encode`.")
            num = batch["obs"].shape[0]
            both = encode(torch.cat([batch["obs"], batch["new_obs"]], dim=0))
            enc_obs, enc_next_obs = both[:num], both[num:]
        return self.features(
            enc_obs=enc_obs,
            enc_next_obs=enc_next_obs,
            actions=batch["actions"],
            rewards=batch["rewards"],
            delta=batch["delta"],
            q=batch["q"],
            timesteps=batch["ts"],
            scalars=scalars,
        )

    def parameter_groups(self) -> List[Dict[str, Any]]:
        """Adam parameter groups: the networks at `settings.lr`, the linear path
        at `settings.linear_skip_lr` (default: `lr`)."""
        settings = self.settings
        if self.linear_skip is None:
            return [{"params": list(self.parameters()), "lr": settings.lr}]
        skip = {id(p) for p in self.linear_skip.parameters()}
        return [
            {
                "params": [p for p in self.parameters() if id(p) not in skip],
                "lr": settings.lr,
            },
            {
                "params": list(self.linear_skip.parameters()),
                "lr": settings.linear_skip_lr or settings.lr,
            },
        ]

    # --------------------------------------------------------------- scores
    def logits(
        self,
        features: torch.Tensor,
        *,
        all_reduce_sum: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> torch.Tensor:
        """Score logits for a set of feature rows `[m, feature_dim]`.

        The global context is the mean of f_g over the set. With
        `all_reduce_sum` (scoring only, no gradients) the set spans several
        processes, e.g. the Learners' shards of one sampled batch: it must return
        the element-wise sum of its argument over all of them, and the global
        context becomes the mean of f_g over the rows of every shard.
        """
        # The layers' own ops, without the module calls (a scored batch is a
        # few dozen rows: calls cost as much as the math).
        local = run_mlp_layers(self.local_net, features)
        per_row = run_mlp_layers(self.global_net, features)
        if all_reduce_sum is None:
            global_context = per_row.mean(dim=0, keepdim=True)
        else:
            count = per_row.new_full((1,), per_row.shape[0])
            total = all_reduce_sum(torch.cat([per_row.sum(dim=0), count]))
            global_context = (total[:-1] / total[-1]).unsqueeze(0)
        joint = torch.cat([local, global_context.expand_as(local)], dim=-1)
        logits = run_mlp_layers(self.score_logit_net, joint).reshape(-1)
        if self.linear_skip is not None:
            skip = self.linear_skip
            logits = logits + F.linear(features, skip.weight, skip.bias).reshape(-1)
        return logits

    def forward(
        self,
        features: torch.Tensor,
        *,
        all_reduce_sum: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
    ) -> torch.Tensor:
        """Scores `sigma_i = sigmoid(logit_i)` in (0, 1) (see `logits`)."""
        logits = self.logits(features, all_reduce_sum=all_reduce_sum)
        return self.score_squash(logits)
