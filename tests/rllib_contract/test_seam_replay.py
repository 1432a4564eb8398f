"""Contract of `rllib_ners.seam.replay`: RLlib's replay-buffer internals we use,
and the RLlib buffer API our buffers answer over RLlib's `__init__`s, which
they run at the smallest capacity (`ring_replay_buffer.RingReplayBuffer`)."""

from __future__ import annotations

import inspect
from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from ray.rllib.utils.replay_buffers import (
    MultiAgentPrioritizedEpisodeReplayBuffer,
    PrioritizedEpisodeReplayBuffer,
)

from rllib_ners.seam.replay import log_add_metrics, log_sample_metrics

OBS_SPACE = gym.spaces.Box(-1e3, 1e3, (2,), np.float32)
ACTION_SPACE = gym.spaces.Discrete(2)


def _fail(what_changed: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt rllib_ners/seam/replay.py."


def _episode(ep: int, num_steps: int) -> SingleAgentEpisode:
    """Episode `ep` whose observation `t` is `[ep, t]`."""
    return SingleAgentEpisode(
        id_=f"e{ep}",
        observations=[np.array([ep, t], np.float32) for t in range(num_steps + 1)],
        actions=[t % 2 for t in range(num_steps)],
        rewards=[1.0] * num_steps,
        terminated=True,
        len_lookback_buffer=0,
        observation_space=OBS_SPACE,
        action_space=ACTION_SPACE,
    )


def _filled_buffer() -> PrioritizedEpisodeReplayBuffer:
    buffer = PrioritizedEpisodeReplayBuffer(100)
    buffer.add([_episode(0, 10), _episode(1, 5)])
    return buffer


def _peek(metrics):
    if isinstance(metrics, dict):
        return {key: _peek(value) for key, value in metrics.items()}
    return metrics.peek()


def _per_agent_and_module(**values):
    out = {}
    for name, value in values.items():
        out[f"agent_to_{name}"] = {DEFAULT_AGENT_ID: value}
        out[f"module_to_{name}"] = {DEFAULT_MODULE_ID: value}
    return out


def test_log_add_metrics_logs_what_rllibs_add_logs():
    """RLlib's `add()` of two episodes (15 steps, nothing evicted) logs the
    same metrics as `log_add_metrics` with those counts."""
    rllib = _filled_buffer()
    ours = _filled_buffer()
    ours.metrics = MetricsLogger(root=False)  # forget what add() logged
    counts = {
        "num_episodes_added": 2,
        "num_env_steps_added": 15,
        "num_episodes_evicted": 0,
        "num_env_steps_evicted": 0,
    }
    counts.update(
        **_per_agent_and_module(
            num_episodes_added=2,
            num_steps_added=15,
            num_episodes_evicted=0,
            num_steps_evicted=0,
        )
    )
    log_add_metrics(ours, **counts)
    expected = _peek(rllib.get_metrics())
    assert _peek(ours.get_metrics()) == expected, _fail(
        "EpisodeReplayBuffer._update_add_metrics logs other metrics for an add()"
    )
    assert expected["num_env_steps_added"] == 15
    assert expected["num_episodes_stored"] == 2  # the buffer's stored count


def test_log_sample_metrics_logs_what_rllibs_sample_logs():
    rllib = _filled_buffer()
    rllib.rng = np.random.default_rng(0)
    rllib.metrics = MetricsLogger(root=False)
    sampled = rllib.sample(num_items=6, n_step=1)
    steps = {tuple(np.asarray(e.get_observations()[0]).tolist()) for e in sampled}
    num_episodes = len({ep for ep, _ in steps})
    ours = _filled_buffer()
    ours.metrics = MetricsLogger(root=False)
    log_sample_metrics(
        ours,
        num_env_steps_sampled=6,
        num_episodes_per_sample=num_episodes,
        num_env_steps_per_sample=len(steps),
        sampled_n_step=1.0,
        num_resamples=0,
        **_per_agent_and_module(
            num_steps_sampled=6,
            num_episodes_per_sample=num_episodes,
            num_steps_per_sample=len(steps),
            sampled_n_step=1.0,
            num_resamples=0,
        ),
    )
    expected = _peek(rllib.get_metrics())
    assert _peek(ours.get_metrics()) == expected, _fail(
        "EpisodeReplayBuffer._update_sample_metrics logs other metrics for a sample()"
    )
    assert expected["num_env_steps_sampled"] == 6


def test_the_metric_hooks_take_the_arguments_we_pass():
    """Our buffers pass these keywords (see `replay_buffers/buffer_metrics`);
    RLlib's multi-agent buffers inherit the same hooks."""
    from ray.rllib.utils.replay_buffers.episode_replay_buffer import (
        EpisodeReplayBuffer,
    )

    for hook, names in (
        ("_update_add_metrics", ("num_episodes_added", "module_to_num_steps_evicted")),
        (
            "_update_sample_metrics",
            ("num_env_steps_sampled", "module_to_num_resamples"),
        ),
    ):
        function = getattr(EpisodeReplayBuffer, hook, None)
        assert function is not None, _fail(f"EpisodeReplayBuffer.{hook} is gone")
        params = inspect.signature(function).parameters
        assert all(name in params for name in names), _fail(
            f"the keyword arguments of EpisodeReplayBuffer.{hook}"
        )
        assert getattr(MultiAgentPrioritizedEpisodeReplayBuffer, hook) is function, (
            _fail(f"RLlib's multi-agent buffers override {hook}")
        )


# ---------------------------------------------- our buffers as RLlib's buffers
def test_our_buffer_answers_every_public_method_of_rllibs_prioritized_buffer():
    """We subclass RLlib's `PrioritizedEpisodeReplayBuffer` (DQN routes TD errors
    only to instances of it) over storage of our own: a public method RLlib adds
    or changes would read RLlib's storage, which ours never fills; every one
    must answer on our buffer what it answers on RLlib's holding the same
    episodes."""
    from ray.rllib.utils.replay_buffers.utils import (
        update_priorities_in_episode_replay_buffer,
    )

    from rllib_ners import FastPrioritizedEpisodeReplayBuffer

    assert "PrioritizedEpisodeReplayBuffer" in inspect.getsource(
        update_priorities_in_episode_replay_buffer
    ), (
        "RLlib changed: DQN no longer routes TD errors to "
        "PrioritizedEpisodeReplayBuffer instances. Adapt the base class of "
        "rllib_ners/replay_buffers/ring_replay_buffer.py."
    )
    _check_public_methods(
        PrioritizedEpisodeReplayBuffer,
        FastPrioritizedEpisodeReplayBuffer(100, seed=0),
        episodes=lambda: [_episode(0, 10), _episode(1, 5)],
        differ_by_design={},
        metrics_by_design=(),
    )


def test_our_multi_agent_buffer_answers_every_public_method_of_rllibs():
    """The same for the multi-agent buffer and RLlib's multi-agent buffers."""
    from multi_agent_episodes import collect_multi_agent_cartpole

    from rllib_ners import FastMultiAgentPrioritizedEpisodeReplayBuffer

    _check_public_methods(
        MultiAgentPrioritizedEpisodeReplayBuffer,
        FastMultiAgentPrioritizedEpisodeReplayBuffer(100, seed=0),
        episodes=lambda: collect_multi_agent_cartpole(40, cut_every=7),
        # The module docstring: without a module_id, ours counts stored agent
        # steps (modules evict on their own), RLlib's env steps.
        differ_by_design={"get_num_timesteps": "get_num_agent_timesteps"},
        metrics_by_design=("num_env_steps_stored",),
    )


def _check_public_methods(
    rllib_class, buffer, *, episodes, differ_by_design, metrics_by_design
):
    """Every public method of `rllib_class` callable without arguments answers
    on our `buffer` what it answers on an `rllib_class` buffer given the same
    `episodes()` (a method inherited from RLlib that reads RLlib's storage
    answers as if the buffer were empty). `differ_by_design` maps a method
    whose answer differs on purpose to the RLlib method ours answers like;
    `get_metrics()` answers RLlib's keys alike, but for `metrics_by_design`,
    and adds keys of its own (docs/drop-in.md, "Metrics")."""
    rllib_buffer = rllib_class(100)
    rllib_buffer.add(episodes())
    buffer.add(episodes())
    no_argument_methods = [
        name
        for name, member in inspect.getmembers(rllib_class)
        if not name.startswith("_")
        and callable(member)
        and all(
            p.default is not inspect.Parameter.empty
            or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            for p in list(inspect.signature(member).parameters.values())[1:]
        )
    ]
    # `get_state` is ours by design (`rllib_states` converts); the others need
    # data and are covered by the buffers' own tests.
    skipped = ("sample", "add", "update_priorities", "set_state", "get_state")
    assert "get_num_episodes" in no_argument_methods, no_argument_methods
    broken = {}
    for name in no_argument_methods:
        if name in skipped:
            continue
        try:
            ours = _answer(getattr(buffer, name)())
        except Exception as error:  # noqa: BLE001 - report them all at once
            broken[name] = f"{type(error).__name__}: {error}"
            continue
        expected = _answer(getattr(rllib_buffer, differ_by_design.get(name, name))())
        if name == "get_metrics":
            ours = {key: ours.get(key, "missing") for key in expected}
            for key in metrics_by_design:
                ours.pop(key), expected.pop(key)
        if ours != expected:
            broken[name] = f"ours {ours!r}, RLlib's {expected!r}"
    assert not broken, (
        f"RLlib changed: these public methods of {rllib_class.__name__} answer "
        f"otherwise on our buffer: {broken}. Adapt {type(buffer).__name__} "
        f"(override them)."
    )


def _answer(value):
    """A method's answer as plain data (metrics by their reduced values)."""
    if isinstance(value, dict):
        return {key: _answer(item) for key, item in value.items()}
    if hasattr(value, "peek"):
        return value.peek()
    return value


def _buffer_pair(which: str):
    """Ours, used (added to, sampled, priorities updated, state restored), and
    RLlib's as RLlib's `__init__` leaves it for ours (same settings, capacity
    `RLLIB_STORAGE_CAPACITY`)."""
    from multi_agent_episodes import collect_multi_agent_cartpole

    from rllib_ners import (
        FastMultiAgentPrioritizedEpisodeReplayBuffer,
        FastPrioritizedEpisodeReplayBuffer,
    )
    from rllib_ners.replay_buffers.ring_replay_buffer import RLLIB_STORAGE_CAPACITY

    settings = {
        "batch_size_B": 8,
        "batch_length_T": 1,
        "alpha": 0.6,
        "metrics_num_episodes_for_smoothing": 7,
    }
    if which == "single":
        ours = FastPrioritizedEpisodeReplayBuffer(100, seed=0, **settings)
        rllib = PrioritizedEpisodeReplayBuffer(RLLIB_STORAGE_CAPACITY, **settings)
        ours.add([_episode(0, 10), _episode(1, 5)])
        ours.sample(num_items=4)
        ours.update_priorities(np.arange(1.0, 5.0))
    else:
        ours = FastMultiAgentPrioritizedEpisodeReplayBuffer(100, seed=0, **settings)
        rllib = MultiAgentPrioritizedEpisodeReplayBuffer(
            RLLIB_STORAGE_CAPACITY, **settings
        )
        ours.add(collect_multi_agent_cartpole(40, cut_every=7))
        ours.sample(num_items=4)
        for module_id in ours.get_module_ids():
            ours.update_priorities(np.arange(1.0, 5.0), module_id=module_id)
    ours.set_state(ours.get_state())
    ours.get_metrics()
    return ours, rllib


def _comparable(value):
    """`value` as plain data (RLlib's segment trees by their leaves and nodes)."""
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, type(deque()))):
        return [_comparable(item) for item in value]
    if hasattr(value, "operation") and hasattr(value, "value"):
        return ("segment tree", value.capacity, list(value.value))
    return value


