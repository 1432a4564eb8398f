"""Per-iteration diagnostics of the NERS sampler under `result["ners"]`.

Every training iteration (through `NERSSamplerUpdate.report()`: from `step()`
in NERS-DQN, NERS-SAC, TD3 and ACER, from `NERSCallback.on_train_result` on
the stock-DQN route), `SamplerDiagnostics.compute()`:

- reads the leaves, "scored" flags and cached TD errors of the stored
  transitions (a uniform random subset of `diagnostics_sample_size` of them when
  the buffer holds more) and computes the distribution keys of
  `rllib_ners.ners.diagnostics`;
- scores a fixed probe set of stored transitions on the Learners (drawn once the
  buffer holds `PROBE_SIZE` transitions; a probe item whose slot is evicted or
  rewritten is replaced by a fresh draw) as its own batch, without gradients,
  and reports the scores' spread and their rank drift since the last scoring.

Its random draws (subset, probe items, their n) come from its own numpy
Generator, never from the buffer's, the Learners' or torch's, so seeded training
runs are the same with or without diagnostics. The generator and the probe set
are part of `NERSSamplerUpdate`'s checkpoint state.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch

from rllib_ners.algorithms.ners.torch.torch_ners_sampler import sampler_tensors
from rllib_ners.ners.diagnostics import (
    DIAGNOSTICS_SAMPLE_SIZE,
    PROBE_SIZE,
    probe_diagnostics,
    replay_distribution_diagnostics,
    uniform_subset,
)
from rllib_ners.ners.reinforce import learned_log_score
from rllib_ners.replay_buffers.n_step import draw_n_steps

# Mixed into the diagnostics generator's seed, so that it never equals a
# generator training seeds with the same `config.seed`.
_SEED_SALT = 0x4E455253  # "NERS"


def _score_probe_on_learner(learner, *, batch) -> np.ndarray:
    """The Learner's learned log-scores of `batch` (`log sigma`, or
    per_residual's log-correction: the part of the log priority the sampler
    learns) as one batch of its own (its own global context, no all-reduce with
    other Learners), without gradients."""
    settings = learner.ners.settings
    tensors = sampler_tensors(batch, learner.device)
    with torch.no_grad():
        features = learner.ners.scorer.featurize_batch(
            tensors, encode=learner.ners.state_encoder()
        )
        log_scores = learned_log_score(
            learner.ners.scorer.logits(features),
            parameterization=settings.parameterization,
            log_eps=settings.log_eps,
            max_log_correction=settings.max_log_correction,
        )
        return log_scores.detach().cpu().numpy()


class SamplerDiagnostics:
    """Probe set, random generator and the per-iteration computation.

    Args:
        sample_size: Stored transitions the distribution keys look at.
        n_step: The n (or inclusive range) of the probe transitions' features,
            drawn once per probe item.
        gamma: Discount of their n-step returns.
        seed: Seeds the diagnostics' own generator (None: unseeded).
        probe_size: Number of probe items.
    """

    def __init__(
        self,
        *,
        sample_size: int = DIAGNOSTICS_SAMPLE_SIZE,
        n_step=1,
        gamma: float = 0.99,
        seed: Optional[int] = None,
        probe_size: int = PROBE_SIZE,
    ):
        self.sample_size = int(sample_size)
        self.n_step = n_step
        self.gamma = float(gamma)
        self.probe_size = int(probe_size)
        self.rng = np.random.default_rng(None if seed is None else [_SEED_SALT, seed])
        self.probe_slots: Optional[np.ndarray] = None
        self.probe_stamps: Optional[np.ndarray] = None
        self.probe_n_steps: Optional[np.ndarray] = None
        # Scores of the last probe scoring, NaN where the item was replaced since.
        self.probe_previous: Optional[np.ndarray] = None

    def compute(self, algorithm) -> Dict[str, float]:
        """All diagnostics defined now (see the module docstring)."""
        buffer = algorithm.local_replay_buffer
        stored = buffer.transition_slots()
        if stored.size == 0:
            return {}
        columns = buffer.diagnostics_columns(
            uniform_subset(self.rng, stored, self.sample_size)
        )
        out = replay_distribution_diagnostics(
            columns["leaf"], columns["scored"], columns["delta"], stored.size
        )
        batch = self.refresh_probe(buffer, stored)
        if batch is not None:
            results = algorithm.learner_group.foreach_learner(
                _score_probe_on_learner, batch=batch
            )
            # Every Learner holds the same sampler: the first one's scores do.
            scores = np.asarray(next(iter(results)).get(), dtype=np.float64)
            out.update(probe_diagnostics(scores, self.probe_previous))
            self.probe_previous = scores
        return out

    def refresh_probe(self, buffer, stored: np.ndarray) -> Optional[Dict[str, Any]]:
        """Draws the probe set (once enough transitions are stored) or replaces
        its evicted items; returns its feature batch, or None before the draw."""
        if self.probe_slots is None:
            if stored.size < self.probe_size:
                return None
            self.probe_slots = uniform_subset(self.rng, stored, self.probe_size)
            self.probe_stamps = buffer.slot_stamps(self.probe_slots)
            self.probe_n_steps = draw_n_steps(
                self.rng, self.probe_slots.size, self.n_step
            )
            self.probe_previous = None
        else:
            self._replace_lost(buffer, stored)
        return buffer.scorer_feature_batch(
            self.probe_slots, self.probe_n_steps, gamma=self.gamma
        )

    def _replace_lost(self, buffer, stored: np.ndarray) -> None:
        kept = buffer.still_stored(self.probe_slots, self.probe_stamps)
        if kept.all():
            return
        lost = np.flatnonzero(~kept)
        fresh = self._fresh_items(stored, self.probe_slots[kept], lost.size)
        refill, dropped = lost[: fresh.size], lost[fresh.size :]
        self.probe_slots[refill] = fresh
        self.probe_stamps[refill] = buffer.slot_stamps(fresh)
        self.probe_n_steps[refill] = draw_n_steps(self.rng, fresh.size, self.n_step)
        if self.probe_previous is not None:
            self.probe_previous[refill] = np.nan
        if dropped.size:  # fewer stored transitions than probe items lost
            for name in ("probe_slots", "probe_stamps", "probe_n_steps"):
                setattr(self, name, np.delete(getattr(self, name), dropped))
            if self.probe_previous is not None:
                self.probe_previous = np.delete(self.probe_previous, dropped)

    def _fresh_items(
        self, stored: np.ndarray, probe: np.ndarray, num: int
    ) -> np.ndarray:
        """Up to `num` stored slots outside `probe`, uniformly without
        replacement. `num + probe.size` distinct stored slots are drawn and
        the probe's dropped: at least `num` remain, in random order. (Removing
        the probe from every stored slot first costs a sort of the buffer,
        tens of milliseconds per iteration at a million transitions.)"""
        if stored.size <= num + probe.size:  # a small buffer: take what is left
            candidates = np.setdiff1d(stored, probe, assume_unique=True)
            return self.rng.choice(
                candidates, size=min(num, candidates.size), replace=False
            )
        drawn = stored[
            self.rng.choice(stored.size, size=num + probe.size, replace=False)
        ]
        return drawn[~np.isin(drawn, probe)][:num]

    # ------------------------------------------------------------------ state
    _PROBE_ARRAYS = ("probe_slots", "probe_stamps", "probe_n_steps", "probe_previous")

    def get_state(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {"rng": self.rng.bit_generator.state}
        for name in self._PROBE_ARRAYS:
            value = getattr(self, name)
            state[name] = None if value is None else value.copy()
        return state

    def set_state(self, state: Dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        for name in self._PROBE_ARRAYS:
            value = state[name]
            setattr(self, name, None if value is None else np.array(value))
