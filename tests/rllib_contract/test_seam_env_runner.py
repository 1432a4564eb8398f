"""Contract of `rllib_ners.seam.env_runner`: each function reads or writes what
RLlib's own `SingleAgentEnvRunner.sample()` reads or writes, checked on a real
EnvRunner (DQN on CartPole, two sub-envs)."""

from __future__ import annotations

import time
import types

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.core import COMPONENT_RL_MODULE
from ray.rllib.core.columns import Columns
from ray.rllib.env import single_agent_env_runner
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import (
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MEAN,
    TIME_BETWEEN_SAMPLING,
    WEIGHTS_SEQ_NO,
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
    set_runner_device,
    set_runner_weights_seq_no,
    set_time_after_sampling,
    time_after_sampling,
)

NUM_ENVS = 2


def _fail(what_changed: str) -> str:
    return f"RLlib changed: {what_changed}. Adapt rllib_ners/seam/env_runner.py."


class _Recorder(RLlibCallback):
    """Records the objects RLlib calls and the `on_episode_end` arguments."""

    def __init__(self):
        super().__init__()
        self.sample_ends = 0
        self.episode_ends = []

    def on_sample_end(self, **kwargs):
        self.sample_ends += 1

    def on_episode_end(self, **kwargs):
        self.episode_ends.append(kwargs)


def _config():
    return (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=NUM_ENVS)
        .rl_module(model_config={"fcnet_hiddens": [8], "head_fcnet_hiddens": [8]})
        .callbacks(_Recorder)
        .debugging(seed=0)
    )


@pytest.fixture
def runner(one_torch_thread):
    runner = SingleAgentEnvRunner(config=_config())
    yield runner
    runner.stop()


def _last_observations(episodes):
    return torch.from_numpy(np.stack([e.get_observations(-1) for e in episodes]))


def _finished_episode(rewards, terminated=True) -> SingleAgentEpisode:
    return SingleAgentEpisode(
        observations=[np.zeros(4, np.float32)] * (len(rewards) + 1),
        actions=[0] * len(rewards),
        rewards=list(rewards),
        terminated=terminated,
        len_lookback_buffer=0,
    )


def test_runner_callbacks_are_the_objects_rllibs_loop_calls(runner):
    callbacks = runner_callbacks(runner)
    assert [type(c) for c in callbacks] == [_Recorder], _fail(
        "the EnvRunner no longer keeps config.callbacks(...) objects as _callbacks"
    )
    runner.sample(num_timesteps=2)
    assert callbacks[0].sample_ends == 1, _fail(
        "sample() calls other callback objects than _callbacks"
    )


def test_runner_device_is_where_the_module_and_its_inputs_live(runner):
    runner.sample(num_timesteps=2)
    device = runner_device(runner)
    assert next(runner.module.parameters()).device == torch.device(device), _fail(
        "the RLModule is not on _device"
    )
    assert runner_cached_obs(runner).device == torch.device(device), _fail(
        "the env-to-module pipeline puts the module input elsewhere than _device"
    )


def test_set_runner_device_moves_the_module_and_is_what_runner_device_reads(runner):
    set_runner_device(runner, torch.device("cpu"))
    assert runner_device(runner) == torch.device("cpu"), _fail(
        "the EnvRunner no longer keeps its module's device as _device"
    )
    assert next(runner.module.parameters()).device == torch.device("cpu")
    runner.sample(num_timesteps=2)  # RLlib's loop goes on with it


def test_runner_cached_obs_is_the_module_input_for_the_current_observations(runner):
    runner.sample(num_timesteps=3)
    obs = runner_cached_obs(runner)
    assert obs.dtype == torch.float32
    torch.testing.assert_close(
        obs,
        _last_observations(ongoing_episodes(runner)),
        msg=lambda m: _fail(
            f"_cached_to_module[OBS] is not the last observations: {m}"
        ),
    )


