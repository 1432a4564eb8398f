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
  kept in `eval()` mode, runs `_forward_exploration` / `_forward_inference`
  under `no_grad` (what `forward_exploration` does after its mode toggle);
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

Configs it cannot serve keep RLlib's loop, and the EnvRunner says why in one
INFO log line at construction: custom env-to-module or module-to-env
connectors, or the default ones switched off; a stateful RLModule; callbacks
that act per step (`on_episode_created`, `on_episode_start`, `on_episode_step`);
nested (Dict/Tuple) observation or action spaces. `sample(num_episodes=...)`
and evaluation use the fast loop too; the state they leave (ongoing episodes,
the cached module input) is RLlib's, so either loop can continue the other's.

Use it with `config.env_runners(env_runner_cls=FastSingleAgentEnvRunner)`; the
configs of this package's algorithms default to it.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchSquashedGaussian
from ray.rllib.env.env_errors import StepFailedRecreateEnvError
from ray.rllib.env.env_runner import (
    ENV_STEP_FAILURE,
    NUM_ENV_STEP_FAILURES_LIFETIME,
)
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.annotations import override
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
from ray.rllib.utils.spaces.space_utils import unsquash_action
from ray.rllib.utils.typing import ResultDict

from rllib_ners.seam.episodes import append_steps
from rllib_ners.utils.torch_ops import (
    numpy_to_tensor,
    squashed_gaussian_sample_and_logp,
)

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
    if config._env_to_module_connector is not None:
        return "a custom env_to_module_connector is set"
    if config._module_to_env_connector is not None:
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
        for callback in env_runner._callbacks:
            if getattr(type(callback), name) is not getattr(RLlibCallback, name):
                return f"callback {type(callback).__name__} overrides {name}"
    return None


class _SubEnvSteps:
    """The steps one sub-env took since its episode object was last written."""

    __slots__ = ("observations", "actions", "rewards", "infos", "extra")

    def __init__(self):
        self.observations: List[Any] = []
        self.actions: List[Any] = []
        self.rewards: List[Any] = []
        self.infos: List[Dict] = []
        self.extra: Dict[str, List[Any]] = {}

    def __len__(self) -> int:
        return len(self.rewards)

    def append(self, observation, action, reward, infos, extra) -> None:
        self.observations.append(observation)
        self.actions.append(action)
        self.rewards.append(reward)
        self.infos.append(infos)
        for key, value in extra.items():
            column = self.extra.get(key)
            if column is None:
                self.extra[key] = [value]
            else:
                column.append(value)

    def write_into(
        self, episode: SingleAgentEpisode, terminated: bool, truncated: bool
    ) -> None:
        """Adds the steps to `episode` as that many `add_env_step()` calls would,
        then forgets them."""
        append_steps(
            episode,
            observations=self.observations,
            actions=self.actions,
            rewards=self.rewards,
            infos=self.infos,
            extra_model_outputs=self.extra,
            terminated=terminated,
            truncated=truncated,
        )
        self.__init__()


