"""DQN's training step (which SAC inherits) as one loop per training iteration.

RLlib 2.60's DQN `training_step()` runs one round - sample a rollout fragment,
add it to the buffer, replay `k` batches to the Learners, update priorities,
copy the weights back to the EnvRunners - and `Algorithm` calls it again until
the iteration has sampled `min_sample_timesteps_per_iteration` env steps. Each
round aggregates the EnvRunners' and the Learners' reduced metrics into the
Algorithm's and times five sections; each replayed transition travels as one
`SingleAgentEpisode` through the learner connector pipeline. With one update
per env step, that bookkeeping costs more than the network math.

`ReplayLoopMixin.training_step()` runs the same rounds, in the same order,
with the same draws, until the iteration's targets are met (time, sampled and
trained env steps, as RLlib's `TrainIterCtx` checks them), and:

* replays numpy columns straight from the buffer (`sample_batch()`): the batch
  RLlib's learner connectors build from the sampled episodes (tested, for DQN
  and SAC), plus the buffer's per-item columns;
* calls the local EnvRunner's `sample()` directly and reads the EnvRunners'
  metrics once per iteration; remote EnvRunners ship their fragments packed
  into numpy columns instead of as pickled episodes (`fragment_shipping`);
* updates the Learners with deferred metrics (`FastTorchLearner`): their
  metrics are reduced once per iteration, the replay feedback (`feedback`)
  comes back with every update;
* shares the parameters of the local Learner with the local EnvRunner
  (`weight_sharing`), so no weights are copied between them; with the Learner
  on a GPU, mirrors them into the EnvRunner in one transfer per round with
  updates; otherwise the weights go to the EnvRunners after every round with
  updates, as RLlib does;
* logs the timers once per iteration (the mean time per round's section).

Multi-agent configs take the same loop with the multi-agent buffer: numpy
columns per module (`sample_batch()`), one batch with every module's, each
module's replay feedback back to its own sampler, weights copied to the
EnvRunners (never shared).

Configs it cannot serve keep RLlib's `training_step()` and say why in one INFO
log line at setup: a custom learner connector, a stateful RLModule, a replay
buffer that is not this package's (for multi-agent: not its multi-agent
buffer), a Learner class without deferred updates, or
`.training(fast_training_loop=False)`.

With `config.training(overlap_sampling=True)` and remote EnvRunners, the
rounds do not wait for every EnvRunner: `OverlappedSampler` keeps a request in
flight on each, a round takes the fragments that are ready and the Learner
makes the updates they owe while the EnvRunners sample the next ones
(`rllib_ners.algorithms.common.training.overlapped_sampling`).

Subclasses run per-round work (the NERS sampler update) in `_after_round()`.
"""

from __future__ import annotations

import logging
import time
from fractions import Fraction
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.dqn.dqn import DQN, calculate_rr_weights
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    REPLAY_BUFFER_ADD_DATA_TIMER,
    REPLAY_BUFFER_RESULTS,
    REPLAY_BUFFER_SAMPLE_TIMER,
    REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)

from rllib_ners.algorithms.common.learner.deferred_updates import (
    DEFER_METRICS,
    REPLAY_FEEDBACK,
    ROWS_ON_DEVICE,
)
from rllib_ners.algorithms.common.learner.fast_torch_learner import FastTorchLearner
from rllib_ners.algorithms.common.learner.replay_methods import (
    large_batch_factor_of,
)
from rllib_ners.algorithms.common.training.columnar_replay import replay_train_batch
from rllib_ners.algorithms.common.training.deferred_priorities import (
    DeferredPriorityWrites,
    deferred_priority_writes_blocker,
)
from rllib_ners.algorithms.common.training.fragment_shipping import (
    fragment_packing_blocker,
    packed_fragment_spaces,
    receive_fragments,
    sample_packed_and_metrics,
    sample_remote_fragments,
)
from rllib_ners.algorithms.common.training.overlapped_sampling import (
    OverlappedSampler,
    OverlapTally,
    request_size_line,
)
from rllib_ners.algorithms.common.training.replay_state import ReplayStateMixin
from rllib_ners.algorithms.common.training.weight_sharing import (
    MirroredWeights,
    SharedWeights,
    share_weights_with_local_env_runner,
)
from rllib_ners.replay_buffers.device_frames import DeviceFrames
from rllib_ners.seam.algorithm import (
    local_learner_of,
    observe_learner_update_time,
    sample_episodes,
)
from rllib_ners.seam.config import custom_learner_connector

