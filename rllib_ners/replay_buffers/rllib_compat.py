"""Putting our buffers into stock RLlib algorithms whose configs refuse them.

`DQNConfig` accepts any dotted buffer type. RLlib 2.60's `SACConfig.validate()`
does not: on the new API stack it raises unless `replay_buffer_config["type"]` is
one of RLlib's four episode-buffer short names (`sac.py`, "the replay buffer must
be of type EpisodeReplayBuffer"), and that check cannot be switched off.

`with_replay_buffer(config, cls)` keeps a name SAC accepts in `type` and adds an
`on_algorithm_init` callback that replaces the (still empty) RLlib buffer with
`cls`, built from the same `replay_buffer_config`. Works for any config.
"""

from __future__ import annotations

from typing import Type

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

_TARGET_KEY = "rllib_ners_buffer_class"


def _swap_in_replay_buffer(algorithm, **kwargs) -> None:
    buffer_config = dict(algorithm.config.replay_buffer_config)
    cls = buffer_config.pop(_TARGET_KEY)
    algorithm.local_replay_buffer = _seeded_buffer(algorithm, cls, buffer_config)


def _seeded_buffer(algorithm, cls: Type, buffer_config: dict):
    """`cls` built from `buffer_config` (its `type` left out) as RLlib builds
    its episode buffers, and seeded by the algorithm's seed, as this package's
    algorithms seed theirs, unless the buffer config names its own (RLlib
    leaves its buffers unseeded)."""
    kwargs = {key: value for key, value in buffer_config.items() if key != "type"}
    kwargs["metrics_num_episodes_for_smoothing"] = (
        algorithm.config.metrics_num_episodes_for_smoothing
    )
    if algorithm.config.seed is not None and _takes_a_seed(cls):
        kwargs.setdefault("seed", algorithm.config.seed)
    return cls(**kwargs)


def _takes_a_seed(buffer_class: Type) -> bool:
    """Whether `buffer_class` takes `seed`: every buffer of this package (some
    pass it on through `**kwargs`), or a class whose constructor names it."""
    import inspect

    from rllib_ners.algorithms.common.config.buffer_types import is_fast_buffer

    return is_fast_buffer(buffer_class) or (
        "seed" in inspect.signature(buffer_class.__init__).parameters
    )


def _placeholder_type(buffer_class: Type) -> str:
    """The RLlib buffer name SAC accepts that stands in for `buffer_class`."""
    from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import (
        MultiAgentEpisodeReplayBuffer,
    )

    if issubclass(buffer_class, MultiAgentEpisodeReplayBuffer):
        return "MultiAgentPrioritizedEpisodeReplayBuffer"
    return "PrioritizedEpisodeReplayBuffer"


def with_replay_buffer(config: AlgorithmConfig, buffer_class: Type) -> AlgorithmConfig:
    """Makes `config` build its replay buffer as `buffer_class`.

    Args:
        config: A stock RLlib config with a `replay_buffer_config` (DQN, SAC, ...).
        buffer_class: E.g. `rllib_ners.FastPrioritizedEpisodeReplayBuffer` (or
            `FastMultiAgentPrioritizedEpisodeReplayBuffer` for a multi-agent
            config); the other keys of `replay_buffer_config` are its
            constructor arguments. A class that takes a `seed` is seeded by
            `config.seed` unless `replay_buffer_config` names one.
    """
    if not isinstance(config, AlgorithmConfig) or not hasattr(
        config, "replay_buffer_config"
    ):
        raise ValueError(
            f"with_replay_buffer() takes the config of an algorithm with a replay "
            f"buffer (DQN, SAC, ...), got {type(config).__name__}."
        )
    if not isinstance(buffer_class, type):
        raise ValueError(
            f"with_replay_buffer() needs a buffer class, got {buffer_class!r}."
        )
    if is_a_package_config(config):
        # Their validate() takes our buffers by name; the placeholder type
        # would fail it with a name the user never set.
        raise ValueError(
            f"with_replay_buffer() is for stock RLlib configs; "
            f"{type(config).__name__} takes this package's buffers by name: "
            f"config.training(replay_buffer_config={{'type': "
            f"'rllib_ners.{buffer_class.__name__}', ...}})."
        )
    buffer_config = dict(config.replay_buffer_config or {})
    buffer_config.update(
        type=_placeholder_type(buffer_class), **{_TARGET_KEY: buffer_class}
    )
    # Fails now, not at build time, if the settings do not fit the class.
    from rllib_ners.algorithms.common.config.buffer_config_checks import (
        buffer_settings_problem,
    )

    probe = {k: v for k, v in buffer_config.items() if k not in ("type", _TARGET_KEY)}
    problem = buffer_settings_problem(buffer_class, probe)
    if problem is not None:
        raise ValueError(f"with_replay_buffer: {problem}")
    # RLlib's placeholder buffer swallows unknown kwargs, so the class can ride
    # along in the same dict; ours is built first, before the user's hooks run.
    config.replay_buffer_config = buffer_config
    return _with_init_hook_first(config, _swap_in_replay_buffer)


def is_a_package_config(config: AlgorithmConfig) -> bool:
    """One of this package's configs, or a subclass of one."""
    return any(
        cls.__module__.startswith("rllib_ners.algorithms.")
        for cls in type(config).__mro__
    )


def seed_our_buffer_at_init(config: AlgorithmConfig) -> AlgorithmConfig:
    """Makes a stock RLlib algorithm given our buffer by `type` seed it by
    `config.seed`, as this package's algorithms do (RLlib builds the buffer
    from `replay_buffer_config` alone). Adds an `on_algorithm_init` hook, ahead
    of the others, that rebuilds the still empty buffer with the seed where
    `replay_buffer_config` names none. `enable_replay` and `enable_ners` call
    it; this package's algorithms and `with_replay_buffer` seed theirs."""
    from rllib_ners.seam.algorithm import LocalReplayBufferHook

    algo_class = config.algo_class
    if isinstance(algo_class, type) and issubclass(algo_class, LocalReplayBufferHook):
        return config  # builds its buffer seeded
    return _with_init_hook_first(config, _seed_our_stock_built_buffer)


def _seed_our_stock_built_buffer(algorithm, **kwargs) -> None:
    from rllib_ners.algorithms.common.config.buffer_types import is_fast_buffer
    from rllib_ners.seam.algorithm import LocalReplayBufferHook

    buffer_config = dict(algorithm.config.replay_buffer_config or {})
    buffer = algorithm.local_replay_buffer
    if (
        algorithm.config.seed is None
        or "seed" in buffer_config
        or _TARGET_KEY in buffer_config  # `_swap_in_replay_buffer` seeds it
        or isinstance(algorithm, LocalReplayBufferHook)  # ours seed theirs
        or not is_fast_buffer(buffer)
    ):
        return
    algorithm.local_replay_buffer = _seeded_buffer(
        algorithm, type(buffer), buffer_config
    )


def _with_init_hook_first(config: AlgorithmConfig, hook) -> AlgorithmConfig:
    """`config` with `hook` first among its `on_algorithm_init` callables
    (once: a second call leaves them as they are)."""
    existing = config.callbacks_on_algorithm_init
    if existing is None:
        hooks = []
    elif isinstance(existing, (list, tuple)):
        hooks = list(existing)
    else:
        hooks = [existing]
    if hook in hooks:
        return config
    return config.callbacks(on_algorithm_init=[hook, *hooks])
