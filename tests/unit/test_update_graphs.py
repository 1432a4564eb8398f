"""`UpdateGraphs`: warm-up, capture and replay of an update, as a schedule.

Run with `EagerStandInGraph` (no CUDA here): the stand-in runs the update at
the capture and at each replay on the capture's static inputs, writing its
outputs into the capture's tensors, so a schedule that forgot to copy a batch
in, replayed a stale graph, made an update twice or logged its metrics wrongly
ends with other weights or metrics than the plain eager updates. The `gpu`
suite replays real CUDA graphs.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from rllib_ners.utils.deferred_metrics import DeferredMetrics
from rllib_ners.utils.update_graphs import (
    EagerStandInGraph,
    HostReadGuard,
    NotCapturable,
    RecordedMetrics,
    UpdateGraphs,
    input_signature,
)


class Owner:
    """A tiny regression model updated by Adam, logging like a Learner."""

    def __init__(self):
        torch.manual_seed(0)
        self.net = torch.nn.Linear(3, 1)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-2, fused=True)
        self.metrics = DeferredMetrics()

    def update(self, inputs):
        batch = inputs["m"]
        prediction = self.net(batch["x"]).squeeze(-1)
        errors = prediction - batch["y"]
        loss = (errors**2).mean()
        for param in self.net.parameters():
            param.grad = None
        loss.backward()
        self.optimizer.step()
        self.metrics.log_value(("m", "td_error"), errors.detach(), reduce="item_series")
        self.metrics.log_value(("m", "loss_sum"), loss.detach(), reduce="sum")
        self.metrics.log_lazy(("m", "loss"), lambda: loss.detach(), window=1)
        return {"m": {"errors": errors}}, {"m": loss}

    def fingerprint(self):
        return tuple(group["lr"] for group in self.optimizer.param_groups)


def batches(num, size=8):
    generator = torch.Generator().manual_seed(1)
    return [
        {"m": {"x": torch.randn(size, 3, generator=generator), "y": torch.randn(size)}}
        for _ in range(num)
    ]


def graphs_for(owner, **kwargs):
    return UpdateGraphs(
        fingerprint=owner.fingerprint, make_graph=EagerStandInGraph, **kwargs
    )


def run_both(batch_list, *, before_each=None):
    """The same updates eagerly and through `UpdateGraphs`: both owners, each
    update's returned outputs, and the graphs."""
    eager, graphed = Owner(), Owner()
    graphs = graphs_for(graphed)
    outputs = []
    for index, batch in enumerate(batch_list):
        if before_each is not None:
            before_each(index, eager, graphed, graphs)
        expected = eager.update(batch)
        got = graphs.run((), batch, graphed.update, graphed)
        outputs.append((expected, got))
        # What the caller does with the outputs before the next update.
        torch.testing.assert_close(got[0]["m"]["errors"], expected[0]["m"]["errors"])
        torch.testing.assert_close(got[1]["m"], expected[1]["m"])
    return eager, graphed, graphs


def assert_same_state(eager, graphed):
    for a, b in zip(eager.net.parameters(), graphed.net.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(eager.optimizer.state.values(), graphed.optimizer.state.values()):
        for key in a:
            assert torch.equal(a[key], b[key]), key


def flushed(metrics: DeferredMetrics):
    class Logger:
        def __init__(self):
            self.logged = []

        def log_value(self, key, value, **kwargs):
            self.logged.append((key, value))

    logger = Logger()
    metrics.flush_into(logger)
    return logger.logged


def test_warm_up_capture_and_replays_make_each_update_once():
    eager, graphed, graphs = run_both(batches(9))
    assert graphs.num_captures == 1
    # 3 warm-up updates, the capture (which runs the stand-in's update), 5 replays.
    assert graphs.num_replays == 5
    assert_same_state(eager, graphed)


def test_metrics_are_logged_once_per_update_with_its_values():
    eager, graphed, _ = run_both(batches(7))
    expected, got = flushed(eager.metrics), flushed(graphed.metrics)
    assert [key for key, _ in got] == [key for key, _ in expected]
    for (key, a), (_, b) in zip(expected, got):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=str(key))


def test_a_new_batch_shape_gets_its_own_graph():
    mixed = batches(5, size=8) + batches(5, size=4) + batches(3, size=8)
    eager, graphed, graphs = run_both(mixed)
    assert graphs.num_captures == 2
    assert_same_state(eager, graphed)


def test_replayed_outputs_are_overwritten_by_the_next_replay():
    """The outputs are the graph's tensors: valid until its next replay."""
    graphed = Owner()
    graphs = graphs_for(graphed, warmup_updates=1)
    batch_list = batches(4)
    outputs = [graphs.run((), b, graphed.update, graphed) for b in batch_list]
    assert outputs[2][0]["m"]["errors"] is outputs[3][0]["m"]["errors"]


