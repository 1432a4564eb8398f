"""`cuda_graph_updates=True`: the training loop's updates through captured graphs.

No CUDA here, so the Learner's graphs are `EagerStandInGraph`s, which run the
same warm-up/capture/replay schedule (each replay runs the update on the
capture's static inputs and overwrites the capture's outputs, as a CUDA graph's
replay does). Each algorithm then ends with the same weights, buffer, returns
and Learner metrics as the eager updates, with the graphs' keys, static inputs
and re-logged metrics in play. The gradient step runs as on a GPU
(`host_reads=False`) in both arms. The stand-in's capture fails where the update
reads a value on the host (`HostReadGuard`), as a CUDA capture does, so each
algorithm's update is also checked to be capturable on a GPU. The `gpu` suite
replays real CUDA graphs against eager CUDA updates.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from helpers import TinyBoolImageEnv
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    LEARNER_RESULTS,
)

from rllib_ners import RainbowDQNConfig
from rllib_ners.algorithms.common.config.sampler_presets import relo_buffer_settings
from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.utils.update_graphs import EagerStandInGraph

pytestmark = [pytest.mark.usefixtures("ray_session"), pytest.mark.slow]
RAY_NUM_CPUS = 2
ITERATIONS = 3
LOGGER = "rllib_ners.algorithms.common.learner.cuda_graph_updates"

PER = {
    "type": "rllib_ners.FastPrioritizedEpisodeReplayBuffer",
    "capacity": 5000,
    "alpha": 0.6,
    "beta": 0.4,
}


def _config(algorithm, small_dqn, small_sac, small_td3):
    name, replay = algorithm.split("_")
    # ReLo: PER's buffer with ReLo's sampler ("clip": the small DQN's Q-values
    # are scalars).
    buffer = {**PER, **relo_buffer_settings("clip")} if replay == "relo" else PER
    if name == "rainbow":
        return small_dqn(RainbowDQNConfig(), replay_buffer_config=buffer)
    if name == "dqn":  # NERS-DQN
        return small_dqn()
    if name == "sac":
        return small_sac(
            buffer if replay == "relo" else replay, rollout_fragment_length=1
        ).reporting(min_time_s_per_iteration=0)
    return small_td3(replay)


def _build(config, *, graphs: bool):
    algo = (
        config.copy(copy_frozen=False).training(cuda_graph_updates=graphs).build_algo()
    )
    learner = local_learner(algo)
    learner.host_reads = False  # the gradient step a GPU Learner takes
    if graphs:
        learner.make_update_graph = EagerStandInGraph
    return algo, learner


def _learner_values(results):
    values = results[LEARNER_RESULTS][DEFAULT_MODULE_ID]
    return {
        key: float(value)
        for key, value in values.items()
        if isinstance(value, (int, float, np.floating, np.integer))
    }


def _train(config, *, graphs: bool):
    algo, learner = _build(config, graphs=graphs)
    try:
        results = [algo.train() for _ in range(ITERATIONS)]
        weights = {
            name: tensor.clone()
            for name, tensor in learner.module[DEFAULT_MODULE_ID].state_dict().items()
        }
        priorities = algo.local_replay_buffer.get_state()
        return results, weights, priorities, learner.update_graphs
    finally:
        algo.stop()


def _flat(state, prefix=""):
    for key, value in state.items():
        if isinstance(value, dict):
            yield from _flat(value, f"{prefix}{key}/")
        elif isinstance(value, np.ndarray) and value.dtype != object:
            yield f"{prefix}{key}", value


def _assert_same_weights_and_buffer(weights, buffer, eager) -> None:
    """The weights and replay buffer of a run equal those of `eager`'s run."""
    for name, tensor in weights.items():
        assert torch.equal(tensor, eager[1][name]), name
    buffer_eager = dict(_flat(eager[2]))
    for key, value in _flat(buffer):
        if not key.startswith(("_partial_returns/", "_open_episodes/")):
            np.testing.assert_array_equal(value, buffer_eager[key], err_msg=key)


