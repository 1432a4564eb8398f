"""`DeferredMetrics`: logging an iteration's values once gives RLlib's reduction.

The invariant: recording values with `DeferredMetrics` and flushing them into a
`MetricsLogger` reduces to the same results as logging every value into that
logger directly, for every reduction a Learner uses (window 1, windowed and
unwindowed means, EMA, max, min, sums, lifetime sums, item series).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from rllib_ners.utils.deferred_metrics import DeferredMetrics

CASES = [
    ("loss", {"window": 1}),
    ("lr", {"reduce": "mean"}),
    ("batch_mean", {"reduce": "mean", "window": 5}),
    ("smooth", {}),  # RLlib's default: "ema"
    ("peak", {"reduce": "max"}),
    ("low", {"reduce": "min"}),
    ("steps", {"reduce": "sum"}),
    ("steps_lifetime", {"reduce": "lifetime_sum"}),
    ("series", {"reduce": "item_series"}),
]


def _logged(values, kwargs, *, deferred: bool, as_tensors: bool):
    logger = MetricsLogger(root=True)
    target = DeferredMetrics() if deferred else logger
    for value in values:
        item = torch.tensor(value) if as_tensors else value
        target.log_value(("module", "key"), item, **kwargs)
    if deferred:
        target.flush_into(logger)
    result = logger.reduce()["module"]["key"]
    peeked = result.peek() if hasattr(result, "peek") else result
    return np.asarray(peeked, dtype=np.float64)


@pytest.mark.parametrize("as_tensors", [False, True])
@pytest.mark.parametrize("name,kwargs", CASES)
def test_flush_reduces_like_logging_every_value(name, kwargs, as_tensors):
    values = list(np.random.default_rng(len(name)).normal(size=23).round(3))
    direct = _logged(values, kwargs, deferred=False, as_tensors=as_tensors)
    deferred = _logged(values, kwargs, deferred=True, as_tensors=as_tensors)
    np.testing.assert_allclose(deferred, direct, rtol=1e-6, err_msg=name)


def test_log_dict_records_each_leaf_under_its_nested_key():
    recorder = DeferredMetrics()
    recorder.log_dict({"a": 1.0, "b": {"c": 2.0}}, key="module", window=1)
    recorder.log_dict({"a": 3.0, "b": {"c": 4.0}}, key="module", window=1)
    logger = MetricsLogger(root=True)
    recorder.flush_into(logger)
    assert logger.peek(("module", "a")) == 3.0
    assert logger.peek(("module", "b", "c")) == 4.0
    assert len(recorder) == 0  # flushed


def test_pop_and_delete_take_values_out_of_the_flush():
    recorder = DeferredMetrics()
    recorder.log_value(("m", "td_error"), torch.ones(3), reduce="item_series")
    recorder.log_value(("m", "td_error"), torch.zeros(2), reduce="item_series")
    recorder.log_value(("m", "gone"), 1.0, window=1)
    popped = recorder.pop_values(("m", "td_error"))
    assert [len(item) for item in popped] == [3, 2]
    recorder.delete("m", "gone")
    with pytest.raises(KeyError, match="No deferred metric"):
        recorder.delete("m", "gone")
    recorder.delete("m", "gone", key_error=False)
    assert len(recorder) == 0


def test_lazy_values_are_computed_only_for_what_the_flush_logs():
    """`log_lazy`: a window-1 key computes only the iteration's last value;
    other reductions compute every value; the result equals eager logging."""
    calls = []

    def lazy(value):
        return lambda: calls.append(value) or torch.tensor(float(value))

    deferred, eager = DeferredMetrics(), MetricsLogger(root=True)
    for value in range(5):
        deferred.log_lazy(("m", "last"), lazy(value), window=1)
        deferred.log_lazy(("m", "sum"), lazy(10 + value), reduce="sum")
        eager.log_value(("m", "last"), torch.tensor(float(value)), window=1)
        eager.log_value(("m", "sum"), torch.tensor(10.0 + value), reduce="sum")
    assert calls == []
    logger = MetricsLogger(root=True)
    deferred.flush_into(logger)
    assert sorted(calls) == [4, 10, 11, 12, 13, 14]
    ours, theirs = logger.reduce()["m"], eager.reduce()["m"]
    for key in ("last", "sum"):
        a = ours[key].peek() if hasattr(ours[key], "peek") else ours[key]
        b = theirs[key].peek() if hasattr(theirs[key], "peek") else theirs[key]
        assert float(a) == float(b), key
