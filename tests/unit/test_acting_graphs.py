"""`ActingGraph`: the EnvRunner's exploration pass replayed from a captured graph.

No CUDA here, so the graphs are `EagerStandInGraph`s: the same warm-up,
capture and replay schedule, each replay running the pass on the capture's
static input and writing into the capture's output tensors, as a CUDA graph's
replay does. The stand-in's capture fails where the pass reads a value on the
host, as a CUDA capture would: each module's pass is checked to be capturable.
From the same random state, the replayed passes then give exactly the eager
passes' actions (the `gpu` suite compares real CUDA graphs within tolerance).
"""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from rllib_ners.algorithms.ners_sac.presets import pendulum_sac
from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow
from rllib_ners.algorithms.td3.presets import pendulum_td3
from rllib_ners.env.acting_graphs import (
    WARMUP_PASSES,
    ActingGraph,
    acting_graph_blocker,
)
from rllib_ners.env.sampling_steps import actions_from_module_output
from rllib_ners.seam.rl_module import exploration_pass
from rllib_ners.utils.update_graphs import EagerStandInGraph

IMAGES = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
PENDULUM = gym.make("Pendulum-v1")
STEPS = 12


def _module(config, obs_space, action_space):
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = obs_space, action_space
    spec.model_config = config.model_config
    spec.inference_only = True
    module = spec.build()
    module.eval()
    return module


def _rainbow(**settings):
    config = atari_data_efficient_rainbow("MsPacman", replay="per").training(**settings)
    return _module(config, IMAGES, gym.spaces.Discrete(9)), IMAGES


def _sac():
    module = _module(pendulum_sac(replay="per"), *_pendulum_spaces())
    return module, PENDULUM.observation_space


def _td3(random_timesteps=STEPS // 2):
    config = pendulum_td3().training(random_timesteps=random_timesteps)
    return _module(config, *_pendulum_spaces()), PENDULUM.observation_space


def _pendulum_spaces():
    return PENDULUM.observation_space, PENDULUM.action_space


def _observations(space, seed=0):
    space.seed(seed)
    return [
        torch.as_tensor(np.stack([space.sample() for _ in range(2)]))
        for _ in range(STEPS)
    ]


def _eager(module, observations):
    outputs = []
    with torch.no_grad():
        for t, obs in enumerate(observations):
            out = exploration_pass(module, {Columns.OBS: obs}, t=t)
            out = actions_from_module_output(module, out, explore=True)
            outputs.append({key: value.clone() for key, value in out.items()})
    return outputs


def _replayed(acting, observations):
    outputs = []
    with torch.no_grad():
        for t, obs in enumerate(observations):
            out = acting.explore(obs, t)
            # Replayed outputs are the graph's tensors: copied, as the
            # EnvRunner copies them to the host.
            outputs.append({key: value.clone() for key, value in out.items()})
    return outputs


def _assert_equal(replayed, eager):
    assert len(replayed) == len(eager)
    for ours, theirs in zip(replayed, eager):
        assert ours.keys() == theirs.keys()
        for key in ours:
            torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=0)


@pytest.mark.parametrize(
    "build, captures",
    [(_rainbow, 1), (_sac, 1), (_td3, 2)],
    ids=["noisy-rainbow", "sac", "td3"],
)
def test_replayed_passes_act_as_the_eager_ones(build, captures):
    """Data-efficient Rainbow (noisy nets, distributional dueling head on
    images), SAC (a squashed Gaussian draw) and TD3 (random actions, then the
    policy with noise: one graph each) capture their passes and, from the same
    random state, take the same actions and log-probabilities."""
    module, space = build()
    observations = _observations(space)
    torch.manual_seed(3)
    eager = _eager(module, observations)
    torch.manual_seed(3)
    acting = ActingGraph(module, make_graph=EagerStandInGraph)
    replayed = _replayed(acting, observations)
    _assert_equal(replayed, eager)
    assert acting.graphs.disabled_because is None
    assert acting.graphs.num_captures == captures
    # Each key: warm-up passes, the capture's pass, then replays.
    assert acting.num_replays == STEPS - captures * (WARMUP_PASSES + 1)


def test_replayed_passes_see_the_learners_in_place_updates():
    """The graph reads the parameters' memory: an optimizer's in-place step
    (what the shared Learner parameters get) shows in the next replay."""
    module, space = _sac()
    observations = _observations(space)
    acting = ActingGraph(module, make_graph=EagerStandInGraph)
    _replayed(acting, observations)
    replays, captures = acting.num_replays, acting.graphs.num_captures
    with torch.no_grad():
        for param in module.parameters():
            param.add_(0.5)
    torch.manual_seed(4)
    replayed = _replayed(acting, observations[:3])
    torch.manual_seed(4)
    _assert_equal(replayed, _eager(module, observations[:3]))
    # The three passes were replays of the graphs captured before the step.
    assert acting.num_replays == replays + 3
    assert acting.graphs.num_captures == captures
    assert acting.graphs.disabled_because is None


def test_a_replaced_parameter_drops_the_graphs_and_says_so(caplog):
    module, space = _rainbow()
    observations = _observations(space)
    acting = ActingGraph(module, make_graph=EagerStandInGraph)
    _replayed(acting, observations)
    replays = acting.num_replays
    param = next(module.parameters())
    param.data = param.data.clone() + 1.0  # new memory: a graph would read the old
    with caplog.at_level(logging.INFO, logger="rllib_ners.utils.update_graphs"):
        torch.manual_seed(5)
        replayed = _replayed(acting, observations[:3])
    torch.manual_seed(5)
    _assert_equal(replayed, _eager(module, observations[:3]))
    assert acting.num_replays == replays
    assert "parameter or buffer of the module was replaced" in (
        acting.graphs.disabled_because
    )
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "acting passes run eagerly" in said[0]


def test_epsilon_greedy_exploration_runs_eagerly_and_says_so(caplog):
    """Epsilon-greedy Rainbow reads its epsilon on the host from the timestep
    at every step: no graph could replay that, each pass runs eagerly."""
    module, space = _rainbow(noisy=False)
    observations = _observations(space)
    acting = ActingGraph(module, make_graph=EagerStandInGraph)
    torch.manual_seed(6)
    with caplog.at_level(logging.INFO, logger="rllib_ners.env.acting_graphs"):
        replayed = _replayed(acting, observations)
    torch.manual_seed(6)
    _assert_equal(replayed, _eager(module, observations))
    assert acting.graphs.num_captures == 0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "run eagerly" in said[0] and "timestep" in said[0]


def test_a_module_that_does_not_say_how_it_explores_is_not_served():
    from ray.rllib.algorithms.sac import SACConfig

    module = _module(
        SACConfig().environment("Pendulum-v1"), *_pendulum_spaces()
    )  # RLlib's own SAC module
    reason = acting_graph_blocker(module)
    assert "exploration_graph_key" in reason
    with pytest.raises(ValueError, match="exploration_graph_key"):
        ActingGraph(module, make_graph=EagerStandInGraph)
