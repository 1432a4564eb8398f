"""Speed-ups of RLlib's TorchLearner for this package's Learners (same results).

1. One pass instead of two to check gradients for nan/inf before each step.
RLlib 2.60's `TorchLearner.apply_gradients` runs `torch.isfinite(grad).all()`
on every gradient tensor, then again on every parameter's gradient before
stepping: two passes over all gradients and two host syncs per tensor (about
3 ms per update for data-efficient Rainbow on this project's CPU, more than
Adam itself). The total gradient norm is finite exactly when no gradient holds
nan or inf (or a finite value so large that the norm overflows), so one fused
norm decides: all finite -> step the optimizers directly; anything else ->
RLlib's own `apply_gradients`, with its exact nan/inf handling. When every
gradient went through a global-norm clip in the same update, the clip's
per-tensor norms decide, and no norm is computed a second time.

2. Freed CPU tensor memory is reused instead of being unmapped and faulted in
again at every update (`rllib_ners.utils.malloc.keep_freed_tensor_memory`).

3. Updates with deferred metrics (`update(..., rllib_ners_defer_metrics=True)`,
what this package's replay loop sends through `LearnerGroup.update`): the same
`_update()` (forward pass, losses, gradients, optimizer steps) and the same
`after_gradient_based_update()` (target networks, learning-rate schedules) as
RLlib's `Learner.update()`, on the numpy columns of a `MultiAgentBatch`; but
RLlib's per-update bookkeeping around them (a `TrainingData` and batch
iterator, a tree-map over the batch, a dozen `MetricsLogger.log_value()` calls
and a full `reduce()`) is replaced by a `DeferredMetrics` record, which
`reduce_deferred_metrics()` logs and reduces once per training iteration. The
per-item rows the loss logs under RLlib's TD-error key (TD errors, or NERS
score rows) come back from each update as `PRIORITY_ROWS`: numpy rows per
module id.

4. Polyak target-network updates as foreach ops on the parameter lists instead
of RLlib's `state_dict()` / new tensors / `load_state_dict()` round trip: the
same `tau * main + (1 - tau) * target`, element by element (tested equal).

5. Clipping by global norm (`grad_clip_by="global_norm"`) with foreach norms
and one foreach multiply: RLlib's `clip_gradients` formula (per-tensor norms
with nan/inf mapped as RLlib maps them, the clamped coefficient), the same
values bit for bit.

6. The training forward pass without `TorchRLModule.forward_train`'s `train()`
call, which walks every submodule at every update: the Learner's modules stay
in training mode (one Learner; with several, DDP's forward runs as RLlib's).

7. Gradients cleared by setting them to None (`zero_grad(set_to_none=True)`
without its profiler record per optimizer) and optimizer steps without torch's
step wrapper when no step hooks or profiler would see it; fused Adams run their
kernels directly, the groups of several optimizers with the same settings in
one call (`step_optimizers`: SAC's four optimizers, one kernel).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
import torch
from ray.rllib.algorithms.dqn.dqn_learner import (
    LAST_TARGET_UPDATE_TS,
    NUM_TARGET_UPDATES,
    DQNLearner,
)
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME, TD_ERROR_KEY
from ray.rllib.utils.torch_utils import clip_gradients, update_target_network
from ray.rllib.utils.typing import ParamDict

from rllib_ners.utils.deferred_metrics import DeferredMetrics
from rllib_ners.utils.malloc import keep_freed_tensor_memory
from rllib_ners.utils.torch_ops import numpy_to_tensor, step_optimizers

# `Learner.update()` keyword that asks for an update with deferred metrics.
DEFER_METRICS = "rllib_ners_defer_metrics"
# Key of the per-item rows in a deferred update's result.
PRIORITY_ROWS = "priority_rows"


def columns_to_tensors(columns, device) -> Dict[str, Any]:
    """A batch's numpy columns as torch tensors on `device` (`numpy_to_tensor`);
    object and string arrays stay numpy, as RLlib leaves them."""
    tensors = {}
    for name, value in columns.items():
        if not torch.is_tensor(value):
            value = np.asarray(value)
            if value.dtype == object or value.dtype.type is np.str_:
                tensors[name] = value
                continue
        tensors[name] = numpy_to_tensor(value, device)
    return tensors


def polyak_pairs(main_net: torch.nn.Module, target_net: torch.nn.Module):
    """The `(main, target)` state-dict tensors RLlib's `update_target_network`
    averages, as two lists; None if any entry is not a floating-point tensor of
    the same dtype in both (then RLlib's own update runs)."""
    main_state = main_net.state_dict(keep_vars=True)
    mains, targets = [], []
    for name, target in target_net.state_dict(keep_vars=True).items():
        main = main_state[name]
        if not (target.is_floating_point() and main.dtype == target.dtype):
            return None
        mains.append(main)
        targets.append(target)
    return mains, targets


def polyak_update(mains, targets, tau: float) -> None:
    """RLlib's `update_target_network`: `tau * main + (1 - tau) * target` for every
    pair, in place, as foreach ops (the same values: each product rounded on its
    own, then one sum, and IEEE addition is commutative). The targets are scaled
    in place and the main products added to them: one pass and one temporary
    fewer than building the new values and copying them over."""
    if not targets:
        return
    with torch.no_grad():
        mains = [tensor.detach() for tensor in mains]
        targets = [tensor.detach() for tensor in targets]
        torch._foreach_mul_(targets, 1 - tau)
        torch._foreach_add_(targets, torch._foreach_mul(mains, tau))


def clip_gradients_foreach(
    gradients_dict: ParamDict,
    *,
    grad_clip=None,
    grad_clip_by: str = "value",
    finite_flags: Optional[List] = None,
):
    """RLlib's `clip_gradients`, with foreach ops for `grad_clip_by="global_norm"`
    (the same per-tensor norms, total norm, coefficient and products).

    A finite total norm means every per-tensor norm is finite (a nan or inf one
    makes the total nan or inf), so RLlib's `nan_to_num` calls on them change
    nothing; the coefficient is then RLlib's float32 arithmetic done on the host
    from the total norm (`grad_clip / clamp(total + 1e-6, min=grad_clip)`, the
    division as torch's `__rtruediv__`: a float32 reciprocal times the clip),
    and a coefficient of 1 skips the products (x * 1.0 is x, nan and inf
    included). Otherwise RLlib's tensor ops run.

    `finite_flags`: a list that a global-norm clip appends whether every
    gradient it clipped was finite before clipping (then, scaled by a finite
    factor, they stay finite), read off the norms the clip computes anyway: a
    bool, or a 0-d bool tensor."""
    grads = [grad.detach() for grad in gradients_dict.values() if grad is not None]
    if grad_clip is None or grad_clip_by != "global_norm" or not grads:
        return clip_gradients(
            gradients_dict, grad_clip=grad_clip, grad_clip_by=grad_clip_by
        )
    norms = torch.stack(torch._foreach_norm(grads, 2.0))
    if norms.dtype == torch.float32:  # the host arithmetic below is float32's
        total_norm = torch.norm(norms, 2.0)
        total = np.float32(total_norm.item())
        if np.isfinite(total):
            if finite_flags is not None:
                finite_flags.append(True)
            clip = np.float32(grad_clip)
            coeff = (np.float32(1.0) / max(total + np.float32(1e-6), clip)) * clip
            if coeff < 1.0:
                torch._foreach_mul_(grads, float(coeff))
            return total_norm
    if finite_flags is not None:
        finite_flags.append(torch.isfinite(norms).all())
    norms = norms.nan_to_num(neginf=-10e8, posinf=10e8)
    total_norm = torch.norm(norms, 2.0).nan_to_num(neginf=-10e8, posinf=10e8)
    clip_coeff = grad_clip / torch.clamp(total_norm + 1e-6, min=grad_clip)
    torch._foreach_mul_(grads, torch.clamp(clip_coeff, max=1.0))
    return total_norm


def all_finite(tensors) -> bool:
    """Whether no tensor holds a nan or inf: one fused pass (the kernel
    `GradScaler` uses, scaling by exactly 1.0, which leaves every value as it
    is) where torch has it for the tensors' device and dtype, else their
    total norm (finite exactly when they are, short of an overflow)."""
    first = tensors[0]
    same_kind = all(
        t.device == first.device and t.dtype == first.dtype for t in tensors
    )
    if same_kind and first.dtype in (torch.float32, torch.float16, torch.bfloat16):
        found_inf = torch.zeros(1, device=first.device)
        try:
            torch._amp_foreach_non_finite_check_and_unscale_(
                tensors, found_inf, torch.ones(1, device=first.device)
            )
        except (RuntimeError, NotImplementedError):
            pass
        else:
            return not bool(found_inf)
    return bool(torch.isfinite(torch.nn.utils.get_total_norm(tensors, foreach=True)))


class FastTorchLearnerMixin:
    """For `TorchLearner` subclasses (list it before the TorchLearner class)."""

    _deferred_metrics: Optional[DeferredMetrics] = None

    @override(TorchLearner)
    def build(self) -> None:
        keep_freed_tensor_memory()
        super().build()
        self._deferred_metrics = DeferredMetrics()
        self._deferred_env_steps = 0
        # What this update's global-norm clips found (see `_clip_gradients`):
        # bools, or 0-d bool tensors.
        self._clipped_finite: List = []
        self._clipped_gradient_ids = set()

    @override(TorchLearner)
    def _get_clip_function(self):
        return self._clip_gradients

    def _clip_gradients(self, gradients_dict: ParamDict, **kwargs):
        """`clip_gradients_foreach`; a global-norm clip of every gradient in
        `gradients_dict` also tells `apply_gradients` whether they were finite
        (so it need not compute their norms a second time)."""
        flags = []
        norm = clip_gradients_foreach(gradients_dict, finite_flags=flags, **kwargs)
        if flags and all(grad is not None for grad in gradients_dict.values()):
            self._clipped_finite.append(flags[0])
            self._clipped_gradient_ids.update(map(id, gradients_dict.values()))
        return norm

    @override(TorchLearner)
    def _update(self, batch: Dict[str, Any]):
        """TorchLearner's update step (forward, losses, gradients, clipping,
        optimizer steps) with the forward pass of modules kept in training mode."""
        if self.distributed or self.config.torch_compile_learner:
            return super()._update(batch)
        self._compute_off_policyness(batch)
        fwd_out = {}
        for module_id, module_batch in batch.items():
            module = self.module[module_id]
            if not module.training:
                module.train()
            fwd_out[module_id] = module._forward_train(module_batch)
        loss_per_module = self.compute_losses(fwd_out=fwd_out, batch=batch)
        gradients = self.compute_gradients(loss_per_module)
        self.apply_gradients(self.postprocess_gradients(gradients))
        return fwd_out, loss_per_module, {}

    @property
    def weights_seq_no(self) -> int:
        """How many updates this Learner's weights have seen (RLlib's seq no)."""
        return self._weights_seq_no

    @override(Learner)
    def update(self, *args, **kwargs):
        """RLlib's `update()`, or with `rllib_ners_defer_metrics=True` the update
        with deferred metrics (see the module docstring)."""
        if not kwargs.pop(DEFER_METRICS, False):
            return super().update(*args, **kwargs)
        return self._update_deferring_metrics(*args, **kwargs)

    def _update_deferring_metrics(
        self,
        batch: Optional[MultiAgentBatch] = None,
        *,
        training_data: Optional[TrainingData] = None,
        timesteps: Optional[Dict[str, Any]] = None,
        **kwargs,
    ) -> Dict[str, Any]:
        self._check_is_built()
        # LearnerGroup sends `return_state` to remote Learners (True only when
        # its caller asked for the weights back, which this package never does).
        if kwargs.pop("return_state", False):
            raise ValueError(
                "Updates with deferred metrics do not return the Learner's state; "
                "call update() without return_state=True."
            )
        if kwargs:
            raise ValueError(
                f"Updates with deferred metrics take one batch and no minibatching; "
                f"got {sorted(kwargs)}."
            )
        if training_data is not None:  # from LearnerGroup.update (remote Learners)
            training_data.solve_refs()
            batch = training_data.batch
        if not isinstance(batch, MultiAgentBatch):
            raise ValueError(
                f"Updates with deferred metrics take a MultiAgentBatch of numpy "
                f"columns, got {type(batch).__name__}."
            )
        timesteps = timesteps or {}
        tensors = {
            module_id: columns_to_tensors(module_batch, self._device)
            for module_id, module_batch in batch.policy_batches.items()
            if self.should_module_be_updated(module_id, batch)
        }
        real_metrics, self.metrics = self.metrics, self._deferred_metrics
        try:
            self.before_gradient_based_update(timesteps=timesteps)
            self._weights_seq_no += 1
            _, loss_per_module, _ = self._update(tensors)
            self._log_steps_trained_metrics(batch)
            for module_id, loss in loss_per_module.items():
                self.metrics.log_value((module_id, self.TOTAL_LOSS_KEY), loss, window=1)
            self.after_gradient_based_update(timesteps=timesteps)
        finally:
            self.metrics = real_metrics
        self._deferred_env_steps += int(batch.env_steps())
        rows = {}
        for module_id in tensors:
            items = [
                item.detach().cpu().numpy()
                if torch.is_tensor(item)
                else np.asarray(item)
                for item in self._deferred_metrics.pop_values((module_id, TD_ERROR_KEY))
            ]
            if items:
                rows[module_id] = np.concatenate(items)
        return {PRIORITY_ROWS: rows}

    def reduce_deferred_metrics(self) -> Dict[str, Any]:
        """Logs what the deferred updates recorded, then RLlib's `reduce()`: the
        results `Learner.update()` would have returned, once per iteration."""
        self._deferred_metrics.flush_into(self.metrics)
        if self._deferred_env_steps:
            # Ray's Prometheus counters of trained steps (RLlib's `_log_metrics`).
            self._metrics_all_modules_num_env_steps_trained.inc(
                value=self._deferred_env_steps
            )
            self._metrics_all_modules_num_module_steps_trained.inc(
                value=self._deferred_env_steps
            )
            self._deferred_env_steps = 0
        return self.metrics.reduce()

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        grads = [grad for grad in gradients_dict.values() if grad is not None]
        plain = (
            self._grad_scalers is None
            and self._lr_scheduler_classes is None
            and len(grads) == len(gradients_dict)
        )
        flags, self._clipped_finite = self._clipped_finite, []
        clipped, self._clipped_gradient_ids = self._clipped_gradient_ids, set()
        if not plain or not grads:
            return super().apply_gradients(gradients_dict)
        if flags and all(id(grad) in clipped for grad in grads):
            # Every gradient went through a global-norm clip this update.
            finite = all(bool(flag) for flag in flags)
        else:
            finite = all_finite(grads)
        if not finite:
            return super().apply_gradients(gradients_dict)
        for pid, grad in gradients_dict.items():
            self._params[pid].grad = grad
        step_optimizers(
            [
                self.get_optimizer(module_id, optimizer_name)
                for module_id, optimizer_names in self._module_optimizers.items()
                for optimizer_name in optimizer_names
            ]
        )

    @override(TorchLearner)
    def compute_gradients(self, loss_per_module, **kwargs) -> ParamDict:
        """RLlib's `compute_gradients`, the gradients of every optimizer's
        parameters set to None directly (what `zero_grad(set_to_none=True)` does,
        without its profiler record per optimizer)."""
        if self._grad_scalers is not None:
            return super().compute_gradients(loss_per_module, **kwargs)
        for param in self._params.values():
            param.grad = None
        total_loss = sum(loss_per_module.values())
        if isinstance(total_loss, int) or total_loss.grad_fn is None:
            return {}  # no losses, or every parameter frozen (as RLlib)
        total_loss.backward()
        return {pid: param.grad for pid, param in self._params.items()}


class FastTargetNetworkMixin:
    """For `DQNLearner` subclasses (DQN, SAC): `DQNLearner`'s target-network
    update, with the Polyak step as foreach ops (`polyak_update`) on tensor
    lists built once per module, all its network pairs at once (the parameters
    are updated in place, so the same tensors stay current)."""

    _polyak_tensors: Dict = {}

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        self._polyak_tensors = {}

    @staticmethod
    def _target_pairs(module):
        return module.unwrapped().get_target_network_pairs()

    def _update_targets(self, module_id, module, tau: float) -> None:
        """RLlib's `update_target_network` for every (main, target) pair of the
        module: one `polyak_update` over all pairs' tensors (element-wise, so
        the same values as pair by pair), or RLlib's own update for a pair
        with anything unusual in its state."""
        key = (module_id, id(module.unwrapped()))
        tensors = self._polyak_tensors.get(key)
        if tensors is None:
            pairs = list(self._target_pairs(module))
            listed = [polyak_pairs(main, target) for main, target in pairs]
            if all(listed):
                tensors = (
                    [tensor for mains, _ in listed for tensor in mains],
                    [tensor for _, targets in listed for tensor in targets],
                )
            else:
                tensors = pairs
            self._polyak_tensors[key] = tensors
        if isinstance(tensors, tuple):
            polyak_update(*tensors, tau)
            return
        for main_net, target_net in tensors:
            listed = polyak_pairs(main_net, target_net)
            if listed:
                polyak_update(*listed, tau)
            else:  # anything unusual: RLlib's own update
                update_target_network(main_net=main_net, target_net=target_net, tau=tau)

    @override(DQNLearner)
    def after_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        # What DQNLearner.after_gradient_based_update does, line by line: the
        # learning-rate schedules of the Learners above it, then every module's
        # target nets once `target_network_update_freq` env steps have passed.
        super(DQNLearner, self).after_gradient_based_update(timesteps=timesteps)
        timestep = timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)
        for module_id, module in self.module._rl_modules.items():
            config = self.config.get_config_for_module(module_id)
            if timestep - self.last_update_ts_by_mid[
                module_id
            ] >= config.target_network_update_freq and isinstance(
                module.unwrapped(), TargetNetworkAPI
            ):
                self._update_targets(module_id, module, config.tau)
                self.metrics.log_value(
                    (module_id, NUM_TARGET_UPDATES), 1, reduce="lifetime_sum"
                )
                self.last_update_ts_by_mid[module_id] = timestep
                self.metrics.log_value(
                    (module_id, LAST_TARGET_UPDATE_TS), timestep, reduce="max"
                )
