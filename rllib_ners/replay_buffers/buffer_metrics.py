"""The buffers' metrics: what they count between reports, in RLlib's terms.

RLlib's episode buffers log their metrics inside every `add()` and `sample()`
call (`_update_add_metrics` / `_update_sample_metrics`, keys from
`ray.rllib.utils.metrics`). Ours only count there (`bookkeeping.StepCounts`,
the multi-agent buffer's `AddTally`) and log once per `get_metrics()`, through
RLlib's own methods (`rllib_ners.seam.replay`), with the arguments built here:
the same keys, meanings and reductions as RLlib's, so RLlib's metrics code
and dashboards read ours unchanged.

`num_resamples` is always 0: our n-step returns are truncated at episode
ends, never redrawn.
"""

from __future__ import annotations

from typing import Any, Dict

from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID

from rllib_ners.replay_buffers.bookkeeping import AddTally, SampleTally

# Metric keys of our own (RLlib's constants are used where one exists).
NUM_PRIORITIES_STALE_LIFETIME = "num_priorities_stale_skipped_lifetime"
MAX_PRIORITY = "max_priority"
SAMPLED_N_STEP_MEAN = "sampled_n_step_mean"
SAMPLE_BETA = "beta"


def log_latest(metrics, key, value) -> None:
    """Logs a value whose latest reading is the metric (a gauge)."""
    metrics.log_value(key, value, reduce="mean", window=1)


def log_lifetime_count(metrics, key, value) -> None:
    """Logs a monotone lifetime counter: the latest value is the largest."""
    metrics.log_value(key, value, reduce="max", window=1)


# ------------------------------------------------------------ single agent
def _rllib_counts(kind: str, *, episodes: int, steps: int) -> Dict[str, Any]:
    """RLlib's episode and step counts for `kind` "added" or "evicted",
    whole-buffer and per (default) agent and module."""
    return {
        f"num_episodes_{kind}": episodes,
        f"num_env_steps_{kind}": steps,
        f"agent_to_num_episodes_{kind}": {DEFAULT_AGENT_ID: episodes},
        f"agent_to_num_steps_{kind}": {DEFAULT_AGENT_ID: steps},
        f"module_to_num_episodes_{kind}": {DEFAULT_MODULE_ID: episodes},
        f"module_to_num_steps_{kind}": {DEFAULT_MODULE_ID: steps},
    }


def _per_agent_and_module(**values) -> Dict[str, Dict[str, Any]]:
    """RLlib's `agent_to_<name>` and `module_to_<name>` dicts for one agent."""
    out = {}
    for name, value in values.items():
        out[f"agent_to_{name}"] = {DEFAULT_AGENT_ID: value}
        out[f"module_to_{name}"] = {DEFAULT_MODULE_ID: value}
    return out


def add_counts(lifetime_growth: Dict[str, int]) -> Dict[str, Any]:
    """The arguments of RLlib's `_update_add_metrics` for a single-agent
    buffer, from the growth of its lifetime counts (`steps_added`,
    `steps_evicted`, `episodes_added`, `episodes_evicted`) since the last
    report."""
    return {
        **_rllib_counts(
            "added",
            episodes=lifetime_growth["episodes_added"],
            steps=lifetime_growth["steps_added"],
        ),
        **_rllib_counts(
            "evicted",
            episodes=lifetime_growth["episodes_evicted"],
            steps=lifetime_growth["steps_evicted"],
        ),
    }


def sample_counts(tally: SampleTally) -> Dict[str, Any]:
    """The arguments of RLlib's `_update_sample_metrics` for a single-agent
    buffer's samples since the last report."""
    n_step_mean = tally.n_step_mean()
    return dict(
        num_env_steps_sampled=tally.steps,
        num_episodes_per_sample=tally.distinct_episodes,
        num_env_steps_per_sample=tally.distinct_steps,
        sampled_n_step=n_step_mean,
        num_resamples=0,
        **_per_agent_and_module(
            num_steps_sampled=tally.steps,
            num_episodes_per_sample=tally.distinct_episodes,
            num_steps_per_sample=tally.distinct_steps,
            sampled_n_step=n_step_mean,
            num_resamples=0,
        ),
    )


# ------------------------------------------------------------- multi-agent
def multi_agent_add_counts(
    tally: AddTally,
    steps_evicted: Dict[Any, int],
    agent_steps_evicted: Dict[Any, int],
) -> Dict[str, Any]:
    """The arguments of RLlib's `_update_add_metrics` for the multi-agent
    buffer: `tally`, the steps each module's ring evicted and each agent lost
    (agent steps: each module evicts on its own, so no env-step count
    exists)."""
    return {
        "num_episodes_added": tally.episodes_added,
        "num_env_steps_added": tally.env_steps,
        "num_episodes_evicted": tally.episodes_evicted,
        "num_env_steps_evicted": sum(steps_evicted.values()),
        "agent_to_num_episodes_added": dict(tally.agent_episodes_added),
        "agent_to_num_steps_added": dict(tally.agent_steps),
        "agent_to_num_episodes_evicted": dict(tally.agent_episodes_evicted),
        "agent_to_num_steps_evicted": agent_steps_evicted,
        "module_to_num_episodes_added": dict(tally.module_episodes_added),
        "module_to_num_steps_added": dict(tally.module_steps),
        "module_to_num_episodes_evicted": dict(tally.module_episodes_evicted),
        "module_to_num_steps_evicted": steps_evicted,
    }


def multi_agent_sample_counts(samples: Dict[Any, SampleTally]) -> Dict[str, Any]:
    """The arguments of RLlib's `_update_sample_metrics` for the multi-agent
    buffer, from each module's tally (modules that sampled nothing left out):
    per module, since a module's items come from several agents."""
    steps = sum(t.steps for t in samples.values())
    n_step_sum = sum(t.n_step_sum for t in samples.values())

    def per_module(name):
        return {m: getattr(t, name) for m, t in samples.items()}

    n_step = {m: t.n_step_sum / t.steps for m, t in samples.items()}
    return {
        "num_env_steps_sampled": steps,
        "num_episodes_per_sample": sum(per_module("distinct_episodes").values()),
        "num_env_steps_per_sample": sum(per_module("distinct_steps").values()),
        "sampled_n_step": n_step_sum / steps if n_step_sum else None,
        "num_resamples": 0,
        "agent_to_num_steps_sampled": {},
        "agent_to_num_episodes_per_sample": {},
        "agent_to_num_steps_per_sample": {},
        "agent_to_sampled_n_step": {},
        "agent_to_num_resamples": {},
        "module_to_num_steps_sampled": per_module("steps"),
        "module_to_num_episodes_per_sample": per_module("distinct_episodes"),
        "module_to_num_steps_per_sample": per_module("distinct_steps"),
        "module_to_sampled_n_step": n_step if n_step_sum else {},
        "module_to_num_resamples": dict.fromkeys(samples, 0),
    }
