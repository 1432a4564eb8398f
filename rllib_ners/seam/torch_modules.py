"""torch's `nn.Module`: which of its buffers its state dict holds.

`nn.Module.named_buffers()` lists every buffer, persistent or not; whether one
is part of the state dict is kept in the module's private
`_non_persistent_buffers_set`. Pinned by
`tests/rllib_contract/test_seam_torch_modules.py`.
"""

from __future__ import annotations

from typing import Iterator, Tuple

import torch

__all__ = ["persistent_buffers"]


def persistent_buffers(module: torch.nn.Module) -> Iterator[Tuple[str, torch.Tensor]]:
    """`(name, buffer)` of the buffers that are part of `module`'s state dict,
    named as in it, submodule by submodule (`named_modules()` order)."""
    for prefix, submodule in module.named_modules():
        for name, buffer in submodule._buffers.items():
            if buffer is not None and name not in submodule._non_persistent_buffers_set:
                yield (f"{prefix}.{name}" if prefix else name), buffer
