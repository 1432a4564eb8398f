"""The NERS sampler on a torch Learner: a part the Learner holds, not a base class.

A Learner whose config replays with NERS holds a `TorchNERSSampler` as
`learner.ners` (None otherwise): the scorer networks and their Adam optimiser
(on the Learner's device, outside RLlib's optimiser registry, so the agent's
updates never zero or step them), batch scoring with the global context
(`score`, and `report_scores`, which logs a batch's rows for the buffer), the
REINFORCE step (`reinforce`) that the algorithm runs on every Learner at
episode ends, and its checkpoint state (`get_state` / `set_state`, which the
Learners' shared base `FastTorchLearner` puts in the Learner's state). NERS-DQN,
NERS-SAC, TD3 / DDPG and ACER hold one.

With several Learners (`num_learners > 1`) RLlib splits each sampled batch
between them; the scorer then takes its global context over the whole batch (an
all-reduce across the Learners' process group), starts from rank 0's weights,
and averages REINFORCE gradients, so every Learner holds the same sampler at all
times, as DDP keeps the RLModules equal.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.utils.metrics import TD_ERROR_KEY

from rllib_ners.algorithms.common.learner.distributed import (
    average_over_learners,
    learners_share_process_group,
    sum_over_learners,
)
from rllib_ners.algorithms.common.learner.gradient_step import gradients_of
from rllib_ners.algorithms.ners.ners_learner import ners_settings_from_config
from rllib_ners.ners.encoding_cache import EncodingCache
from rllib_ners.ners.reinforce import priority_base, sampler_loss
from rllib_ners.ners.scorer import NERSScorer
from rllib_ners.replay_buffers.feedback import NERS_SCORES
from rllib_ners.replay_buffers.ners_episode_buffer import (
    DELTA,
    ENCODING_KEYS,
    SAMPLE_POSITION,
    TARGET_Q,
)
from rllib_ners.utils.optimizer_steps import make_adam
from rllib_ners.utils.rng import global_rng_state, set_global_rng_state
from rllib_ners.utils.spaces import is_image_space

logger = logging.getLogger(__name__)

# Learner metric: the share of scored observations whose image encoding came
# from the encoding cache, over the Learner's lifetime.
NERS_ENCODING_CACHE_HIT_RATE = "ners_encoding_cache_hit_rate"
# At most this many cache entries (x encoder_out_dim floats) per Learner; a
# larger replay buffer shares entries between slots (correct, more misses).
_MAX_ENCODING_CACHE_ENTRIES = 2**18
# The columns the scorer's features are built from.
NERS_FEATURE_COLUMNS = ("obs", "new_obs", "actions", "rewards", DELTA, TARGET_Q, "ts")


def sampler_tensors(batch: Dict[str, Any], device) -> Dict[str, torch.Tensor]:
    """The scorer's feature columns of a numpy batch, as tensors on `device`."""
    return {
        name: torch.as_tensor(np.asarray(batch[name]), device=device)
        for name in NERS_FEATURE_COLUMNS
    }


def uses_ners_replay(config: Any) -> bool:
    """Whether a Learner's config replays from the NERS buffer."""
    return bool(getattr(config, "uses_ners_replay", False))


