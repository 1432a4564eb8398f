"""NERS sampler settings: one validated dataclass shared by configs and learners."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from rllib_ners.ners.diagnostics import DIAGNOSTICS_SAMPLE_SIZE
from rllib_ners.utils.checks import is_finite_positive_number

REPLAY_REWARD_MODES = ("train_return", "eval_return")
ENCODERS = ("separate", "module")
ACTION_ENCODINGS = ("one_hot", "scaled_index")
OBJECTIVES = ("log_score", "log_prob")
BASELINES = ("previous_window", "first", "ema")
PARAMETERIZATIONS = ("sigmoid", "per_residual")
TRAIN_DRAWS = ("uniform_set", "replay_multiset")
FEATURE_NORMALIZATIONS = ("running", "none")

# One check of `NERSSettings.validate`: (setting, value, check, what it asks).
_Rule = Tuple[str, Any, Callable[[Any], bool], str]


def _is_positive_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value > 0


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class NERSSettings:
    """Settings of the Neural Experience Replay Sampler.

    Attributes:
        hidden_size: Width `h` of the local, global and score networks (reference:
            128). f_l and f_g map features to `h // 2`; f_s maps `[h//2 + h//2]` to a
            score through hidden layers `h` and `h // 2`.
        encoder: "separate" trains the paper's own state encoder (MLP for vector
            observations, two 5x5 stride-5 convolutions for images; images
            smaller than 25x25 get one 3x3 stride-1 convolution with 16
            channels, the "small" CNN of `rllib_ners.networks.conv_stack`)
            inside the sampler; "module" reuses the RLModule's encoder output,
            detached, so the sampler adds no encoder of its own.
        encoder_hiddens: Hidden layers of the separate MLP encoder (vectors) or of
            the MLP after the convolutions (images: reference 256, 64).
        encoder_out_dim: Size of the separate encoder's output (reference: 32).
        lr: Adam learning rate of the sampler networks (reference: 1e-4).
        train_size: Size of I_train, the transitions drawn from I_all for one
            REINFORCE step (default 256: the gradient's noise falls with it and
            scoring 256 rows costs little; reference: the batch size, 32).
        replay_reward_mode: "train_return" computes the replay reward from the
            training episodes RLlib already collects; "eval_return" runs RLlib
            evaluation episodes at each sampler update (extra env steps, counted).
        min_episodes_per_update: Training episodes that must finish before the
            sampler is updated (the paper updates at every episode end: 1).
        timestep_scale: With `feature_normalization="none"`, the in-episode
            timestep is divided by this before tanh squashing, so that `t` stays
            informative (the reference feeds the raw timestep, which saturates
            tanh at 1 for every t >= 3). Unused with "running".
        feature_normalization: How the scalar features (n-step return r, delta,
            q, t) enter tanh. "running" (default) standardises each by the
            running mean and variance of every row scored so far (kept in the
            scorer's state, identical on every Learner), so none saturates
            whatever the scale of rewards and values; "none" feeds raw r, delta,
            q and `t / timestep_scale` (the reference code's semantics).
        action_encoding: How discrete actions enter the features: "one_hot" or
            "scaled_index" (`a / (num_actions - 1)`).
        log_eps: Added to the sigmoid score inside the REINFORCE loss's log,
            `log(sigma + log_eps)` (only with parameterization="sigmoid").
        objective: The REINFORCE objective of one sampler step on I_train, with
            replay reward r_re:
            "log_score" (the paper's Eq. 7): `-r_re * mean_i log sigma_i`. It
            pushes every item of I_train the same way and has no normaliser, so
            it cannot move mass between items by itself.
            "log_prob": the score-function gradient of the real sampling
            distribution, `log p_i = log leaf_i - log sum_k leaf_k` with
            `leaf = sigma^alpha` (or the per_residual leaf). The normaliser is
            estimated from `normalizer_size` stored transitions drawn
            uniformly (`(N / K) sum_u leaf_u`, never-scored ones at their fixed
            priority): a self-normalised estimate of its gradient, exact when
            K covers the buffer, and invariant to a shift of every log leaf.
        baseline: What the replay reward compares a window's mean return with:
            "previous_window" (`r_re = G_k - G_{k-1}`), "first" (the first
            window's return, frozen: the reference code), or "ema" (an
            exponential moving average of window returns with decay
            `baseline_decay`; r_re is divided by a running standard deviation of
            `G - baseline`, so its scale does not depend on the task's returns).
        baseline_decay: Decay of the "ema" baseline and of its running variance.
        parameterization: How a score becomes a priority (the sum-tree leaf):
            "sigmoid" (the paper): `leaf = sigma^alpha`, sigma = sigmoid(logit)
            in (0, 1); a fresh scorer gives every transition almost the same
            sigma, so replay starts uniform.
            "per_residual": `leaf = ((|delta| + per_epsilon) * exp(logit))^alpha`:
            PER's priority times a learned correction `exp(logit)` (about 1 for
            a fresh scorer), so replay starts as PER and the sampler learns what
            to add to it; the logit's log-correction is bounded by
            `max_log_correction`.
        per_epsilon: Added to |delta| in the per_residual priority (PER's eps).
        max_log_correction: per_residual only: the learned log-correction is
            `b * tanh(logit / b)` with `b` this bound (default 5.0), so the
            scorer re-weights PER's priority by at most `exp(alpha * b)` either
            way (12x at alpha 0.5, 20x at 0.6). Without a bound (None; the logit is then
            clipped at +-20) the noisy REINFORCE steps let the logits drift
            apart until a few transitions hold nearly all the sampling mass
            (measured on Acrobot: effective sample fraction 0.003, and the
            agent stopped learning).
        train_draw: How I_train is drawn from I_all, the transitions replayed
            since the last sampler update: "uniform_set" (uniformly, without
            replacement, from the distinct replayed transitions) or
            "replay_multiset" (with replacement from the multiset of replays, so
            weighted by how often each was replayed: the reference code).
        normalizer_size: K, the stored transitions drawn uniformly per
            "log_prob" step to estimate the normaliser's gradient (default 1024).
        update_interval_env_steps: None (default): the sampler updates when
            `min_episodes_per_update` training episodes have finished. A number:
            every that many env steps instead (the reference: 1000, with
            evaluation episodes giving the replay reward).
        linear_skip: Add a linear map of the features to the score logit, zero
            at initialisation (the reference has none). The reference's deep
            default-initialised layers give almost the same logit to every
            transition and REINFORCE barely changes that; the linear path lets
            the gradient tell transitions apart from the first step.
        linear_skip_lr: Adam learning rate of the linear path (default 3e-2;
            None: `lr`; unused with `linear_skip=False`). One replay reward per
            update carries little information and Adam moves each weight by
            at most about its learning rate per step, so at the deep networks'
            `lr` the linear path needs thousands of updates to move a priority
            by a factor of e. Its few weights tolerate a larger rate; the deep
            networks' many weights do not (they turn reward noise into random
            priorities). 3e-2 is the rate at which the replay-reward oracle
            (`tests/sampler_oracle.py`) moves sampling mass steadily
            without the reversals that higher rates show.
        cache_encodings: With encoder="separate" and image observations,
            keep the encoder's output for each stored observation between
            sampler updates and score with it instead of running the CNN again
            (`rllib_ners.ners.encoding_cache`; the same scores, as the encoder
            only changes at sampler updates). None (the default): cached,
            except by a Learner that replays its updates from CUDA graphs
            (`cuda_graph_updates=True` on a GPU), which encodes inside the
            graph, as the cache's host-side bookkeeping cannot be captured.
            True caches in any case (such a Learner then updates eagerly);
            False encodes every scored batch afresh. Vector observations never
            use it (their MLP encoder costs less than the lookup).
        diagnostics_sample_size: The per-iteration sampler diagnostics of
            `result["ners"]` look at a uniform random subset of this many stored
            transitions when the buffer holds more (all of them otherwise).
    """

    hidden_size: int = 128
    encoder: str = "separate"
    encoder_hiddens: Tuple[int, ...] = (256, 64)
    encoder_out_dim: int = 32
    lr: float = 1e-4
    train_size: int = 256
    replay_reward_mode: str = "train_return"
    min_episodes_per_update: int = 1
    timestep_scale: float = 1000.0
    action_encoding: str = "one_hot"
    log_eps: float = 1e-6
    objective: str = "log_prob"
    baseline: str = "ema"
    baseline_decay: float = 0.9
    parameterization: str = "per_residual"
    per_epsilon: float = 1e-6
    max_log_correction: Optional[float] = 5.0
    train_draw: str = "uniform_set"
    normalizer_size: int = 1024
    update_interval_env_steps: Optional[int] = None
    linear_skip: bool = True
    linear_skip_lr: Optional[float] = 3e-2
    feature_normalization: str = "running"
    cache_encodings: Optional[bool] = None
    diagnostics_sample_size: int = DIAGNOSTICS_SAMPLE_SIZE

    def __post_init__(self):
        hiddens = self.encoder_hiddens
        if isinstance(hiddens, (str, bytes)) or not isinstance(hiddens, Iterable):
            raise ValueError(
                f"NERS setting `encoder_hiddens={hiddens!r}` is invalid: a sequence "
                f"of layer widths, e.g. `config.ners(encoder_hiddens=(256, 64))`."
            )
        object.__setattr__(self, "encoder_hiddens", tuple(hiddens))
        self.validate()

    def validate(self) -> None:
        """Raises `ValueError` naming the first bad setting (in the order of
        `_rules`) and the `.ners(...)` fix."""
        for name, value, is_valid, rule in self._rules():
            if not is_valid(value):
                raise ValueError(
                    f"NERS setting `{name}={value!r}` is invalid: {rule}. Fix it "
                    f"with `config.ners({name}=...)`."
                )

    def _rules(self) -> List[_Rule]:
        """(setting, value, check, what the check asks), in the order checked."""

        def choice(name: str, allowed: Tuple[str, ...]) -> _Rule:
            is_allowed = lambda value: value in allowed  # noqa: E731
            return (name, getattr(self, name), is_allowed, f"use one of {allowed}")

        positive_int = (_is_positive_int, "it must be a positive integer")
        positive = (is_finite_positive_number, "it must be a finite number > 0")
        sizes = (
            "encoder_out_dim",
            "train_size",
            "min_episodes_per_update",
            "diagnostics_sample_size",
        )
        return [
            ("hidden_size", self.hidden_size, *positive_int),
            (
                "hidden_size",
                self.hidden_size,
                lambda v: v >= 2,
                "it must be at least 2",
            ),
            *[(name, getattr(self, name), *positive_int) for name in sizes],
            *[
                ("encoder_hiddens", width, *positive_int)
                for width in self.encoder_hiddens
            ],
            (
                "lr",
                self.lr,
                is_finite_positive_number,
                "the sampler learning rate must be a finite number > 0",
            ),
            ("timestep_scale", self.timestep_scale, *positive),
            ("log_eps", self.log_eps, *positive),
            choice("replay_reward_mode", REPLAY_REWARD_MODES),
            ("normalizer_size", self.normalizer_size, *positive_int),
            (
                "update_interval_env_steps",
                self.update_interval_env_steps,
                lambda v: v is None or _is_positive_int(v),
                positive_int[1],
            ),
            (
                "baseline_decay",
                self.baseline_decay,
                lambda v: isinstance(v, (int, float)) and 0.0 < v < 1.0,
                "it must lie in (0, 1)",
            ),
            ("per_epsilon", self.per_epsilon, *positive),
            (
                "max_log_correction",
                self.max_log_correction,
                lambda v: v is None or is_finite_positive_number(v),
                "it must be a finite number > 0, or None for no bound",
            ),
            choice("objective", OBJECTIVES),
            choice("baseline", BASELINES),
            choice("parameterization", PARAMETERIZATIONS),
            choice("train_draw", TRAIN_DRAWS),
            ("linear_skip", self.linear_skip, _is_bool, "it must be True or False"),
            (
                "cache_encodings",
                self.cache_encodings,
                lambda v: v is None or _is_bool(v),
                "it must be True, False, or None (cached unless the Learner "
                "replays its updates from CUDA graphs)",
            ),
            (
                "linear_skip_lr",
                self.linear_skip_lr,
                lambda v: v is None or is_finite_positive_number(v),
                "it must be a finite number > 0, or None for `lr`",
            ),
            choice("encoder", ENCODERS),
            choice("action_encoding", ACTION_ENCODINGS),
            choice("feature_normalization", FEATURE_NORMALIZATIONS),
        ]

    def switched_off(self) -> List[Tuple[str, Any, Any, str]]:
        """`(setting, value, default, switch)` for each setting that differs
        from its default while another setting leaves it unused (`switch`
        says what would use it): it would be ignored."""
        defaults = NERSSettings()
        return [
            (name, getattr(self, name), getattr(defaults, name), switch)
            for name, switch, is_on in _SWITCHED_SETTINGS
            if not is_on(self) and getattr(self, name) != getattr(defaults, name)
        ]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> NERSSettings:
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(
                f"Unknown NERS settings {sorted(unknown)}; known ones are "
                f"{sorted(f.name for f in dataclasses.fields(cls))}."
            )
        return cls(**values)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


# Settings another one switches on: (setting, the switch in words, whether it
# is on). Each is read only on that branch (`scorer`, `reinforce`,
# `sampler_update`).
_SWITCHED_SETTINGS: Tuple[Tuple[str, str, Callable[[NERSSettings], bool]], ...] = (
    (
        "timestep_scale",
        "feature_normalization='none'",
        lambda s: s.feature_normalization == "none",
    ),
    (
        "per_epsilon",
        "parameterization='per_residual'",
        lambda s: s.parameterization == "per_residual",
    ),
    (
        "max_log_correction",
        "parameterization='per_residual'",
        lambda s: s.parameterization == "per_residual",
    ),
    (
        "log_eps",
        "parameterization='sigmoid'",
        lambda s: s.parameterization == "sigmoid",
    ),
    ("baseline_decay", "baseline='ema'", lambda s: s.baseline == "ema"),
    ("linear_skip_lr", "linear_skip=True", lambda s: s.linear_skip),
    ("normalizer_size", "objective='log_prob'", lambda s: s.objective == "log_prob"),
    # The sampler's own encoder; encoder="module" reads the RLModule's instead.
    ("encoder_hiddens", "encoder='separate'", lambda s: s.encoder == "separate"),
    ("encoder_out_dim", "encoder='separate'", lambda s: s.encoder == "separate"),
    # The cache holds the separate encoder's outputs (for image observations;
    # which observations a config has is not known here).
    ("cache_encodings", "encoder='separate'", lambda s: s.encoder == "separate"),
    # A sampler window closes every `update_interval_env_steps` env steps
    # when that is set, however many episodes finished (`ReplayRewardWindow`).
    (
        "min_episodes_per_update",
        "update_interval_env_steps=None",
        lambda s: s.update_interval_env_steps is None,
    ),
)
