"""What a Learner sends back about the items of one sample (numpy only).

`ReplayFeedback` is the typed record a replay sampler sets priorities from,
one value per sampled item in each field:

- `td_errors`: `|delta_i|`, the absolute TD error (PER, LAP and uniform
  replay read it; NERS caches it as a feature of the transition);
- `scores`: NERS's `sigma_i`, the scorer's output for the item;
- `target_q`: the TD target `q_i` of the item, NERS's other cached feature;
- `online_losses`, `target_losses`: ReLo's, the item's loss under the online
  network and under the target network against the same TD target;
- `times_drawn`: LaBER's, how often the item of the large batch was drawn
  into the mini-batches of the update;
- `sample_positions`: the item's place in its sample, for Learners that each
  return a shard of the batch (see `in_sample_order`).

How it travels. RLlib's stock DQN and SAC hand a prioritized buffer exactly
one array per module: what the Learner logged under `TD_ERROR_KEY` (RLlib's
`update_priorities_in_episode_replay_buffer`), so feedback crosses from a
Learner to a buffer as that one array. A `FeedbackLayout` names the fields of
its columns: `TD_ERRORS` is RLlib's own (one TD error per item, a 1-D array),
`NERS_SCORES` is `[score, td_error, target_q, sample_position]` per item,
`RELO_LOSSES` `[td_error, online_loss, target_loss, sample_position]` and
`LABER_SURROGATES` `[surrogate, times_drawn, sample_position]`. The
Learner packs by the layout of the sampler it feeds (`pack_columns`), and the
buffer unpacks by its sampler's layout (`unpack`), which raises, naming the
fix, for an array laid out otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Optional, Sequence, Tuple

import numpy as np

# The Learner class attribute naming the `FeedbackLayout`s its updates can
# send (RLlib's Learners, which lack it, send TD errors only).
LEARNER_FEEDBACK_LAYOUTS_ATTR = "replay_feedback_layouts"


@dataclass(frozen=True)
class ReplayFeedback:
    """Per sampled item: what the Learner computed (float64 arrays, or None
    where the Learner sent no such field)."""

    td_errors: np.ndarray
    scores: Optional[np.ndarray] = None
    target_q: Optional[np.ndarray] = None
    online_losses: Optional[np.ndarray] = None
    target_losses: Optional[np.ndarray] = None
    times_drawn: Optional[np.ndarray] = None
    sample_positions: Optional[np.ndarray] = None

    def __post_init__(self):
        # Priorities are computed in float64 whatever the Learner's dtype, as
        # RLlib's buffer does.
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None:
                value = np.asarray(value, dtype=np.float64).reshape(-1)
                object.__setattr__(self, field.name, value)

    def __len__(self) -> int:
        return int(self.td_errors.shape[0])

    def in_sample_order(self) -> ReplayFeedback:
        """The feedback sorted by `sample_positions` (then dropped).

        With several Learners, RLlib shards a batch between them (interleaving
        its items) and concatenates their results Learner by Learner; each
        item's position puts it back. Raises unless the positions are
        `0 .. n-1` once each. Feedback without positions is in order already.
        """
        if self.sample_positions is None:
            return self
        positions = self.sample_positions
        order = np.argsort(positions, kind="stable")
        if not np.array_equal(positions[order], np.arange(len(self))):
            raise ValueError(
                f"The replay feedback's `sample_position` values are not "
                f"0..{len(self) - 1} once each: the Learners must return exactly "
                f"one row per item of the last sample(), all Learners together."
            )
        reordered = {
            field.name: getattr(self, field.name)[order]
            for field in fields(self)
            if field.name != "sample_positions"
            and getattr(self, field.name) is not None
        }
        return replace(self, **reordered, sample_positions=None)


@dataclass(frozen=True)
class FeedbackLayout:
    """The fields of a packed feedback array's columns, in order; a layout of
    one field packs it as a 1-D array (RLlib's TD errors)."""

    name: str
    fields: Tuple[str, ...]
    # What a Learner must be to send this layout (for the error's fix).
    sent_by: str

    @property
    def num_columns(self) -> int:
        return len(self.fields)

    def pack_columns(self, columns: Sequence, stack) -> object:
        """One array from per-field columns given in `fields` order, stacked
        with `stack` (`numpy.stack` or `torch.stack`) along the last axis."""
        if len(columns) != self.num_columns:
            raise ValueError(
                f"The {self.name} feedback layout has {self.num_columns} fields "
                f"{self.fields}, got {len(columns)} columns."
            )
        return columns[0] if self.num_columns == 1 else stack(columns, -1)

    def unpack(self, packed) -> ReplayFeedback:
        """The `ReplayFeedback` of an array packed in this layout (a layout
        of one field takes any shape, flattened, as RLlib's buffer does)."""
        if isinstance(packed, dict):  # as RLlib's, one module's array per call
            raise TypeError(
                "update_priorities() takes one array of priorities, one row per "
                "item of the last sample; a multi-agent buffer takes one module's "
                "with its module_id, once per module. Got a dict of "
                f"{sorted(map(str, packed))}."
            )
        values = np.asarray(packed, dtype=np.float64)
        if self.num_columns == 1:
            return ReplayFeedback(**{self.fields[0]: values.reshape(-1)})
        if values.ndim != 2 or values.shape[1] != self.num_columns:
            raise ValueError(
                f"The replay buffer's sampler takes {self.name} feedback, one row "
                f"[{', '.join(self.fields)}] per sampled item, got an array of "
                f"shape {values.shape}. It needs {self.sent_by}."
            )
        return ReplayFeedback(
            **{name: values[:, i] for i, name in enumerate(self.fields)}
        )


TD_ERRORS = FeedbackLayout(
    name="TD-error",
    fields=("td_errors",),
    sent_by="a Learner that logs TD errors under RLlib's TD_ERROR_KEY, as "
    "RLlib's DQN and SAC Learners and this package's do",
)

NERS_SCORES = FeedbackLayout(
    name="NERS",
    fields=("scores", "td_errors", "target_q", "sample_positions"),
    sent_by="a NERS Learner: plain TD errors mean the learner is not a NERS "
    "learner; use NERSDQNConfig (NERSSACConfig; ACERConfig or TD3Config with the NERS "
    "buffer in replay_buffer_config) or "
    "`rllib_ners.enable_ners(config)` on a stock DQNConfig",
)

RELO_LOSSES = FeedbackLayout(
    name="ReLo",
    fields=("td_errors", "online_losses", "target_losses", "sample_positions"),
    sent_by="a Learner that computes ReLo (the item's loss under the online and "
    "the target network): RainbowDQNConfig, NERSSACConfig or TD3Config with "
    "replay_buffer_config['sampler']='relo', or "
    "`rllib_ners.enable_replay(config, 'relo')` on a stock DQNConfig or SACConfig",
)

LABER_SURROGATES = FeedbackLayout(
    name="LaBER",
    fields=("td_errors", "times_drawn", "sample_positions"),
    sent_by="a Learner that sub-samples LaBER's large batch: RainbowDQNConfig, "
    "NERSSACConfig or TD3Config with replay_buffer_config['sampler']='laber', or "
    "`rllib_ners.enable_replay(config, 'laber')` on a stock DQNConfig or SACConfig",
)
