"""Learner updates whose metrics are logged and reduced once per iteration.

RLlib's `Learner.update()` surrounds each gradient step with bookkeeping: a
`TrainingData` and batch iterator, a tree-map over the batch, a dozen
`MetricsLogger.log_value()` calls and a full `reduce()`. At one update per env
step of a small network that is a large share of the update. An Algorithm
reports the reduced metrics once per iteration, so they need reducing only
then.

`DeferredMetricsUpdates.update(batch, rllib_ners_defer_metrics=True, ...)`
(what this package's replay loop sends through `LearnerGroup.update`) runs
the same `before_gradient_based_update()`, `_update()` (forward pass, losses,
gradients, optimizer steps) and `after_gradient_based_update()` as
`Learner.update()`, on the numpy columns of a `MultiAgentBatch`, with the
Learner's metrics recorded by a `DeferredMetrics` instead of its
`MetricsLogger`; `reduce_deferred_metrics()` logs and reduces them once per
iteration. The per-item rows a loss logs under RLlib's TD-error key (TD
errors, or NERS score rows) come back from each update as `PRIORITY_ROWS`:
numpy rows per module id, or with `rllib_ners_rows_on_device=True` tensors
left on the Learner's device (nothing read back: see `deferred_priorities`).

Losses log their window-1 statistics through `log_statistics()`, which
computes each only for the update an iteration reports.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY

from rllib_ners.seam.learner import (
    advance_weights_seq_no,
    check_learner_built,
    count_trained_env_steps,
    log_steps_trained,
)
from rllib_ners.utils.deferred_metrics import DeferredMetrics
from rllib_ners.utils.torch_ops import numpy_to_tensor
from rllib_ners.utils.update_graphs import RecordedMetrics

# `Learner.update()` keyword that asks for an update with deferred metrics.
DEFER_METRICS = "rllib_ners_defer_metrics"
# Key of the per-item rows in a deferred update's result.
PRIORITY_ROWS = "priority_rows"
# `Learner.update()` keyword (with DEFER_METRICS) that keeps those rows on the
# Learner's device.
ROWS_ON_DEVICE = "rllib_ners_rows_on_device"


def columns_to_tensors(columns, device) -> Dict[str, Any]:
    """A batch's numpy columns as torch tensors on `device` (`numpy_to_tensor`;
    to a GPU through pinned memory, the copies queued without waiting for
    each); object and string arrays stay numpy, as RLlib leaves them."""
    tensors = {}
    for name, value in columns.items():
        if not torch.is_tensor(value):
            value = np.asarray(value)
            if value.dtype == object or value.dtype.type is np.str_:
                tensors[name] = value
                continue
        tensors[name] = numpy_to_tensor(value, device, via_pinned_memory=True)
    return tensors


def _numpy_rows(values) -> Optional[np.ndarray]:
    """The logged per-item rows of one module, concatenated, as numpy."""
    items = [
        value.detach().cpu().numpy() if torch.is_tensor(value) else np.asarray(value)
        for value in values
    ]
    return np.concatenate(items) if items else None


def _device_rows(values) -> Optional[torch.Tensor]:
    """The logged per-item rows of one module, concatenated, where they are."""
    items = [torch.as_tensor(value).detach() for value in values]
    return torch.cat(items) if items else None


class DeferredMetricsUpdates:
    """For `TorchLearner` subclasses (list it before the TorchLearner class):
    updates with deferred metrics (see the module docstring)."""

    @override(TorchLearner)
    def build(self) -> None:
        super().build()
        self.deferred_metrics = DeferredMetrics()
        self._deferred_env_steps = 0

    @override(Learner)
    def update(self, *args, **kwargs):
        """RLlib's `update()`, or with `rllib_ners_defer_metrics=True` the update
        with deferred metrics (see the module docstring)."""
        if not kwargs.pop(DEFER_METRICS, False):
            return super().update(*args, **kwargs)
        return self.update_deferring_metrics(*args, **kwargs)

    def update_deferring_metrics(
        self,
        batch: Optional[MultiAgentBatch] = None,
        *,
        training_data: Optional[TrainingData] = None,
        timesteps: Optional[Dict[str, Any]] = None,
        rllib_ners_rows_on_device: bool = False,
        **kwargs,
    ) -> Dict[str, Any]:
        """One gradient step on `batch`; returns `{PRIORITY_ROWS: rows}`
        (numpy, or tensors on the device with `rllib_ners_rows_on_device`)."""
        check_learner_built(self)
        batch = _single_batch(batch, training_data, kwargs)
        timesteps = timesteps or {}
        tensors = {
            module_id: columns_to_tensors(module_batch, self.device)
            for module_id, module_batch in batch.policy_batches.items()
            if self.should_module_be_updated(module_id, batch)
        }
        with self._metrics_deferred():
            self.before_gradient_based_update(timesteps=timesteps)
            advance_weights_seq_no(self)
            _, loss_per_module, _ = self.deferred_update_step(tensors)
            log_steps_trained(self, batch)
            for module_id, loss in loss_per_module.items():
                self.metrics.log_value((module_id, self.TOTAL_LOSS_KEY), loss, window=1)
            self.after_gradient_based_update(timesteps=timesteps)
        self._deferred_env_steps += int(batch.env_steps())
        rows = {}
        as_rows = _device_rows if rllib_ners_rows_on_device else _numpy_rows
        for module_id in tensors:
            module_rows = as_rows(
                self.deferred_metrics.pop_values((module_id, TD_ERROR_KEY))
            )
            if module_rows is not None:
                rows[module_id] = module_rows
        return {PRIORITY_ROWS: rows}

    def deferred_update_step(self, batch: Dict[str, Dict[str, Any]]):
        """The update's forward pass, losses, gradients and optimizer steps:
        `_update(batch)` (`CudaGraphUpdates` replays it from CUDA graphs)."""
        return self._update(batch)

    @contextlib.contextmanager
    def _metrics_deferred(self):
        """`self.metrics` is the `DeferredMetrics` inside the block, so that
        everything an update logs (RLlib's code included) is recorded there."""
        logger, self.metrics = self.metrics, self.deferred_metrics
        try:
            yield
        finally:
            self.metrics = logger

    def reduce_deferred_metrics(self) -> Dict[str, Any]:
        """Logs what the deferred updates recorded, then RLlib's `reduce()`: the
        results `Learner.update()` would have returned, once per iteration."""
        self.deferred_metrics.flush_into(self.metrics)
        if self._deferred_env_steps:
            count_trained_env_steps(self, self._deferred_env_steps)
            self._deferred_env_steps = 0
        return self.metrics.reduce()

    def log_statistics(
        self, module_id: str, statistics: Dict[str, Callable[[], Any]]
    ) -> None:
        """Logs window-1 statistics of an update under `(module_id, key)`, in
        key order. Each is a function computing the value: in a deferred
        update only the iteration's last value is kept, so only it is
        computed."""
        # Recorded for a CUDA graph: logged again after each replay.
        deferred = isinstance(self.metrics, (DeferredMetrics, RecordedMetrics))
        for key, compute in statistics.items():
            if deferred:
                self.metrics.log_lazy((module_id, key), compute, window=1)
            else:
                self.metrics.log_value((module_id, key), compute(), window=1)


def _single_batch(batch, training_data, kwargs) -> MultiAgentBatch:
    """The one `MultiAgentBatch` of a deferred update; raises for what such an
    update does not do (return the state, minibatch, take episodes)."""
    # LearnerGroup sends `return_state` to remote Learners (True only when its
    # caller asked for the weights back, which this package never does).
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
    return batch
