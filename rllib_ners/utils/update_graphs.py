"""Gradient updates replayed from captured CUDA graphs.

Eager PyTorch launches each of an update's few hundred kernels from Python. On a
GPU, with the small networks of SAC, TD3 or data-efficient Rainbow, the host's
launching is the bound and the GPU idles: on the lent H200 the bare SAC update
ran 74.7 times a second eagerly and 1,562 times captured in a CUDA graph
(docs/benchmarks/gpu_sac_2026-11-27_1.txt). A CUDA graph records the kernels of
one update once and replays them with one launch.

`UpdateGraphs.run(key, inputs, update, owner)` makes one update:

* its signature is `key` (the Python-side decisions its caller made before,
  such as TD3's delayed actor step) plus every input tensor's name, shape, dtype
  and device; an input that is no tensor is not served (the update runs
  eagerly);
* the first `warmup_updates` updates of a signature run eagerly, on a side
  stream as torch requires before a capture (state allocated on first use, such
  as Adam's moments and cuBLAS workspaces, must exist by then);
* the next update of the signature is captured: the graph's inputs are static
  tensors, into which each later batch is copied before the graph replays; the
  capture itself computes nothing, so the graph then replays for that update;
* the metrics an update logs through `owner.metrics` are recorded at the capture
  and logged again after each replay, tensors cloned (the next replay
  overwrites them); a function logged with `log_lazy` (window 1: only the last
  is computed, when metrics are flushed) computes from the graph's tensors,
  which then hold the last replay's values.

The outputs returned are the graph's own tensors, detached: valid until the
signature's next replay.

A graph bakes in the Python numbers the update read (a learning rate) and the
tensors it touched (optimizer states). `fingerprint()` of the owner, taken at
the capture, is compared before each replay: where it changed (a learning rate
schedule, an optimizer state replaced) no graph is replayed again and the
updates run eagerly, said once in the log. Restoring a Learner calls `reset()`:
graphs are captured again from the restored state.

Where a capture fails (an op that waits on the host, a host-to-device copy in
the update) the update runs eagerly from then on, said once in a WARNING log
line with the update's own error; the CUDA generator's state and the current
stream are put back as they were before the capture, so that the eager updates
draw what they would have drawn.

Without CUDA, `EagerStandInGraph` runs the same schedule for tests: it runs
the update at the capture and at each replay, writing the outputs into the
capture's tensors as a replay does. Its capture fails, as a CUDA capture would,
where the update reads a tensor on the host (`HostReadGuard`), so CPU tests
find what would keep an update from being captured on a GPU. No Ray imports.
"""

from __future__ import annotations

import logging
import os
import traceback
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

from rllib_ners.seam.torch_internals import TorchDispatchMode

logger = logging.getLogger(__name__)

Inputs = Dict[str, Dict[str, Any]]


class NotCapturable(RuntimeError):
    """An update does something a CUDA graph cannot replay."""


def input_signature(inputs: Inputs) -> Optional[tuple]:
    """Name, shape, dtype and device of every input tensor, per module; None
    where an input is no tensor (a graph would bake it in)."""
    signature = []
    for module_id, columns in inputs.items():
        for name, value in columns.items():
            if not torch.is_tensor(value):
                return None
            signature.append((module_id, name, value.shape, value.dtype, value.device))
    return tuple(signature)


