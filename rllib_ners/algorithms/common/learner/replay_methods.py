"""What a torch Learner computes for the ReLo and LaBER samplers.

The buffer side (`replay_buffers.relo_sampler`, `replay_buffers.laber_sampler`)
owns the priorities and the large batch; a Learner adds the work that needs
its networks, and only when its config replays with that method
(`replay_buffer_config["sampler"]`, read by `replay_method_of`):

- ReLo: one no-grad pass of the target network on the sampled `(s, a)`,
  giving each item's loss under the target network against the update's own
  TD target; the Learner sends `[|delta|, online loss, target loss, position]`
  rows (`pack_relo_feedback`).
- LaBER: on the `m * B` rows of the large batch, a no-grad pass for the TD
  targets and the surrogate priorities (`mse_surrogate`, `huber_surrogate`,
  `distribution_surrogate`), the sub-sample of `B` rows and their weights
  (`LargeBatchSubsampler`), the gradient step on those rows; it sends
  `[surrogate, times drawn, position]` rows (`pack_laber_feedback`).

The sub-sampler's generator is part of the Learner's checkpoint state
(`LABER_GENERATOR_STATE`, kept by `FastTorchLearner` as the NERS sampler's
state), so a restored run draws the same rows.
"""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import torch

from rllib_ners.replay_buffers.buffer_names import SAMPLE_POSITION
from rllib_ners.replay_buffers.feedback import LABER_SURROGATES, RELO_LOSSES
from rllib_ners.replay_buffers.laber_sampler import (
    DEFAULT_LABER_M,
    check_laber_settings,
)
from rllib_ners.replay_buffers.sampler_choice import LABER, PRIORITY, RELO

# The Learner's checkpoint entry for the LaBER sub-sampler's generator.
LABER_GENERATOR_STATE = "laber_generator"


def replay_method_of(config: Any) -> str:
    """The replay method of a Learner's config: "priority" (uniform replay,
    PER, LAP), "relo" or "laber" (`replay_buffer_config["sampler"]`)."""
    buffer_config = getattr(config, "replay_buffer_config", None) or {}
    return buffer_config.get("sampler") or PRIORITY


def uses_relo_replay(config: Any) -> bool:
    """Whether the Learner must send ReLo's losses."""
    return replay_method_of(config) == RELO


def uses_laber_replay(config: Any) -> bool:
    """Whether the Learner must sub-sample LaBER's large batch."""
    return replay_method_of(config) == LABER


def large_batch_factor_of(config: Any) -> int:
    """Rows a replayed batch holds per row the Learner trains on: LaBER's
    `laber_m` (its buffer returns the large batch of `m * B` rows for a batch
    of `B`, and the Learner trains on `B` drawn from it), 1 for every other
    replay. The Learners divide their logged step counts by it, and the
    training loop the env steps it counts as trained (RLlib's
    `min_train_timesteps_per_iteration`), so both count B per update."""
    if not uses_laber_replay(config):
        return 1
    return int(config.replay_buffer_config.get("laber_m", DEFAULT_LABER_M))


def sample_positions(batch: Dict[str, Any], num_rows: int, like: torch.Tensor):
    """The rows' `sample_position` column (their place in the buffer's
    sample), or `0 .. num_rows-1` for a batch built without one."""
    if SAMPLE_POSITION in batch:
        return torch.as_tensor(batch[SAMPLE_POSITION], device=like.device).to(
            like.dtype
        )
    return torch.arange(num_rows, device=like.device, dtype=like.dtype)


def pack_relo_feedback(
    td_errors: torch.Tensor,
    online_losses: torch.Tensor,
    target_losses: torch.Tensor,
    batch: Dict[str, Any],
) -> torch.Tensor:
    """`[|delta|, online loss, target loss, position]` per item
    (`feedback.RELO_LOSSES`), detached."""
    td_errors = td_errors.detach()
    columns = (
        td_errors,
        online_losses.detach().to(td_errors.dtype),
        target_losses.detach().to(td_errors.dtype),
        sample_positions(batch, td_errors.shape[0], td_errors),
    )
    return RELO_LOSSES.pack_columns(columns, torch.stack)


def pack_laber_feedback(
    surrogates: torch.Tensor, times_drawn: torch.Tensor, batch: Dict[str, Any]
) -> torch.Tensor:
    """`[surrogate, times drawn, position]` per large-batch item
    (`feedback.LABER_SURROGATES`), detached."""
    surrogates = surrogates.detach()
    columns = (
        surrogates,
        times_drawn.to(surrogates.dtype),
        sample_positions(batch, surrogates.shape[0], surrogates),
    )
    return LABER_SURROGATES.pack_columns(columns, torch.stack)


# ---------------------------------------------------------------- surrogates
# LaBER's surrogate priority: the norm of the item's loss gradient with
# respect to the network's output, the factor of its parameter gradient that
# differs between items (Lahire et al. 2022, section 4).
def mse_surrogate(delta: torch.Tensor) -> torch.Tensor:
    """`|delta|`: the squared error's gradient norm (up to a constant factor,
    which the normalised draw and the mean weights cancel)."""
    return delta.abs()


