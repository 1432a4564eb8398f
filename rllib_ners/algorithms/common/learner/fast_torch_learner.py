"""The shared base of this package's torch Learners: RLlib's update, with the
package's speed-ups applied in one place.

Every Learner of the package (Rainbow / NERS-DQN, NERS-SAC, TD3 / DDPG, ACER)
lists `FastTorchLearner` before the RLlib Learner class it extends. The
algorithm's own Learner writes its update (`_update`: forward pass, losses,
gradients, optimizer steps; `compute_loss_for_module`: the paper's losses);
this base makes that update faster without changing what it computes, in the
order `update_deferring_metrics` reads top-down:

1. **Deferred metrics** (`update(batch, rllib_ners_defer_metrics=True)`, what
   this package's replay loop sends through `LearnerGroup.update`): the same
   `before_gradient_based_update()`, `_update()` and
   `after_gradient_based_update()` as RLlib's `Learner.update()`, on the numpy
   columns of a `MultiAgentBatch`, with everything the update logs recorded by
   a `DeferredMetrics` (`deferred_updates`) and reduced once per iteration
   (`reduce_deferred_metrics`). Window-1 statistics go through
   `log_statistics`, which computes each only for the update an iteration
   reports. The replay feedback a loss logs under RLlib's TD-error key comes
   back as `REPLAY_FEEDBACK`.
2. **CUDA-graph replay** (`cuda_graph_updates=True` on a CUDA Learner,
   `cuda_graph_updates`): the update's tensor work replayed from captured
   graphs, one launch per update; Learners and configs a graph cannot serve
   update eagerly and say why once. An update whose Python side decides
   something per update (TD3's delayed actor step) says so in
   `graph_update_parts`.
3. **The fused gradient step** (`gradient_step`): one `backward()` of the
   summed loss, clipping by global norm with multi-tensor kernels, one fused
   nan/inf check, fused Adam steps (RLlib's own step for mixed precision and
   torch LR schedulers).

RLlib's `Learner.update()` (without the keyword) stays RLlib's, so a config
on RLlib's training step runs RLlib's bookkeeping around the same update.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Hashable, Optional, Tuple

import numpy as np
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY, WEIGHTS_SEQ_NO
from ray.rllib.utils.typing import ParamDict

from rllib_ners.algorithms.common.learner.cuda_graph_updates import (
    build_update_graphs,
    make_capturable,
)
from rllib_ners.algorithms.common.learner.deferred_updates import (
    DEFER_METRICS,
    REPLAY_FEEDBACK,
    columns_to_tensors,
    device_rows,
    numpy_rows,
    single_batch,
)
from rllib_ners.algorithms.common.learner.gradient_step import (
    all_finite,
    clip_gradients_foreach,
    finite_gradients_without_host_reads,
    gradients_of,
    learner_reads_on_host,
)
from rllib_ners.algorithms.common.learner.replay_methods import (
    LABER_GENERATOR_STATE,
    large_batch_factor_of,
)
from rllib_ners.seam.checkpoints import includes_component
from rllib_ners.seam.learner import (
    advance_weights_seq_no,
    check_learner_built,
    count_trained_env_steps,
    learner_optimizers,
    learner_parameters,
    log_steps_trained,
    scales_gradients,
    use_clip_function,
    uses_torch_lr_schedulers,
)
from rllib_ners.utils.deferred_metrics import DeferredMetrics
from rllib_ners.utils.mixin_order import PrecedesInBases
from rllib_ners.utils.optimizer_steps import step_optimizers
from rllib_ners.utils.package_logs import follow_rllib_log_level
from rllib_ners.utils.update_graphs import (
    CudaUpdateGraph,
    RecordedMetrics,
    UpdateGraphs,
)

# Learner state entry holding the NERS sampler's state, if the Learner has one.
NERS_SAMPLER_STATE = "ners_sampler"


def trained_rows(batch: MultiAgentBatch, large_batch_factor: int) -> MultiAgentBatch:
    """`batch`, or with LaBER (`large_batch_factor` m > 1) a stand-in holding
    only its counts divided by m: the module and env steps the update trained
    on, which RLlib's bookkeeping (`log_steps_trained`) logs as
    `num_env_steps_trained` and friends. So the results (and the benchmarks'
    updates per second) count B per update, not the m * B rows scored.
    RLlib's own `Learner.update()` (`fast_training_loop=False`) still counts
    the m * B rows it is given."""
    if large_batch_factor == 1:
        return batch
    return MultiAgentBatch(
        {
            module_id: SampleBatch(
                {"trained": np.zeros(len(module_batch) // large_batch_factor, bool)}
            )
            for module_id, module_batch in batch.policy_batches.items()
        },
        env_steps=batch.env_steps() // large_batch_factor,
    )


class FastTorchLearner(PrecedesInBases, precedes=Learner):
    """For this package's `TorchLearner` subclasses, ahead of the RLlib Learner
    class: deferred metrics, CUDA-graph replay and the fused gradient
    step around the Learner's own update (see the module docstring).

    `host_reads`: whether the gradient step may read gradient values on the
    host (None, the default: where the Learner's tensors are in host memory).
    `make_update_graph`: the graph kind (`EagerStandInGraph` runs the same
    schedule without CUDA, for tests).
    """

    host_reads: Optional[bool] = None
    # The NERS sampler (`TorchNERSSampler`) a Learner that replays with NERS
    # builds in `build()`, None otherwise; part of the Learner's state
    # (`NERS_SAMPLER_STATE`).
    ners = None
    # LaBER's sub-sampler (`LargeBatchSubsampler`) that a Learner replaying
    # with LaBER builds in `build()`, None otherwise; its generator is part of
    # the Learner's state (`LABER_GENERATOR_STATE`), so a restored run draws
    # the same sub-samples.
    laber = None
    make_update_graph: Callable[[], Any] = CudaUpdateGraph
    update_graphs: Optional[UpdateGraphs] = None
    graphs_checked = False

    @override(TorchLearner)
    def build(self) -> None:
        follow_rllib_log_level(self.config.log_level)  # a remote Learner's, too
        super().build()
        self.deferred_metrics = DeferredMetrics()
        self.deferred_env_steps = 0
        self.large_batch_factor = large_batch_factor_of(self.config)
        # RLlib's gradient clipping (`postprocess_gradients`) clips with ours.
        use_clip_function(self, self.clip_gradients)

    # ------------------------------------------------ 1. deferred metrics
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
        """One gradient step on `batch`; returns `{REPLAY_FEEDBACK: {module
        id: packed feedback}}` (numpy, or tensors on the device with
        `rllib_ners_rows_on_device`)."""
        check_learner_built(self)
        batch = single_batch(batch, training_data, kwargs)
        timesteps = timesteps or {}
        tensors = {
            module_id: columns_to_tensors(module_batch, self.device)
            for module_id, module_batch in batch.policy_batches.items()
            if self.should_module_be_updated(module_id, batch)
        }
        with self.metrics_deferred():
            self.before_gradient_based_update(timesteps=timesteps)
            advance_weights_seq_no(self)
            _, loss_per_module, _ = self.graph_or_eager_update(tensors)
            trained = trained_rows(batch, self.large_batch_factor)
            log_steps_trained(self, trained)
            for module_id, loss in loss_per_module.items():
                self.metrics.log_value((module_id, self.TOTAL_LOSS_KEY), loss, window=1)
            self.after_gradient_based_update(timesteps=timesteps)
        self.deferred_env_steps += int(trained.env_steps())
        rows = {}
        as_rows = device_rows if rllib_ners_rows_on_device else numpy_rows
        for module_id in tensors:
            module_rows = as_rows(
                self.deferred_metrics.pop_values((module_id, TD_ERROR_KEY))
            )
            if module_rows is not None:
                rows[module_id] = module_rows
        return {REPLAY_FEEDBACK: rows}

    @contextlib.contextmanager
    def metrics_deferred(self):
        """`self.metrics` is the `DeferredMetrics` inside the block, so that
        everything an update logs (RLlib's code included) is recorded there."""
        logger_, self.metrics = self.metrics, self.deferred_metrics
        try:
            yield
        finally:
            self.metrics = logger_

    def reduce_deferred_metrics(self) -> Dict[str, Any]:
        """Logs what the deferred updates recorded, then RLlib's `reduce()`: the
        results `Learner.update()` would have returned, once per iteration."""
        self.deferred_metrics.flush_into(self.metrics)
        if self.deferred_env_steps:
            count_trained_env_steps(self, self.deferred_env_steps)
            self.deferred_env_steps = 0
        return self.metrics.reduce()

    def log_statistics(
        self, module_id: str, statistics: Dict[str, Callable[[], Any]]
    ) -> None:
        """Logs window-1 statistics of an update under `(module_id, key)`.
        Each is a function computing the value: in a deferred
        update only the iteration's last value is kept, so only it is
        computed."""
        # Recorded for a CUDA graph: logged again after each replay.
        deferred = isinstance(self.metrics, (DeferredMetrics, RecordedMetrics))
        for key, compute in statistics.items():
            if deferred:
                self.metrics.log_lazy((module_id, key), compute, window=1)
            else:
                self.metrics.log_value((module_id, key), compute(), window=1)

    # ------------------------------------------------ 2. CUDA-graph replay
    def graph_or_eager_update(self, batch: Dict[str, Dict[str, Any]]):
        """`_update(batch)`, from a captured CUDA graph where the config asks
        and the Learner allows."""
        if not self.graphs_checked:
            self.graphs_checked = True
            self.update_graphs = build_update_graphs(self)
        if self.update_graphs is None:
            return self._update(batch)
        if any(WEIGHTS_SEQ_NO in columns for columns in batch.values()):
            self.update_graphs.disable(
                f"the batch carries {WEIGHTS_SEQ_NO!r}: the off-policyness metric "
                f"reads a host counter"
            )
        key, update = self.graph_update_parts(batch)
        return self.update_graphs.run(key, batch, update, self)

    def graph_update_parts(self, batch) -> Tuple[Hashable, Callable]:
        """The Python-side decisions this update made before its tensor work
        (part of the graph's key) and the function doing that work on a batch;
        by default none, and `_update`."""
        return (), self._update

    # ------------------------------------------------ 3. the gradient step
    def clip_gradients(self, gradients_dict: ParamDict, **kwargs):
        """RLlib's `clip_gradients` with multi-tensor kernels
        (`clip_gradients_foreach`)."""
        return clip_gradients_foreach(
            gradients_dict, host_reads=self.host_reads, **kwargs
        )

    @override(TorchLearner)
    def compute_gradients(self, loss_per_module, **kwargs) -> ParamDict:
        if scales_gradients(self):
            return super().compute_gradients(loss_per_module, **kwargs)
        total_loss = sum(loss_per_module.values())
        if isinstance(total_loss, int) or total_loss.grad_fn is None:
            return {}  # no losses, or every parameter frozen (as RLlib)
        return gradients_of(total_loss, learner_parameters(self))

    @override(TorchLearner)
    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        grads = [grad for grad in gradients_dict.values() if grad is not None]
        if (
            not grads
            or len(grads) != len(gradients_dict)
            or scales_gradients(self)
            or uses_torch_lr_schedulers(self)
        ):
            return super().apply_gradients(gradients_dict)
        if not learner_reads_on_host(self, grads):
            finite_gradients_without_host_reads(
                self, grads, skip_nan_gradients=self.config.torch_skip_nan_gradients
            )
        elif not all_finite(grads):
            return super().apply_gradients(gradients_dict)
        parameters = learner_parameters(self)
        for pid, grad in gradients_dict.items():
            parameters[pid].grad = grad
        step_optimizers(learner_optimizers(self))

    # ------------------------------------------------ state
    @override(TorchLearner)
    def get_state(self, components=None, *, not_components=None, **kwargs):
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self.ners is not None and includes_component(
            self, NERS_SAMPLER_STATE, components, not_components
        ):
            state[NERS_SAMPLER_STATE] = self.ners.get_state()
        if self.laber is not None and includes_component(
            self, LABER_GENERATOR_STATE, components, not_components
        ):
            state[LABER_GENERATOR_STATE] = self.laber.get_state()
        return state

    @override(TorchLearner)
    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        if self.ners is not None and NERS_SAMPLER_STATE in state:
            self.ners.set_state(state[NERS_SAMPLER_STATE])
        if self.laber is not None and LABER_GENERATOR_STATE in state:
            self.laber.set_state(state[LABER_GENERATOR_STATE])
        # The restored optimizers carry the settings they were saved with.
        if self.update_graphs is not None:
            make_capturable(learner_optimizers(self))
            # Optimizer states were replaced: capture again from them.
            self.update_graphs.reset()
        else:
            make_capturable(learner_optimizers(self), capturable=False)