def test_the_cached_obs_set_is_what_rllibs_next_forward_pass_reads(runner):
    runner.sample(num_timesteps=2)
    mine = torch.zeros(NUM_ENVS, 4)
    set_runner_cached_obs(runner, mine)
    inputs = []
    forward = runner.module.forward_exploration

    def recording_forward(batch, **kwargs):
        inputs.append(batch)
        return forward(batch, **kwargs)

    runner.module.forward_exploration = recording_forward
    runner.sample(num_timesteps=1)
    assert inputs and inputs[0][Columns.OBS] is mine, _fail(
        "sample() no longer feeds _cached_to_module[OBS] to the forward pass"
    )
    assert inputs[0].keys() == {Columns.OBS}, _fail(
        "the default env-to-module pipeline caches more than the observations"
    )


def test_needs_env_reset_until_sampled_and_when_requested(runner):
    assert needs_env_reset(runner), _fail("a new EnvRunner needs no reset")
    runner.sample(num_timesteps=2)
    assert not needs_env_reset(runner), _fail("sample() leaves the reset flag set")
    before = {e.id_ for e in ongoing_episodes(runner)}
    request_env_reset(runner)
    chunks = runner.sample(num_timesteps=2)
    assert all(c.t_started == 0 and c.id_ not in before for c in chunks), _fail(
        "sample() does not reset the envs when _needs_initial_reset is set"
    )
    runner.sample(num_episodes=1)
    assert needs_env_reset(runner), _fail(
        "sampling episodes no longer asks for a reset before the next call"
    )


def test_reset_envs_and_episodes_starts_a_new_episode_per_sub_env(runner):
    runner.sample(num_timesteps=4)
    before = {e.id_ for e in ongoing_episodes(runner)}
    reset_envs_and_episodes(runner, True)
    episodes = ongoing_episodes(runner)
    assert len(episodes) == NUM_ENVS
    assert all(e.is_reset and len(e) == 0 and e.id_ not in before for e in episodes)
    torch.testing.assert_close(
        runner_cached_obs(runner),
        _last_observations(episodes),
        msg=lambda m: _fail(f"the reset caches no module input for its obs: {m}"),
    )
    assert not needs_env_reset(runner)


def test_ongoing_episodes_are_the_ones_rllibs_loop_continues(runner):
    chunks = runner.sample(num_timesteps=4)
    continuations = ongoing_episodes(runner)
    assert [(e.id_, e.t_started) for e in continuations] == [
        (c.id_, c.t) for c in chunks
    ], _fail("_ongoing_episodes are not the continuations of the chunks")
    mine = list(continuations)
    set_ongoing_episodes(runner, mine)
    next_chunks = runner.sample(num_timesteps=2)
    assert all(a is b for a, b in zip(next_chunks, mine)), _fail(
        "sample() adds the steps elsewhere than to _ongoing_episodes"
    )
    assert ongoing_episodes(runner) is not mine


def test_done_episodes_kept_for_metrics_are_the_ones_get_metrics_reports(runner):
    keep_done_episodes_for_metrics(runner, [_finished_episode([1.0, 2.0, 3.0])])
    metrics = runner.get_metrics()
    assert metrics[EPISODE_RETURN_MEAN] == 6.0, _fail(
        "get_metrics() reports other episodes than _done_episodes_for_metrics"
    )
    assert metrics[EPISODE_LEN_MEAN] == 3


def test_ongoing_chunks_kept_count_towards_their_episode(runner):
    first = _finished_episode([1.0, 2.0], terminated=False)
    rest = first.cut()
    rest.add_env_step(np.zeros(4, np.float32), 0, 3.0, terminated=True)
    keep_ongoing_chunk_for_metrics(runner, first)
    keep_done_episodes_for_metrics(runner, [rest])
    metrics = runner.get_metrics()
    assert (metrics[EPISODE_RETURN_MEAN], metrics[EPISODE_LEN_MEAN]) == (6.0, 3), _fail(
        "get_metrics() no longer adds the chunks in _ongoing_episodes_for_metrics"
    )


