"""An EnvRunner whose training sampling loop costs a forward pass and an env step.

RLlib 2.60's `SingleAgentEnvRunner` runs, for every env step, the env-to-module
and module-to-env connector pipelines (about a dozen connectors, each mapping
over the batch item by item), toggles the RLModule between `train()` and
`eval()` around the forward pass (`TorchRLModule.forward_exploration`), adds the
step to each episode object one call at a time and logs several metrics and
Prometheus counters. On CartPole that is about 0.5 ms per env step, ten times
the forward pass and the env step themselves.

`FastSingleAgentEnvRunner` is that EnvRunner with one change: for the configs
the default pipelines fully describe (below), `sample()` computes the same thing
directly:

* the observations of all sub-envs go to the RLModule as one float32 tensor
  (what `NumpyToTensor` builds from the batched observations), and the module,
  kept in `eval()` mode, runs its exploration or inference implementation
  under `no_grad` (what `forward_exploration` does after its mode toggle;
  `rllib_ners.seam.rl_module`);
* actions come from the module or from its action distribution as `GetActions`
  draws them, and are unsquashed or clipped for the env in one vectorised call
  (`NormalizeAndClipActions`);
* the steps of each sub-env are collected in plain lists and written into
  RLlib's own `SingleAgentEpisode` objects when the episode ends or the call
  returns: the same observations, actions, rewards, infos, extra model outputs,
  lookback buffers and chunk boundaries as RLlib's loop produces (tested, for
  the same seeds);
* counters and timers are added up in the loop and logged into the
  EnvRunner's `MetricsLogger` once per `get_metrics()` call, the keys RLlib
  logs (the connector pipelines' own timers excepted: they do not run).

The random draws happen in the same order as in RLlib's loop (the module's
exploration, then the action distribution), including the forward pass RLlib
makes for a finished episode's last observation before the vector env resets
that sub-env; so a seeded run takes the same actions either way.

Atari's frame stacking (`with_atari`'s `FrameStackingConnector`, RLlib's
`FrameStackingEnvToModule` before the default pipeline) is served too: each
sub-env's stack of its last k frames is kept from step to step
(`push_frames`), the same uint8 stacks the connector rebuilds from the
episodes at every step, with an `episode_lookback_horizon` of at least k - 1
(with less, RLlib's loop zero-fills stacks in mid-episode at every chunk
boundary; such configs keep it).

Configs it cannot serve keep RLlib's loop, and the EnvRunner says why in one
INFO log line at construction: other custom env-to-module or module-to-env
connectors, or the default ones switched off; a stateful RLModule; callbacks
that act per step (`on_episode_created`, `on_episode_start`, `on_episode_step`);
nested (Dict/Tuple) observation or action spaces. An EnvRunner that pulls its
weights from an `EnvRunnerStateServer` (the Algorithm sets one after
construction) samples with RLlib's loop as well, which makes the pull.
`sample(num_episodes=...)` and evaluation use the fast loop too; the state they
leave (ongoing episodes, the cached module input) is RLlib's, read and written
through `rllib_ners.seam.env_runner`, so either loop can continue the other's.

The loop's pieces that need no EnvRunner (the action draw and map, the
per-sub-env step lists) live in `rllib_ners.env.sampling_steps`, its counters
and timers in `rllib_ners.env.sampling_metrics`.

Use it with `config.env_runners(env_runner_cls=FastSingleAgentEnvRunner)`; the
configs of this package's algorithms default to it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core.columns import Columns
from ray.rllib.env.env_errors import StepFailedRecreateEnvError
from ray.rllib.env.env_runner import (
    ENV_STEP_FAILURE,
    NUM_ENV_STEP_FAILURES_LIFETIME,
)
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ResultDict

from rllib_ners.env.acting_graphs import ActingGraph
from rllib_ners.env.frame_stacking import FrameStackingConnector
from rllib_ners.env.sampling_metrics import PendingSamplingMetrics
from rllib_ners.env.sampling_steps import (
    EnvActions,
    SubEnvSteps,
    actions_from_module_output,
    push_frames,
    record_sub_env_steps,
    write_unwritten_steps,
)
from rllib_ners.seam.config import (
    custom_env_to_module_connector,
    custom_module_to_env_connector,
)
from rllib_ners.seam.env_runner import (
    call_on_episode_end,
    count_env_steps_sampled,
    keep_done_episodes_for_metrics,
    keep_ongoing_chunk_for_metrics,
    needs_env_reset,
    ongoing_episodes,
    pulls_state_from_server,
    request_env_reset,
    reset_envs_and_episodes,
    runner_cached_obs,
    runner_callbacks,
    runner_device,
    runner_weights_seq_no,
    set_ongoing_episodes,
    set_runner_cached_obs,
    set_time_after_sampling,
    time_after_sampling,
)
from rllib_ners.seam.rl_module import exploration_pass, inference_pass
from rllib_ners.utils.package_logs import follow_rllib_log_level
from rllib_ners.utils.tensor_conversion import numpy_to_tensor, tensor_to_numpy

logger = logging.getLogger(__name__)

# Episode callbacks RLlib makes while an episode runs; the fast loop builds the
# episode objects in bulk, so it serves only callbacks that leave these alone.
_PER_STEP_CALLBACKS = ("on_episode_created", "on_episode_start", "on_episode_step")


def fast_sampling_blocker(config, env_runner: SingleAgentEnvRunner) -> Optional[str]:
    """Why the fast loop cannot reproduce RLlib's sampling for this config, or None.

    The fast loop computes what the default connector pipelines compute; every
    config that adds to or removes from them, or that needs the per-step episode
    objects, keeps RLlib's loop.
    """
    env_to_module = custom_env_to_module_connector(config)
    if isinstance(env_to_module, FrameStackingConnector):
        if config.episode_lookback_horizon < env_to_module.num_frames - 1:
            return (
                f"frame stacking of {env_to_module.num_frames} frames with "
                f"episode_lookback_horizon={config.episode_lookback_horizon} "
                f"(RLlib's loop zero-fills those stacks at chunk boundaries)"
            )
    elif env_to_module is not None:
        return "a custom env_to_module_connector is set"
    if custom_module_to_env_connector(config) is not None:
        return "a custom module_to_env_connector is set"
    if not (
        config.add_default_connectors_to_env_to_module_pipeline
        and config.add_default_connectors_to_module_to_env_pipeline
    ):
        return "the default connectors are switched off"
    module = env_runner.module
    if module is None:
        return "the EnvRunner has no RLModule"
    if not isinstance(module, torch.nn.Module):
        return "the RLModule is not a torch module"
    if module.is_stateful():
        return "the RLModule is stateful (it needs RLlib's state connectors)"
    for space in (
        env_runner.env.single_observation_space,
        env_runner.env.single_action_space,
    ):
        if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete)):
            return f"the space {space} is nested (only Box and Discrete are served)"
    for name in _PER_STEP_CALLBACKS:
        if getattr(config, f"callbacks_{name}", None):
            return f"config.callbacks({name}=...) is set"
        for callback in runner_callbacks(env_runner):
            if getattr(type(callback), name) is not getattr(RLlibCallback, name):
                return f"callback {type(callback).__name__} overrides {name}"
    return None


def frames_per_stack(config) -> int:
    """The frames the fast loop stacks per observation (`FrameStackingConnector`
    as the env-to-module connector), else 1."""
    env_to_module = custom_env_to_module_connector(config)
    if isinstance(env_to_module, FrameStackingConnector):
        return env_to_module.num_frames
    return 1


def sampling_target(
    config,
    worker_index: Optional[int],
    num_envs: int,
    num_timesteps: Optional[int],
    num_episodes: Optional[int],
) -> Tuple[Optional[int], Optional[int]]:
    """`(num_timesteps, num_episodes)` of one `sample()` call, one of them None,
    with RLlib's defaults: a rollout fragment per sub-env when truncating
    episodes, else one episode per sub-env."""
    if (
        num_timesteps is None
        and num_episodes is None
        and config.batch_mode == "truncate_episodes"
    ):
        num_timesteps = config.get_rollout_fragment_length(worker_index) * num_envs
    if num_timesteps is None and num_episodes is None:
        num_episodes = num_envs  # complete_episodes
    if (num_timesteps is not None and num_timesteps < 0) or (
        num_episodes is not None and num_episodes < 0
    ):
        raise ValueError(
            f"sample() needs num_timesteps >= 0 or num_episodes >= 0, got "
            f"num_timesteps={num_timesteps}, num_episodes={num_episodes}."
        )
    return num_timesteps, num_episodes


class FastSingleAgentEnvRunner(SingleAgentEnvRunner):
    """`SingleAgentEnvRunner` with a fast sampling loop (see the module docstring)."""

    @override(SingleAgentEnvRunner)
    def __init__(self, *, config, **kwargs):
        follow_rllib_log_level(config.log_level)  # a remote EnvRunner's, too
        super().__init__(config=config, **kwargs)
        self.fast_sampling_blocker: Optional[str] = None
        if self.env is not None:
            self.fast_sampling_blocker = fast_sampling_blocker(self.config, self)
            if self.fast_sampling_blocker is not None:
                logger.info(
                    "FastSingleAgentEnvRunner samples with RLlib's loop: %s.",
                    self.fast_sampling_blocker,
                )
            else:
                # The module only ever runs forward passes here: eval() once,
                # instead of RLlib's eval()/train() around every forward pass.
                self.module.eval()
        # Counters and timers of the fast loop, logged in `get_metrics()`.
        self._pending_metrics = PendingSamplingMetrics()
        # The map of actions onto the env's action space, worked out once per
        # env (see `_actions_map`).
        self._env_actions: Optional[EnvActions] = None
        # Frames per RLModule input (Atari's frame stacking), else 1.
        self._frames_per_stack = frames_per_stack(self.config)
        # Set where the module acts on a GPU from captured graphs
        # (`rllib_ners.env.acting_graphs`); None: the passes run eagerly.
        self.acting_graph: Optional[ActingGraph] = None

    @property
    def uses_fast_sampling(self) -> bool:
        """Whether `sample()` runs the fast loop (else RLlib's)."""
        return (
            self.env is not None
            and self.fast_sampling_blocker is None
            # RLlib's `sample()` pulls the weights from the server first.
            and not pulls_state_from_server(self)
        )

    @override(SingleAgentEnvRunner)
    def sample(
        self,
        *,
        num_timesteps: int = None,
        num_episodes: int = None,
        explore: bool = None,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> List[SingleAgentEpisode]:
        """RLlib's `sample()`, with the fast loop where it serves the config."""
        if not self.uses_fast_sampling:
            return super().sample(
                num_timesteps=num_timesteps,
                num_episodes=num_episodes,
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
            )
        if num_timesteps is not None and num_episodes is not None:
            raise ValueError(
                "Give sample() either `num_timesteps` or `num_episodes`, not both."
            )
        start = time.perf_counter()
        last_return = time_after_sampling(self)
        if last_return is not None:
            self._pending_metrics.add_time_between_sampling(start - last_return)
        if explore is None:
            explore = self.config.explore
        num_timesteps, num_episodes = sampling_target(
            self.config, self.worker_index, self.num_envs, num_timesteps, num_episodes
        )
        samples = self._sample_without_connectors(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        make_callback(
            "on_sample_end",
            callbacks_objects=runner_callbacks(self),
            callbacks_functions=self.config.callbacks_on_sample_end,
            kwargs={
                "env_runner": self,
                "metrics_logger": self.metrics,
                "samples": samples,
            },
        )
        end = time.perf_counter()
        set_time_after_sampling(self, end)
        self._pending_metrics.add_sample_call(end - start)
        return samples

    @override(SingleAgentEnvRunner)
    def get_metrics(self) -> ResultDict:
        pending = self._pending_metrics
        if pending.env_steps > 0:
            # Ray's Prometheus counter of sampled env steps (RLlib increments it
            # per sample() call): this get_metrics() period's steps at once.
            count_env_steps_sampled(self, pending.env_steps)
        pending.log_into(self.metrics, runner_weights_seq_no(self))
        return super().get_metrics()

    def _sample_without_connectors(
        self,
        *,
        num_timesteps: Optional[int],
        num_episodes: Optional[int],
        explore: bool,
        random_actions: bool,
        force_reset: bool,
    ) -> List[SingleAgentEpisode]:
        """RLlib's `_sample()` without the connector pipelines, with the episode
        objects written in bulk (same results; see the module docstring): the
        finished episodes, then (when sampling timesteps) the chunks of the
        ongoing ones."""
        if force_reset or num_episodes is not None or needs_env_reset(self):
            reset_envs_and_episodes(self, explore)
        if num_episodes is not None:
            request_env_reset(self)  # as RLlib: the next call starts fresh too
        num_runners = self.config.num_env_runners or 1
        # RLlib's estimate of the env steps sampled by all EnvRunners, which
        # the module's exploration schedules read.
        lifetime_steps = self.num_env_steps_sampled_lifetime // num_runners
        weights_seq_no = runner_weights_seq_no(self)
        device = runner_device(self)
        episodes, steps, obs, to_env = self._loop_start_state()
        stacks = self._frame_stacks(obs)
        env_steps = 0
        done: List[SingleAgentEpisode] = []
        terminateds = truncateds = None
        while (
            (env_steps < num_timesteps)
            if num_timesteps is not None
            else (len(done) < num_episodes)
        ):
            actions, actions_for_env, extra = self._choose_actions(
                obs,
                explore=explore,
                random_actions=random_actions,
                t=(lifetime_steps + env_steps) * num_runners,
                to_env=to_env,
            )
            results = self._step_envs(actions_for_env)
            if results is ENV_STEP_FAILURE:
                # As RLlib's loop: the env was recreated; the steps taken in
                # the ongoing episodes are dropped and sampling starts over.
                env_steps = 0
                reset_envs_and_episodes(self, explore)
                episodes, steps, obs, to_env = self._loop_start_state()
                stacks = self._frame_stacks(obs)
                continue
            observations, rewards, terminateds, truncateds, infos = results
            if stacks is not None:
                # Sub-envs whose episode is not reset yet were reset in this
                # step: their observation starts a new stack.
                restarted = np.array([not episode.is_reset for episode in episodes])
                stacks = push_frames(stacks, np.asarray(observations), restarted)
            env_steps += record_sub_env_steps(
                episodes,
                steps,
                observations=observations,
                actions=actions,
                rewards=rewards,
                infos=infos,
                extra_model_outputs=extra,
                weights_seq_no=weights_seq_no,
            )
            obs = numpy_to_tensor(observations if stacks is None else stacks, device)
            done += self._finish_done_episodes(
                episodes,
                steps,
                terminateds,
                truncateds,
                max_episodes=None if num_episodes is None else num_episodes - len(done),
            )

        set_runner_cached_obs(self, obs)
        keep_done_episodes_for_metrics(self, done)
        write_unwritten_steps(episodes, steps, terminateds, truncateds)
        chunks = [] if num_timesteps is None else self._hand_back_chunks(episodes)
        self._pending_metrics.add_sampled(env_steps, len(done))
        return done + chunks

    def _loop_start_state(
        self,
    ) -> Tuple[List[SingleAgentEpisode], List[SubEnvSteps], torch.Tensor, EnvActions]:
        """What the loop starts from, after a reset or an env recreation: the
        ongoing episodes, an empty `SubEnvSteps` per sub-env, the module input
        for the current observations (a finished episode's last one included,
        as RLlib feeds it) and the map of actions onto the env's action space.
        """
        steps = [SubEnvSteps() for _ in range(self.num_envs)]
        episodes = ongoing_episodes(self)
        # RLlib's reset builds the input on the CPU, where its connectors put
        # it; a module acting on a GPU (`act_on_learner_device`) takes it there.
        obs = runner_cached_obs(self)
        device = runner_device(self)
        if torch.is_tensor(obs) and obs.device != device:
            obs = obs.to(device)
        return episodes, steps, obs, self._actions_map()

    def _frame_stacks(self, obs: torch.Tensor) -> Optional[np.ndarray]:
        """With frame stacking, the sub-envs' current stacks (the cached module
        input, which either loop leaves as the connector builds it), else None."""
        if self._frames_per_stack == 1:
            return None
        return obs.cpu().numpy()

    def _actions_map(self) -> EnvActions:
        """`EnvActions` for the env's action space, built again only when the
        env was recreated (a new space object): inspecting the space's bounds
        takes about as long as mapping a batch of actions."""
        space = self.env.single_action_space
        if self._env_actions is None or self._env_actions.space is not space:
            self._env_actions = EnvActions(
                space,
                normalize_actions=self.config.normalize_actions,
                clip_actions=self.config.clip_actions,
            )
        return self._env_actions

    def _choose_actions(
        self,
        obs: torch.Tensor,
        *,
        explore: bool,
        random_actions: bool,
        t: int,
        to_env: EnvActions,
    ) -> Tuple[Any, Any, Dict[str, Any]]:
        """One batch of actions: `(actions, actions_for_env, extra)`, the
        actions as episodes store them, as the env takes them, and the module's
        other outputs (numpy, one row per sub-env).

        The module's forward pass then the action distribution's draw, in
        RLlib's order (`t` is the exploration schedules' timestep); or a
        sample of the action space with `random_actions`."""
        if random_actions:
            actions = self.env.action_space.sample()
            return actions, actions, {}
        start = time.perf_counter()
        with torch.no_grad():
            if explore and self.acting_graph is not None:
                # The graph's own tensors, which its next replay overwrites:
                # copied to the host now.
                out = {
                    key: value.to("cpu", copy=True) if torch.is_tensor(value) else value
                    for key, value in self.acting_graph.explore(obs, t).items()
                }
            else:
                if explore:
                    out = exploration_pass(self.module, {Columns.OBS: obs}, t=t)
                else:
                    out = inference_pass(self.module, {Columns.OBS: obs})
                out = actions_from_module_output(self.module, out, explore)
        extra = {
            key: tensor_to_numpy(value) if torch.is_tensor(value) else value
            for key, value in out.items()
        }
        self._pending_metrics.add_inference(time.perf_counter() - start)
        actions = extra.pop(Columns.ACTIONS)
        return actions, to_env(actions), extra

    def _step_envs(self, actions):
        """`_try_env_step()`, its timer and counter added up instead of logged:
        the vector env's step results, or `ENV_STEP_FAILURE` when a step failed
        and the env was recreated."""
        start = time.perf_counter()
        try:
            results = self.env.step(actions)
        except Exception as error:
            self.metrics.log_value(
                NUM_ENV_STEP_FAILURES_LIFETIME, 1, reduce="lifetime_sum"
            )
            if not self.config.restart_failed_sub_environments:
                logger.exception(
                    "FastSingleAgentEnvRunner: an env step failed and "
                    "config.fault_tolerance(restart_failed_sub_environments=False); "
                    "the env is not recreated. The original error: %r",
                    error,
                )
                raise RuntimeError from error
            if not isinstance(error, StepFailedRecreateEnvError):
                logger.exception(
                    "FastSingleAgentEnvRunner: an env step failed; recreating and "
                    "resetting the env(s) of this EnvRunner. The original error: %r",
                    error,
                )
            self.make_env()
            return ENV_STEP_FAILURE
        self._pending_metrics.add_env_step(time.perf_counter() - start)
        return results

    def _finish_done_episodes(
        self,
        episodes: List[SingleAgentEpisode],
        steps: List[SubEnvSteps],
        terminateds,
        truncateds,
        *,
        max_episodes: Optional[int],
    ) -> List[SingleAgentEpisode]:
        """Ends the episodes this vector-env step finished, in sub-env order
        and at most `max_episodes` of them: their steps written, their
        `on_episode_end` callbacks made, a new (not yet reset) episode in their
        place, as RLlib's loop does. Returns them as `sample()` hands them back.
        """
        finished = []
        # Only the sub-envs whose episode ended (most steps: none).
        done = np.flatnonzero(np.logical_or(terminateds, truncateds))
        for env_index in done.tolist():
            episode = episodes[env_index]
            steps[env_index].write_into(
                episode, terminateds[env_index], truncateds[env_index]
            )
            call_on_episode_end(self, env_index, episodes)
            finished.append(episode.to_numpy() if self.episodes_to_numpy else episode)
            # A new episode, not yet reset: the vector env resets this sub-env
            # at its next step (as RLlib's `_new_episode`).
            episodes[env_index] = SingleAgentEpisode(
                observation_space=self.env.single_observation_space,
                action_space=self.env.single_action_space,
            )
            if max_episodes is not None and len(finished) >= max_episodes:
                break
        return finished

    def _hand_back_chunks(
        self, episodes: List[SingleAgentEpisode]
    ) -> List[SingleAgentEpisode]:
        """The chunks of the ongoing episodes that hold steps, kept for
        `get_metrics()`; their continuations (with RLlib's lookback) become
        the ongoing episodes of the next `sample()` call."""
        continuations = [
            episode.cut(len_lookback_buffer=self.config.episode_lookback_horizon)
            for episode in episodes
        ]
        chunks = []
        for episode in episodes:
            if episode.t == 0:
                continue
            episode.validate()
            keep_ongoing_chunk_for_metrics(self, episode)
            chunks.append(episode.to_numpy() if self.episodes_to_numpy else episode)
        set_ongoing_episodes(self, continuations)
        return chunks
