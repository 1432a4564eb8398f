"""A stand-in for RLlib's `MetricsLogger` that defers logging to one flush.

RLlib's Learner logs a dozen values per update (losses, counters, learning
rates) and reduces its `MetricsLogger` after every update; each `log_value()`
call creates or finds a Stats object by its nested key and pushes the value,
and the reduction walks every Stats object. At one update per env step that is
a large share of a small network's update. An Algorithm reports the reduced
metrics once per iteration, so they need to be reduced only then.

`DeferredMetrics` takes the same calls (`log_value`, `log_dict`, `delete`)
during the updates of an iteration, keeps the values (tensors stay tensors: no
device sync per update; a key whose reduction keeps only the last value keeps
only that one; `log_lazy` keeps a function that computes the value, called
only for the values the flush logs), and `flush_into(logger)` logs each key
once with what its reduction would have kept:

* `window=1`, "item" and "max"/"min": the last value, or the max/min;
* "mean" with a window W: the last W values (RLlib's window keeps those);
  "mean" without one: the mean of all values;
* "sum" and "lifetime_sum": the sum (throughputs then span the same steps);
* "ema", "percentiles" and "item_series": every value, in order.

So the reduced results equal those of per-update reduction, except for RLlib's
mean-of-means when results are merged update by update (e.g. a learning rate
logged as "mean" is the mean over the iteration instead of a mean of per-update
means; the same for a constant rate). No Ray imports.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

Key = Tuple[str, ...]


def _as_key(key) -> Key:
    return tuple(key) if isinstance(key, (tuple, list)) else (key,)


class _Record:
    __slots__ = ("kwargs", "values", "last_only")

    def __init__(self, kwargs: Dict[str, Any]):
        self.kwargs = kwargs
        self.values: List[Any] = []
        # Keys whose reduction keeps only the last value: only it is kept.
        self.last_only = _reduction(kwargs) == "item" or kwargs.get("window") == 1


def _reduction(kwargs: Dict[str, Any]) -> str:
    reduce = kwargs.get("reduce")
    if reduce is None:
        return "mean" if kwargs.get("window") is not None else "ema"
    return reduce


class DeferredMetrics:
    """Records a MetricsLogger's `log_value`/`log_dict`/`delete` calls; see the
    module docstring for what `flush_into()` logs."""

    def __init__(self):
        self._records: Dict[Key, _Record] = {}

    def __len__(self) -> int:
        return len(self._records)

    def log_value(self, key, value, **kwargs) -> None:
        if getattr(value, "requires_grad", False):
            # Kept until the flush, a loss would keep its update's whole
            # autograd graph alive into the next updates (RLlib's logger
            # detaches what it keeps, too).
            value = value.detach()
        key = _as_key(key)
        record = self._records.get(key)
        if record is None:
            record = self._records[key] = _Record(kwargs)
        if record.last_only:
            record.values = [value]
        else:
            record.values.append(value)

    def log_lazy(self, key, compute, **kwargs) -> None:
        """`log_value(key, compute(), **kwargs)`, with `compute` called only if
        the flush logs this value (a `window=1` key logs only the iteration's
        last one): for statistics of tensors that would otherwise be reduced
        at every update."""
        self.log_value(key, _Lazy(compute), **kwargs)

    def log_dict(self, value_dict: Dict[str, Any], *, key=None, **kwargs) -> None:
        prefix = _as_key(key) if key is not None else ()

        def _log(path: Key, value) -> None:
            if isinstance(value, dict):
                for name, item in value.items():
                    _log(path + (name,), item)
            else:
                self.log_value(path, value, **kwargs)

        _log(prefix, value_dict)

    def delete(self, *key, key_error: bool = True) -> None:
        key = _as_key(key[0] if len(key) == 1 else key)
        if self._records.pop(key, None) is None and key_error:
            raise KeyError(f"No deferred metric under {key}.")

    def pop_values(self, key) -> List[Any]:
        """The values recorded under `key` (removed; never flushed)."""
        record = self._records.pop(_as_key(key), None)
        return record.values if record is not None else []

    def flush_into(self, logger) -> None:
        """Logs every recorded key once (see the module docstring); then empty."""
        for key, record in self._records.items():
            record.values = [
                value.compute() if type(value) is _Lazy else value
                for value in record.values
            ]
            for value in _values_to_log(record):
                logger.log_value(key, value, **record.kwargs)
        self._records.clear()


class _Lazy:
    """A value computed when it is flushed (`DeferredMetrics.log_lazy`)."""

    __slots__ = ("compute",)

    def __init__(self, compute):
        self.compute = compute


def _values_to_log(record: _Record) -> List[Any]:
    values, kwargs = record.values, record.kwargs
    reduce = _reduction(kwargs)
    window: Optional[float] = kwargs.get("window")
    if reduce in ("ema", "percentiles", "item_series"):
        return values
    if reduce == "item" or window == 1:
        return values[-1:]
    if reduce == "max":
        return [_combine(values, max)]
    if reduce == "min":
        return [_combine(values, min)]
    if reduce in ("sum", "lifetime_sum"):
        return [_combine(values, sum)]
    if reduce == "mean":
        if window is not None:
            return values[-int(window) :]
        return [_combine(values, _mean)]
    return values


def _mean(values):
    return sum(values) / len(values)


def _combine(values: List[Any], reducer):
    """`reducer` over numbers, or over 0-d tensors as one tensor (no sync)."""
    first = values[0]
    if len(values) == 1:
        return first
    if hasattr(first, "detach"):  # torch tensors
        import torch

        stacked = torch.stack([v.detach().reshape(()) for v in values])
        if reducer is max:
            return stacked.max()
        if reducer is min:
            return stacked.min()
        if reducer is sum:
            return stacked.sum()
        return stacked.float().mean()
    return reducer(values)