def map_tensors(function, tree):
    """`tree` (dicts, tuples and lists of tensors and other values) with
    `function` applied to every tensor."""
    if torch.is_tensor(tree):
        return function(tree)
    if isinstance(tree, dict):
        return {key: map_tensors(function, value) for key, value in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(map_tensors(function, value) for value in tree)
    return tree


def copy_into(targets, sources) -> None:
    """Copies every tensor of `sources` into the tensor at the same place of
    `targets` (two trees of the same structure)."""
    if torch.is_tensor(targets):
        targets.copy_(sources)
    elif isinstance(targets, dict):
        for key, target in targets.items():
            copy_into(target, sources[key])
    elif isinstance(targets, (tuple, list)):
        for target, source in zip(targets, sources):
            copy_into(target, source)


def _detached(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach() if tensor.requires_grad else tensor


def _last_only(kwargs) -> bool:
    return kwargs.get("window") == 1 or kwargs.get("reduce") == "item"


class RecordedMetrics:
    """Takes an update's `log_value`, `log_dict`, `log_lazy` and `delete`
    calls (the metrics API this package's Learners log through) and logs them
    again into another logger (`log_into`), tensors cloned. Any other call
    means the update reads its metrics: not capturable."""

    def __init__(self):
        self.calls: List[Tuple[str, tuple, dict]] = []

    # Values are kept detached: the capture's autograd graph is not kept alive.
    def log_value(self, key, value, **kwargs) -> None:
        self.calls.append(("log_value", (key, map_tensors(_detached, value)), kwargs))

    def log_dict(self, value_dict, **kwargs) -> None:
        self.calls.append(("log_dict", (map_tensors(_detached, value_dict),), kwargs))

    def log_lazy(self, key, compute, **kwargs) -> None:
        if kwargs.get("window") != 1:
            raise NotCapturable(
                f"the update logs {key} lazily with window={kwargs.get('window')}: "
                f"only window-1 values are computed from the graph's last replay"
            )
        self.calls.append(("log_lazy", (key, compute), kwargs))

    def delete(self, *key, **kwargs) -> None:
        self.calls.append(("delete", key, kwargs))

    def __getattr__(self, name: str):
        raise NotCapturable(f"the update calls metrics.{name}()")

    def log_into(self, metrics) -> None:
        """Makes the recorded calls on `metrics`: values kept beyond the next
        replay cloned; values of which a deferred logger keeps only the last
        (window 1) not, as they are read at the flush, from the graph's
        last replay."""
        for method, args, kwargs in self.calls:
            if method in ("log_value", "log_dict") and not _last_only(kwargs):
                args = map_tensors(torch.Tensor.clone, args)
            getattr(metrics, method)(*args, **kwargs)


# Ops that make the host wait for the device (or copy host data to it), which a
# CUDA graph capture refuses. Seen below the Python API, so also where torch or
# RLlib call them: `torch.normal` with a tensor `std` checks `std.min() >= 0`
# on the host inside its kernel.
_HOST_READING_OPS = {
    "aten::_local_scalar_dense": "reads a tensor's value on the host (.item(), "
    "float(t), bool(t), `if t:`)",
    "aten::nonzero": "computes an output whose shape depends on values (nonzero)",
    "aten::masked_select": "computes an output whose shape depends on values "
    "(masked_select)",
    "aten::_unique2": "computes an output whose shape depends on values (unique)",
    "aten::unique_consecutive": "computes an output whose shape depends on "
    "values (unique_consecutive)",
    "aten::unique_dim": "computes an output whose shape depends on values (unique)",
    "aten::is_nonzero": "reads a tensor's truth value on the host",
    "aten::equal": "compares tensors on the host (torch.equal)",
    "aten::lift_fresh": "makes a tensor from host data (torch.tensor, "
    "torch.as_tensor, torch.from_numpy): a host-to-device copy on a GPU",
}
# Overloads whose kernels check values on the host.
_HOST_READING_OVERLOADS = {
    "aten::normal.Tensor_Tensor": "draws torch.normal with a tensor std, "
    "whose kernel checks std >= 0 on the host",
    "aten::normal.float_Tensor": "draws torch.normal with a tensor std, "
    "whose kernel checks std >= 0 on the host",
    "aten::repeat_interleave.Tensor": "computes an output whose shape depends "
    "on values (repeat_interleave without output_size)",
}
_HOST_COPYING_METHODS = {
    torch.Tensor.cpu: "copies a tensor to the host (.cpu())",
    torch.Tensor.numpy: "copies a tensor to the host (.numpy())",
    torch.Tensor.tolist: "copies a tensor to the host (.tolist())",
    torch.Tensor.__array__: "copies a tensor to the host (numpy)",
}


_TORCH_DIR = os.path.dirname(torch.__file__)


def _caller() -> str:
    """The innermost frame outside torch, as "file:line in function"."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if not frame.filename.startswith(_TORCH_DIR) and frame.filename != __file__:
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return "an unknown place"


class _HostReadOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.paused = 0  # inside a call that reads on the host only on a CPU

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        name = func.name()  # "aten::op" or "aten::op.overload"
        packet = name.split(".", 1)[0]
        what = _HOST_READING_OVERLOADS.get(name) or _HOST_READING_OPS.get(packet)
        if what is None and packet == "aten::index":
            # Boolean-mask indexing finds the mask's nonzero entries first.
            if any(
                torch.is_tensor(index) and index.dtype in (torch.bool, torch.uint8)
                for index in args[1]
            ):
                what = "indexes with a boolean mask (its shape depends on values)"
        if what is not None:
            raise NotCapturable(f"the update {what}, at {_caller()}")
        return func(*args, **kwargs)


class _HostCopyMethods(TorchFunctionMode):
    def __init__(self, ops: _HostReadOps):
        super().__init__()
        self.ops = ops

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        what = _HOST_COPYING_METHODS.get(func)
        if what is not None:
            raise NotCapturable(f"the update {what}, at {_caller()}")
        if func is torch.nn.functional.one_hot and _num_classes(args, kwargs) >= 0:
            # Checks its index's range on the host on a CPU only (a GPU's
            # kernel asserts it on the device): RLlib's distributional loss.
            self.ops.paused += 1
            try:
                return func(*args, **kwargs)
            finally:
                self.ops.paused -= 1
        return func(*args, **kwargs)


def _num_classes(args, kwargs) -> int:
    return kwargs.get("num_classes", args[1] if len(args) > 1 else -1)


class HostReadGuard:
    """Raises `NotCapturable` where the code it runs reads a tensor on the host
    or copies host data into a tensor: what makes a CUDA graph capture fail, or
    bake in a value, found without CUDA. The error names the op and the first
    caller outside torch."""

    def __enter__(self):
        ops = _HostReadOps()
        self._modes = (_HostCopyMethods(ops), ops)
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc_info):
        for mode in reversed(self._modes):
            mode.__exit__(*exc_info)
        return False


class CudaUpdateGraph:
    """One captured update (`torch.cuda.CUDAGraph`): the capture records the
    kernels without running them."""

    runs_at_capture = False

    def __init__(self):
        self._graph = torch.cuda.CUDAGraph()
        self._recorded: Optional[RecordedMetrics] = None

    def capture(self, recorded_update: Callable[[], Tuple[Any, RecordedMetrics]]):
        # A capture that fails leaves torch's CUDA generator registered with the
        # dead graph: every later random draw of the process then fails
        # ("Offset increment outside graph capture encountered unexpectedly"),
        # and torch leaves the capture's stream current. Both are put back as
        # they were before the capture, which ran no kernel.
        generator = torch.cuda.default_generators[torch.cuda.current_device()]
        generator_before = generator.clone_state()
        stream_before = torch.cuda.current_stream()
        try:
            # Only this thread's unsafe calls end the capture: Ray's own
            # threads may touch CUDA meanwhile.
            with torch.cuda.graph(self._graph, capture_error_mode="thread_local"):
                outputs, self._recorded = recorded_update()
        except BaseException:
            generator.graphsafe_set_state(generator_before)
            torch.cuda.set_stream(stream_before)
            raise
        return outputs, self._recorded

    def replay(self) -> RecordedMetrics:
        self._graph.replay()
        return self._recorded


class EagerStandInGraph:
    """A stand-in for `CudaUpdateGraph` where CUDA is absent, for tests: the
    update runs at the capture and again at each replay (on the capture's
    static inputs), its outputs copied into the capture's tensors, as a CUDA
    graph's replay overwrites them; each replay's own logged metrics are
    returned. The capture runs under `HostReadGuard`: it fails where a CUDA
    capture would."""

    runs_at_capture = True

    def __init__(self):
        self._update = None
        self._outputs = None

    def capture(self, recorded_update):
        self._update = recorded_update
        with HostReadGuard():
            self._outputs, recorded = recorded_update()
        return self._outputs, recorded

    def replay(self) -> RecordedMetrics:
        outputs, recorded = self._update()
        with torch.no_grad():
            copy_into(self._outputs, outputs)
        return recorded


class _Entry:
    __slots__ = ("warmups", "graph", "static_inputs", "outputs", "fingerprint")

    def __init__(self):
        self.warmups = 0
        self.graph = None
        self.static_inputs: Optional[Inputs] = None
        self.outputs = None
        self.fingerprint = None


class UpdateGraphs:
    """Captured updates, one per signature (see the module docstring).

    `make_graph`: `CudaUpdateGraph` (the default) or `EagerStandInGraph`.
    `fingerprint`: the Python-side values and objects a graph bakes in (see the
    module docstring), compared before each replay; `fingerprint_change` says
    in the log what a change of it means. `name` names the owner in
    the log lines, `noun` and `plural` what one call makes ("update", or
    "acting pass" for `rllib_ners.env.acting_graphs`)."""

    def __init__(
        self,
        *,
        fingerprint: Callable[[], Hashable],
        warmup_updates: int = 3,
        make_graph: Callable[[], Any] = CudaUpdateGraph,
        name: str = "Learner",
        noun: str = "update",
        plural: Optional[str] = None,
        fingerprint_change: str = (
            "what the graphs baked in changed since their capture (a learning "
            "rate schedule, or an optimizer state replaced)"
        ),
    ):
        if warmup_updates < 1:
            raise ValueError(
                f"warmup_updates must be >= 1 (state allocated on first use must "
                f"exist before a capture), got {warmup_updates}."
            )
        self.fingerprint = fingerprint
        self.fingerprint_change = fingerprint_change
        self.warmup_updates = warmup_updates
        self.make_graph = make_graph
        self.name = name
        self.noun = noun
        self.plural = plural or f"{noun}s"
        self.disabled_because: Optional[str] = None
        self.num_captures = 0
        self.num_replays = 0
        self._entries: Dict[Hashable, _Entry] = {}
        self._side_stream = None

    def reset(self) -> None:
        """Drops every graph (e.g. after the owner's state was restored): the
        next updates warm up and capture again."""
        self._entries.clear()

    def disable(self, reason: str, *, level: int = logging.INFO) -> None:
        """Updates run eagerly from now on; says why once in the log."""
        if self.disabled_because is None:
            self.disabled_because = reason
            logger.log(
                level,
                "%s: %s run eagerly instead of from CUDA graphs: %s.",
                self.name,
                self.plural,
                reason,
            )
        self._entries.clear()

    def run(self, key: Hashable, inputs: Inputs, update: Callable, owner):
        """`update(inputs)` (returning a tree of tensors), made eagerly or by a
        captured graph's replay; see the module docstring."""
        if self.disabled_because is not None:
            return update(inputs)
        signature = input_signature(inputs)
        if signature is None:
            return update(inputs)  # an input a graph would bake in
        entry = self._entries.get((key, signature))
        if entry is None:
            entry = self._entries[(key, signature)] = _Entry()
        if entry.warmups < self.warmup_updates:
            entry.warmups += 1
            return self._on_the_side_stream(update, inputs)
        if entry.graph is None:
            return self._capture(entry, inputs, update, owner)
        if self.fingerprint() != entry.fingerprint:
            self.disable(self.fingerprint_change)
            return update(inputs)
        with torch.no_grad():
            copy_into(entry.static_inputs, inputs)
        return self._replay(entry, owner)

    def _capture(self, entry: _Entry, inputs: Inputs, update: Callable, owner):
        entry.static_inputs = {
            module_id: {name: value.clone() for name, value in columns.items()}
            for module_id, columns in inputs.items()
        }

        def recorded_update():
            recorded = RecordedMetrics()
            metrics, owner.metrics = owner.metrics, recorded
            try:
                outputs = update(entry.static_inputs)
                return map_tensors(torch.Tensor.detach, outputs), recorded
            finally:
                owner.metrics = metrics

        graph = self.make_graph()
        _synchronize_device()
        try:
            outputs, recorded = graph.capture(recorded_update)
        except Exception as error:  # noqa: BLE001 - any failure: eager from now on
            _synchronize_device()
            self.disable(
                f"capturing the {self.noun} failed: {capture_failure(error)}",
                level=logging.WARNING,
            )
            return update(inputs)
        entry.graph, entry.outputs = graph, outputs
        entry.fingerprint = self.fingerprint()
        self.num_captures += 1
        if graph.runs_at_capture:  # the capture made this update
            recorded.log_into(owner.metrics)
            return entry.outputs
        return self._replay(entry, owner)

    def _replay(self, entry: _Entry, owner):
        recorded = entry.graph.replay()
        self.num_replays += 1
        recorded.log_into(owner.metrics)
        return entry.outputs

    def _on_the_side_stream(self, update: Callable, inputs: Inputs):
        """`update(inputs)`; on a GPU on one side stream, as torch requires of
        the updates before a capture (the inputs' stream waited for first).
        One stream for every warm-up: state made on first use (the autograd
        nodes that accumulate each parameter's gradient among it) remembers
        the stream it was made on."""
        if not torch.cuda.is_available() or not _on_cuda(inputs):
            return update(inputs)
        if self._side_stream is None:
            self._side_stream = torch.cuda.Stream()
        side = self._side_stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            outputs = update(inputs)
        torch.cuda.current_stream().wait_stream(side)
        return outputs


def capture_failure(error: BaseException) -> str:
    """What made a capture fail: where torch's end of the capture raised
    because the update had raised inside it, both errors, the update's first
    (the end's error alone only says that the capture was invalidated)."""
    inner = error.__cause__ or error.__context__
    if inner is None or inner is error:
        return repr(error)
    return f"{inner!r} (then, ending the capture: {error!r})"


def _on_cuda(inputs: Inputs) -> bool:
    return any(
        torch.is_tensor(value) and value.is_cuda
        for columns in inputs.values()
        for value in columns.values()
    )


def _synchronize_device() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
