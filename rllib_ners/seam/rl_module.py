"""RLlib's `RLModule`, `MultiRLModule` and `Catalog`: internals we call or read.

`RLModule.forward_exploration()` / `forward_inference()` / `forward_train()`
wrap the module's own `_forward_*` implementations (the hooks RLlib tells
module authors to override) in a switch to eval or train mode, which walks
every submodule at every call: at one forward pass per env step or per update
of a small network that walk costs as much as the pass itself. The callers
here keep the module in the right mode once and run the implementation
directly. Pinned by `tests/rllib_contract/test_seam_rl_module.py`.
"""

from __future__ import annotations

from typing import Any, Dict

__all__ = ["exploration_pass", "inference_pass", "training_pass"]


def exploration_pass(module, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
    """What `module.forward_exploration(batch, **kwargs)` computes, for a
    module already in eval mode (the caller runs it under `no_grad`)."""
    return module._forward_exploration(batch, **kwargs)


def inference_pass(module, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
    """What `module.forward_inference(batch, **kwargs)` computes, for a module
    already in eval mode (the caller runs it under `no_grad`)."""
    return module._forward_inference(batch, **kwargs)


def training_pass(module, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
    """What `module.forward_train(batch, **kwargs)` computes, for a module
    already in training mode."""
    return module._forward_train(batch, **kwargs)
