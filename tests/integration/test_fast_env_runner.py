"""`FastSingleAgentEnvRunner` samples what RLlib's `SingleAgentEnvRunner` samples.

For the same config and seed, every `sample()` call returns the same episode
chunks (ids aside: RLlib draws them from uuid4): observations, actions,
rewards, infos, extra model outputs and their lookback buffers, chunk
boundaries and flags; and `get_metrics()` reports the same counters and
episode statistics (timers aside). Checked for SAC (Box actions, a squashed
Gaussian drawn by the connector), DQN (epsilon-greedy inside the module) and
ACER (a categorical drawn by the connector), one and three sub-envs, timestep
and episode sampling and inference mode. Configs the fast loop cannot serve
take RLlib's loop and say why.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.dqn import DQNConfig
from ray.rllib.algorithms.sac import SACConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from rllib_ners import ACERConfig, TD3Config
from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

# Metric keys that are times (or connector timers the fast loop has no use for).
TIMING_KEYS = {
    "sample",
    "time_between_sampling",
    "env_step_timer",
    "rlmodule_inference_timer",
    "env_reset_timer",
    "env_to_module_connector",
    "module_to_env_connector",
    "episode_duration_sec_mean",
    "env_to_module_sum_episodes_length_in",
    "env_to_module_sum_episodes_length_out",
}

CONFIGS = {
    "sac": lambda: SACConfig().environment("Pendulum-v1"),
    "dqn": lambda: DQNConfig().environment("CartPole-v1"),
    "acer": lambda: ACERConfig().environment("CartPole-v1"),
    # TD3 acts uniformly at random for `random_timesteps`, then with noise:
    # the plans cross that point.
    "td3": lambda: (
        TD3Config().environment("Pendulum-v1").training(random_timesteps=100)
    ),
}
# (what, how many): timesteps, episodes, metrics, timesteps without exploring.
PLAN = [
    ("t", 7),
    ("t", 60),
    ("t", 250),
    ("m", 0),
    ("t", 3),
    ("e", 2),
    ("t", 5),
    ("m", 0),
]


def _run(runner_class, config, plan, *, inputs=False):
    """`runner_class`'s outputs for `plan`; with `inputs`, also the
    observations its RLModule got at every forward pass, in order."""
    runner = runner_class(config=config)
    outputs, module_inputs = [], []
    if inputs:
        _record_module_inputs(runner.module, module_inputs)
    for kind, n in plan:
        if kind == "t":
            outputs.append(runner.sample(num_timesteps=n))
        elif kind == "i":
            outputs.append(runner.sample(num_timesteps=n, explore=False))
        elif kind == "e":
            outputs.append(runner.sample(num_episodes=n))
        else:
            outputs.append(runner.get_metrics())
    return (runner, outputs, module_inputs) if inputs else (runner, outputs)


def _record_module_inputs(module, inputs: list) -> None:
    """Makes `module` append a copy of its input observations to `inputs` at
    every exploration or inference pass (both loops make those calls)."""
    for name in ("_forward_exploration", "_forward_inference"):
        forward = getattr(module, name)

        def recording(batch, *args, _forward=forward, **kwargs):
            inputs.append(batch["obs"].clone())
            return _forward(batch, *args, **kwargs)

        setattr(module, name, recording)


def _assert_same_buffer(ours, theirs, name):
    assert ours.lookback == theirs.lookback, name
    if name == "infos":
        assert list(ours.data) == list(theirs.data)
    else:
        ours, theirs = np.asarray(ours.data), np.asarray(theirs.data)
        np.testing.assert_array_equal(ours, theirs, err_msg=name)
        # Same dtypes too: RLlib's EnvRunner stores its module's outputs as
        # float32 and int32 (its TensorToNumpy connector).
        assert ours.dtype == theirs.dtype, (name, ours.dtype, theirs.dtype)


def assert_same_episodes(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert (a.t_started, len(a), a.is_terminated, a.is_truncated) == (
            b.t_started,
            len(b),
            b.is_terminated,
            b.is_truncated,
        )
        assert a.is_numpy == b.is_numpy
        for name in ("observations", "actions", "rewards", "infos"):
            _assert_same_buffer(getattr(a, name), getattr(b, name), name)
        assert a.extra_model_outputs.keys() == b.extra_model_outputs.keys()
        for key in a.extra_model_outputs:
            _assert_same_buffer(
                a.extra_model_outputs[key], b.extra_model_outputs[key], key
            )


def assert_same_outputs(plan, ours, theirs):
    """Each call of `plan` returned the same episodes, or metrics, from both
    runners."""
    for (kind, _), a, b in zip(plan, ours, theirs):
        if kind == "m":
            assert_same_metrics(a, b)
        else:
            assert_same_episodes(a, b)


def assert_same_metrics(ours, theirs, path=()):
    """The same keys and values, nested ones (per agent, per module) too;
    timings aside."""
    assert set(ours) - TIMING_KEYS == set(theirs) - TIMING_KEYS, path
    for key in set(theirs) - TIMING_KEYS:
        a, b = ours[key], theirs[key]
        if isinstance(b, dict):
            assert isinstance(a, dict), path + (key,)
            assert_same_metrics(a, b, path + (key,))
            continue
        a = a.peek() if hasattr(a, "peek") else a
        b = b.peek() if hasattr(b, "peek") else b
        assert a == b or (a != a and b != b), (path + (key,), a, b)


@pytest.mark.slow
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("algo", sorted(CONFIGS))
def test_fast_loop_samples_what_rllibs_loop_samples(algo, num_envs, one_torch_thread):
    config = (
        CONFIGS[algo]()
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=num_envs,
            rollout_fragment_length=4,
        )
        .debugging(seed=3)
    )
    for plan in (PLAN, [("i", 30), ("i", 120), ("m", 0)]):
        _, theirs = _run(SingleAgentEnvRunner, config, plan)
        runner, ours = _run(FastSingleAgentEnvRunner, config, plan)
        assert runner.uses_fast_sampling
        assert_same_outputs(plan, ours, theirs)
        assert sum(len(e) for out in ours if isinstance(out, list) for e in out) >= 150


@pytest.mark.slow
def test_either_loop_continues_the_others_state(one_torch_thread):
    """The fast loop leaves RLlib's state (ongoing episodes, cached module
    input): RLlib's loop continues it exactly, and the other way round."""
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, rollout_fragment_length=4)
        .debugging(seed=1)
    )
    # One runner after the other: both draw from the process's global RNGs,
    # which each runner seeds when it is built.
    reference = SingleAgentEnvRunner(config=config)
    expected = [reference.sample(num_timesteps=9) for _ in range(40)]
    mixed = FastSingleAgentEnvRunner(config=config)
    for step in range(40):
        if step % 2:
            got = SingleAgentEnvRunner.sample(mixed, num_timesteps=9)
        else:
            got = mixed.sample(num_timesteps=9)
        assert_same_episodes(got, expected[step])