logger = logging.getLogger(__name__)

_DEFER = {DEFER_METRICS: True}
# Checkpoint entry: the fraction of an update owed by the env steps sampled.
UPDATES_OWED_STATE = "replay_updates_owed"

_TIMER_KEYS = (
    ENV_RUNNER_SAMPLING_TIMER,
    REPLAY_BUFFER_ADD_DATA_TIMER,
    REPLAY_BUFFER_SAMPLE_TIMER,
    LEARNER_UPDATE_TIMER,
    REPLAY_BUFFER_UPDATE_PRIOS_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
)


def replay_loop_blocker(algo) -> Optional[str]:
    """Why the fast loop cannot run `algo`'s config, or None."""
    from rllib_ners.replay_buffers.fast_multi_agent_episode_buffer import (
        FastMultiAgentPrioritizedEpisodeReplayBuffer,
    )
    from rllib_ners.replay_buffers.fast_prioritized_episode_buffer import (
        FastPrioritizedEpisodeReplayBuffer,
    )

    config = algo.config
    if not getattr(config, "fast_training_loop", True):
        return "config.training(fast_training_loop=False)"
    if custom_learner_connector(config) is not None:
        return "a custom learner connector is set"
    buffer = algo.local_replay_buffer
    if config.is_multi_agent:
        if not isinstance(buffer, FastMultiAgentPrioritizedEpisodeReplayBuffer):
            return "the replay buffer is not this package's multi-agent buffer"
        if config.count_steps_by == "agent_steps":
            # RLlib starts learning and ends iterations by agent steps then.
            return "count_steps_by='agent_steps' (the loop counts env steps)"
    elif not isinstance(buffer, FastPrioritizedEpisodeReplayBuffer):
        return "the replay buffer is not one of this package's"
    if config.get_rl_module_spec().model_config.get("use_lstm", False):
        return "the RLModule is stateful"
    learner_class = config.learner_class
    if not (
        isinstance(learner_class, type) and issubclass(learner_class, FastTorchLearner)
    ):
        return f"the Learner class {learner_class!r} has no deferred-metrics updates"
    return None


class _Section:
    """Times one section into `_SectionTimes` (a context manager, reused)."""

    __slots__ = ("times", "key", "start")

    def __init__(self, times: _SectionTimes, key: str):
        self.times, self.key, self.start = times, key, 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, error_type, error, traceback) -> None:
        if error_type is None:
            self.times.add(self.key, time.perf_counter() - self.start)


class _SectionTimes:
    """Seconds and calls per timed section of the rounds of one iteration.

    `with times.section(KEY): ...` adds the block's time to `KEY` (nothing
    when the block raises)."""

    def __init__(self):
        self.seconds = dict.fromkeys(_TIMER_KEYS, 0.0)
        self.calls = dict.fromkeys(_TIMER_KEYS, 0)
        self._sections = {key: _Section(self, key) for key in _TIMER_KEYS}

    def section(self, key: str) -> _Section:
        return self._sections[key]

    def add(self, key: str, seconds: float) -> None:
        self.seconds[key] += seconds
        self.calls[key] += 1

    def log_into(self, metrics) -> None:
        for key in _TIMER_KEYS:
            if self.calls[key]:
                # The mean over this iteration's rounds (an EMA over iterations would
                # keep the first, warm-up iteration's times for hundreds of them).
                metrics.log_value(
                    (TIMERS, key), self.seconds[key] / self.calls[key], window=1
                )


