"""The sampling loop's counters and timers, logged once per `get_metrics()`.

RLlib's loop logs every env step's and forward pass's time and every
`sample()` call's counts into the EnvRunner's `MetricsLogger` as they happen,
several `log_value()` calls per env step. The loop in
`rllib_ners.env.fast_env_runner` adds them up here instead, and
`PendingSamplingMetrics.log_into()` logs them under RLlib's keys and
reductions when `get_metrics()` is called: the counts summed, each timer as
the mean over the calls it timed.
"""

from __future__ import annotations

from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_STEP_TIMER,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
    RLMODULE_INFERENCE_TIMER,
    SAMPLE_TIMER,
    TIME_BETWEEN_SAMPLING,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

__all__ = ["PendingSamplingMetrics"]


class PendingSamplingMetrics:
    """Counts and times of the sampling loop since the last `log_into()`."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.env_steps = 0
        self.episodes = 0
        self.env_steps_tried = 0
        self.env_step_s = 0.0
        self.inference_calls = 0
        self.inference_s = 0.0
        self.sample_calls = 0
        self.sample_s = 0.0
        self.sample_calls_after_first = 0
        self.between_sampling_s = 0.0

    def add_inference(self, seconds: float) -> None:
        """One forward pass of the RLModule (with its action draw)."""
        self.inference_s += seconds
        self.inference_calls += 1

    def add_env_step(self, seconds: float) -> None:
        """One successful `step()` of the vector env."""
        self.env_step_s += seconds
        self.env_steps_tried += 1

    def add_sampled(self, env_steps: int, episodes: int) -> None:
        """The env steps taken and episodes finished by one `sample()` call."""
        self.env_steps += env_steps
        self.episodes += episodes

    def add_time_between_sampling(self, seconds: float) -> None:
        """The time from one `sample()` call's return to the next call."""
        self.between_sampling_s += seconds
        self.sample_calls_after_first += 1

    def add_sample_call(self, seconds: float) -> None:
        """One `sample()` call's duration."""
        self.sample_s += seconds
        self.sample_calls += 1

    def log_into(self, metrics: MetricsLogger, weights_seq_no: int) -> None:
        """Logs what was added up as RLlib's loop logs it, then starts over."""
        if self.sample_calls:
            self._log_sample_counts(metrics, weights_seq_no)
        if self.sample_calls_after_first:
            metrics.log_value(
                TIME_BETWEEN_SAMPLING,
                self.between_sampling_s / self.sample_calls_after_first,
            )
        if self.env_steps_tried:
            metrics.log_value(ENV_STEP_TIMER, self.env_step_s / self.env_steps_tried)
        if self.inference_calls:
            metrics.log_value(
                RLMODULE_INFERENCE_TIMER, self.inference_s / self.inference_calls
            )
        self.reset()

    def _log_sample_counts(self, metrics: MetricsLogger, weights_seq_no: int) -> None:
        metrics.log_value(WEIGHTS_SEQ_NO, weights_seq_no, window=1)
        metrics.log_value(SAMPLE_TIMER, self.sample_s / self.sample_calls)
        # RLlib's loop logs these per call, whether or not steps were taken.
        metrics.log_value(NUM_ENV_STEPS_SAMPLED, self.env_steps, reduce="sum")
        metrics.log_value(
            (NUM_AGENT_STEPS_SAMPLED, DEFAULT_AGENT_ID), self.env_steps, reduce="sum"
        )
        metrics.log_value(
            (NUM_MODULE_STEPS_SAMPLED, DEFAULT_MODULE_ID), self.env_steps, reduce="sum"
        )
        metrics.log_value(NUM_EPISODES, self.episodes, reduce="sum")
        metrics.log_value(
            NUM_ENV_STEPS_SAMPLED_LIFETIME,
            self.env_steps,
            reduce="lifetime_sum",
            with_throughput=True,
        )
        metrics.log_value(
            (NUM_AGENT_STEPS_SAMPLED_LIFETIME, DEFAULT_AGENT_ID),
            self.env_steps,
            reduce="lifetime_sum",
        )
        metrics.log_value(
            (NUM_MODULE_STEPS_SAMPLED_LIFETIME, DEFAULT_MODULE_ID),
            self.env_steps,
            reduce="lifetime_sum",
        )
        metrics.log_value(NUM_EPISODES_LIFETIME, self.episodes, reduce="lifetime_sum")