class _PassThrough(ConnectorV2):
    def __call__(self, *, batch, **kwargs):
        return batch


class _StepCounter(RLlibCallback):
    def on_episode_step(self, *, episode, **kwargs):
        pass


class _EndLogger(RLlibCallback):
    ended = 0

    def on_episode_end(self, *, episode, metrics_logger=None, **kwargs):
        type(self).ended += 1
        metrics_logger.log_value("ended_len", len(episode), window=1)


@pytest.mark.parametrize(
    "change,reason",
    [
        (
            lambda c: c.env_runners(env_to_module_connector=lambda *a: _PassThrough()),
            "custom env_to_module_connector",
        ),
        (lambda c: c.callbacks(_StepCounter), "overrides on_episode_step"),
        (
            lambda c: c.callbacks(on_episode_start=lambda **kwargs: None),
            "on_episode_start",
        ),
        (
            lambda c: c.rl_module(model_config={"use_lstm": True}),
            "stateful",
        ),
    ],
)
def test_configs_it_cannot_serve_take_rllibs_loop_and_say_why(change, reason, caplog):
    config = change(
        DQNConfig().environment("CartPole-v1").env_runners(num_env_runners=0)
    )
    with caplog.at_level(logging.INFO, logger="rllib_ners.env.fast_env_runner"):
        runner = FastSingleAgentEnvRunner(config=config)
    assert not runner.uses_fast_sampling
    assert reason in runner.fast_sampling_blocker
    assert any("RLlib's loop" in record.getMessage() for record in caplog.records)
    assert sum(len(e) for e in runner.sample(num_timesteps=20)) == 20


def _atari(num_envs: int, lookback: int = 3):
    from rllib_ners.algorithms.rainbow.presets import atari_rainbow

    return (
        atari_rainbow("MsPacman", replay="per", capacity=1000, learning_starts=100)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=num_envs,
            rollout_fragment_length=4,
            episode_lookback_horizon=lookback,
        )
        .debugging(seed=5)
    )


