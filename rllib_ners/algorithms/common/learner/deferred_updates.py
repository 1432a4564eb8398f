"""Learner updates whose metrics are logged and reduced once per iteration.

RLlib's `Learner.update()` surrounds each gradient step with bookkeeping: a
`TrainingData` and batch iterator, a tree-map over the batch, a dozen
`MetricsLogger.log_value()` calls and a full `reduce()`. At one update per env
step of a small network that is a large share of the update. An Algorithm
reports the reduced metrics once per iteration, so they need reducing only
then.

`FastTorchLearner.update(batch, rllib_ners_defer_metrics=True, ...)`
(`fast_torch_learner`; what this package's replay loop sends through
`LearnerGroup.update`) runs
the same `before_gradient_based_update()`, `_update()` (forward pass, losses,
gradients, optimizer steps) and `after_gradient_based_update()` as
`Learner.update()`, on the numpy columns of a `MultiAgentBatch`, with the
Learner's metrics recorded by a `DeferredMetrics` instead of its
`MetricsLogger`; `reduce_deferred_metrics()` logs and reduces them once per
iteration. The replay feedback a loss logs under RLlib's TD-error key (TD
errors, or NERS's rows: `rllib_ners.replay_buffers.feedback`) comes back
from each update as `REPLAY_FEEDBACK`: numpy arrays per module id, or with
`rllib_ners_rows_on_device=True` tensors left on the Learner's device
(nothing read back: see `deferred_priorities`).

Losses log their window-1 statistics through `log_statistics()`, which
computes each only for the update an iteration reports. This module holds the
pieces of such an update: the batch's tensors, its rows, the one batch it
takes.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch
from ray.rllib.policy.sample_batch import MultiAgentBatch

from rllib_ners.utils.tensor_conversion import (
    as_rllib_host_tensor,
    host_tensors_in_one_copy,
)

# `Learner.update()` keyword that asks for an update with deferred metrics.
DEFER_METRICS = "rllib_ners_defer_metrics"
# Key of the packed replay feedback in a deferred update's result.
REPLAY_FEEDBACK = "replay_feedback"
# `Learner.update()` keyword (with DEFER_METRICS) that keeps those rows on the
# Learner's device.
ROWS_ON_DEVICE = "rllib_ners_rows_on_device"


def columns_to_tensors(columns, device) -> Dict[str, Any]:
    """A batch's numpy columns as torch tensors on `device`, converted as
    `numpy_to_tensor` converts them; object and string arrays stay numpy, as
    RLlib leaves them. To a GPU the host columns go in one non-blocking copy
    through pinned memory (`host_tensors_in_one_copy`); tensors already on
    the device stay as they are."""
    tensors, on_host = {}, {}
    for name, value in columns.items():
        if not torch.is_tensor(value):
            value = np.asarray(value)
            if value.dtype == object or value.dtype.type is np.str_:
                tensors[name] = value
                continue
        tensor = as_rllib_host_tensor(value)
        if tensor.device.type == "cpu":
            on_host[name] = tensor
        else:
            tensors[name] = tensor.to(device)
    if torch.device(device).type == "cuda" and on_host:
        tensors.update(host_tensors_in_one_copy(on_host, device, pinned=True))
    else:
        for name, tensor in on_host.items():
            tensors[name] = tensor.to(device)
    return {name: tensors[name] for name in columns}


def numpy_rows(values) -> Optional[np.ndarray]:
    """The logged per-item rows of one module, concatenated, as numpy."""
    items = [
        value.detach().cpu().numpy() if torch.is_tensor(value) else np.asarray(value)
        for value in values
    ]
    return np.concatenate(items) if items else None


def device_rows(values) -> Optional[torch.Tensor]:
    """The logged per-item rows of one module, concatenated, where they are."""
    items = [torch.as_tensor(value).detach() for value in values]
    return torch.cat(items) if items else None


def single_batch(batch, training_data, kwargs) -> MultiAgentBatch:
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