@pytest.mark.parametrize("which", ["single", "multi"])
def test_rllibs_init_runs_on_our_buffers_and_its_storage_stays_untouched(which):
    """Our buffers run RLlib's `__init__` with capacity `RLLIB_STORAGE_CAPACITY`
    (`RingReplayBuffer` says why): the public attributes it sets hold our
    settings, and every private one stays as RLlib's `__init__` left it, also
    after the buffer is used, so no method of ours writes RLlib's storage (the
    names our buffers write `test_private_names` keeps apart from RLlib's)."""
    ours, rllib = _buffer_pair(which)
    assert ours.capacity == 100
    assert (ours.batch_size_B, ours.batch_length_T) == (8, 1)
    assert isinstance(ours.metrics, MetricsLogger)
    assert isinstance(ours.rng, np.random.Generator)
    assert ours.sampled_timesteps == 4
    assert ours._metrics_num_episodes_for_smoothing == 7
    assert ours._alpha == 0.6
    rllib_private = {name for name in vars(rllib) if name.startswith("_")}
    assert rllib_private <= set(vars(ours)), (
        f"RLlib's __init__ did not run on {type(ours).__name__}: "
        f"{sorted(rllib_private - set(vars(ours)))} missing"
    )
    changed = sorted(
        name
        for name in rllib_private
        if _comparable(vars(ours)[name]) != _comparable(vars(rllib)[name])
    )
    assert not changed, (
        f"{type(ours).__name__} changed the state RLlib's __init__ set: {changed}. "
        f"Ours keeps its state under names of its own: rename ours in "
        f"rllib_ners/replay_buffers/."
    )