class FastSingleAgentEnvRunner(SingleAgentEnvRunner):
    """`SingleAgentEnvRunner` with a fast sampling loop (see the module docstring)."""

    @override(SingleAgentEnvRunner)
    def __init__(self, *, config, **kwargs):
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
        self._pending_metrics = _PendingSamplingMetrics()

    @property
    def uses_fast_sampling(self) -> bool:
        """Whether `sample()` runs the fast loop (else RLlib's)."""
        return (
            self.env is not None
            and self.fast_sampling_blocker is None
            and self._env_runner_state_server is None
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
        pending = self._pending_metrics
        start = time.perf_counter()
        if self._time_after_sampling is not None:
            pending.between_sampling_s += start - self._time_after_sampling
            pending.sample_calls_after_first += 1
        if explore is None:
            explore = self.config.explore
        if (
            num_timesteps is None
            and num_episodes is None
            and self.config.batch_mode == "truncate_episodes"
        ):
            num_timesteps = (
                self.config.get_rollout_fragment_length(self.worker_index)
                * self.num_envs
            )
        if num_timesteps is None and num_episodes is None:
            num_episodes = self.num_envs  # complete_episodes
        if (num_timesteps is not None and num_timesteps < 0) or (
            num_episodes is not None and num_episodes < 0
        ):
            raise ValueError(
                f"sample() needs num_timesteps >= 0 or num_episodes >= 0, got "
                f"num_timesteps={num_timesteps}, num_episodes={num_episodes}."
            )
        samples = self._fast_sample(
            num_timesteps=num_timesteps,
            num_episodes=num_episodes,
            explore=explore,
            random_actions=random_actions,
            force_reset=force_reset,
        )
        make_callback(
            "on_sample_end",
            callbacks_objects=self._callbacks,
            callbacks_functions=self.config.callbacks_on_sample_end,
            kwargs={
                "env_runner": self,
                "metrics_logger": self.metrics,
                "samples": samples,
            },
        )
        self._time_after_sampling = time.perf_counter()
        pending.sample_s += self._time_after_sampling - start
        pending.sample_calls += 1
        return samples

    @override(SingleAgentEnvRunner)
    def get_metrics(self) -> ResultDict:
        pending = self._pending_metrics
        if pending.env_steps > 0:
            # Ray's Prometheus counter of sampled env steps (RLlib increments it
            # per sample() call): this get_metrics() period's steps at once.
            self._log_env_steps(
                metric=self._metrics_num_env_steps_sampled,
                num_steps=pending.env_steps,
            )
        pending.log_into(self.metrics, self._weights_seq_no)
        return super().get_metrics()

    def _fast_sample(
        self,
        *,
        num_timesteps: Optional[int],
        num_episodes: Optional[int],
        explore: bool,
        random_actions: bool,
        force_reset: bool,
    ) -> List[SingleAgentEpisode]:
        """RLlib's `_sample()` without the connector pipelines, with the episode
        objects written in bulk (same results; see the module docstring)."""
        ts = 0
        eps = 0
        done_episodes_to_return: List[SingleAgentEpisode] = []
        if force_reset or num_episodes is not None or self._needs_initial_reset:
            self._reset_envs_and_episodes(explore)
        if num_episodes is not None:
            self._needs_initial_reset = True

        num_envs = self.num_envs
        episodes = self._ongoing_episodes
        steps = [_SubEnvSteps() for _ in range(num_envs)]
        # What the env-to-module pipeline cached for the current observations
        # (a finished episode's last one included, as RLlib feeds it).
        obs_tensor = self._cached_to_module[Columns.OBS]
        num_runners = self.config.num_env_runners or 1
        lifetime_base = self.num_env_steps_sampled_lifetime // num_runners
        seq_no = self._weights_seq_no
        pending = self._pending_metrics
        clock = time.perf_counter
        terminateds = truncateds = None

        while (
            (ts < num_timesteps) if num_timesteps is not None else (eps < num_episodes)
        ):
            if random_actions:
                actions = self.env.action_space.sample()
                actions_for_env = actions
                extra: Dict[str, Any] = {}
            else:
                start = clock()
                with torch.no_grad():
                    if explore:
                        out = self.module._forward_exploration(
                            {Columns.OBS: obs_tensor},
                            t=(lifetime_base + ts) * num_runners,
                        )
                    else:
                        out = self.module._forward_inference({Columns.OBS: obs_tensor})
                    out = self._actions_from_module_output(out, explore)
                extra = {
                    key: value.cpu().numpy() if torch.is_tensor(value) else value
                    for key, value in out.items()
                }
                pending.inference_s += clock() - start
                pending.inference_calls += 1
                actions = extra.pop(Columns.ACTIONS)
                actions_for_env = self._actions_for_env(actions)

            results = self._step_env(actions_for_env)
            if results is ENV_STEP_FAILURE:
                # As RLlib's loop: start over with fresh episodes.
                ts = 0
                steps = [_SubEnvSteps() for _ in range(num_envs)]
                self._reset_envs_and_episodes(explore)
                episodes = self._ongoing_episodes
                obs_tensor = self._cached_to_module[Columns.OBS]
                continue
            observations, rewards, terminateds, truncateds, infos = results

            for env_index in range(num_envs):
                episode = episodes[env_index]
                if not episode.is_reset:
                    # The vector env has just reset this sub-env (ignoring the
                    # action): the new episode's first observation.
                    episode.add_env_reset(
                        observation=observations[env_index], infos=infos[env_index]
                    )
                    continue
                ts += 1
                step_extra = {key: value[env_index] for key, value in extra.items()}
                step_extra[WEIGHTS_SEQ_NO] = seq_no
                steps[env_index].append(
                    observations[env_index],
                    actions[env_index],
                    rewards[env_index],
                    infos[env_index],
                    step_extra,
                )
            obs_tensor = numpy_to_tensor(observations, self._device)

            for env_index in range(num_envs):
                if not (terminateds[env_index] or truncateds[env_index]):
                    continue
                episode = episodes[env_index]
                steps[env_index].write_into(
                    episode, terminateds[env_index], truncateds[env_index]
                )
                eps += 1
                self._make_on_episode_callback("on_episode_end", env_index, episodes)
                done_episodes_to_return.append(
                    episode.to_numpy() if self.episodes_to_numpy else episode
                )
                # A new episode, not yet reset (as RLlib's `_new_episode`).
                episodes[env_index] = SingleAgentEpisode(
                    observation_space=self.env.single_observation_space,
                    action_space=self.env.single_action_space,
                )
                if num_episodes is not None and eps >= num_episodes:
                    break

        self._cached_to_module = {Columns.OBS: obs_tensor}
        self._done_episodes_for_metrics.extend(done_episodes_to_return)
        # Steps not yet written all come from sub-envs that stepped in the last
        # iteration (a finished episode's steps were written when it ended).
        for env_index, env_steps in enumerate(steps):
            if len(env_steps):
                env_steps.write_into(
                    episodes[env_index], terminateds[env_index], truncateds[env_index]
                )

        ongoing_episodes_to_return = []
        if num_timesteps is not None:
            continuations = [
                episode.cut(len_lookback_buffer=self.config.episode_lookback_horizon)
                for episode in episodes
            ]
            for episode in episodes:
                if episode.t == 0:
                    continue
                episode.validate()
                self._ongoing_episodes_for_metrics[episode.id_].append(episode)
                ongoing_episodes_to_return.append(
                    episode.to_numpy() if self.episodes_to_numpy else episode
                )
            self._ongoing_episodes = continuations

        pending.env_steps += ts
        pending.episodes += len(done_episodes_to_return)
        return done_episodes_to_return + ongoing_episodes_to_return

    def _step_env(self, actions):
        """`_try_env_step()`, its timer and counter added up instead of logged."""
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
        pending = self._pending_metrics
        pending.env_step_s += time.perf_counter() - start
        pending.env_steps_tried += 1
        return results

    def _actions_from_module_output(
        self, out: Dict[str, Any], explore: bool
    ) -> Dict[str, Any]:
        """`GetActions`: actions drawn from the action distribution when the
        module returned only its inputs (and their log-probabilities)."""
        if Columns.ACTIONS in out or Columns.ACTION_DIST_INPUTS not in out:
            return out
        if explore:
            dist_class = self.module.get_exploration_action_dist_cls()
        else:
            dist_class = self.module.get_inference_action_dist_cls()
        if explore and dist_class is TorchSquashedGaussian:
            # SAC: the same draw and log-probability without the objects.
            actions, logp = squashed_gaussian_sample_and_logp(
                out[Columns.ACTION_DIST_INPUTS]
            )
            out[Columns.ACTIONS] = actions
            out.setdefault(Columns.ACTION_LOGP, logp)
            return out
        dist = dist_class.from_logits(out[Columns.ACTION_DIST_INPUTS])
        if not explore:
            dist = dist.to_deterministic()
        actions = dist.sample()
        out[Columns.ACTIONS] = actions
        if Columns.ACTION_LOGP not in out:
            out[Columns.ACTION_LOGP] = dist.logp(actions)
        return out

    def _unsquashes_to_float_bounds(self, space: gym.spaces.Box) -> bool:
        """Whether RLlib's `unsquash_action` maps [-1, 1] onto `space`'s bounds
        (a bounded float Box) rather than passing or shifting the actions;
        worked out once per space."""
        known = getattr(self, "_unsquash_space", None)
        if known is None or known[0] is not space:
            bounded = bool(
                np.all(space.bounded_below)
                and np.all(space.bounded_above)
                and space.dtype in (np.float32, np.float64)
            )
            self._unsquash_space = known = (space, bounded)
        return known[1]

    def _actions_for_env(self, actions: np.ndarray) -> np.ndarray:
        """`NormalizeAndClipActions` on the whole batch at once: the same
        element-wise maps over a Box (a Discrete space passes through)."""
        space = self.env.single_action_space
        if not isinstance(space, gym.spaces.Box):
            return actions  # both maps leave Discrete actions as they are
        if self.config.normalize_actions:
            if self._unsquashes_to_float_bounds(space):
                # unsquash_action's Box case, without its tree walk.
                low, high = space.low, space.high
                return np.clip(low + (actions + 1.0) * (high - low) / 2.0, low, high)
            return unsquash_action(actions.copy(), space)
        if self.config.clip_actions:
            return np.clip(actions, space.low, space.high)  # clip_action's Box case
        return actions


class _PendingSamplingMetrics:
    """Counters and timers of the fast loop, logged once per `get_metrics()`
    under RLlib's keys and reductions (timers as the mean over the calls)."""

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

    def log_into(self, metrics, weights_seq_no: int) -> None:
        if self.sample_calls:
            metrics.log_value(WEIGHTS_SEQ_NO, weights_seq_no, window=1)
            metrics.log_value(SAMPLE_TIMER, self.sample_s / self.sample_calls)
            # RLlib's loop logs these per call, whether or not steps were taken.
            metrics.log_value(NUM_ENV_STEPS_SAMPLED, self.env_steps, reduce="sum")
            metrics.log_value(
                (NUM_AGENT_STEPS_SAMPLED, DEFAULT_AGENT_ID),
                self.env_steps,
                reduce="sum",
            )
            metrics.log_value(
                (NUM_MODULE_STEPS_SAMPLED, DEFAULT_MODULE_ID),
                self.env_steps,
                reduce="sum",
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
            metrics.log_value(
                NUM_EPISODES_LIFETIME, self.episodes, reduce="lifetime_sum"
            )
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