class TorchNERSSampler:
    """The NERS scorer, its optimiser, scoring and REINFORCE on `learner`.

    Args:
        learner: The TorchLearner holding it (its config, device, module,
            metrics and process group are the sampler's).
        module_encoder: The RLModule's encoder that `encoder="module"` reads
            (an attribute of the module: "encoder", SAC's "pi_encoder").
        batches_carry_encoding_keys: Whether the batches it scores carry the
            buffer's `ENCODING_KEYS` (transition replay does; ACER's sequence
            replay does not, so it builds no encoding cache).
    """

    def __init__(
        self,
        learner,
        *,
        module_encoder: str = "encoder",
        batches_carry_encoding_keys: bool = True,
    ):
        self.learner = learner
        self.settings = ners_settings_from_config(learner.config)
        self.module_encoder = module_encoder
        module = learner.module[DEFAULT_MODULE_ID]
        external_dim = None
        if self.settings.encoder == "module":
            probe = torch.as_tensor(
                np.asarray(module.observation_space.sample())[None],
                device=learner.device,
            )
            external_dim = int(self.module_encode(probe).shape[-1])
        self.scorer = NERSScorer(
            module.observation_space,
            module.action_space,
            self.settings,
            external_encoder_dim=external_dim,
        ).to(learner.device)
        self.optimizer = make_adam(self.scorer.parameter_groups())
        self.encoding_cache = self._build_encoding_cache(
            module.observation_space, batches_carry_encoding_keys
        )
        if learners_share_process_group(learner):
            # Learners seed differently (or not at all): start from rank 0's nets.
            for tensor in self.scorer.state_dict().values():
                dist.broadcast(tensor, src=0)

    def _build_encoding_cache(
        self, observation_space, batches_carry_encoding_keys: bool
    ) -> Optional[EncodingCache]:
        """The cache of the separate image encoder's outputs, if it is used."""
        settings = self.settings
        if (
            settings.cache_encodings
            and settings.encoder == "separate"
            and not is_image_space(observation_space)
        ):
            # Settings cannot tell (the config names no observation space);
            # the Learner can. Vector encodings cost less than a lookup. With
            # encoder="module" `validate()` has named the setting already.
            logger.warning(
                "NERS setting cache_encodings=True has no effect with vector "
                "observations (%s): only image encodings are cached. Leave "
                "cache_encodings at its default (None).",
                observation_space,
            )
        if not (
            batches_carry_encoding_keys
            and settings.cache_encodings is not False
            and settings.encoder == "separate"
            and is_image_space(observation_space)
        ):
            return None
        capacity = (self.learner.config.replay_buffer_config or {}).get("capacity")
        size = min(
            int(capacity or _MAX_ENCODING_CACHE_ENTRIES), _MAX_ENCODING_CACHE_ENTRIES
        )
        return EncodingCache(size, settings.encoder_out_dim, self.learner.device)

    def module_encode(self, obs: torch.Tensor) -> torch.Tensor:
        """The RLModule's own encoder output, detached (encoder='module')."""
        module = self.learner.module[DEFAULT_MODULE_ID].unwrapped()
        encoder = getattr(module, self.module_encoder)
        with torch.no_grad():
            return encoder({Columns.OBS: obs})[ENCODER_OUT].detach()

    def state_encoder(self) -> Optional[Callable]:
        """The encoder NERS's features take the states through: the
        RLModule's own (`encoder="module"`), or None for the scorer's own."""
        return self.module_encode if self.settings.encoder == "module" else None

    def score(
        self,
        columns: Dict[str, torch.Tensor],
        *,
        module_encodings: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
        encoding_keys: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Priority bases of a (shard of a) sampled batch, without gradients.

        `columns` holds `NERS_FEATURE_COLUMNS` as tensors (`delta` the fresh TD
        errors). `module_encodings`: the RLModule encoder's outputs for `obs`
        and `new_obs` from the training forward pass, if it made them; with
        encoder="module" they are used instead of encoding again (the same
        values: same encoder, same weights, before the update).
        `encoding_keys`: the buffer's `ENCODING_KEYS` column; with the separate
        image encoder and `cache_encodings`, encodings come from the
        `EncodingCache` where it holds them (again the same values). Returns what
        the buffer raises to alpha: sigma for the "sigmoid" parameterization,
        `(|delta| + eps) * exp(logit)` for "per_residual". With several
        Learners each holds a shard, and the global context covers the whole
        batch.
        """
        learner = self.learner
        reduce = sum_over_learners if learners_share_process_group(learner) else None
        with torch.no_grad():
            # The scalar features' running statistics grow from scored batches
            # only, never from REINFORCE's I_train: those are rows already
            # scored (rebuilt with the same n, the cached delta and q), so
            # counting them again would weigh replayed rows twice, and each
            # Learner gets the whole I_train (an all-reduce would count it once
            # per Learner). REINFORCE thus sees the normalisation the priorities
            # were scored with, up to the drift of the statistics since then.
            scalars = self.scorer.scalar_columns(columns)
            # A Learner told to step as on a GPU (`host_reads=False`) also
            # merges the statistics without a host read.
            self.scorer.update_scalar_statistics(
                columns,
                all_reduce_sum=reduce,
                scalars=scalars,
                host_reads=learner.host_reads,
            )
            # Without double Q the pass did not encode s_t+n: encode both here.
            reuse = (
                self.settings.encoder == "module"
                and module_encodings is not None
                and all(encoding is not None for encoding in module_encodings)
            )
            encoded = module_encodings if reuse else None
            if self.encoding_cache is not None and encoding_keys is not None:
                encoded = self._cached_encodings(columns, encoding_keys)
            features = self.scorer.featurize_batch(
                columns,
                encode=self.state_encoder(),
                encoded=encoded,
                scalars=scalars,
            )
            logits = self.scorer.logits(features, all_reduce_sum=reduce)
            return priority_base(
                logits,
                columns[DELTA],
                parameterization=self.settings.parameterization,
                per_epsilon=self.settings.per_epsilon,
                max_log_correction=self.settings.max_log_correction,
            )

    def _cached_encodings(
        self, columns: Dict[str, torch.Tensor], encoding_keys: torch.Tensor
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """The separate encoder's outputs for `obs` and `new_obs`, through the
        encoding cache (`[slot, key]` of each in `encoding_keys`' columns)."""
        num = columns["obs"].shape[0]
        both = self.encoding_cache.encode(
            self.scorer.encoder,
            (columns["obs"], columns["new_obs"]),
            slots=torch.cat([encoding_keys[:, 0], encoding_keys[:, 2]]),
            keys=torch.cat([encoding_keys[:, 1], encoding_keys[:, 3]]),
        )
        return both[:num], both[num:]

    def report_scores(
        self,
        module_id: str,
        batch: Dict[str, Any],
        delta: torch.Tensor,
        target: torch.Tensor,
        *,
        module_encodings: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    ) -> None:
        """Scores a batch of 1-step (or n-step) transitions and sends the
        buffer's sampler their feedback (`send_feedback`).

        `delta` and `target` are the fresh |TD error| and TD target of each item
        (no gradients); `module_encodings` as in `score`. The training step
        hands the rows (concatenated Learner by Learner) to
        `NERSEpisodeReplayBuffer.update_priorities()`, which puts them back in
        sample order by `sample_position`.
        """
        if "ts" not in batch:
            raise ValueError(
                "The NERS learner needs the `ts` column that NERSEpisodeReplayBuffer "
                "adds to every sampled transition: set replay_buffer_config['type'] "
                "to 'rllib_ners.NERSEpisodeReplayBuffer'."
            )
        scores = self.score(
            {
                "obs": batch[Columns.OBS],
                "new_obs": batch[Columns.NEXT_OBS],
                "actions": batch[Columns.ACTIONS],
                "rewards": batch[Columns.REWARDS],
                DELTA: delta,
                TARGET_Q: target,
                "ts": batch["ts"],
            },
            module_encodings=module_encodings,
            encoding_keys=batch.get(ENCODING_KEYS),
        )
        metrics = self.learner.metrics
        cache = self.encoding_cache
        if cache is not None and cache.num_lookups:
            metrics.log_value(
                (module_id, NERS_ENCODING_CACHE_HIT_RATE),
                cache.num_hits / cache.num_lookups,
                window=1,
            )
        self.send_feedback(module_id, batch, scores, delta, target)

    def send_feedback(
        self,
        module_id: str,
        batch: Dict[str, Any],
        scores: torch.Tensor,
        delta: torch.Tensor,
        target: torch.Tensor,
    ) -> None:
        """Logs the items' NERS feedback for the buffer's sampler: rows
        `[score, delta, q, sample_position]` (`feedback.NERS_SCORES`) under
        RLlib's TD-error key, the one array RLlib's training steps hand a
        prioritized buffer, in place of the plain TD errors the algorithm's
        loss logged there. A batch without `sample_position` (built by hand,
        not by the NERS buffer) is one Learner's whole sample, in order."""
        if SAMPLE_POSITION in batch:
            positions = batch[SAMPLE_POSITION].to(scores.dtype)
        else:
            positions = torch.arange(
                scores.shape[0], dtype=scores.dtype, device=scores.device
            )
        metrics = self.learner.metrics
        metrics.delete(module_id, TD_ERROR_KEY, key_error=False)
        metrics.log_value(
            (module_id, TD_ERROR_KEY),
            NERS_SCORES.pack_columns([scores, delta, target, positions], torch.stack),
            reduce="item_series",
        )

    def reinforce(
        self, batch: Dict[str, Any], replay_reward: float
    ) -> Dict[str, float]:
        """One REINFORCE step of the sampler on I_train (numpy columns).

        The objective is the settings' `objective` (`rllib_ners.ners.reinforce`):
        the paper's log-score, or the log-probability of the sampling
        distribution, whose normaliser term uses `batch["normalizer"]` (K stored
        transitions drawn uniformly) and the buffer's `alpha`, `num_stored` and
        `normalizer_leaf`.

        Only the sampler's parameters move: the RLModule is untouched (with
        encoder='module' its encoder output enters detached). Every Learner gets
        the same batch; with several, the gradients are averaged all the same, so
        their samplers stay identical whatever the floating-point details.
        """
        self.scorer.train()
        loss, logits = sampler_loss(
            self._sampler_logits, batch, replay_reward, self.settings
        )
        gradients = gradients_of(loss, dict(self.scorer.named_parameters()))
        if learners_share_process_group(self.learner):
            average_over_learners(list(gradients.values()))
        self.optimizer.step()
        if self.encoding_cache is not None:
            self.encoding_cache.invalidate()  # the encoder has changed
        return {
            "loss": float(loss.detach().cpu()),
            "score_mean": float(torch.sigmoid(logits.detach()).mean().cpu()),
            "logit_std": float(logits.detach().std().cpu()),
        }

    def _sampler_logits(self, columns: Dict[str, Any]) -> torch.Tensor:
        """Score logits of numpy columns, with gradients (their own context)."""
        tensors = sampler_tensors(columns, self.learner.device)
        features = self.scorer.featurize_batch(tensors, encode=self.state_encoder())
        return self.scorer.logits(features)

    def get_state(self) -> Dict[str, Any]:
        state = {
            "scorer": {
                k: v.detach().cpu() for k, v in self.scorer.state_dict().items()
            },
            "optimizer": self.optimizer.state_dict(),
            # A remote Learner's own process generators (e.g. noisy nets).
            "global_rng": global_rng_state(),
        }
        if self.encoding_cache is not None:
            state["encoding_cache"] = self.encoding_cache.get_state()
        return state

    def set_state(self, state: Dict[str, Any]) -> None:
        self.scorer.load_state_dict(state["scorer"])
        self.optimizer.load_state_dict(state["optimizer"])
        cache = self.encoding_cache
        if cache is not None and "encoding_cache" in state:
            cache.set_state(state["encoding_cache"])
        elif cache is not None:  # the scorer changed; no entries saved
            cache.invalidate()
        if "global_rng" in state:
            set_global_rng_state(state["global_rng"])
