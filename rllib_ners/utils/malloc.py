"""glibc allocator tuning for the processes that run this package's Learners."""

from __future__ import annotations

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_malloc_tuned = False


def keep_freed_tensor_memory() -> bool:
    """Lets glibc reuse the memory of freed CPU tensors instead of returning it.

    By default glibc serves every allocation above 128 KiB-32 MiB with a fresh
    `mmap` and unmaps it on free, so the few-MB activations and patch matrices
    of every update page-fault anew (about 2 ms per data-efficient Rainbow
    update on this project's CPU). Raising the mmap and trim thresholds to 64
    and 256 MiB keeps such blocks in the heap for reuse - what torch's CUDA
    caching allocator does on GPUs. Blocks of 64 MiB and more (replay storage)
    are still mapped and returned as before.

    Called by this package's Learners in their own process. Linux/glibc only
    (elsewhere a no-op); set `RLLIB_NERS_MALLOC_TUNING=0` to opt out. Returns
    whether the thresholds are set.
    """
    global _malloc_tuned
    if _malloc_tuned:
        return True
    import ctypes
    import os
    import sys

    if os.environ.get(
        "RLLIB_NERS_MALLOC_TUNING", "1"
    ) == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        ok = libc.mallopt(_M_MMAP_THRESHOLD, 64 << 20) == 1
        ok &= libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20) == 1
    except (OSError, AttributeError):
        return False
    _malloc_tuned = bool(ok)
    return _malloc_tuned
