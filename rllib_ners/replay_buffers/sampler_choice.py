"""The `"sampler"` setting of `replay_buffer_config`: which replay method a
buffer's sampler is, and the settings each takes beyond PER's (no Ray)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from rllib_ners.replay_buffers.laber_sampler import DEFAULT_LABER_M, LargeBatchSampler
from rllib_ners.replay_buffers.priority_sampler import PrioritySampler
from rllib_ners.replay_buffers.relo_sampler import DEFAULT_RELO_EPSILON, ReLoSampler

# `"sampler"` values, the names every layer uses, and the class each builds.
PRIORITY, RELO, LABER = PrioritySampler.name, ReLoSampler.name, LargeBatchSampler.name
SAMPLER_CLASSES = {
    PrioritySampler.name: PrioritySampler,
    ReLoSampler.name: ReLoSampler,
    LargeBatchSampler.name: LargeBatchSampler,
}

# The methods whose feedback only this package's Learners send.
LEARNER_FED_SAMPLERS = (ReLoSampler.name, LargeBatchSampler.name)

# The settings of each method beyond PER's, with their defaults.
METHOD_SETTINGS: Dict[str, Dict[str, Any]] = {
    PrioritySampler.name: {},
    ReLoSampler.name: {"relo_transform": "clip", "relo_epsilon": DEFAULT_RELO_EPSILON},
    LargeBatchSampler.name: {"laber_m": DEFAULT_LABER_M, "laber_weights": "mean"},
}
ALL_METHOD_SETTINGS = tuple(
    name for settings in METHOD_SETTINGS.values() for name in settings
)


def sampler_class_for(
    sampler: Optional[str], buffer_class: type, method_settings: Dict[str, Any]
) -> type:
    """The sampler class `buffer_class` builds for the `"sampler"` setting;
    raises naming the fix for an unknown method, one the buffer class cannot
    take, or a method setting given without its method."""
    default_class = buffer_class.sampler_class
    if sampler is None:
        chosen = default_class
    elif sampler not in SAMPLER_CLASSES:
        raise ValueError(
            f"Unknown replay method sampler={sampler!r} in `replay_buffer_config`; "
            f"choose one of {sorted(SAMPLER_CLASSES)} (or leave it out: "
            f"'priority', which is uniform replay, PER or LAP by alpha, beta and "
            f"min_priority)."
        )
    elif default_class is not PrioritySampler:
        raise ValueError(
            f"{buffer_class.__name__} replays with its own sampler "
            f"({default_class.name!r}); remove sampler={sampler!r} from "
            f"`replay_buffer_config`, or use "
            f"'rllib_ners.FastPrioritizedEpisodeReplayBuffer' for {sampler!r}."
        )
    else:
        chosen = SAMPLER_CLASSES[sampler]
    foreign = sorted(
        name
        for name in method_settings
        if name not in METHOD_SETTINGS.get(chosen.name, {})
    )
    if foreign:
        owners = ", ".join(
            f"{method!r}: {sorted(names)}"
            for method, names in METHOD_SETTINGS.items()
            if names
        )
        raise ValueError(
            f"`replay_buffer_config` sets {foreign}, which the {chosen.name!r} "
            f'sampler does not read; set `"sampler"` to the method they belong '
            f"to ({owners}) "
            f"or remove them."
        )
    return chosen


def check_learner_sends_feedback(
    sampler_class: type,
    learner_sends_feedback: Optional[bool],
    built_by_algorithm: bool,
) -> None:
    """Fails at build time when an Algorithm builds a ReLo or LaBER buffer for a
    Learner that cannot send their feedback (RLlib's send TD errors only), so a
    stock config stops here with the fix, not at its first priority update or,
    for LaBER, never (it would train on the whole uniform large batch).

    Our algorithms (`ReplayStateMixin`) and `rllib_ners.enable_replay()` pass
    `learner_sends_feedback`; RLlib's `Algorithm` passes
    `metrics_num_episodes_for_smoothing` to every episode buffer it builds, so
    that without our flag means a stock algorithm built us. A buffer built by
    hand (tests, tools) passes neither and is not checked.
    """
    if learner_sends_feedback not in (None, True, False):
        raise ValueError(
            f"`learner_sends_feedback` must be True, False or None, got "
            f"{learner_sends_feedback!r}. Our algorithms and "
            f"`rllib_ners.enable_replay()` set it; leave it out of "
            f"`replay_buffer_config`."
        )
    if sampler_class.name not in LEARNER_FED_SAMPLERS:
        return
    if learner_sends_feedback or (
        learner_sends_feedback is None and not built_by_algorithm
    ):
        return
    method = sampler_class.name
    raise ValueError(
        f"sampler={method!r} needs a Learner that sends "
        f"{sampler_class.feedback_layout.name} feedback, and the algorithm's "
        f"Learner does not (RLlib's Learners send TD errors only). Use "
        f"`rllib_ners.RainbowDQNConfig`, `NERSSACConfig` or `TD3Config`, or on a "
        f"stock DQNConfig or SACConfig call "
        f"`rllib_ners.enable_replay(config, {method!r})`. (Built by hand with "
        f"`metrics_num_episodes_for_smoothing`, for a Learner of your own that "
        f"sends it: pass `learner_sends_feedback=True`.)"
    )
