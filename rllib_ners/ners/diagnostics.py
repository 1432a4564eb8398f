"""What the NERS sampler does to replay: the math of `result["ners"]`'s diagnostics.

Pure numpy (no Ray, no torch, no scipy), vectorised: every function takes arrays
over stored transitions and makes a fixed number of numpy calls.

Inputs, per stored transition `i` (or per item of a uniform random subset of
them): its sum-tree leaf `l_i = sigma_i ** alpha` (the sampling probability is
`p_i = l_i / sum_k l_k`), whether a NERS row has ever set its priority
(`scored`), and its cached TD error `delta`.

On a subset of `n` of the `N` stored transitions (uniform, without replacement)
the distribution-wide keys are ratio estimates from the subset's moments, with
the true `N` where `N` enters the formula; with the whole buffer they are exact:

- entropy `H(p) = log(N mean(l)) - mean(l log l) / mean(l)`, reported as
  `H(p) / log N` (1 = uniform);
- effective sample fraction `1 / (N sum p_i^2) = mean(l)^2 / mean(l^2)`;
- unscored mass `sum_{unscored} l / sum l`.

The scored-only keys (max/min, coefficient of variation, Spearman with |delta|)
are those of the scored items in the subset.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

# Default number of stored transitions the per-iteration diagnostics look at
# (a uniform random subset when the buffer holds more; `.ners(
# diagnostics_sample_size=...)`).
DIAGNOSTICS_SAMPLE_SIZE = 8192
# Stored transitions in the fixed probe set whose scores are tracked over time.
PROBE_SIZE = 256

# Keys of `replay_distribution_diagnostics()` and `probe_diagnostics()`.
PRIORITY_ENTROPY_NORMALIZED = "priority_entropy_normalized"
EFFECTIVE_SAMPLE_FRACTION = "effective_sample_fraction"
SCORED_PRIORITY_MAX_OVER_MIN = "scored_priority_max_over_min"
SCORED_PRIORITY_CV = "scored_priority_cv"
UNSCORED_MASS = "unscored_mass"
PRIORITY_TD_SPEARMAN = "priority_td_spearman"
PROBE_SCORE_STD = "probe_score_std"
PROBE_RANK_DRIFT = "probe_rank_drift"


def uniform_subset(
    rng: np.random.Generator, candidates: np.ndarray, size: int
) -> np.ndarray:
    """`size` of `candidates` uniformly without replacement, sorted; all of them
    (and no random draw) when there are at most `size`."""
    candidates = np.asarray(candidates)
    if candidates.size <= size:
        return candidates
    return np.sort(rng.choice(candidates, size=size, replace=False))


def average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n of `values` (float64), ties sharing their average rank."""
    values = np.asarray(values)
    n = values.shape[0]
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    # Starts and ends (exclusive) of the runs of equal values in sorted order.
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], n]
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson's on average ranks); NaN for fewer
    than two items or when either side is constant."""
    x, y = np.asarray(x), np.asarray(y)
    if x.shape[0] < 2:
        return float("nan")
    rx = average_ranks(x)
    ry = average_ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    denominator = np.sqrt(np.dot(rx, rx) * np.dot(ry, ry))
    if denominator == 0.0:
        return float("nan")
    return float(np.dot(rx, ry) / denominator)


def entropy_and_ess(leaves: np.ndarray, num_total: Optional[int] = None):
    """`(H(p) / log N, 1 / (N sum p^2))` of `p = leaves / sum(leaves)`.

    Args:
        leaves: Leaves (>= 0, not all 0) of all `N` stored transitions, or of a
            uniform random subset of them.
        num_total: `N` when `leaves` is a subset; default `len(leaves)`.

    Returns:
        Two floats; both exactly 1 for equal leaves. NaN when `N < 2` or all
        leaves are 0.
    """
    leaves = np.asarray(leaves, dtype=np.float64)
    num_total = leaves.shape[0] if num_total is None else int(num_total)
    top = leaves.max() if leaves.size else 0.0
    if num_total < 2 or not top > 0.0:
        return float("nan"), float("nan")
    # Scaled by the max so that equal leaves give exactly 1.0 (and 0 log 0 = 0).
    scaled = leaves / top
    mean = scaled.mean()
    mean_l_log_l = np.mean(scaled * np.log(np.where(scaled > 0.0, scaled, 1.0)))
    log_n = np.log(num_total)
    entropy = np.log(num_total * mean) - mean_l_log_l / mean
    ess = mean * mean / np.mean(scaled * scaled)
    return float(entropy / log_n), float(ess)


def replay_distribution_diagnostics(
    leaves: np.ndarray,
    scored: np.ndarray,
    delta: np.ndarray,
    num_total: Optional[int] = None,
) -> Dict[str, float]:
    """The buffer-side diagnostics (see the module docstring) as a dict.

    Args:
        leaves: Sum-tree leaves of the stored transitions (or a uniform subset).
        scored: Bool, whether each was ever scored by NERS.
        delta: Their cached TD errors.
        num_total: Number of stored transitions, when the arrays are a subset.

    Returns:
        Every key that is defined: the scored-only ones need scored items
        (Spearman also needs two distinct priorities and TD errors), the
        unscored mass a positive total.
    """
    leaves = np.asarray(leaves, dtype=np.float64)
    scored = np.asarray(scored, dtype=bool)
    out: Dict[str, float] = {}
    if leaves.size == 0:
        return out
    entropy, ess = entropy_and_ess(leaves, num_total)
    out[PRIORITY_ENTROPY_NORMALIZED] = entropy
    out[EFFECTIVE_SAMPLE_FRACTION] = ess
    total = leaves.sum()
    if total > 0.0:
        out[UNSCORED_MASS] = float(leaves[~scored].sum() / total)
    scored_leaves = leaves[scored]
    if scored_leaves.size:
        low, high = scored_leaves.min(), scored_leaves.max()
        if low > 0.0:
            out[SCORED_PRIORITY_MAX_OVER_MIN] = float(high / low)
        if high > 0.0:  # scaled by the max: equal leaves give exactly 0
            scaled = scored_leaves / high
            out[SCORED_PRIORITY_CV] = float(scaled.std() / scaled.mean())
        rho = spearman(scored_leaves, np.abs(np.asarray(delta)[scored]))
        out[PRIORITY_TD_SPEARMAN] = rho
    return {key: value for key, value in out.items() if np.isfinite(value)}


def probe_diagnostics(
    scores: np.ndarray, previous: Optional[np.ndarray] = None
) -> Dict[str, float]:
    """Spread and rank drift of the probe set's scores.

    Args:
        scores: This scoring of the probe items.
        previous: The previous scoring of the same positions, NaN where the item
            was replaced since (or None: the first scoring).

    Returns:
        `probe_score_std` (population std), and `probe_rank_drift`
        `= 1 - Spearman(scores, previous)` over the kept items, when defined.
    """
    scores = np.asarray(scores, dtype=np.float64)
    out: Dict[str, float] = {}
    if scores.size:
        out[PROBE_SCORE_STD] = float(scores.std())
    if previous is not None:
        previous = np.asarray(previous, dtype=np.float64)
        kept = np.isfinite(previous) & np.isfinite(scores)
        out[PROBE_RANK_DRIFT] = 1.0 - spearman(scores[kept], previous[kept])
    return {key: value for key, value in out.items() if np.isfinite(value)}
