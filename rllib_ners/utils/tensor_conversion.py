"""numpy arrays as torch tensors on a device, converted as RLlib converts them
(no Ray)."""

from __future__ import annotations

from typing import Dict

import numpy as np
import torch


def numpy_to_tensor(value, device, *, via_pinned_memory: bool = False) -> torch.Tensor:
    """A numpy array (or tensor) as a torch tensor on `device`, converted as
    RLlib's `convert_to_torch_tensor` converts it: float64 (and any other
    float but float16) becomes float32; a read-only array is copied first
    (`torch.from_numpy` shares the array's memory).

    `via_pinned_memory`, for a CUDA `device`: the host tensor is copied into
    pinned (page-locked) memory and sent with a non-blocking copy, which the
    host queues and leaves; a copy from pageable memory makes the host wait
    for it. The same values either way."""
    tensor = as_rllib_host_tensor(value)
    if (
        via_pinned_memory
        and tensor.device.type == "cpu"
        and torch.device(device).type == "cuda"
    ):
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def as_rllib_host_tensor(value) -> torch.Tensor:
    """`value` as a torch tensor where it is, with RLlib's dtype conversion
    (`numpy_to_tensor` without the move)."""
    if torch.is_tensor(value):
        tensor = value
    else:
        array = np.asarray(value)
        if not array.flags.writeable:
            array = array.copy()
        tensor = torch.from_numpy(array)
    if tensor.is_floating_point() and tensor.dtype != torch.float16:
        tensor = tensor.float()
    return tensor


# Each column's offset in a packed transfer: a multiple of every element size.
PACKED_ALIGNMENT = 16


def host_tensors_in_one_copy(
    tensors: Dict[str, torch.Tensor], device, *, pinned: bool
) -> Dict[str, torch.Tensor]:
    """Host tensors moved to `device` in one copy: their bytes packed into one
    staging buffer (page-locked with `pinned`, the copy then non-blocking),
    copied as one, each returned as its own view of the copy (the same dtype,
    shape and values). On a GPU each tensor copied on its own costs the host a
    pinned allocation and a copy call: 8.1 (Atari) and 9 (SAC) per env step
    of the 21.6 and 23.5 copies the 2026-12-04 profiles count
    (docs/benchmarks/gpu_profile_ops_2026-12-04_1.txt)."""
    offsets, end = {}, 0
    for name, tensor in tensors.items():
        offsets[name] = end
        nbytes = tensor.numel() * tensor.element_size()
        end += -(-nbytes // PACKED_ALIGNMENT) * PACKED_ALIGNMENT
    staging = torch.empty(end, dtype=torch.uint8, pin_memory=pinned)
    for name, tensor in tensors.items():
        _packed_view(staging, offsets[name], tensor).copy_(tensor)
    moved = staging.to(device, non_blocking=pinned)
    return {
        name: _packed_view(moved, offsets[name], tensor)
        for name, tensor in tensors.items()
    }


def _packed_view(buffer: torch.Tensor, offset: int, like: torch.Tensor):
    nbytes = like.numel() * like.element_size()
    return buffer[offset : offset + nbytes].view(like.dtype).view(like.shape)


def tensor_to_numpy(value) -> np.ndarray:
    """A tensor on any device as a host numpy array, converted as RLlib's
    `TensorToNumpy` connector converts its module's outputs
    (`convert_to_numpy(reduce_type=True)`): every float becomes float32 and
    int64 becomes int32, so episodes hold the dtypes RLlib's EnvRunner gives
    them (CartPole's actions int32, not torch's int64)."""
    array = value.detach().cpu().numpy()
    if np.issubdtype(array.dtype, np.floating):
        return array.astype(np.float32, copy=False)
    if array.dtype == np.int64:
        return array.astype(np.int32)
    return array
