"""Exact resume with ReLo and LaBER: a checkpoint taken mid-run brings back
the buffer (priorities, large-batch RNG) and the Learner (networks, optimizer,
LaBER's sub-sample generator), so the restored algorithm draws the same
samples, the same sub-samples and makes the same update as the saved one.

As in `test_resume.py`, the comparison is one replay update from the same
process generator state: RLlib 2.60's EnvRunner state holds neither the
environment nor its episode in progress, so a whole `train()` cannot repeat.
"""

import numpy as np
import pytest
from helpers import build_small_dqn, build_small_sac
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME
from resume_cases import assert_same_state, columnar_replay_update

from rllib_ners import RainbowDQNConfig
from rllib_ners.algorithms.common.learner.replay_methods import LABER_GENERATOR_STATE
from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.utils.rng import global_rng_state, set_global_rng_state

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("ray_session", "one_torch_thread"),
]

BUFFER = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
METHODS = {
    "relo": {"sampler": "relo", "alpha": 0.5, "beta": 0.4},
    "laber": {"sampler": "laber", "alpha": 0.0, "beta": 0.0, "laber_m": 4},
}


def _sac(method):
    return build_small_sac(
        {"type": BUFFER, **METHODS[method]},
        learning_starts=100,
        min_sample_timesteps_per_iteration=300,
        store_buffer_in_checkpoints=True,
    )


def _rainbow(method):
    settings = dict(METHODS[method])
    if method == "relo":
        settings["relo_transform"] = "exp"
    return build_small_dqn(
        RainbowDQNConfig(),
        replay_buffer_config={"type": BUFFER, "capacity": 5000, **settings},
        learning_starts=100,
        min_sample_timesteps_per_iteration=300,
        store_buffer_in_checkpoints=True,
        num_atoms=11,
        v_min=-10.0,
        v_max=10.0,
        noisy=True,
        dueling=True,
    )


AGENTS = {"sac": _sac, "rainbow": _rainbow}


def _learner_state(algo, method):
    components = ["rl_module", "optimizer"]
    if method == "laber":
        components.append(LABER_GENERATOR_STATE)
    return local_learner(algo).get_state(components=components)


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_restored_relo_and_laber_runs_draw_and_update_as_the_saved_one(
    agent, method, tmp_path
):
    algo = AGENTS[agent](method).build_algo()
    restored = None
    try:
        for _ in range(2):
            algo.train()
        env_steps = algo.metrics.peek(
            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME)
        )
        columnar_replay_update(algo, env_steps)  # the feedback has come back
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        start = global_rng_state()
        restored = Algorithm.from_checkpoint(path)
        assert type(restored.local_replay_buffer.sampler).name == method
        assert_same_state(
            _learner_state(algo, method), _learner_state(restored, method)
        )

        slots, leaves, states = [], [], []
        for run in (algo, restored):
            set_global_rng_state(start)
            for _ in range(2):
                slots.append(columnar_replay_update(run, env_steps))
            leaves.append(run.local_replay_buffer.sampler.sum_tree.leaves.copy())
            states.append(_learner_state(run, method))
        np.testing.assert_array_equal(slots[0], slots[2])
        np.testing.assert_array_equal(slots[1], slots[3])
        np.testing.assert_array_equal(leaves[0], leaves[1])
        assert_same_state(states[0], states[1], "learner after two updates")
        if method == "relo":
            # ReLo set priorities: not all leaves are the initial max priority.
            assert np.unique(leaves[0][leaves[0] > 0]).size > 2
    finally:
        if restored is not None:
            restored.stop()
        algo.stop()