def test_a_changed_learning_rate_stops_the_replays(caplog):
    def schedule(index, eager, graphed, graphs):
        if index == 6:
            for owner in (eager, graphed):
                owner.optimizer.param_groups[0]["lr"] = 5e-3

    with caplog.at_level(logging.INFO, logger="rllib_ners.utils.update_graphs"):
        eager, graphed, graphs = run_both(batches(9), before_each=schedule)
    assert graphs.disabled_because is not None
    assert "learning rate" in graphs.disabled_because
    said = [r.getMessage() for r in caplog.records if "eagerly" in r.getMessage()]
    assert len(said) == 1
    assert_same_state(eager, graphed)


def test_reset_captures_again():
    """After `reset()` the next updates warm up and capture anew, each update
    still made once (the weights equal eager updates on the same batches)."""
    eager, graphed = Owner(), Owner()
    graphs = graphs_for(graphed, warmup_updates=1)
    for rounds in range(2):
        for batch in batches(3):
            eager.update(batch)
            graphs.run((), batch, graphed.update, graphed)
        if rounds == 0:
            graphs.reset()
    assert graphs.num_captures == 2
    # Per round: one warm-up update, the capture, one replay.
    assert graphs.num_replays == 2
    assert_same_state(eager, graphed)


def test_keys_separate_graphs():
    """A Python-side decision made before the update (the key) picks its own
    graph: a graph never replays another decision's update."""
    eager, graphed = Owner(), Owner()
    graphs = graphs_for(graphed, warmup_updates=1)

    def update_scaled(owner, scale):
        def update(inputs):
            columns = inputs["m"]
            return owner.update({"m": {"x": columns["x"] * scale, "y": columns["y"]}})

        return update

    for index, batch in enumerate(batches(10)):
        scale = 2.0 if index % 2 else 1.0
        update_scaled(eager, scale)(batch)
        graphs.run(scale, batch, update_scaled(graphed, scale), graphed)
    assert graphs.num_captures == 2
    assert_same_state(eager, graphed)


def test_an_update_that_reads_its_metrics_runs_eagerly(caplog):
    class Reading(Owner):
        def update(self, inputs):
            outputs = super().update(inputs)
            self.metrics.peek(("m", "loss"))
            return outputs

    owner = Reading()
    owner.metrics.peek = lambda key: None  # the real logger answers
    graphs = graphs_for(owner, warmup_updates=1)
    with caplog.at_level(logging.INFO, logger="rllib_ners.utils.update_graphs"):
        for batch in batches(4):
            graphs.run((), batch, owner.update, owner)
    assert "metrics.peek()" in graphs.disabled_because
    assert graphs.num_replays == 0


def test_inputs_that_are_no_tensors_run_eagerly():
    assert input_signature({"m": {"x": torch.zeros(2), "infos": [{}]}}) is None
    eager, owner = Owner(), Owner()
    graphs = graphs_for(owner, warmup_updates=1)
    for batch in batches(4):
        eager.update(batch)
        batch["m"]["note"] = "a string"
        graphs.run(
            (),
            batch,
            lambda b: owner.update({"m": {k: b["m"][k] for k in "xy"}}),
            owner,
        )
    assert graphs.num_captures == 0 and graphs.num_replays == 0
    assert_same_state(eager, owner)


def test_lazy_metrics_with_a_window_are_not_capturable():
    with pytest.raises(NotCapturable, match="window"):
        RecordedMetrics().log_lazy("key", lambda: 1.0, window=10)


def test_warmup_updates_must_be_positive():
    with pytest.raises(ValueError, match="warmup_updates must be >= 1"):
        UpdateGraphs(fingerprint=tuple, warmup_updates=0)


class CaptureInvalidated(EagerStandInGraph):
    """A capture that fails as torch's does when the update reads a value on
    the host: the update's error, then the capture's end raising another."""

    runs_at_capture = False

    def capture(self, recorded_update):
        try:
            raise RuntimeError("operation not permitted when stream is capturing")
        finally:
            raise RuntimeError(
                "operation failed due to a previous error during capture"
            )


def test_a_failed_capture_runs_the_update_eagerly_and_names_its_error(caplog):
    eager, graphed = Owner(), Owner()
    graphs = UpdateGraphs(
        fingerprint=graphed.fingerprint, make_graph=CaptureInvalidated, warmup_updates=1
    )
    with caplog.at_level(logging.INFO, logger="rllib_ners.utils.update_graphs"):
        for batch in batches(5):
            eager.update(batch)
            graphs.run((), batch, graphed.update, graphed)
    assert_same_state(eager, graphed)  # every update made once, eagerly
    assert graphs.num_captures == 0 and graphs.num_replays == 0
    reason = graphs.disabled_because
    # The update's own error first: the capture's end only says it failed.
    assert reason.index("not permitted when stream is capturing") < reason.index(
        "previous error during capture"
    )
    [record] = [r for r in caplog.records if "eagerly" in r.getMessage()]
    assert record.levelno == logging.WARNING