def lay_out_frames_for_the_learner(algo) -> None:
    """For a local Learner on a GPU, the buffer's sampled frame stacks are
    laid out channels-first in memory (`frames_channels_first`: the same
    values, built several times faster, and the layout the GPU's
    convolution takes as it is), and gathered on the GPU from a copy of the
    stored frames there (`device_frames`) where that copy fits; each says so
    in the log. A CPU Learner keeps channels-last memory, on which its
    convolution is faster."""
    buffer = algo.local_replay_buffer
    group = algo.learner_group
    learner = local_learner_of(group) if group is not None else None
    if (
        learner is None
        or getattr(buffer, "frame_stack", 1) == 1
        or learner.device.type != "cuda"
    ):
        return
    buffer.frames_channels_first = True
    logger.info(
        "%s lays out sampled frame stacks channels-first in memory for its %s Learner.",
        type(algo).__name__,
        learner.device,
    )
    if hasattr(buffer, "device_frames"):
        buffer.device_frames = DeviceFrames(learner.device, name=type(buffer).__name__)


# The settings that only this loop serves: overlapped sampling, the Learner's
# CUDA-graph updates (made in its deferred updates) and acting on the
# Learner's device (through the weights this loop shares).
LOOP_ONLY_FLAGS = ("overlap_sampling", "cuda_graph_updates", "act_on_learner_device")


