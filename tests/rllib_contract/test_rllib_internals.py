"""RLlib behaviours this package relies on beyond its private names.

Private names are reached through `rllib_ners.seam` and pinned by the
`test_seam_*.py` files beside this one; the checks here pin public behaviour
our code assumes (what a metric keeps, what an overridden method does). Each
fails with a message saying what changed in RLlib and which of our modules to
adapt. After a Ray upgrade, run `python -m pytest tests/rllib_contract` first: it
is the upgrade check (see docs/contributing.md, "Upgrading Ray").
"""

from __future__ import annotations

import inspect

import numpy as np


def _fail(what_changed: str, ours: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt {ours}."


def test_item_series_stats_keep_the_logged_values_in_items():
    import torch
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    logger = MetricsLogger()
    rows = torch.arange(8.0).reshape(4, 2)
    logger.log_value(("m", "td_error"), rows, reduce="item_series")
    stats = logger.reduce()["m"]["td_error"]
    items = getattr(stats, "items", None)
    assert items is not None and len(items) == 1, _fail(
        "item-series stats no longer keep the logged values in `.items`",
        "rllib_ners/algorithms/common/training/training_ops.py (_logged_arrays)",
    )
    np.testing.assert_array_equal(np.asarray(items[0]), rows.numpy())
    np.testing.assert_array_equal(np.asarray(stats.peek()[0]), rows.numpy())


def test_dqn_learners_post_update_step_only_updates_the_target_networks():
    """`DQNTargetUpdates` replaces DQNLearner's `after_gradient_based_update`
    (and runs the Learners' below it): that is right only while DQNLearner's
    does nothing but the target-network update and its two metrics."""
    from ray.rllib.algorithms.dqn.dqn_learner import DQNLearner

    source = inspect.getsource(DQNLearner.after_gradient_based_update)
    calls = {
        name
        for name in ("update_target_network", "log_value", "get_target_network_pairs")
        if name in source
    }
    assert calls == {
        "update_target_network",
        "log_value",
        "get_target_network_pairs",
    }
    assert (
        source.count("self.metrics.log_value(") == 2
        and source.count("update_target_network(") == 1
    ), _fail(
        "DQNLearner.after_gradient_based_update does more than update the target "
        "networks",
        "rllib_ners/algorithms/common/learner/target_updates.py (DQNTargetUpdates)",
    )
