"""Contract of `rllib_ners.seam.replay`: RLlib's replay-buffer internals we use,
and the RLlib buffer API our buffers answer without running RLlib's
`__init__`s."""

from __future__ import annotations

import inspect

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
    only to instances of it) without running its `__init__`: our storage is
    different. A public method RLlib adds or changes would then read state that
    we never set; every one must work on our buffer."""
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
        PrioritizedEpisodeReplayBuffer, FastPrioritizedEpisodeReplayBuffer(100)
    )


def test_our_multi_agent_buffer_answers_every_public_method_of_rllibs():
    """The same for the multi-agent buffer, which skips the `__init__`s of
    RLlib's multi-agent buffers."""
    from rllib_ners import FastMultiAgentPrioritizedEpisodeReplayBuffer

    _check_public_methods(
        MultiAgentPrioritizedEpisodeReplayBuffer,
        FastMultiAgentPrioritizedEpisodeReplayBuffer(100),
    )


def _check_public_methods(rllib_class, buffer) -> None:
    """Every public method of `rllib_class` callable without arguments works on
    our (empty) `buffer`."""
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
    broken = {}
    for name in no_argument_methods:
        if name in ("sample", "add", "update_priorities", "set_state"):
            continue  # need data; covered by the buffer's own tests
        try:
            getattr(buffer, name)()
        except Exception as error:  # noqa: BLE001 - report them all at once
            broken[name] = f"{type(error).__name__}: {error}"
    assert not broken, (
        f"RLlib changed: these public methods of {rllib_class.__name__} fail on "
        f"our buffer: {broken}. Adapt {type(buffer).__name__} (override them)."
    )


@pytest.mark.parametrize("which", ["single", "multi"])
def test_our_buffers_use_no_attribute_rllibs_init_would_set(which):
    """Our buffers skip RLlib's prioritized `__init__`s; they keep their own
    state under names RLlib's buffers do not use, so no method of RLlib's
    reads our state by accident (nor ours RLlib's leftovers)."""
    from rllib_ners import (
        FastMultiAgentPrioritizedEpisodeReplayBuffer,
        FastPrioritizedEpisodeReplayBuffer,
    )

    if which == "single":
        ours = FastPrioritizedEpisodeReplayBuffer(100)
        rllib = PrioritizedEpisodeReplayBuffer(100)
    else:
        ours = FastMultiAgentPrioritizedEpisodeReplayBuffer(100)
        rllib = MultiAgentPrioritizedEpisodeReplayBuffer(100)
    rllib_private = {name for name in vars(rllib) if name.startswith("_")}
    # What EpisodeReplayBuffer.__init__ (which ours runs) sets itself.
    shared = {"_num_episodes_evicted", "_metrics_num_episodes_for_smoothing"}
    ours_private = {name for name in vars(ours) if name.startswith("_")}
    clashes = sorted((ours_private & rllib_private) - shared)
    assert not clashes, (
        f"RLlib changed: {type(rllib).__name__} now sets {clashes}. Rename ours "
        f"in rllib_ners/replay_buffers/ ({type(ours).__name__})."
    )