def huber_surrogate(delta: torch.Tensor) -> torch.Tensor:
    """`min(|delta|, 1)`: the Huber loss's (threshold 1) gradient norm."""
    return delta.abs().clamp(max=1.0)


def distribution_surrogate(
    probs: torch.Tensor, target_probs: torch.Tensor
) -> torch.Tensor:
    """`||p - m||_2` over the atoms: the gradient norm of C51's cross-entropy
    `-sum m log softmax(z)` with respect to the logits `z`."""
    return torch.linalg.vector_norm(probs - target_probs, dim=-1)


def surrogate_for_loss(loss_name: str):
    """The surrogate of a per-item loss named as the configs name them
    ("huber" or "mse")."""
    return huber_surrogate if loss_name == "huber" else mse_surrogate


# --------------------------------------------------------------- sub-sample
class LargeBatchSubsampler:
    """LaBER's sub-sample of a large batch, from a seeded generator.

    The draw runs on a CPU `torch.Generator` whatever the Learner's device, so
    a seeded run draws the same rows on CPU and GPU and the generator's state
    is a plain tensor in checkpoints (on a GPU it costs one copy of the
    `m * B` probabilities to the host per update).

    Args:
        m: The large batch is `m` times the mini-batch.
        weights: "mean" (`mean(s) / s_i`, the paper's LaBER-mean), "lazy"
            (`1 / s_i`) or "max" (`1 / s_i` over its largest drawn value).
        seed: Seed of the generator (None: a random one).
    """

    def __init__(self, m: int = DEFAULT_LABER_M, weights: str = "mean", seed=None):
        self.m = check_laber_settings(m, weights)
        self.weights = weights
        self.generator = torch.Generator(device="cpu")
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(int(seed))

    def minibatch_size(self, num_rows: int) -> int:
        """`B` for a large batch of `num_rows` rows; raises unless `m` divides it."""
        if num_rows % self.m:
            raise ValueError(
                f"LaBER got a large batch of {num_rows} rows, not a multiple of "
                f"laber_m={self.m}: each Learner must receive m times its "
                f"mini-batch. Make `train_batch_size_per_learner` (times "
                f"num_learners) divisible as RLlib shards it, or change laber_m."
            )
        return num_rows // self.m

    def draw(
        self, surrogates: torch.Tensor, num: int
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """`num` row indices drawn with replacement, `P(i) = s_i / sum_j s_j`,
        and their float32 weights, both on the surrogates' device. If every
        surrogate is 0 (each item fitted exactly) the draw is uniform and the
        weights 1: no item has a larger gradient to favour."""
        device = surrogates.device
        scores = surrogates.detach().to("cpu", torch.float64)
        total = scores.sum()
        if not torch.isfinite(total):
            raise ValueError(
                "LaBER's surrogate priorities are not finite (NaN or infinite TD "
                "errors): the networks diverged. Lower the learning rate or clip "
                "gradients (`grad_clip`)."
            )
        if total <= 0.0:
            index = torch.randint(scores.shape[0], (num,), generator=self.generator)
            return index.to(device), torch.ones(num, device=device)
        index = torch.multinomial(
            scores / total, num, replacement=True, generator=self.generator
        )
        inverse = 1.0 / scores[index]
        if self.weights == "mean":
            weights = scores.mean() * inverse
        elif self.weights == "lazy":
            weights = inverse
        else:
            weights = inverse / inverse.max()
        return index.to(device), weights.to(device, torch.float32)

    def uniform(self, num_rows: int, num: int, device) -> torch.Tensor:
        """`num` row indices drawn uniformly with replacement (the actor's rows
        in LaBER for actor-critic agents)."""
        return torch.randint(num_rows, (num,), generator=self.generator).to(device)

    @staticmethod
    def times_drawn(index_sets: Sequence[torch.Tensor], num_rows: int) -> torch.Tensor:
        """How often each of the `num_rows` rows was drawn, over all sets."""
        return torch.bincount(torch.cat(list(index_sets)), minlength=num_rows)

    def get_state(self) -> Dict[str, Any]:
        return {"generator": self.generator.get_state().numpy().copy()}

    def set_state(self, state: Dict[str, Any]) -> None:
        self.generator.set_state(torch.as_tensor(state["generator"], dtype=torch.uint8))


def large_batch_subsampler(learner) -> LargeBatchSubsampler:
    """The sub-sampler of a Learner whose config replays with LaBER: its
    `laber_m` and `laber_weights`, seeded from `config.seed` plus the
    Learner's rank (each of several Learners draws its own shard's rows)."""
    config = learner.config
    buffer_config = config.replay_buffer_config
    seed = config.seed
    if seed is not None:
        seed = int(seed) + _learner_rank()
    return LargeBatchSubsampler(
        buffer_config.get("laber_m", DEFAULT_LABER_M),
        buffer_config.get("laber_weights", "mean"),
        seed,
    )


def _learner_rank() -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return 0
