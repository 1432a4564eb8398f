"""RLlib's `RLModule`, `MultiRLModule` and `Catalog`: internals we call or read.

`RLModule.forward_exploration()` / `forward_inference()` / `forward_train()`
wrap the module's own `_forward_*` implementations (the hooks RLlib tells
module authors to override) in a switch to eval or train mode, which walks
every submodule at every call: at one forward pass per env step or per update
of a small network that walk costs as much as the pass itself. The callers
here keep the module in the right mode once and run the implementation
directly.

Our catalogs build encoders RLlib's `Catalog` does not know (image CNNs, SAC's
critic on `[s, a]`): they read and set what `Catalog._determine_components_hook`
reads and sets, through the catalog functions here. Our modules raise the
catalog's construction error, which `RLModule.__init__` only keeps, and keep
the epsilon schedule's tensor current in place.

Pinned by `tests/rllib_contract/test_seam_rl_module.py`.
"""

from __future__ import annotations

import functools
from typing import Any, Dict

__all__ = [
    "advance_schedule",
    "catalog_encoder_config",
    "catalog_model_config",
    "clear_encoder_config",
    "exploration_pass",
    "inference_pass",
    "raise_catalog_error",
    "sac_critic_pass",
    "set_catalog_model_config",
    "training_pass",
    "use_action_space_distribution",
]


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


def raise_catalog_error(module) -> None:
    """Raises the error the catalog class raised when `module` was built, if
    it raised one.

    `RLModule.__init__` catches it, logs it, keeps it (as
    `_catalog_ctor_error`) and leaves `module.catalog` None, for modules that
    need no catalog; ours do, and a bad model config must fail with the
    catalog's own message."""
    if module.catalog is None and module._catalog_ctor_error is not None:
        raise module._catalog_ctor_error


def catalog_model_config(catalog) -> Dict[str, Any]:
    """The model config dict `catalog` builds from: RLlib's
    `DefaultModelConfig` updated with the module's `model_config` (kept as
    `_model_config_dict`)."""
    return catalog._model_config_dict


def set_catalog_model_config(catalog, model_config: Dict[str, Any]) -> None:
    """Replaces the model config dict `catalog` builds from (in
    `_determine_components_hook`, before the parent's hook reads it)."""
    catalog._model_config_dict = model_config


def catalog_encoder_config(catalog) -> Any:
    """The config of the encoder `catalog.build_encoder()` builds, as
    `Catalog._determine_components_hook` chose it (e.g. an
    `MLPEncoderConfig`; kept as `_encoder_config`)."""
    return catalog._encoder_config


def clear_encoder_config(catalog) -> None:
    """For a catalog whose `build_encoder()` builds an encoder of its own:
    leaves no RLlib encoder config (`Catalog._encoder_config` None), as its
    `_determine_components_hook` does instead of RLlib's."""
    catalog._encoder_config = None


def use_action_space_distribution(catalog) -> None:
    """Makes `catalog.get_action_dist_cls(framework)` return RLlib's default
    distribution class for `catalog.action_space`, as RLlib's
    `_determine_components_hook` sets it up (a catalog hook that does not
    call its parent's must do the same)."""
    catalog._action_dist_class_fn = functools.partial(
        catalog._get_dist_cls_from_action_space, action_space=catalog.action_space
    )


def advance_schedule(schedule, t: int) -> None:
    """Leaves `schedule.get_current_value()` as `schedule.update(t)` would, by
    filling the tensor it holds in place.

    RLlib's torch `Scheduler.update()` builds a new tensor from the Python
    value at every call (an allocation per env step when acting); the value
    lives in `_curr_value`, the schedule in `_schedule`. A fixed value (no
    schedule) stays as it is."""
    if schedule.use_schedule:
        schedule._curr_value.fill_(schedule._schedule.value(t=t))


def sac_critic_pass(module, encoder, head, obs, actions):
    """One critic's Q(s, a) of RLlib's SAC module (`encoder`, `head`: the
    critic's or its twin's, online or target), as its `forward_train` and
    `compute_q_values` compute it (RLlib's `_qf_forward_train_helper`)."""
    from ray.rllib.core.columns import Columns

    return module._qf_forward_train_helper(
        {Columns.OBS: obs, Columns.ACTIONS: actions}, encoder, head
    )