def test_logged_tensors_keep_no_autograd_graph():
    """What an update logs is kept until the iteration's flush (deferred) or
    for the graph's life (recorded): detached, it keeps no autograd graph."""
    weight = torch.ones(2, requires_grad=True)
    loss = (weight * 3.0).sum()
    deferred, recorded = DeferredMetrics(), RecordedMetrics()
    for metrics in (deferred, recorded):
        metrics.log_value(("m", "loss"), loss, window=1)
        metrics.log_dict({"m": {"loss_sum": loss}}, reduce="sum")
    (_, (_, recorded_value), _), (_, (recorded_dict,), _) = recorded.calls
    kept = [value for _, value in flushed(deferred)]
    kept += [recorded_value, recorded_dict["m"]["loss_sum"]]
    assert len(kept) == 4
    assert all(value.grad_fn is None and torch.equal(value, loss) for value in kept)


X = torch.tensor([0.5, -1.0, 2.0])
HOST_READS = {
    "item": (lambda: X.sum().item(), "reads a tensor's value on the host"),
    "float": (lambda: float(X[0]), "reads a tensor's value on the host"),
    "if": (lambda: bool(X.sum() > 0), "reads a tensor's value on the host"),
    "mask": (lambda: X[X > 0], "boolean mask"),
    "nonzero": (lambda: X.nonzero(), "nonzero"),
    # The kernel itself checks std >= 0 with a host read.
    "normal": (lambda: torch.normal(X, X.abs()), "torch.normal with a tensor std"),
    "cpu": (lambda: X.cpu(), ".cpu()"),
    "numpy": (lambda: np.asarray(X), "numpy"),
    "tolist": (lambda: X.tolist(), ".tolist()"),
    "from host data": (lambda: torch.tensor([1.0]), "host-to-device copy"),
    # Without num_classes, one_hot reads the largest index on every device.
    "one_hot": (
        lambda: torch.nn.functional.one_hot(torch.arange(3)),
        "reads a tensor's value on the host",
    ),
}


@pytest.mark.parametrize("name", sorted(HOST_READS))
def test_the_host_read_guard_names_what_a_capture_refuses(name):
    read, what = HOST_READS[name]
    with pytest.raises(NotCapturable, match=r"the update .*") as error:
        with HostReadGuard():
            read()
    assert what in str(error.value)
    assert "test_update_graphs.py" in str(error.value)  # the caller


def test_the_host_read_guard_lets_device_side_work_through():
    index = torch.tensor([0, 3, 1])
    with HostReadGuard():
        noise = torch.randn_like(X) * X.abs() + X  # what torch.normal computes
        chosen = torch.where(X > 0, X, torch.zeros_like(X)).sum()
        gathered = X[torch.arange(2)]
        # Reads the index's range on the host on a CPU only (not on a GPU).
        one_hot = torch.nn.functional.one_hot(index, 4)
        one_hot_kw = torch.nn.functional.one_hot(index, num_classes=4)
    assert noise.shape == X.shape and chosen.ndim == 0
    assert torch.equal(gathered, X[:2])
    assert one_hot.tolist() == [[1, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]]
    assert torch.equal(one_hot, one_hot_kw)
    with pytest.raises(NotCapturable):  # the guard is back after one_hot
        with HostReadGuard():
            torch.nn.functional.one_hot(index, 4)
            X.sum().item()


def test_the_stand_in_capture_fails_where_a_cuda_capture_would(caplog):
    """An update with a host read captures on no device: the stand-in's
    capture fails too, and the updates run eagerly, each made once."""

    class ReadsOnHost(Owner):
        def update(self, inputs):
            # A host read before the step: the stand-in has run the ops before
            # the refused one (a CUDA capture runs none), here no step yet.
            if inputs["m"]["x"].abs().max() > 1e6:
                raise AssertionError("unreachable")
            return super().update(inputs)

    eager, graphed = ReadsOnHost(), ReadsOnHost()
    graphs = graphs_for(graphed, warmup_updates=1)
    with caplog.at_level(logging.INFO, logger="rllib_ners.utils.update_graphs"):
        for batch in batches(5):
            eager.update(batch)
            graphs.run((), batch, graphed.update, graphed)
    assert_same_state(eager, graphed)
    assert graphs.num_captures == 0
    assert "reads a tensor's value on the host" in graphs.disabled_because
    assert "in update" in graphs.disabled_because
