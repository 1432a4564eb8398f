"""Action draws as RLlib's modules and distributions make them, with fewer ops.

Epsilon-greedy over Q-values (`EpsilonGreedyChoice`, `uniform_allowed_choice`)
and the squashed Gaussian of SAC (`squashed_gaussian_sample_and_logp`,
`squashed_gaussian_draw_and_logp`, `squash`, `gaussian_sample`): the same random
draws and values as RLlib's, bit for bit (tested), without the distribution
objects or torch's host-side checks. No Ray.
"""

from __future__ import annotations

import math
from typing import Dict, Tuple

import numpy as np
import torch
from torch.nn import functional as F


def uniform_allowed_choice(allowed: torch.Tensor) -> torch.Tensor:
    """`torch.multinomial(allowed.float(), 1).squeeze(1)` for a 2-D boolean mask
    (one row per state): the same draw from the same random numbers, without
    the multinomial's checks of arbitrary weights (three host syncs).

    For one sample torch draws by an exponential race, `argmax(w / E)` with
    `E ~ Exp(1)` filled into a tensor like `w` from the default generator
    (`multinomial_out` in `aten/src/ATen/native/Distributions.cpp`). A 0/1 mask
    is finite and non-negative, so the one check left is that every row allows
    an action; a row that allows none goes to `torch.multinomial` for its error.
    Tested equal to `torch.multinomial`, seed by seed.
    """
    weights = allowed.float()
    if not bool(allowed.any(dim=-1).all()):
        return torch.multinomial(weights, 1).squeeze(1)
    race = torch.empty_like(weights).exponential_(1)
    return torch.argmax(weights / race, dim=-1)


class EpsilonGreedyChoice:
    """RLlib's epsilon-greedy choice over Q-values (`DefaultDQNTorchRLModule.
    _forward_exploration`): the greedy action `argmax(q)`, a random action
    drawn by `torch.multinomial` over the actions whose Q-value is non-zero
    after `nan_to_num(neginf=0)`, and `torch.rand(rows) < epsilon` choosing
    between them, as an int64 tensor.

    On the CPU, outside autograd, the two random draws are the same torch calls
    on the default generator in RLlib's order (`exponential_` of the
    multinomial's race, see `uniform_allowed_choice`, then `uniform_` as
    `torch.rand`), into tensors kept per shape, and the rest is numpy on their
    views: for the one row an EnvRunner acts on, a dozen torch calls on a few
    numbers cost more than the Q-network itself. numpy's float32 division,
    argmax (first maximum; a NaN counts as the maximum) and comparison give
    torch's values. Elsewhere (an accelerator, a tensor with a graph, a row
    without an allowed action) the torch ops run as RLlib's. Tested equal to
    RLlib's module, draw by draw.
    """

    def __init__(self):
        # (rows, actions) -> (race, coin): tensors refilled by every call (their
        # numpy views are taken per call: a copied or pickled view would no
        # longer share the tensor's memory).
        self._draws: Dict[Tuple[int, int], Tuple[torch.Tensor, torch.Tensor]] = {}

    def __call__(self, q: torch.Tensor, epsilon) -> torch.Tensor:
        if (
            q.device.type != "cpu"
            or q.requires_grad
            or q.dim() != 2
            or q.dtype not in (torch.float32, torch.float64)
        ):
            return self._torch_choice(q, epsilon)
        values = q.numpy()
        allowed = (values != 0.0) & (values > -np.inf)  # nan_to_num(neginf=0) != 0
        if not allowed.any(axis=-1).all():
            return self._torch_choice(q, epsilon)  # multinomial's error, as RLlib
        draws = self._draws.get(values.shape)
        if draws is None:
            race = torch.empty(values.shape, dtype=torch.float32)
            coin = torch.empty(values.shape[0], dtype=torch.float32)
            draws = self._draws[values.shape] = (race, coin)
        race, coin = draws
        greedy = values.argmax(axis=-1)
        race.exponential_(1)
        random_actions = (allowed.astype(np.float32) / race.numpy()).argmax(axis=-1)
        coin.uniform_(0, 1)
        # torch compares a float32 tensor with a 0-d tensor or a Python number
        # in float32.
        threshold = np.float32(
            epsilon.item() if isinstance(epsilon, torch.Tensor) else epsilon
        )
        explore = coin.numpy() < threshold
        return torch.from_numpy(np.where(explore, random_actions, greedy))

    @staticmethod
    def _torch_choice(q: torch.Tensor, epsilon) -> torch.Tensor:
        greedy = torch.argmax(q, dim=-1)
        allowed = torch.nan_to_num(q.reshape(-1, q.size(-1)), neginf=0.0) != 0.0
        random_actions = uniform_allowed_choice(allowed)
        explore = torch.rand((q.shape[0],), device=q.device) < epsilon
        return torch.where(explore, random_actions, greedy)