def test_call_on_episode_end_passes_what_rllibs_loop_passes(runner):
    recorder = runner_callbacks(runner)[0]
    runner.sample(num_episodes=1)
    theirs = recorder.episode_ends[-1]
    episodes = [_finished_episode([1.0]), _finished_episode([1.0, 1.0])]
    kept = _finished_episode([5.0], terminated=False)
    episodes[1] = kept.cut()
    episodes[1].add_env_step(np.zeros(4, np.float32), 0, 1.0, terminated=True)
    keep_ongoing_chunk_for_metrics(runner, kept)
    call_on_episode_end(runner, 1, episodes)
    ours = recorder.episode_ends[-1]
    assert ours.keys() == theirs.keys(), _fail(
        "on_episode_end gets other arguments than _make_on_episode_callback passes"
    )
    assert ours["episode"] is episodes[1] and ours["env_index"] == 1
    assert ours["env_runner"] is runner and ours["rl_module"] is runner.module
    assert list(ours["prev_episode_chunks"]) == [kept], _fail(
        "on_episode_end's prev_episode_chunks no longer come from "
        "_ongoing_episodes_for_metrics"
    )


def test_runner_weights_seq_no_is_what_rllibs_loop_stores_with_each_step(runner):
    runner.set_state(
        {COMPONENT_RL_MODULE: runner.module.get_state(), WEIGHTS_SEQ_NO: 7}
    )
    assert runner_weights_seq_no(runner) == 7, _fail(
        "set_state() keeps the weights' sequence number elsewhere than _weights_seq_no"
    )
    for chunk in runner.sample(num_timesteps=4):
        stored = chunk.get_extra_model_outputs(WEIGHTS_SEQ_NO)
        assert np.all(np.asarray(stored) == 7), _fail(
            "sample() stores another sequence number with each step"
        )


def test_pulls_state_from_server_is_what_rllibs_sample_checks(runner, monkeypatch):
    assert not pulls_state_from_server(runner)
    asked = []
    runner._env_runner_state_server = types.SimpleNamespace(
        pull_if_newer=types.SimpleNamespace(remote=asked.append)
    )
    monkeypatch.setattr(single_agent_env_runner.ray, "get", lambda ref: None)
    assert pulls_state_from_server(runner)
    runner.sample(num_timesteps=2)
    assert asked == [runner_weights_seq_no(runner)], _fail(
        "sample() no longer pulls from _env_runner_state_server"
    )


def test_time_after_sampling_is_what_rllibs_sample_records_and_reads(runner):
    assert time_after_sampling(runner) is None
    before = time.perf_counter()
    runner.sample(num_timesteps=2)
    assert before <= time_after_sampling(runner) <= time.perf_counter(), _fail(
        "sample() no longer records when it returned as _time_after_sampling"
    )
    set_time_after_sampling(runner, time.perf_counter() - 1000.0)
    runner.sample(num_timesteps=2)
    assert runner.get_metrics()[TIME_BETWEEN_SAMPLING] >= 1000.0, _fail(
        "sample() logs the time between calls from elsewhere"
    )


def test_count_env_steps_sampled_adds_to_the_counter_rllibs_loop_adds_to(
    runner, monkeypatch
):
    counted = []
    counter = runner._metrics_num_env_steps_sampled
    monkeypatch.setattr(
        counter, "inc", lambda value=1.0, tags=None: counted.append(value)
    )
    runner.sample(num_timesteps=4)
    assert counted == [4], _fail(
        "sample() counts env steps elsewhere than _metrics_num_env_steps_sampled"
    )
    count_env_steps_sampled(runner, 7)
    assert counted == [4, 7], _fail("_log_env_steps no longer increments the counter")


def test_set_runner_weights_seq_no_is_stored_with_each_step(runner):
    set_runner_weights_seq_no(runner, 9)
    assert runner.get_state()[WEIGHTS_SEQ_NO] == 9, _fail(
        "SingleAgentEnvRunner no longer keeps its weights seq no as _weights_seq_no"
    )
    for chunk in runner.sample(num_timesteps=4):
        stored = chunk.get_extra_model_outputs(WEIGHTS_SEQ_NO)
        assert np.all(np.asarray(stored) == 9), _fail(
            "sample() stores another sequence number with each step"
        )
