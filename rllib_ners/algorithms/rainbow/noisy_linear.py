"""Factorised-Gaussian noisy linear layer (Fortunato et al., "Noisy Networks for
Exploration", ICLR 2018, section 3.2), as used by Rainbow.

    y = (mu_w + sigma_w * eps_w) x + (mu_b + sigma_b * eps_b)
    eps_w = f(eps_out) f(eps_in)^T,   eps_b = f(eps_out),   f(x) = sign(x) sqrt(|x|)

with `eps_in ~ N(0, I_p)`, `eps_out ~ N(0, I_q)`: p + q Gaussian draws per layer
instead of p * q. Initialisation follows the paper (and Kaixhin/Rainbow):
`mu ~ U(-1/sqrt(p), 1/sqrt(p))`, `sigma = sigma0 / sqrt(p)`.

Noise is drawn only by `reset_noise()` (or `reset_noise_of(layers)`, one draw
for several layers), so one draw can serve several forward passes (e.g. the
online net on `s_t` and `s_{t+n}` in one double-Q update).
`forward(x, noise=False)` uses the mean weights only (deterministic evaluation).
Within `noisy_weights_reused(layers)` each layer builds its noisy weight once for
all its forward passes (the noise and parameters cannot change there).
No Ray imports: this is plain torch.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, Optional, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

# Up to this many input rows, forward() never builds the noisy weight matrix.
_FACTORISED_MAX_ROWS = 4


def _scaled_noise(size: int, device: torch.device) -> torch.Tensor:
    x = torch.randn(size, device=device)
    return x.sign() * x.abs().sqrt()


def reset_noise_of(layers: Sequence[NoisyLinear]) -> None:
    """Fresh factorised noise for every layer in `layers` from one Gaussian draw.

    Same distribution as calling `reset_noise()` on each layer (independent
    standard normals through `f`), but one `randn` and one `f` for the whole
    network instead of two per layer: the noise is redrawn on every update and
    every acting step, where a dozen tiny ops per layer add up.
    """
    if not layers:
        return
    sizes = [n for layer in layers for n in (layer.in_features, layer.out_features)]
    noise = _scaled_noise(sum(sizes), layers[0].eps_in.device)
    chunks = noise.split(sizes)
    with torch.no_grad():
        for layer, eps_in, eps_out in zip(layers, chunks[0::2], chunks[1::2]):
            layer.eps_in.copy_(eps_in)
            layer.eps_out.copy_(eps_out)


@contextlib.contextmanager
def noisy_weights_reused(layers: Sequence[NoisyLinear]) -> Iterator[None]:
    """Inside the block each of `layers` builds its noisy weight and bias once
    and uses them in every later forward pass of many rows: for passes with
    the same noise and parameters, such as a double-Q update's online net on
    `s_t` (with gradients) and then on `s_{t+n}` (without). The same values
    (the same tensors), one `mu + sigma * eps` per layer fewer per pass: for
    the Nature CNN's noisy 3136 x 512 layers, a few ms per update on a CPU.

    The block must not redraw the noise or change the parameters. A weight
    built without gradients is not used where gradients are on (it is built
    again)."""
    for layer in layers:
        layer.reuse_weights(True)
    try:
        yield
    finally:
        for layer in layers:
            layer.reuse_weights(False)


class NoisyLinear(nn.Module):
    """`nn.Linear` with learnable factorised Gaussian weight noise.

    Args:
        in_features: Input size p.
        out_features: Output size q.
        sigma0: Initial noise scale; each sigma starts at `sigma0 / sqrt(p)`
            (0.5 in the paper, 0.1 in data-efficient Rainbow).
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5):
        super().__init__()
        if not (math.isfinite(sigma0) and sigma0 >= 0.0):
            raise ValueError(f"`sigma0` must be a finite number >= 0, got {sigma0!r}.")
        self.in_features = in_features
        self.out_features = out_features
        self.sigma0 = float(sigma0)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        # Non-persistent: the noise is not part of state dicts, so checkpoints,
        # target-net syncs and EnvRunner weight syncs never copy one net's noise
        # into another; every copy draws its own.
        self.register_buffer("eps_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("eps_out", torch.zeros(out_features), persistent=False)
        self.reset_parameters()
        self.reset_noise()
        # Set by `noisy_weights_reused`, for its block only.
        self._reuse_weights = False
        self._held_weights: Optional[Tuple[torch.Tensor, torch.Tensor]] = None

    def reuse_weights(self, reuse: bool) -> None:
        """Whether later passes of many rows reuse one noisy weight and bias
        (built at the first of them) instead of building their own; switching
        it off drops the held weights. Use `noisy_weights_reused`, which
        switches it on for one block."""
        self._reuse_weights = reuse
        if not reuse:
            self._held_weights = None

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight_mu, -bound, bound)
        nn.init.uniform_(self.bias_mu, -bound, bound)
        nn.init.constant_(self.weight_sigma, self.sigma0 * bound)
        nn.init.constant_(self.bias_sigma, self.sigma0 * bound)

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draws fresh factorised noise `eps_in`, `eps_out`."""
        device = self.weight_mu.device
        self.eps_in.copy_(_scaled_noise(self.in_features, device))
        self.eps_out.copy_(_scaled_noise(self.out_features, device))

    def noisy_weight_and_bias(self):
        """The current noisy weight and bias (with gradients to mu and sigma)."""
        weight = self.weight_mu + self.weight_sigma * torch.outer(
            self.eps_out, self.eps_in
        )
        bias = self.bias_mu + self.bias_sigma * self.eps_out
        return weight, bias

    def forward(self, x: torch.Tensor, noise: bool = True) -> torch.Tensor:
        if not noise:
            return F.linear(x, self.weight_mu, self.bias_mu)
        if x.dim() == 2 and x.shape[0] <= _FACTORISED_MAX_ROWS:
            # (sigma * eps_out eps_in^T) x = eps_out * (sigma (eps_in * x)): for
            # a few rows (acting) two thin products beat building the q x p
            # noisy weight. Same values and gradients.
            bias = self.bias_mu + self.bias_sigma * self.eps_out
            noisy = F.linear(x * self.eps_in, self.weight_sigma) * self.eps_out
            return F.linear(x, self.weight_mu, bias) + noisy
        weight, bias = self._weight_and_bias_for_pass()
        return F.linear(x, weight, bias)

    def _weight_and_bias_for_pass(self):
        if not self._reuse_weights:
            return self.noisy_weight_and_bias()
        held = self._held_weights
        if held is None or (torch.is_grad_enabled() and not held[0].requires_grad):
            held = self._held_weights = self.noisy_weight_and_bias()
        return held

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"sigma0={self.sigma0}"
        )
