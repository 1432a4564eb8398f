"""The sampler's outer loop: replay reward and the REINFORCE step.

Algorithm 1 of the NERS paper, lines 11-15. A window collects the returns of the
training episodes that finish (or, with `replay_reward_mode="eval_return"`, runs
RLlib evaluation episodes when it closes); it closes after
`min_episodes_per_update` episodes, or every `update_interval_env_steps` env
steps. Its mean return G gives the replay reward through the baseline:
"previous_window" (`r_re = G_k - G_{k-1}`), "first" (`G_k - G_1`: the reference
code's frozen baseline) or "ema" (`(G_k - b) / std`, with b an exponential
moving average of G and std a running standard deviation of `G - b`). Then
I_train is drawn from I_all and every Learner takes one REINFORCE step.

Run by `NERSSamplerRoundsMixin` after every round of the replay loop (NERS-DQN,
NERS-SAC, TD3 / DDPG), by `ACER.training_step()` and by `NERSCallback` once per
iteration (a stock DQN through `enable_ners`).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy as np
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    EVALUATION_RESULTS,
    NUM_ENV_STEPS_SAMPLED,
)

from rllib_ners.algorithms.ners.ners_learner import (
    NERS_EVAL_ENV_STEPS_KEY,
    NERS_NUM_SAMPLER_UPDATES_KEY,
    NERS_REPLAY_REWARD_KEY,
    NERS_RESULTS,
    NERS_SAMPLED_SET_SIZE_KEY,
    NERS_SAMPLER_LOSS_KEY,
    NERS_SCORE_MEAN_KEY,
    NERS_WINDOW_RETURN_KEY,
    ners_settings_from_config,
)
from rllib_ners.algorithms.ners.sampler_diagnostics import SamplerDiagnostics
from rllib_ners.ners.settings import NERSSettings

# Added to the "ema" baseline's standard deviation: the reward stays finite
# while every window so far had the same return (zero variance).
_EMA_STD_EPSILON = 1e-8
# Sampler updates each logged NERS metric is averaged over.
NERS_METRICS_WINDOW = 20


class ReplayRewardBaseline:
    """Turns a closed window's mean return G into the replay reward r_re.

    The first window only sets the baseline and yields no reward.
    """

    def __init__(self, kind: str, decay: float = 0.9):
        self.kind = kind
        self.decay = float(decay)
        self.value: Optional[float] = None
        self.variance = 0.0

    def reward(self, window_mean: float) -> Optional[float]:
        current = float(window_mean)
        if self.value is None:
            self.value = current
            return None
        deviation = current - self.value
        if self.kind == "first":
            return deviation
        if self.kind == "previous_window":
            self.value = current
            return deviation
        # "ema": scale-free reward, then move the baseline and its variance.
        self.variance = self.decay * self.variance + (1 - self.decay) * deviation**2
        self.value = self.decay * self.value + (1 - self.decay) * current
        return deviation / (math.sqrt(self.variance) + _EMA_STD_EPSILON)

    def get_state(self) -> Dict[str, Any]:
        return {"value": self.value, "variance": self.variance}

    def set_state(self, state: Dict[str, Any]) -> None:
        self.value = state["value"]
        self.variance = float(state["variance"])


class ReplayRewardWindow:
    """Collects finished-episode returns until the window closes.

    It closes after `min_episodes` finished episodes, or, with
    `interval_env_steps`, once that many env steps were added since it opened.
    """

    def __init__(self, min_episodes: int, interval_env_steps: Optional[int] = None):
        self.min_episodes = int(min_episodes)
        self.interval_env_steps = interval_env_steps
        self.returns: List[float] = []
        self.opened_at_env_steps = 0

    def add(self, returns: List[float]) -> None:
        self.returns.extend(float(r) for r in returns)

    def ready(self, env_steps: int) -> bool:
        if self.interval_env_steps is not None:
            return env_steps - self.opened_at_env_steps >= self.interval_env_steps
        return len(self.returns) >= self.min_episodes

    def mean(self) -> float:
        return float(np.mean(self.returns)) if self.returns else float("nan")

    def close(self, env_steps: int) -> None:
        self.returns = []
        self.opened_at_env_steps = int(env_steps)

    def get_state(self) -> Dict[str, Any]:
        return {"returns": list(self.returns), "opened_at": self.opened_at_env_steps}

    def set_state(self, state: Dict[str, Any]) -> None:
        self.returns = list(state["returns"])
        self.opened_at_env_steps = int(state.get("opened_at", 0))


def _reinforce_on_learner(learner, *, batch, replay_reward):
    return learner.ners.reinforce(batch, replay_reward)


class NERSSamplerUpdate:
    """Runs the sampler update when enough training episodes have finished."""

    @classmethod
    def from_config(cls, config, *, n_step=None) -> NERSSamplerUpdate:
        """For a NERSDQNConfig, a DQNConfig set up by `enable_ners()`, or an
        ACERConfig (pass `n_step=1`: its features use 1-step transitions)."""
        return cls(
            ners_settings_from_config(config),
            n_step=config.n_step if n_step is None else n_step,
            gamma=config.gamma,
            seed=config.seed,
        )

    def __init__(self, settings: NERSSettings, *, n_step, gamma: float, seed=None):
        self.settings = settings
        self.n_step = n_step
        self.gamma = float(gamma)
        self.window = ReplayRewardWindow(
            settings.min_episodes_per_update, settings.update_interval_env_steps
        )
        self.baseline = ReplayRewardBaseline(settings.baseline, settings.baseline_decay)
        self.num_updates = 0
        self.num_eval_env_steps = 0
        # Per-iteration diagnostics (`report()`).
        self.diagnostics = SamplerDiagnostics(
            sample_size=settings.diagnostics_sample_size,
            n_step=n_step,
            gamma=gamma,
            seed=seed,
        )

    def maybe_update(self, algorithm) -> Optional[Dict[str, float]]:
        """Called after every training step; returns the update's metrics if one ran."""
        buffer = algorithm.local_replay_buffer
        self.window.add(buffer.pop_finished_episode_returns())
        env_steps = buffer.get_added_timesteps()
        if not self.window.ready(env_steps):
            return None
        if self.settings.replay_reward_mode == "eval_return":
            window_mean = self._evaluate(algorithm)
        else:
            window_mean = self.window.mean()
        self.window.close(env_steps)
        if not math.isfinite(window_mean):
            # A step-interval window in which no training episode finished.
            return None
        replay_reward = self.baseline.reward(window_mean)
        metrics = {NERS_WINDOW_RETURN_KEY: window_mean}
        batch = None
        if replay_reward is not None:
            batch = self.sampler_training_batch(buffer)
        if batch is not None:
            metrics[NERS_SAMPLED_SET_SIZE_KEY] = buffer.sampled_set_size
            results = algorithm.learner_group.foreach_learner(
                _reinforce_on_learner, batch=batch, replay_reward=replay_reward
            )
            # RemoteCallResults; `.get()` re-raises a Learner's exception here.
            outs = [result.get() for result in results]
            self.num_updates += 1
            metrics[NERS_REPLAY_REWARD_KEY] = replay_reward
            metrics[NERS_SAMPLER_LOSS_KEY] = float(np.mean([o["loss"] for o in outs]))
            metrics[NERS_SCORE_MEAN_KEY] = float(
                np.mean([o["score_mean"] for o in outs])
            )
        # I_all is emptied at every episode end, whether or not a step was taken.
        buffer.reset_sampled_set()
        # The lifetime counters are not logged here: `report()` puts
        # `lifetime_counters()` in every iteration's result.
        for key, value in metrics.items():
            algorithm.metrics.log_value(
                (NERS_RESULTS, key), value, window=NERS_METRICS_WINDOW
            )
        return metrics

    def report(self, algorithm, result: Dict[str, Any]) -> None:
        """Adds the sampler diagnostics and the lifetime counters to
        `result["ners"]`; every algorithm that replays with NERS calls it once
        per iteration."""
        if not isinstance(result, dict):
            return
        ners = result.setdefault(NERS_RESULTS, {})
        ners.update(self.diagnostics.compute(algorithm))
        ners.update(self.lifetime_counters())

    def lifetime_counters(self) -> Dict[str, int]:
        """The counters that `result["ners"]` carries every iteration, whether or
        not a sampler update ran in it (a window logged only at updates would
        read NaN in iterations without one)."""
        return {
            NERS_NUM_SAMPLER_UPDATES_KEY: self.num_updates,
            NERS_EVAL_ENV_STEPS_KEY: self.num_eval_env_steps,
        }

    def sampler_training_batch(self, buffer) -> Optional[Dict[str, Any]]:
        """I_train from `buffer` (and, for "log_prob", the normaliser draws and
        the buffer's alpha), as every Learner's `ners.reinforce()` takes it;
        None while I_all is empty."""
        settings = self.settings
        batch = buffer.sample_sampler_training_batch(
            settings.train_size,
            n_step=self.n_step,
            gamma=self.gamma,
            draw=settings.train_draw,
            normalizer_size=(
                settings.normalizer_size if settings.objective == "log_prob" else 0
            ),
        )
        if batch is not None:
            batch["alpha"] = buffer.alpha
        return batch

    def _evaluate(self, algorithm) -> float:
        """Runs RLlib evaluation episodes; counts the env steps they cost."""
        results = algorithm.evaluate()
        env_results = results.get(
            ENV_RUNNER_RESULTS, results.get(EVALUATION_RESULTS, {})
        )
        if EVALUATION_RESULTS in results:
            env_results = results[EVALUATION_RESULTS].get(ENV_RUNNER_RESULTS, {})
        self.num_eval_env_steps += int(env_results.get(NUM_ENV_STEPS_SAMPLED, 0) or 0)
        value = env_results.get(EPISODE_RETURN_MEAN)
        if value is None or not np.isfinite(value):
            raise RuntimeError(
                "replay_reward_mode='eval_return' got no evaluation episode return; "
                "set config.evaluation(evaluation_duration_unit='episodes', "
                "evaluation_duration=...) so that evaluation finishes episodes."
            )
        return float(value)

    def get_state(self) -> Dict[str, Any]:
        return {
            "window": self.window.get_state(),
            "baseline": self.baseline.get_state(),
            "num_updates": self.num_updates,
            "num_eval_env_steps": self.num_eval_env_steps,
            "diagnostics": self.diagnostics.get_state(),
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        self.window.set_state(state["window"])
        if "baseline" in state:
            self.baseline.set_state(state["baseline"])
        else:  # a checkpoint without one keeps it as the window's previous mean
            self.baseline.set_state(
                {"value": state["window"].get("previous_mean"), "variance": 0.0}
            )
        self.num_updates = int(state["num_updates"])
        self.num_eval_env_steps = int(state["num_eval_env_steps"])
        if "diagnostics" in state:  # checkpoints without it keep fresh diagnostics
            self.diagnostics.set_state(state["diagnostics"])