# RLlib's bounds on the log-std of a Gaussian's inputs and the margin that keeps
# squashed actions off +-1 before atanh (`ray.rllib.utils.numpy`), restated
# here to keep this module free of Ray; a test checks they are RLlib's.
MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT, SMALL_NUMBER = -5, 2, 1e-6
_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _squashed_gaussian_parameters(logits: torch.Tensor):
    """`TorchSquashedGaussian.from_logits`: the location and the clamped scale."""
    loc, log_std = logits.chunk(2, dim=-1)
    return loc, torch.clamp(log_std, MIN_LOG_NN_OUTPUT, MAX_LOG_NN_OUTPUT).exp()


def squash(unsquashed: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """`tanh` onto `[low, high]`: the squashed Gaussian's action for a pre-tanh
    value (RLlib's `TorchSquashedGaussian._squash`)."""
    actions = ((torch.tanh(unsquashed) + 1.0) / 2.0) * (high - low) + low
    return torch.clamp(actions, low, high)


def _squashed_logp(unsquashed, loc, scale) -> torch.Tensor:
    """`TorchSquashedGaussian._squashed_logp`: `Normal(loc, scale).log_prob`
    summed, minus the tanh Jacobian in RLlib's stable form."""
    var = scale**2
    normal_logp = -((unsquashed - loc) ** 2) / (2 * var) - scale.log() - _LOG_SQRT_2PI
    jacobian = 2.0 * (math.log(2.0) - unsquashed - F.softplus(-2.0 * unsquashed))
    return normal_logp.sum(-1) - jacobian.sum(-1)


def squashed_gaussian_sample_and_logp(
    logits: torch.Tensor, low: float = -1.0, high: float = 1.0
) -> Tuple[torch.Tensor, torch.Tensor]:
    """What RLlib's EnvRunner draws from a `TorchSquashedGaussian` (SAC's action
    distribution): `dist = TorchSquashedGaussian.from_logits(logits)`, `actions =
    dist.sample()`, `logp = dist.logp(actions)` (the `GetActions` connector: the
    log-probability of the squashed action, through atanh), as the same tensor
    ops in the same order without the distribution objects. The same random
    draw as `torch.normal` and the same values, bit for bit (tested)."""
    loc, scale = _squashed_gaussian_parameters(logits)
    unsquashed = gaussian_sample(loc, scale)
    actions = squash(unsquashed, low, high)
    # TorchSquashedGaussian.logp: _unsquash, then _squashed_logp.
    unsquashed = (actions - low) / (high - low) * 2.0 - 1.0
    unsquashed = torch.clamp(unsquashed, -1.0 + SMALL_NUMBER, 1.0 - SMALL_NUMBER)
    return actions, _squashed_logp(torch.atanh(unsquashed), loc, scale)


def squashed_gaussian_draw_and_logp(
    logits: torch.Tensor,
    *,
    reparameterized: bool,
    low: float = -1.0,
    high: float = 1.0,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """`TorchSquashedGaussian.from_logits(logits).rsample_and_logp()` (or, not
    `reparameterized`, `.sample_and_logp()`): SAC's training draws, the exact
    log-probability of the pre-squash sample. The same ops, random draws,
    values and gradients, bit for bit (tested), without the distribution
    objects."""
    loc, scale = _squashed_gaussian_parameters(logits)
    if reparameterized:  # torch.distributions.Normal.rsample()
        unsquashed = loc + _standard_normal(loc) * scale
    else:
        unsquashed = gaussian_sample(loc, scale)
    return squash(unsquashed, low, high), _squashed_logp(unsquashed, loc, scale)


def gaussian_sample(loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`torch.normal(loc, scale)` (what `torch.distributions.Normal.sample()`
    draws), without gradients: the same draw and the same values, bit for bit
    (torch computes `z * scale + loc` from standard normal `z` itself). But
    `torch.normal` with a tensor `scale` checks `scale >= 0` by reading a value
    on the host (`std.min().ge(0).item()` in torch 2.11's distribution
    templates): a wait for the GPU per call, and an op no CUDA graph can
    capture. SAC's `scale` is an exponential, never negative."""
    with torch.no_grad():
        return _standard_normal(loc) * scale + loc


def _standard_normal(like: torch.Tensor) -> torch.Tensor:
    """Standard normal draws in a new contiguous tensor of `like`'s shape."""
    return torch.empty(like.shape, dtype=like.dtype, device=like.device).normal_()
