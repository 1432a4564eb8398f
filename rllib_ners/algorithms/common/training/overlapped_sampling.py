"""Remote EnvRunners that keep sampling while the Learner updates.

RLlib's DQN training step (and our loop by default) samples one fragment from
every EnvRunner, waits for all of them, then updates the Learner: the
EnvRunners idle while the Learner works and the other way round. With replay
nothing forces that lockstep. `OverlappedSampler` keeps one `sample()` request
in flight on every healthy remote EnvRunner (RLlib's async EnvRunner requests,
as IMPALA and APPO use them): each round takes the fragments that are ready
(waiting for at least one), hands them to the buffer and sends the EnvRunners
that returned their next request at once, so they sample while the Learner
makes the updates those fragments owe.

Weights: the Learner's weights go to the EnvRunners after a round with
updates (RLlib's `sync_weights`, which does not wait): after every such round,
as in lockstep, or once `weights_sync_interval` updates were made since the
last sync. An EnvRunner's queued request runs after them, so each request
samples with the weights of the last sync before it was sent. A request is
stamped with the Learner's update count at that sync (`weights_version`);
when its fragment reaches the buffer, its staleness is the updates made since.
Before an update that would let an in-flight request's weights fall more than
`max_staleness` updates behind, the Learner waits for that request
(`wait_for_stale`), which bounds every fragment's staleness.

Faults: an EnvRunner that dies loses only its request in flight (a fragment is
returned whole or not at all, so nothing is half stored or stored twice); RLlib
replaces it between iterations (`restart_failed_env_runners`) and the next
round sends the new one a request. (After a restart the sampler forgets which
requests it believes in flight and asks every EnvRunner again: RLlib refuses a
second request to one that is still sampling, up to
`max_requests_in_flight_per_env_runner`.)

Metrics: `OverlapTally` counts an iteration's fragments' staleness, the
updates made while requests were in flight and the weight syncs, and logs
them once per iteration under the names below.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

__all__ = ["OverlappedSampler", "OverlapTally", "SampledFragments", "request_size_line"]

# Metrics of overlapped sampling, per iteration: the Learner updates between the
# weights a fragment was sampled with and the Learner's when it reached the
# buffer, and the share of updates made while EnvRunners were sampling.
WEIGHTS_STALENESS_MEAN = "weights_staleness_mean"
WEIGHTS_STALENESS_MAX = "weights_staleness_max"
UPDATES_WHILE_SAMPLING_FRACTION = "updates_while_sampling_fraction"
# Overlapped sampling: weight syncs to the EnvRunners in the iteration.
NUM_WEIGHTS_SYNCS = "num_weights_syncs"
# The tag of our requests among the EnvRunners' async requests.
SAMPLE_REQUEST_TAG = "rllib_ners_overlapped_sample"
# Requests of fewer env steps get a hint in the setup log line: each request
# costs the driver and the EnvRunner a fixed overhead (Ray's actor call, the
# EnvRunner's metrics), which fragments of a few env steps cannot amortise
# (docs/scaling.md, "Env steps per request").
SMALL_REQUEST_ENV_STEPS = 32


def request_size_line(
    num_env_runners: int, rollout_fragment_length: int, num_envs_per_env_runner: int
) -> str:
    """The setup log line of overlapped sampling: the env steps each request
    brings, and where that is few, what makes requests larger."""
    steps = rollout_fragment_length * num_envs_per_env_runner
    line = (
        f"Overlapped sampling keeps one sample() request in flight on each of "
        f"{num_env_runners} EnvRunner(s), {steps} env steps per request "
        f"(rollout_fragment_length={rollout_fragment_length} x "
        f"num_envs_per_env_runner={num_envs_per_env_runner})."
    )
    if steps < SMALL_REQUEST_ENV_STEPS:
        line += (
            " Each request costs the driver and the EnvRunner a fixed overhead: "
            "with many EnvRunners, more env steps per request sample faster "
            "(config.env_runners(num_envs_per_env_runner=..., which also batches "
            "the EnvRunner's actions, or rollout_fragment_length=...))."
        )
    return line


def _sample_and_metrics(env_runner) -> Tuple[List, Dict[str, Any]]:
    """Runs on a remote EnvRunner: one rollout fragment and the metrics of it
    (what `synchronous_parallel_sample(_return_metrics=True)` returns per
    EnvRunner)."""
    return env_runner.sample(), env_runner.get_metrics()


@dataclass
class SampledFragments:
    """What one or more ready requests returned."""

    # What the buffer's `add()` takes: episodes or `PackedFragments`.
    episodes: List = field(default_factory=list)
    metrics: List[Dict[str, Any]] = field(default_factory=list)
    staleness: List[int] = field(default_factory=list)

    @property
    def env_steps(self) -> int:
        return sum(len(episode) for episode in self.episodes)

    def extend(self, other: SampledFragments) -> None:
        self.episodes += other.episodes
        self.metrics += other.metrics
        self.staleness += other.staleness


class OverlappedSampler:
    """One `sample()` request in flight per healthy remote EnvRunner.

    `updates_done` is the Learner's update count (the caller advances it);
    `weights_version` is its count when the weights were last sent to the
    EnvRunners (the caller sets it); requests are stamped with it when sent."""

    def __init__(
        self,
        env_runner_group,
        *,
        timeout_s: Optional[float],
        remote_fn: Callable[[Any], Tuple[Any, Dict[str, Any]]] = _sample_and_metrics,
        receive: Callable[[Any], List] = list,
    ):
        """`remote_fn(env_runner)` runs each request on an EnvRunner and returns
        its sampled output and metrics; `receive(output)` turns the output into
        the list the buffer's `add()` takes (the training loop ships packed
        fragments: `fragment_shipping`)."""
        self.group = env_runner_group
        self.timeout_s = timeout_s
        self.remote_fn = remote_fn
        self.receive = receive
        self.updates_done = 0
        self.weights_version = 0
        # EnvRunner id -> the update count of the weights its request in flight
        # samples with.
        self._in_flight: Dict[int, int] = {}
        # Fragments returned per EnvRunner id.
        self.fragments_returned: Counter = Counter()
        self._restarts_seen = env_runner_group.num_remote_worker_restarts()
        # Fragments that arrived while the Learner waited between updates: the
        # caller stored them at once and counts them in its next round (also
        # across training iterations).
        self._held = SampledFragments()

    @property
    def num_in_flight(self) -> int:
        return len(self._in_flight)

    def request(self) -> None:
        """Sends a `sample()` request to every healthy EnvRunner without one."""
        healthy = set(self.group.healthy_worker_ids())
        restarts = self.group.num_remote_worker_restarts()
        if restarts != self._restarts_seen:
            # A restarted EnvRunner keeps its id but not its request.
            self._restarts_seen = restarts
            self._in_flight.clear()
        # Requests of EnvRunners that died never return.
        for runner_id in set(self._in_flight) - healthy:
            del self._in_flight[runner_id]
        idle = sorted(healthy - set(self._in_flight))
        if not idle:
            return
        self.group.foreach_env_runner_async(
            self.remote_fn, tag=SAMPLE_REQUEST_TAG, remote_worker_ids=idle
        )
        for runner_id in idle:
            self._in_flight[runner_id] = self.weights_version

    def collect(self, *, wait: bool) -> SampledFragments:
        """The fragments of the requests that are ready; with `wait`, waits up
        to `timeout_s` for at least one."""
        ready = self.group.fetch_ready_async_reqs(
            tags=SAMPLE_REQUEST_TAG,
            timeout_seconds=self.timeout_s if wait else 0.0,
        )
        fragments = SampledFragments()
        for runner_id, (sampled, metrics) in ready:
            sent_at = self._in_flight.pop(runner_id, self.updates_done)
            self.fragments_returned[runner_id] += 1
            fragments.episodes += self.receive(sampled)
            fragments.metrics.append(metrics)
            fragments.staleness.append(self.updates_done - sent_at)
        return fragments

    def hold(self, fragments: SampledFragments) -> None:
        self._held.extend(fragments)

    def take_held(self) -> SampledFragments:
        held, self._held = self._held, SampledFragments()
        return held

    def wait_for_stale(self, max_staleness: int) -> SampledFragments:
        """Before one more update: waits for the requests whose weights would
        fall more than `max_staleness` updates behind; returns what arrived
        meanwhile (those and any other ready fragments)."""
        arrived = SampledFragments()
        while self._oldest_request() is not None and (
            self.updates_done + 1 - self._oldest_request() > max_staleness
        ):
            fragments = self.collect(wait=True)
            if not fragments.metrics:  # timed out: an EnvRunner is stuck or dead
                self._in_flight = {
                    runner_id: sent_at
                    for runner_id, sent_at in self._in_flight.items()
                    if runner_id in set(self.group.healthy_worker_ids())
                }
                break
            arrived.extend(fragments)
        return arrived

    def _oldest_request(self) -> Optional[int]:
        return min(self._in_flight.values(), default=None)


class OverlapTally:
    """One iteration of overlapped sampling: the EnvRunners' metrics, the
    fragments' staleness and the updates made while they sampled."""

    def __init__(self):
        self.runner_metrics: List[Dict[str, Any]] = []
        self.staleness: List[int] = []
        self.updates = 0
        self.updates_while_sampling = 0
        self.weights_syncs = 0

    def add(self, fragments: SampledFragments) -> None:
        self.runner_metrics += fragments.metrics
        self.staleness += fragments.staleness

    def log_into(self, metrics) -> None:
        if self.staleness:
            metrics.log_value(
                WEIGHTS_STALENESS_MEAN, float(np.mean(self.staleness)), window=1
            )
            metrics.log_value(WEIGHTS_STALENESS_MAX, max(self.staleness), window=1)
        if self.updates:
            metrics.log_value(
                UPDATES_WHILE_SAMPLING_FRACTION,
                self.updates_while_sampling / self.updates,
                window=1,
            )
        metrics.log_value(NUM_WEIGHTS_SYNCS, self.weights_syncs, window=1)