@pytest.mark.slow
@pytest.mark.parametrize("num_envs", [1, 3])
def test_fast_loop_stacks_atari_frames_as_rllibs_connector(num_envs, one_torch_thread):
    """Atari with 4-frame stacks (`with_atari`'s `FrameStackingConnector`):
    the fast loop keeps each sub-env's stack from step to step, and samples
    the same episodes with the same actions (noisy nets drawn in the same
    order) as RLlib's loop rebuilding them from the episodes; episodes end
    (lives lost) and restart their stacks within the plan. Then each loop
    continues the other's state."""
    pytest.importorskip("ale_py")
    config = _atari(num_envs)
    # After an episode: 2 steps into the next one, its stack still holds zeros;
    # 600 steps: lives end (episodes, with episodic_life) in mid-call too.
    plan = [("t", 7), ("t", 600), ("m", 0), ("e", 1), ("t", 2), ("i", 9), ("m", 0)]
    _, theirs, their_inputs = _run(SingleAgentEnvRunner, config, plan, inputs=True)
    runner, ours, our_inputs = _run(FastSingleAgentEnvRunner, config, plan, inputs=True)
    assert runner.uses_fast_sampling
    assert_same_outputs(plan, ours, theirs)
    # The RLModule's input at every forward pass: the same uint8 stacks.
    assert len(our_inputs) == len(their_inputs) > 600 // num_envs
    for a, b in zip(our_inputs, their_inputs):
        assert a.dtype == b.dtype == torch.uint8 and torch.equal(a, b)
    # Stacks restarted within a call: a sub-env's oldest frame turned to zeros.
    oldest_is_zero = torch.stack(
        [(x[..., 0] == 0).flatten(1).all(1) for x in our_inputs]
    )
    assert (oldest_is_zero[1:] & ~oldest_is_zero[:-1]).any()
    # Either loop continues the other's stacks (the cached module input).
    reference = SingleAgentEnvRunner(config=config)
    expected = [reference.sample(num_timesteps=6) for _ in range(8)]
    mixed = FastSingleAgentEnvRunner(config=config)
    for step in range(8):
        sample = SingleAgentEnvRunner.sample if step % 2 else type(mixed).sample
        assert_same_episodes(sample(mixed, num_timesteps=6), expected[step])


def test_atari_frame_stacking_with_a_short_lookback_takes_rllibs_loop():
    pytest.importorskip("ale_py")
    runner = FastSingleAgentEnvRunner(config=_atari(1, lookback=1))
    assert not runner.uses_fast_sampling
    assert "episode_lookback_horizon=1" in runner.fast_sampling_blocker


def test_episode_end_callbacks_run_on_the_fast_loop(one_torch_thread):
    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .callbacks(_EndLogger)
        .debugging(seed=0)
    )
    runner = FastSingleAgentEnvRunner(config=config)
    assert runner.uses_fast_sampling
    _EndLogger.ended = 0
    episodes = runner.sample(num_episodes=3)
    assert _EndLogger.ended == 3
    assert runner.get_metrics()["ended_len"] == len(episodes[-1])


def test_the_fast_loop_toggles_no_module_modes(one_torch_thread):
    """RLlib's forward_exploration switches the module to eval() and back to
    train() around every forward pass; the fast loop keeps it in eval()."""
    config = (
        SACConfig()
        .environment("Pendulum-v1")
        .env_runners(num_env_runners=0)
        .debugging(seed=0)
    )
    runner = FastSingleAgentEnvRunner(config=config)
    calls = []
    original = torch.nn.Module.train

    def counting_train(module, mode=True):
        calls.append(mode)
        return original(module, mode)

    torch.nn.Module.train = counting_train
    try:
        runner.sample(num_timesteps=20)
    finally:
        torch.nn.Module.train = original
    assert not runner.module.training
    assert calls == []


@pytest.mark.slow
@pytest.mark.parametrize("env", ["atari", "pendulum"])
def test_acting_from_captured_graphs_samples_the_same_episodes(env, one_torch_thread):
    """An EnvRunner whose exploration passes replay from captured graphs
    (`act_on_learner_device` with `cuda_graph_updates` on a GPU; here the
    eager stand-in graph, which runs the same schedule) samples the same
    episodes as one acting eagerly: Rainbow's noisy nets on stacked Atari
    frames, and SAC's squashed Gaussian with its log-probabilities and
    distribution inputs kept as extra model outputs (copied out of the graph's
    tensors before the next replay overwrites them)."""
    from rllib_ners import NERSSACConfig
    from rllib_ners.env.acting_graphs import ActingGraph
    from rllib_ners.utils.update_graphs import EagerStandInGraph

    if env == "atari":
        pytest.importorskip("ale_py")
        config = _atari(2)
        plan = [("t", 40), ("t", 250), ("i", 5), ("t", 9)]
    else:
        config = (
            NERSSACConfig()
            .environment("Pendulum-v1")
            .env_runners(num_env_runners=0, num_envs_per_env_runner=2)
            .debugging(seed=5)
        )
        plan = [("t", 40), ("e", 1), ("t", 9)]
    config = config.env_runners(env_runner_cls=FastSingleAgentEnvRunner)
    _, theirs = _run(FastSingleAgentEnvRunner, config, plan)

    class GraphActingRunner(FastSingleAgentEnvRunner):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.acting_graph = ActingGraph(self.module, make_graph=EagerStandInGraph)

    runner, ours = _run(GraphActingRunner, config, plan)
    assert runner.uses_fast_sampling
    assert_same_outputs(plan, ours, theirs)
    assert runner.acting_graph.num_replays > 30
    assert runner.acting_graph.graphs.disabled_because is None
