"""Priority writes held on the Learner's GPU until the round's updates are made,
where that changes no draw: uniform replay (alpha = 0).

After each update RLlib writes the batch's TD errors back to the buffer as
priorities. On a GPU that read waits for the update's kernels, so the host
cannot sample the next batch while the GPU computes, and the GPU idles while
the host samples. With alpha = 0 every leaf is `priority ** 0 = 1`: the
priorities change no draw and no importance weight, only the buffer's
bookkeeping (its max priority, its count of non-finite values). Writing them
later, in the same order and before anything else touches the buffer, leaves
the same buffer as writing each at once.

`DeferredPriorityWrites` holds each update's sampled items (their slots and
stamps, taken from the buffer) with its feedback rows, still on the device,
and `flush()` writes them all in order after one device-to-host copy,
unpacked in the buffer's sampler's `feedback_layout`: plain TD errors, or
LaBER's rows (its large batch is uniform, and its surrogates change no draw). The
training loop flushes after each round's updates and before storing
fragments between updates (overlapped sampling). No Ray imports.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import torch


def deferred_priority_writes_blocker(buffer, learner) -> Optional[str]:
    """Why the training loop writes each update's priorities at once; None
    where it may hold them to the round's end (see the module docstring)."""
    from rllib_ners.replay_buffers import (
        FastPrioritizedEpisodeReplayBuffer,
        NERSEpisodeReplayBuffer,
    )

    if learner is None:
        return "the Learners are remote"
    if learner.device.type != "cuda":
        return f"the Learner is on {learner.device}, where nothing runs ahead"
    if not isinstance(buffer, FastPrioritizedEpisodeReplayBuffer) or isinstance(
        buffer, NERSEpisodeReplayBuffer
    ):
        return f"{type(buffer).__name__} is not the prioritized buffer"
    if buffer.alpha != 0:
        return f"alpha={buffer.alpha}: each update's priorities change the next draw"
    return None


class DeferredPriorityWrites:
    """The priority writes of a round's updates, held until `flush()`."""

    def __init__(self):
        self._held: List[Tuple[Tuple[np.ndarray, np.ndarray], torch.Tensor]] = []

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, sampled: Tuple[np.ndarray, np.ndarray], rows: torch.Tensor) -> None:
        """One update's sampled items (`take_sampled_items()`) and its
        feedback (a tensor, one row per item, on any device, packed in the
        buffer's sampler's `feedback_layout`)."""
        if rows.shape[0] != sampled[0].shape[0]:
            raise ValueError(
                f"got {rows.shape[0]} priorities for {sampled[0].shape[0]} "
                f"sampled items"
            )
        # One row per item (TD errors as a column), so that a round's rows
        # join in one tensor for the copy.
        rows = rows.detach()
        self._held.append((sampled, rows.unsqueeze(1) if rows.dim() == 1 else rows))

    def flush(self, buffer) -> None:
        """Writes every held update's feedback, in the order held, after one
        copy of it all to the host."""
        if not self._held:
            return
        held, self._held = self._held, []
        values = torch.cat([rows for _, rows in held]).cpu().numpy()
        ends = np.cumsum([rows.shape[0] for _, rows in held])
        layout = buffer.sampler.feedback_layout
        for (sampled, _), packed in zip(held, np.split(values, ends[:-1])):
            feedback = layout.unpack(packed).in_sample_order()
            buffer.update_feedback_of(sampled, feedback)
