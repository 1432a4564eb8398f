"""`.ners(...)`: the NERS sampler's settings on an AlgorithmConfig.

`NERSConfigMixin` serves every config that can replay with NERS (`NERSDQNConfig`,
`NERSSACConfig`, `TD3Config` / `DDPGConfig`, `ACERConfig`). It sets itself up:
its `__init__` sets the defaults and its `validate()` checks them after the
parent config's checks, so a config lists the mixin and calls nothing. The
values live in `config.ners_config` as a plain dict (Tune can search over it)
and are validated as `rllib_ners.NERSSettings`.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Tuple

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.utils.annotations import override
from ray.util.debug import log_once

from rllib_ners.ners.settings import NERSSettings
from rllib_ners.seam.config import raise_config_error
from rllib_ners.utils.mixin_order import PrecedesInBases

ACTION_ENCODING_DEFAULT = NERSSettings().action_encoding

logger = logging.getLogger(__name__)


class NERSConfigMixin(PrecedesInBases, precedes=AlgorithmConfig):
    """Adds `ners()` and `uses_ners_replay` to an `AlgorithmConfig` subclass
    (ahead of the RLlib config class), and checks the NERS settings in
    `validate()`: with the NERS buffer, its `alpha` must be > 0 and the settings
    valid; without it, a `.ners(...)` call (which would do nothing) raises, even
    one that sets only defaults: `.ners()` holds the sampler's settings, it does
    not choose the NERS buffer."""

    # The buffer a config of this class replays from when its
    # `replay_buffer_config` names no type.
    default_replay_buffer_type = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
    # Whether `.ners()` was called. An attribute rather than a setting: RLlib's
    # `to_dict()` / `update_from_dict()` carry it through copies and Tune trials.
    _ners_called = False
    # Whether the algorithm acts in Box action spaces only (SAC, TD3), whose
    # actions the sampler's features take as they are (no `action_encoding`).
    continuous_actions_only = False

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class)
        self.ners_config = NERSSettings().to_dict()

    @property
    def uses_ners_replay(self) -> bool:
        """Whether the replay buffer is the NERS buffer (or a subclass)."""
        from rllib_ners.algorithms.common.config.buffer_types import (
            resolve_buffer_class,
        )
        from rllib_ners.replay_buffers.ners_episode_buffer import (
            NERSEpisodeReplayBuffer,
        )

        buffer_type = (self.replay_buffer_config or {}).get(
            "type", self.default_replay_buffer_type
        )
        try:
            buffer_class = resolve_buffer_class(buffer_type)
        except ValueError:
            return False
        return isinstance(buffer_class, type) and issubclass(
            buffer_class, NERSEpisodeReplayBuffer
        )

    @override(AlgorithmConfig)
    def validate(self) -> None:
        super().validate()
        if self.uses_ners_replay:
            self._validate_ners_replay()
        elif self._ners_called or self.ners_config != NERSSettings().to_dict():
            raise_config_error(
                self,
                "config.ners(...) settings have no effect without the NERS replay "
                "buffer (.ners() does not choose it); set "
                "replay_buffer_config['type'] to 'rllib_ners.NERSEpisodeReplayBuffer' "
                "or remove the ners() call.",
            )

    def ners(
        self,
        *,
        hidden_size: Optional[int] = NotProvided,
        encoder: Optional[str] = NotProvided,
        encoder_hiddens: Optional[Tuple[int, ...]] = NotProvided,
        encoder_out_dim: Optional[int] = NotProvided,
        lr: Optional[float] = NotProvided,
        train_size: Optional[int] = NotProvided,
        replay_reward_mode: Optional[str] = NotProvided,
        min_episodes_per_update: Optional[int] = NotProvided,
        timestep_scale: Optional[float] = NotProvided,
        action_encoding: Optional[str] = NotProvided,
        log_eps: Optional[float] = NotProvided,
        objective: Optional[str] = NotProvided,
        baseline: Optional[str] = NotProvided,
        baseline_decay: Optional[float] = NotProvided,
        parameterization: Optional[str] = NotProvided,
        per_epsilon: Optional[float] = NotProvided,
        max_log_correction: Optional[float] = NotProvided,
        train_draw: Optional[str] = NotProvided,
        normalizer_size: Optional[int] = NotProvided,
        update_interval_env_steps: Optional[int] = NotProvided,
        linear_skip: Optional[bool] = NotProvided,
        linear_skip_lr: Optional[float] = NotProvided,
        feature_normalization: Optional[str] = NotProvided,
        cache_encodings: Optional[bool] = NotProvided,
        diagnostics_sample_size: Optional[int] = NotProvided,
    ):
        """Sets the NERS sampler's settings; see `rllib_ners.NERSSettings`.

        Args:
            hidden_size: Width of the local/global/score networks (default 128).
            encoder: "separate" (the paper's own state encoder, default) or
                "module" (the RLModule's encoder output, detached).
            encoder_hiddens: Hidden layers of the separate encoder's MLP
                (default (256, 64); unused with encoder="module").
            encoder_out_dim: Output size of the separate encoder (default 32;
                unused with encoder="module").
            lr: Adam learning rate of the sampler (default 1e-4).
            train_size: |I_train| per REINFORCE step (default 256).
            replay_reward_mode: "train_return" (default) or "eval_return".
            min_episodes_per_update: Finished training episodes per sampler
                update (default 1: every episode end, as in the paper; unused
                with `update_interval_env_steps`).
            timestep_scale: Divides the in-episode timestep before tanh (with
                feature_normalization="none"; default 1000.0).
            action_encoding: "one_hot" (default) or "scaled_index".
            log_eps: Epsilon inside the REINFORCE loss's `log(sigma + eps)`
                (default 1e-6; unused unless parameterization="sigmoid").
            objective: "log_prob" (default: the gradient of the real sampling
                distribution's log-probability) or "log_score" (the paper's).
            baseline: "ema" (default; r_re scaled by a running std),
                "previous_window" or "first" (the reference's frozen baseline).
            baseline_decay: Decay of the "ema" baseline (default 0.9).
            parameterization: "per_residual" (default: PER's priority times a
                learned correction) or "sigmoid" (the paper's sigma^alpha).
            per_epsilon: PER's epsilon in the per_residual priority (default
                1e-6).
            max_log_correction: Bound b of per_residual's learned log-correction
                `b * tanh(logit / b)` (default 5.0; None: unbounded).
            train_draw: "uniform_set" (default) or "replay_multiset" (the
                reference: with replacement from the replays since the update).
            normalizer_size: Transitions drawn per "log_prob" step for the
                normaliser's gradient (default 1024).
            update_interval_env_steps: None (default: at episode ends) or a
                number of env steps between sampler updates (reference: 1000).
            linear_skip: A zero-initialised linear path from the features to the
                score logit (default True; the reference has none).
            linear_skip_lr: Adam learning rate of that linear path (default 3e-2;
                None: lr).
            feature_normalization: "running" (default: r, delta, q, t
                standardised by running statistics before tanh) or "none" (raw
                r, delta, q and t / timestep_scale, as the reference code).
            cache_encodings: Reuse the separate image encoder's output for a
                stored observation between sampler updates when scoring (the
                same scores, less CNN work). None (default): cached, except by
                a Learner replaying its updates from CUDA graphs
                (`cuda_graph_updates=True`), which encodes inside the graph;
                True: cached in any case (such a Learner updates eagerly).
                Unused with encoder="module" and with vector observations.
            diagnostics_sample_size: Stored transitions the per-iteration
                sampler diagnostics look at, a uniform random subset when the
                buffer holds more (default 8192).
        """
        for name, value in locals().items():
            if name != "self" and value is not NotProvided:
                self.ners_config[name] = value
        self._ners_called = True
        return self

    def _validate_ners_replay(self) -> None:
        """Raises config errors (`raise_config_error`) for bad NERS settings and
        set-ups of a config that replays from the NERS buffer."""
        who = getattr(self.algo_class, "__name__", type(self).__name__)
        problem = ners_replay_problem(
            self.replay_buffer_config or {},
            self.ners_config,
            evaluates=bool(self.evaluation_interval or self.evaluation_num_env_runners),
        )
        if problem is not None:
            raise_config_error(self, problem)
        warn_of_switched_off_ners_settings(type(self), self.ners_config)
        if self.continuous_actions_only:
            warn_of_a_discrete_action_setting(type(self), self.ners_config)
        if self.is_multi_agent:
            raise_config_error(
                self,
                f"{who} supports single-agent setups only; remove the multi_agent() "
                f"policies.",
            )


def ners_replay_problem(
    buffer_config: Dict[str, Any],
    ners_settings: Dict[str, Any],
    *,
    evaluates: bool,
    settings_call: str = "config.ners(",
) -> Optional[str]:
    """What is wrong with NERS replay from `buffer_config` (the NERS buffer's)
    with the sampler settings `ners_settings`, or None; `evaluates`: whether
    the config has evaluation workers; `settings_call`: the start of the call
    that takes the sampler settings, as the fix names it. Shared by the NERS configs'
    `validate()` and `enable_ners`."""
    # alpha = 0 is a valid buffer setting (uniform replay) that makes NERS
    # pointless; values out of range are the buffer settings' check.
    if buffer_config.get("alpha", 1.0) == 0:
        return (
            f"NERS replay with replay_buffer_config['alpha']="
            f"{buffer_config.get('alpha')!r} samples uniformly and ignores "
            f"the learned scores; set alpha > 0 (e.g. 0.6)."
        )
    try:
        NERSSettings.from_dict(ners_settings)
    except ValueError as error:
        return str(error).replace("`config.ners(", f"`{settings_call}")
    if ners_settings.get("replay_reward_mode") == "eval_return" and not evaluates:
        return (
            "NERS replay_reward_mode='eval_return' needs evaluation workers: set "
            "config.evaluation(evaluation_num_env_runners=1, "
            "evaluation_duration=5, evaluation_duration_unit='episodes')."
        )
    return None


def warn_of_a_discrete_action_setting(
    owner: type, ners_settings: Dict[str, Any]
) -> bool:
    """Logs a warning, once per `owner` (a config class of Box actions only),
    when `action_encoding` differs from its default: the sampler's features
    take continuous actions as they are. Returns whether it warned."""
    value = ners_settings.get("action_encoding", ACTION_ENCODING_DEFAULT)
    if value == ACTION_ENCODING_DEFAULT:
        return False
    if log_once(f"ners_action_encoding_{owner.__qualname__}"):
        logger.warning(
            "NERS setting action_encoding=%r has no effect on %s's continuous "
            "(Box) actions, which the sampler's features take as they are; it "
            "is ignored. Leave action_encoding at its default (%r).",
            value,
            owner.__name__,
            ACTION_ENCODING_DEFAULT,
        )
    return True


def warn_of_switched_off_ners_settings(
    owner: type, ners_settings: Dict[str, Any]
) -> List[str]:
    """Logs a warning, once per `owner` (a config class) and setting, for each
    sampler setting another leaves unused (`NERSSettings.switched_off`);
    returns their names. A warning, not an error: a Tune sweep over the
    switch keeps the setting for the trials that use it."""
    ignored = NERSSettings.from_dict(ners_settings).switched_off()
    for name, value, default, switch in ignored:
        # Once per config class and setting: validate() runs often.
        if log_once(f"ners_switched_off_{owner.__qualname__}_{name}"):
            logger.warning(
                "NERS setting %s=%r has no effect unless %s; it is ignored. Set "
                "%s, or leave %s at its default (%r).",
                name,
                value,
                switch,
                switch,
                name,
                default,
            )
    return [name for name, *_ in ignored]
