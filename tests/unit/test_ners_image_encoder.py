"""The NERS sampler's image encoder on stacked Atari frames.

Its convolutions have stride == kernel size (the reference's two 5x5 stride-5
convs), so it runs them as patch matmuls on channels-last images; this must equal
conv2d exactly, forward and backward, including the cropped border (84 = 16*5+4).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rllib_ners.ners.scorer import NERSScorer
from rllib_ners.ners.settings import NERSSettings

SPACE = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)


def make_scorer(seed=0):
    torch.manual_seed(seed)
    return NERSScorer(SPACE, gym.spaces.Discrete(9), NERSSettings())


def test_patch_matmul_equals_conv2d_on_uint8_and_float_stacks():
    encoder = make_scorer().encoder
    frames = torch.randint(0, 256, (6, 84, 84, 4), dtype=torch.uint8)
    with torch.no_grad():
        np.testing.assert_allclose(
            encoder(frames).numpy(),
            encoder.forward_conv(frames).numpy(),
            rtol=1e-5,
            atol=1e-6,
        )
        as_float = frames.float() / 255.0
        np.testing.assert_allclose(
            encoder(as_float).numpy(), encoder(frames).numpy(), rtol=1e-5, atol=1e-6
        )
    # The border that conv2d drops (rows/cols 80-83) does not matter either.
    changed = frames.clone()
    changed[:, 80:, :, :] = 255 - changed[:, 80:, :, :]
    with torch.no_grad():
        torch.testing.assert_close(encoder(changed), encoder(frames))


def test_every_frame_of_the_stack_matters():
    encoder = make_scorer().encoder
    frames = torch.randint(0, 256, (2, 84, 84, 4), dtype=torch.uint8)
    with torch.no_grad():
        base = encoder(frames)
        for channel in range(4):
            changed = frames.clone()
            changed[..., channel] = 0
            assert (encoder(changed) - base).abs().max() > 1e-4


@pytest.mark.parametrize("num_images", [5, 150], ids=["one_chunk", "chunked"])
def test_gradients_match_conv2d(num_images):
    """Values and gradients equal plain conv2d's, also for batches the encoder
    runs in chunks on CPU (more than 64 images)."""
    frames = torch.randint(0, 256, (num_images, 84, 84, 4), dtype=torch.uint8)
    grads, outputs = [], []
    for path in ("forward", "forward_conv"):
        encoder = make_scorer(seed=3).encoder
        out = getattr(encoder, path)(frames)
        out.square().sum().backward()
        outputs.append(out.detach())
        grads.append({n: p.grad.clone() for n, p in encoder.named_parameters()})
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-6)
    assert set(grads[0]) == set(grads[1])
    for name in grads[0]:
        assert grads[0][name].abs().sum() > 0, name
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "shape, dtype, kind",
    [
        ((10, 10, 4), bool, "small"),
        ((84, 84, 4), np.uint8, "data_efficient"),
        ((30, 40, 3), np.float32, "data_efficient"),
        ((24, 60, 2), np.float32, "small"),
    ],
)
def test_image_encoder_takes_any_image_size_and_dtype(shape, dtype, kind):
    """Images smaller than 25x25 (which the reference's two 5x5 stride-5 convs
    cannot take) get the small CNN; bool pixels count as 0/1, uint8 as 1/255."""
    high = 1 if dtype is bool else 255
    space = gym.spaces.Box(0, high, shape, dtype)
    torch.manual_seed(0)
    scorer = NERSScorer(space, gym.spaces.Discrete(3), NERSSettings())
    assert scorer.encoder.convs.kind == kind
    obs = torch.as_tensor(np.stack([space.sample() for _ in range(8)]))
    with torch.no_grad():
        encoded = scorer.encoder(obs)
        assert encoded.shape == (8, scorer.settings.encoder_out_dim)
        scale = 255.0 if dtype is np.uint8 else 1.0
        torch.testing.assert_close(encoded, scorer.encoder(obs.float() / scale))
        torch.testing.assert_close(
            encoded, scorer.encoder.forward_conv(obs), rtol=1e-5, atol=1e-5
        )
    batch = {
        "obs": obs,
        "new_obs": obs.flip(0),
        "actions": torch.arange(8) % 3,
        "rewards": torch.ones(8),
        "delta": torch.ones(8),
        "q": torch.ones(8),
        "ts": torch.arange(8),
    }
    scorer.update_scalar_statistics(batch)
    scores = scorer(scorer.featurize_batch(batch))
    assert scores.shape == (8,) and torch.isfinite(scores).all()
    scores.sum().backward()
    assert all(p.grad is not None for p in scorer.encoder.parameters())


class _CountingEncoder(torch.nn.Module):
    """The scorer's image encoder, counting the images it encodes."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.images = 0

    def forward(self, obs):
        self.images += obs.shape[0]
        return self.encoder(obs)


def test_encoding_cache_returns_what_encoding_again_would():
    """Hits skip the CNN and equal a fresh encoding; a new key (the buffer
    rewrote the slot), `invalidate()` (the encoder changed) and a slot sharing
    the entry (`slot % size`) all encode again, and only the misses are
    encoded."""
    from rllib_ners.ners.encoding_cache import EncodingCache

    encoder = _CountingEncoder(make_scorer().encoder)
    cache = EncodingCache(size=8, dim=NERSSettings().encoder_out_dim, device="cpu")
    # Five stored observations: slot and key of each (slot 9 shares 1's entry).
    images = torch.randint(0, 256, (5, 84, 84, 4), dtype=torch.uint8)
    slots = torch.tensor([0, 1, 2, 3, 9])
    keys = torch.tensor([10, 11, 12, 13, 19])

    def lookup(*parts):
        """Encodes observations `parts` (lists of indices) through the cache,
        as (obs, new_obs) parts; returns the output and the images encoded."""
        before = encoder.images
        index = [i for part in parts for i in part]
        out = cache.encode(
            encoder, [images[part] for part in parts], slots[index], keys[index]
        )
        with torch.no_grad():
            torch.testing.assert_close(out, encoder.encoder(images[index]))
        return out, encoder.images - before

    first, encoded = lookup([0, 1], [2])
    assert encoded == 3
    _, encoded = lookup([2, 0], [1, 1])  # all hits, repeats included
    assert encoded == 0
    assert (cache.num_hits, cache.num_lookups) == (4, 7)
    _, encoded = lookup([0, 3], [2, 1])  # only observation 3 is new
    assert encoded == 1

    # Slot 9 maps to slot 1's entry with another key: a miss, then it owns it.
    _, encoded = lookup([4])
    assert encoded == 1
    _, encoded = lookup([1])
    assert encoded == 1

    # Slot 0 rewritten (a new key): encoded again, the new image's output.
    images[0] = torch.randint(0, 256, (84, 84, 4), dtype=torch.uint8)
    keys[0] = 20
    _, encoded = lookup([0], [2])
    assert encoded == 1

    # A sampler update changes the encoder: every entry is stale.
    with torch.no_grad():
        for param in encoder.parameters():
            param.add_(0.05)
    cache.invalidate()
    updated, encoded = lookup([1], [2])
    assert encoded == 2
    assert not torch.allclose(updated, first[1:])  # the new encoder's outputs