class ReplayLoopMixin(ReplayStateMixin):
    """DQN's training step as one loop per iteration, ahead of DQN or SAC in a
    class's bases.

    It extends `ReplayStateMixin`, whose checkpoints carry the loop's own state
    (`_extra_checkpoint_state`)."""

    replay_loop_blocker: Optional[str] = "the algorithm is not set up yet"
    weight_sharing_blocker: Optional[str] = "the algorithm is not set up yet"
    fragment_packing_blocker: Optional[str] = "the algorithm is not set up yet"
    # With packing: the env spaces the packed fragments are stored with.
    _packed_spaces: Optional[Tuple[Any, Any]] = None
    _shared_weights: Optional[SharedWeights] = None
    # With `overlap_sampling`: the EnvRunners' requests in flight.
    _overlapped: Optional[OverlappedSampler] = None
    # Updates owed by the env steps sampled so far (a fraction of an update
    # carries over to the next round).
    _updates_owed = Fraction(0)
    # Where each round's priority writes wait for its last update (uniform
    # replay on a local GPU Learner: `deferred_priorities`), else None.
    _deferred_priorities: Optional[DeferredPriorityWrites] = None

    @override(DQN)
    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        self.replay_loop_blocker = replay_loop_blocker(self)
        if self.replay_loop_blocker is not None:
            logger.info(
                "%s trains with RLlib's training step: %s.",
                type(self).__name__,
                self.replay_loop_blocker,
            )
            self.weight_sharing_blocker = "RLlib's training step copies the weights"
            # Opt-in speed-ups of our loop alone: set, they would do nothing.
            for flag in LOOP_ONLY_FLAGS:
                if getattr(config, flag, False):
                    raise ValueError(
                        f"{flag}=True runs in this package's training loop, which "
                        f"cannot serve this config: {self.replay_loop_blocker}. "
                        f"Set config.training({flag}=False), or change that."
                    )
            return
        self._set_up_fragment_packing()
        if getattr(config, "overlap_sampling", False):
            packing = {}
            if self._packed_spaces is not None:
                spaces = self._packed_spaces
                packing = {
                    "remote_fn": sample_packed_and_metrics,
                    "receive": lambda sampled: receive_fragments(sampled, spaces),
                }
            self._overlapped = OverlappedSampler(
                self.env_runner_group, timeout_s=config.sample_timeout_s, **packing
            )
            logger.info(
                request_size_line(
                    self.env_runner_group.num_remote_env_runners(),
                    config.get_rollout_fragment_length(),
                    config.num_envs_per_env_runner,
                )
            )
        shared = share_weights_with_local_env_runner(self)
        if isinstance(shared, str):
            self.weight_sharing_blocker = shared
            logger.info(
                "%s copies the Learner's weights to the EnvRunners: %s.",
                type(self).__name__,
                shared,
            )
        else:
            self.weight_sharing_blocker, self._shared_weights = None, shared
            if isinstance(shared, MirroredWeights):
                logger.info(
                    "%s mirrors the %s Learner's weights into the local "
                    "EnvRunner in one transfer per round with updates.",
                    type(self).__name__,
                    shared.sources[0].device,
                )
        lay_out_frames_for_the_learner(self)
        self._set_up_deferred_priorities()

    def _set_up_deferred_priorities(self) -> None:
        """Priority writes wait for the round's last update where that changes
        no draw (`deferred_priorities`); one log line where they would."""
        group = self.learner_group
        learner = local_learner_of(group) if group.is_local else None
        blocker = deferred_priority_writes_blocker(self.local_replay_buffer, learner)
        if blocker is None:
            self._deferred_priorities = DeferredPriorityWrites()
            logger.info(
                "%s writes a round's priorities after its last update (uniform "
                "replay: they change no draw), so that its %s Learner's updates "
                "queue without the host waiting for each.",
                type(self).__name__,
                learner.device,
            )

    def _set_up_fragment_packing(self) -> None:
        """Remote EnvRunners ship their fragments packed (`fragment_shipping`)
        where the config allows; one log line says which."""
        if self.env_runner_group.num_remote_env_runners() == 0:
            self.fragment_packing_blocker = "no remote EnvRunners"
            return
        self.fragment_packing_blocker = fragment_packing_blocker(self)
        if self.fragment_packing_blocker is not None:
            logger.info(
                "%s's remote EnvRunners ship episodes: %s.",
                type(self).__name__,
                self.fragment_packing_blocker,
            )
            return
        self._packed_spaces = packed_fragment_spaces(self)
        logger.info(
            "%s's remote EnvRunners ship their fragments as packed numpy columns.",
            type(self).__name__,
        )

    @property
    def uses_replay_loop(self) -> bool:
        return self.replay_loop_blocker is None

    @property
    def overlapped_sampler(self) -> Optional[OverlappedSampler]:
        """With `overlap_sampling`: the EnvRunners' requests in flight; else None."""
        return self._overlapped

    def _after_round(self) -> None:
        """Runs after every round (RLlib's training step); for subclasses."""

    @override(DQN)
    def training_step(self) -> None:
        if not self.uses_replay_loop:
            super().training_step()
            self._after_round()
            return
        start = time.time()
        sampled_lifetime = self.metrics.peek(
            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
        )
        sampled = trained = 0
        store_weight, updates_per_env_step = self._replay_ratio()
        times = _SectionTimes()
        overlapped = OverlapTally() if self._overlapped is not None else None
        while True:
            if overlapped is None:
                round_sampled = self._sample_round(store_weight, times)
            else:
                round_sampled = self._overlapped_round(overlapped, times)
            sampled += round_sampled
            sampled_lifetime += round_sampled
            num_updates = 0
            if sampled_lifetime >= self.config.num_steps_sampled_before_learning_starts:
                num_updates = self._take_owed_updates(
                    round_sampled * updates_per_env_step
                )
                trained += self._replay_updates(
                    num_updates, sampled_lifetime, times, overlapped
                )
            self._after_round()
            if num_updates > 0 and self._weights_sync_due():
                with times.section(SYNCH_WORKER_WEIGHTS_TIMER):
                    self._sync_weights()
                if overlapped is not None:
                    self._overlapped.weights_version = self._overlapped.updates_done
                    overlapped.weights_syncs += 1
            if round_sampled == 0 or self._iteration_done(start, sampled, trained):
                break
        self._report_iteration_metrics(times, overlapped)

    def _sample_round(self, store_weight: int, times: _SectionTimes) -> int:
        """Samples `store_weight` rollout fragments into the buffer; returns
        the env steps sampled."""
        buffer = self.local_replay_buffer
        round_sampled = 0
        for _ in range(store_weight):
            with times.section(ENV_RUNNER_SAMPLING_TIMER):
                episodes = self._sample_episodes()
            round_sampled += sum(len(episode) for episode in episodes)
            with times.section(REPLAY_BUFFER_ADD_DATA_TIMER):
                buffer.add(episodes)
        return round_sampled

    def _overlapped_round(self, tally: OverlapTally, times: _SectionTimes) -> int:
        """Takes the fragments that are ready (waiting for one), stores them and
        sends the EnvRunners that returned their next request, so they sample
        while the Learner updates; returns the env steps stored (with those
        that arrived during the last round's updates)."""
        sampler = self._overlapped
        late = sampler.take_held()  # stored already, during the last updates
        with times.section(ENV_RUNNER_SAMPLING_TIMER):
            sampler.request()
            fresh = sampler.collect(wait=not late.metrics)
            sampler.request()
        if fresh.episodes:
            with times.section(REPLAY_BUFFER_ADD_DATA_TIMER):
                self.local_replay_buffer.add(fresh.episodes)
        tally.add(fresh)
        tally.add(late)
        return fresh.env_steps + late.env_steps

    def _take_owed_updates(self, new_updates_owed: Fraction) -> int:
        """Adds the updates a round's env steps owe to those still owed and
        takes the whole ones (a fraction carries over to the next round)."""
        self._updates_owed += new_updates_owed
        num_updates = int(self._updates_owed)
        self._updates_owed -= num_updates
        return num_updates

    def _replay_updates(
        self,
        num_updates: int,
        sampled_lifetime: int,
        times: _SectionTimes,
        overlapped: Optional[OverlapTally] = None,
    ) -> int:
        """`num_updates` Learner updates on batches replayed from the buffer,
        each followed by its priority update; returns the env steps trained.
        Overlapped: each update first waits for requests whose weights it would
        make too stale (their fragments are stored at once and counted in the
        next round)."""
        config = self.config
        buffer = self.local_replay_buffer
        beta = config.replay_buffer_config.get("beta")
        deferred = self._deferred_priorities
        trained = 0
        # LaBER's buffer returns m * B rows per update, of which the Learner
        # trains on B.
        trained_per_row = Fraction(1, large_batch_factor_of(config))
        for _ in range(num_updates):
            if overlapped is not None:
                self._before_overlapped_update(overlapped, times)
            with times.section(REPLAY_BUFFER_SAMPLE_TIMER):
                columns = buffer.sample_batch(
                    config.total_train_batch_size,
                    n_step=config.n_step,
                    gamma=config.gamma,
                    beta=beta,
                )
            with times.section(LEARNER_UPDATE_TIMER):
                batch = replay_train_batch(buffer, columns)
                results = self._update_learners(
                    batch,
                    self._update_timesteps(sampled_lifetime),
                    rows_on_device=deferred is not None,
                )
            trained += int(batch.env_steps() * trained_per_row)
            with times.section(REPLAY_BUFFER_UPDATE_PRIOS_TIMER):
                if deferred is not None:
                    td_errors = results[0][REPLAY_FEEDBACK].get(DEFAULT_MODULE_ID)
                    if td_errors is not None:
                        deferred.hold(buffer.take_sampled_items(), td_errors)
                    continue
                for module_id, packed in _replay_feedback(results).items():
                    buffer.update_priorities(packed, module_id)
        self._write_deferred_priorities(times)
        return trained

    def _write_deferred_priorities(self, times: _SectionTimes) -> None:
        """The priorities held since the last write (`deferred_priorities`),
        written before anything else touches the buffer."""
        if self._deferred_priorities is not None and len(self._deferred_priorities):
            with times.section(REPLAY_BUFFER_UPDATE_PRIOS_TIMER):
                self._deferred_priorities.flush(self.local_replay_buffer)

    def _before_overlapped_update(
        self, tally: OverlapTally, times: _SectionTimes
    ) -> None:
        sampler = self._overlapped
        with times.section(ENV_RUNNER_SAMPLING_TIMER):
            late = sampler.wait_for_stale(self._max_weights_staleness())
        if late.episodes:
            self._write_deferred_priorities(times)
            with times.section(REPLAY_BUFFER_ADD_DATA_TIMER):
                self.local_replay_buffer.add(late.episodes)
        sampler.hold(late)
        tally.updates += 1
        tally.updates_while_sampling += sampler.num_in_flight > 0
        sampler.updates_done += 1

    def _max_weights_staleness(self) -> int:
        """`config.max_weights_staleness`, or twice one lockstep round's updates
        (twice `weights_sync_interval` where that is more)."""
        configured = self.config.max_weights_staleness
        if configured is not None:
            return configured
        _, train_weight = calculate_rr_weights(self.config)
        return max(2 * train_weight, 2 * self.config.weights_sync_interval, 1)

    def _weights_sync_due(self) -> bool:
        """After a round with updates: whether the weights go to the EnvRunners
        (always in lockstep; overlapped, once `weights_sync_interval` updates
        were made since the last sync)."""
        sampler = self._overlapped
        if sampler is None:
            return True
        since = sampler.updates_done - sampler.weights_version
        return since >= self.config.weights_sync_interval

    @override(ReplayStateMixin)
    def _extra_checkpoint_state(self) -> Dict[str, Any]:
        state = super()._extra_checkpoint_state()
        owed = self._updates_owed
        return {**state, UPDATES_OWED_STATE: (owed.numerator, owed.denominator)}

    @override(ReplayStateMixin)
    def _set_extra_checkpoint_state(self, state: Dict[str, Any]) -> None:
        super()._set_extra_checkpoint_state(state)
        if UPDATES_OWED_STATE in state:
            self._updates_owed = Fraction(*state[UPDATES_OWED_STATE])

    def _replay_ratio(self) -> Tuple[int, Fraction]:
        """RLlib's replay ratio (`calculate_rr_weights`: sample `store_weight`
        fragments, then make `train_weight` updates) as updates per env step.

        A round that samples the nominal number of env steps makes exactly
        RLlib's `train_weight` updates. With several sub-envs a round can sample
        more (a sub-env's reset step takes no env step, so the fragment takes
        another vector step); its updates then grow with its env steps, so the
        replay ratio holds per env step, not per round.
        """
        config = self.config
        store_weight, train_weight = calculate_rr_weights(config)
        if self._overlapped is not None and config.training_intensity:
            # Overlapped rounds have no nominal size: the configured ratio of
            # trained to sampled env steps itself. (RLlib's weights count a
            # local EnvRunner that does not sample beside remote ones, so in
            # lockstep its ratio is (N + 1) / N times the configured one.)
            intensity = Fraction(config.training_intensity).limit_denominator(10**6)
            return store_weight, intensity / config.total_train_batch_size
        nominal_steps = (
            store_weight
            * config.get_rollout_fragment_length()
            * config.num_envs_per_env_runner
            * max(self.env_runner_group.num_remote_env_runners(), 1)
        )
        return store_weight, Fraction(train_weight, nominal_steps)

    def _update_timesteps(self, sampled_lifetime: int) -> Dict[str, Any]:
        """The `timesteps` of a Learner update (target-network updates count
        env steps; single-agent: the agent's steps are the env steps)."""
        timesteps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: sampled_lifetime}
        if not self.config.is_multi_agent:
            timesteps[NUM_AGENT_STEPS_SAMPLED_LIFETIME] = {
                DEFAULT_AGENT_ID: sampled_lifetime
            }
        return timesteps

    def _update_learners(
        self, batch, timesteps, *, rows_on_device: bool = False
    ) -> List[Dict[str, Any]]:
        """One update with deferred metrics: the local Learner's `update()`
        called directly (what `LearnerGroup.update` does for it, without the
        `TrainingData` wrapper and the two Prometheus timers per update; the
        update timer is observed once per iteration instead), or the
        LearnerGroup's update across remote Learners. `rows_on_device`: the
        local Learner's replay feedback stays on its device."""
        group = self.learner_group
        if group.is_local:
            learner = local_learner_of(group)
            on_device = {ROWS_ON_DEVICE: True} if rows_on_device else {}
            return [
                learner.update(batch=batch, timesteps=timesteps, **_DEFER, **on_device)
            ]
        return group.update(batch=batch, timesteps=timesteps, **_DEFER)

    def _sync_weights(self) -> None:
        """The Learner's weights to the EnvRunners (shared: only the buffers;
        mirrored: one transfer)."""
        if self._shared_weights is not None:
            self._shared_weights.refresh()
            return
        self.env_runner_group.sync_weights(
            from_worker_or_learner_group=self.learner_group,
            # Multi-agent: every module (RLlib syncs those the Learners trained).
            policies=None if self.config.is_multi_agent else {DEFAULT_MODULE_ID},
            inference_only=True,
        )

    def _sample_episodes(self) -> List:
        """One rollout fragment from every EnvRunner (RLlib's sampling step);
        remote EnvRunners' packed where the config allows."""
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0 and group.local_env_runner is not None:
            return group.local_env_runner.sample()
        if self._packed_spaces is not None:
            return sample_remote_fragments(
                group,
                spaces=self._packed_spaces,
                sample_timeout_s=self.config.sample_timeout_s,
            )
        return sample_episodes(group, sample_timeout_s=self.config.sample_timeout_s)

    def _iteration_done(self, start: float, sampled: int, trained: int) -> bool:
        """RLlib's `TrainIterCtx.should_stop` on this training step's counts."""
        config = self.config
        return (
            (
                not config.min_time_s_per_iteration
                or time.time() - start >= config.min_time_s_per_iteration
            )
            and (
                not config.min_sample_timesteps_per_iteration
                or sampled >= config.min_sample_timesteps_per_iteration
            )
            and (
                not config.min_train_timesteps_per_iteration
                or trained >= config.min_train_timesteps_per_iteration
            )
        )

    def _report_iteration_metrics(
        self, times: _SectionTimes, overlapped: Optional[OverlapTally] = None
    ) -> None:
        """The EnvRunners', the Learners' and the buffer's metrics and the
        timers, each once per iteration."""
        group = self.env_runner_group
        if overlapped is not None:
            # Each fragment came back with its EnvRunner's metrics.
            runner_results = overlapped.runner_metrics
            overlapped.log_into(self.metrics)
        elif group.num_remote_env_runners() == 0 and group.local_env_runner is not None:
            runner_results = [group.local_env_runner.get_metrics()]
        else:
            runner_results = group.foreach_env_runner(
                lambda runner: runner.get_metrics(), local_env_runner=False
            )
        self.metrics.aggregate(runner_results, key=ENV_RUNNER_RESULTS)
        learner_results = [
            result.get()
            for result in self.learner_group.foreach_learner(
                lambda learner: learner.reduce_deferred_metrics()
            )
        ]
        self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        self.metrics.aggregate(
            [self.local_replay_buffer.get_metrics()], key=REPLAY_BUFFER_RESULTS
        )
        times.log_into(self.metrics)
        if self.learner_group.is_local and times.calls[LEARNER_UPDATE_TIMER]:
            # Ray's Prometheus histogram of update times (`LearnerGroup.update`
            # observes it per call): the iteration's mean, once.
            observe_learner_update_time(
                self.learner_group,
                times.seconds[LEARNER_UPDATE_TIMER] / times.calls[LEARNER_UPDATE_TIMER],
            )


def _replay_feedback(results) -> Dict[str, np.ndarray]:
    """The packed replay feedback of one update per module, Learner by
    Learner."""
    rows: Dict[str, List[np.ndarray]] = {}
    for result in results:
        for module_id, module_rows in (result or {}).get(REPLAY_FEEDBACK, {}).items():
            rows.setdefault(module_id, []).append(module_rows)
    return {module_id: np.concatenate(parts) for module_id, parts in rows.items()}