# ------------------------------------------------------- RLlib's config path
def _build_through_rllibs_config_path(config):
    """The local replay buffer `Algorithm.setup()` builds for `config`."""
    from types import SimpleNamespace

    from ray.rllib.algorithms.algorithm import Algorithm

    algorithm = SimpleNamespace(config=config)
    return Algorithm._create_local_replay_buffer_if_necessary(algorithm, config)


@pytest.mark.parametrize("as_class", [False, True], ids=["dotted", "class"])
@pytest.mark.parametrize("which", ["single", "multi"])
def test_rllibs_config_path_builds_our_buffers_by_dotted_string_and_class(
    which, as_class
):
    """`Algorithm.setup()` builds the buffer of `replay_buffer_config` whether
    its `type` is our dotted string or our class (what `update_from_dict`, and
    so Ray Tune, turns the string into), and RLlib's `"EpisodeReplayBuffer" in
    type` test passes it `metrics_num_episodes_for_smoothing` either way."""
    from ray.rllib.algorithms.dqn import DQNConfig

    import rllib_ners

    name = {
        "single": "FastPrioritizedEpisodeReplayBuffer",
        "multi": "FastMultiAgentPrioritizedEpisodeReplayBuffer",
    }[which]
    buffer_class = getattr(rllib_ners, name)
    config = DQNConfig().training(
        replay_buffer_config={"type": f"rllib_ners.{name}", "capacity": 64}
    )
    config = config.reporting(metrics_num_episodes_for_smoothing=7)
    if as_class:
        config = DQNConfig().update_from_dict(config.to_dict())
        assert config.replay_buffer_config["type"] is buffer_class
    buffer = _build_through_rllibs_config_path(config)
    assert type(buffer) is buffer_class
    assert buffer.capacity == 64
    assert buffer._metrics_num_episodes_for_smoothing == 7


def test_rllibs_config_path_still_fails_for_a_buffer_class_of_its_own():
    """Why our buffer classes have the metaclass `RLlibTypeString`
    (`ring_replay_buffer.RingReplayBuffer`): RLlib's substring test on `type`
    raises for a class without it, RLlib's own buffer classes included."""
    from ray.rllib.algorithms.dqn import DQNConfig

    config = DQNConfig().training(
        replay_buffer_config={"type": PrioritizedEpisodeReplayBuffer, "capacity": 64}
    )
    try:
        _build_through_rllibs_config_path(config)
    except TypeError as error:
        assert "not iterable" in str(error)
    else:
        pytest.fail(
            "RLlib changed: it builds a buffer given as a class now. The metaclass "
            "RLlibTypeString in rllib_ners/replay_buffers/ring_replay_buffer.py "
            "can go (and this paragraph of RingReplayBuffer's docstring)."
        )