@pytest.mark.parametrize(
    "algorithm",
    [
        "rainbow_per",
        "rainbow_relo",
        "dqn_ners",
        "sac_per",
        "sac_ners",
        "sac_relo",
        "td3_per",
        "td3_ners",
        "td3_relo",
    ],
)
def test_graph_updates_train_as_eager_updates(
    algorithm, small_dqn, small_sac, small_td3, one_torch_thread
):
    config = _config(algorithm, small_dqn, small_sac, small_td3)
    graphed, eager = _train(config, graphs=True), _train(config, graphs=False)
    results, weights, buffer, graphs = graphed
    assert graphs is not None and graphs.disabled_because is None
    # TD3: one graph for critic-only updates, one for those with the actor.
    assert graphs.num_captures == (2 if algorithm.startswith("td3") else 1)
    assert graphs.num_replays > 50
    assert eager[3] is None
    _assert_same_weights_and_buffer(weights, buffer, eager)
    for a, b in zip(results, eager[0]):
        assert a[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN] == pytest.approx(
            b[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]
        )
        assert _learner_values(a) == pytest.approx(
            _learner_values(b), rel=0, abs=0, nan_ok=True
        )


def test_a_cpu_learner_updates_eagerly_and_says_why(small_dqn, caplog):
    config = small_dqn(RainbowDQNConfig(), replay_buffer_config=PER).training(
        cuda_graph_updates=True
    )
    algo = config.build_algo()
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            algo.train()
        assert local_learner(algo).update_graphs is None
    finally:
        algo.stop()
    said = [r.getMessage() for r in caplog.records if "run eagerly" in r.getMessage()]
    assert len(said) == 1 and "not a CUDA device" in said[0]


def _image_ners_dqn(small_dqn, **ners):
    config = small_dqn(
        env=TinyBoolImageEnv,
        train_batch_size_per_learner=16,
        learning_starts=48,
        replay_buffer_config={"capacity": 2000},
        min_sample_timesteps_per_iteration=100,
    )
    return config.ners(**ners) if ners else config


def test_a_requested_ners_encoding_cache_updates_eagerly_and_says_why(
    small_dqn, caplog
):
    """NERS scoring with cached image encodings (host-side bookkeeping) is
    not captured: asked for, the cache stays and the Learner updates eagerly,
    saying so once."""
    algo, learner = _build(
        _image_ners_dqn(small_dqn, cache_encodings=True), graphs=True
    )
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER):
            algo.train()
        assert learner.ners.encoding_cache is not None
        assert learner.update_graphs is None
    finally:
        algo.stop()
    said = [r.getMessage() for r in caplog.records if "run eagerly" in r.getMessage()]
    assert len(said) == 1 and "encoding cache" in said[0]


def test_ners_image_scoring_is_captured_without_the_cache(
    small_dqn, one_torch_thread, caplog
):
    """`cache_encodings` left unset: a Learner that captures its updates drops
    the cache (said once) and encodes inside the graph; it trains as the eager
    Learner without the cache does (`cache_encodings=False`), bit for bit."""
    with caplog.at_level(logging.INFO, logger=LOGGER):
        results, weights, buffer, graphs = _train(
            _image_ners_dqn(small_dqn), graphs=True
        )
    said = [r.getMessage() for r in caplog.records if "caching image" in r.getMessage()]
    assert len(said) == 1
    assert graphs is not None and graphs.disabled_because is None
    assert graphs.num_captures == 1 and graphs.num_replays > 10
    eager = _train(_image_ners_dqn(small_dqn, cache_encodings=False), graphs=False)
    _assert_same_weights_and_buffer(weights, buffer, eager)


def test_a_restored_learner_captures_again_and_continues_as_eager(
    small_td3, one_torch_thread, tmp_path
):
    """A checkpoint of a Learner with graphs restores into one with graphs
    (captured again from the restored optimizer states) and into an eager one
    (its optimizers no longer capturable): both continue alike."""
    config = small_td3("per")
    algo, _ = _build(config, graphs=True)
    try:
        algo.train()
        algo.save_to_path(str(tmp_path))
    finally:
        algo.stop()
    weights = []
    for graphs in (True, False):
        algo, learner = _build(config, graphs=graphs)
        try:
            algo.restore_from_path(str(tmp_path))
            algo.train()
            optimizers = learner.get_optimizers_for_module(DEFAULT_MODULE_ID)
            capturable = {
                group["capturable"]
                for _, optimizer in optimizers
                for group in optimizer.param_groups
            }
            assert capturable == {graphs}
            if graphs:
                assert learner.update_graphs.num_replays > 0
            weights.append(
                {
                    k: v.clone()
                    for k, v in learner.module[DEFAULT_MODULE_ID].state_dict().items()
                }
            )
        finally:
            algo.stop()
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name
