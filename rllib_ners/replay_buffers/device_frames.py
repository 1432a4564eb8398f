"""The replay buffer's stored frames mirrored on the Learner's device, so that
sampled frame stacks are gathered there (torch and numpy, no Ray).

Without it, every update of a GPU Learner on Atari costs the host a gather of
`2 x batch x k` frames into stacks (`frame_stack.stacked_frames`, the largest
share of `sample_batch`) and a copy of the stacks, `2 x batch x k` frames
again, to the device: for batch 32 and k = 4, 1.8 MB per update. With the
mirror, each stored frame goes to the device once, when it is first needed
(the frames written since the last sample), and a sample sends only the
frames' slots (`2 x batch x k` int64) and gathers the stacks on the device.
Both go in one host-to-device copy per sample
(`tensor_conversion.host_tensors_in_one_copy`): each copy of its own costs a
GPU host a pinned allocation and a copy call.

The stacks are the same values, built from the same slots and validity
(`frame_stack.stack_frame_slots`), and the same layout as the host's
`channels_first` stacks: `[n, H, W, k * C]` viewing channels-first memory.

The mirror follows the ring's writes by `num_slots_written`: slots are
written in ring order from `write_pos`, so the frames written since the last
sync are the last ones before it. A restored storage (new arrays) is copied
whole. Frames of evicted slots stay in the mirror as in the host ring: the
slots' validity, not their contents, decides what is used.
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np
import torch

from rllib_ners.replay_buffers.frame_stack import stack_frame_slots
from rllib_ners.replay_buffers.ring_storage import RingStorage
from rllib_ners.utils.tensor_conversion import host_tensors_in_one_copy

logger = logging.getLogger(__name__)

# The mirror may take at most this share of the device's free memory when it
# is allocated (at the first sample); a larger ring keeps its frames on the host.
MAX_SHARE_OF_FREE_MEMORY = 0.5


def free_device_bytes(device: torch.device) -> Optional[int]:
    """Free memory of a CUDA device; None for others (no limit known)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free)


class DeviceFrames:
    """The frames of a `RingStorage` on `device`, and frame stacks gathered
    there (see the module docstring). `stacks()` returns None where the
    mirror does not serve the storage (said once in the log): the caller
    builds the stacks on the host."""

    def __init__(self, device, *, name: str = "replay buffer"):
        self.device = torch.device(device)
        self.name = name
        self.frames: Optional[torch.Tensor] = None
        self.disabled_because: Optional[str] = None
        self._source: Optional[np.ndarray] = None  # the host ring it mirrors
        self._synced_written = 0

    def stacks(
        self, storage: RingStorage, slots: np.ndarray, k: int
    ) -> Optional[torch.Tensor]:
        """`[n, H, W, k * C]` uint8 stacks ending at `slots` (`[n]`), on the
        device; the values of `frame_stack.stacked_frames(storage, slots, k)`."""
        if not self._serves(storage):
            return None
        flat = np.asarray(slots, dtype=np.int64).reshape(-1)
        index, valid = stack_frame_slots(storage, flat, k)
        # The stacks' slots, -1 where the frame reads as zeros, and the frames
        # written since the last sample, in one copy through pinned memory: a
        # copy from pageable memory would make the host wait for the kernels
        # queued before it (the last update's).
        host = {
            "index": torch.from_numpy(
                np.ascontiguousarray(np.where(valid, index, -1).T)
            )
        }
        written = self._slots_not_yet_copied(storage)
        if written.size:
            host["slots"] = torch.from_numpy(written)
            host["frames"] = torch.from_numpy(storage.obs[written])
        moved = host_tensors_in_one_copy(
            host, self.device, pinned=self.device.type == "cuda"
        )
        if written.size:
            self.frames[moved["slots"]] = moved["frames"]
        self._source, self._synced_written = storage.obs, storage.num_slots_written
        index = moved["index"]  # [n, k], oldest frame first
        frames = self.frames[index.clamp(min=0)]  # [n, k, H, W(, C)]
        missing = (index < 0).reshape(index.shape + (1,) * (frames.ndim - 2))
        frames = frames.masked_fill(missing, 0)
        n, height, width = flat.size, frames.shape[2], frames.shape[3]
        if frames.ndim == 5:  # [n, k, H, W, C] -> [n, k * C, H, W]
            frames = frames.permute(0, 1, 4, 2, 3).reshape(n, -1, height, width)
        return frames.permute(0, 2, 3, 1)  # channels-last view, channels-first memory

    def _serves(self, storage: RingStorage) -> bool:
        """Whether the mirror serves this storage (allocated at the first
        sample)."""
        if self.disabled_because is not None or not storage.allocated:
            return False
        return self.frames is not None or self._allocate(storage)

    def _slots_not_yet_copied(self, storage: RingStorage) -> np.ndarray:
        """The ring's slots whose frames the mirror has yet to copy: every slot
        of a new storage (a restore) or after a full lap, else the ones written
        since the last sample, before the ring's head."""
        new = storage.num_slots_written - self._synced_written
        if storage.obs is not self._source or new < 0 or new >= storage.capacity:
            return np.arange(storage.capacity)
        return (storage.write_pos - new + np.arange(new)) % storage.capacity

    def _allocate(self, storage: RingStorage) -> bool:
        obs = storage.obs
        if obs.dtype != np.uint8 or obs.ndim not in (3, 4):
            return self._disable(
                f"its frames are {obs.dtype} {obs.shape[1:]}, not uint8 images"
            )
        free = free_device_bytes(self.device)
        if free is not None and obs.nbytes > MAX_SHARE_OF_FREE_MEMORY * free:
            return self._disable(
                f"its {obs.nbytes / 2**30:.1f} GiB of frames exceed "
                f"{MAX_SHARE_OF_FREE_MEMORY:.0%} of the {free / 2**30:.1f} GiB "
                f"free on {self.device}"
            )
        self.frames = torch.empty(obs.shape, dtype=torch.uint8, device=self.device)
        logger.info(
            "The %s keeps a copy of its %.2f GiB of frames on %s and gathers "
            "sampled frame stacks there.",
            self.name,
            obs.nbytes / 2**30,
            self.device,
        )
        return True

    def _disable(self, reason: str) -> bool:
        self.disabled_because = reason
        logger.info(
            "The %s builds sampled frame stacks on the host: %s.", self.name, reason
        )
        return False
