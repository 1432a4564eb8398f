"""What `enable_ners` and `enable_replay` refuse before they change a stock config.

Both replace parts of a user's config (the buffer, the Learner class); each
refusal here stops a change that would otherwise drop something of the user's
without a word, or fail later inside `train()`.
"""

from __future__ import annotations

from rllib_ners.seam.config import user_learner_class


def refuse_other_configs(config, config_class: type, *, who: str, instead: str) -> None:
    """Raises ValueError unless `config` is a `config_class` (or a subclass):
    `who` would otherwise fail on a missing attribute, or change a config
    whose algorithm never reads the change. `instead`: what to use."""
    if isinstance(config, config_class):
        return
    got = type(config).__name__ if config is not None else "None"
    raise ValueError(
        f"{who} takes a config of type {config_class.__name__} (RLlib's or a "
        f"subclass), got {got}; "
        f"{instead}."
    )


def refuse_multi_agent(config, *, who: str) -> None:
    """Raises ValueError for a multi-agent config: its buffer, this package's
    multi-agent one, replays by priority only (a stock config would fail at
    its first `add()`, inside `train()`)."""
    if config.is_multi_agent:
        raise ValueError(
            f"{who}: single-agent configs only; this config has multi_agent() "
            f"policies, whose buffer replays by priority only. For PER per "
            f"module, set replay_buffer_config['type'] to "
            f"'rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer'."
        )


def refuse_a_users_learner_class(config, package_learner: type, *, who: str) -> None:
    """Raises ValueError where the user set a Learner class (one that is not
    `package_learner` or derived from it) that `who` would have to replace:
    replacing it would drop the user's update without a word."""
    users = user_learner_class(config)
    if users is None or (
        isinstance(users, type) and issubclass(users, package_learner)
    ):
        return
    name = getattr(users, "__name__", repr(users))
    raise ValueError(
        f"{who}: the config's learner_class {name} would be replaced by "
        f"{package_learner.__name__}, the Learner that sends what this replay "
        f"needs. Derive {name} from {package_learner.__name__}, or remove "
        f"config.learners(learner_class=...)."
    )
