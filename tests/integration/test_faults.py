"""Faults: an EnvRunner killed mid-training with RLlib's restart option on.

Training must go on, the replay buffer's invariants must hold, and the killed
runner's unfinished episode must not corrupt what is stored: every stored
transition continues its own episode (timestep + 1) and its next observation is
what the env's dynamics (CartPole's, or Pendulum's for NERS-SAC, whose reward is
checked too) give for (observation, action), so no fragment was spliced onto
another episode's tail.

(NaN/inf injection is tested in test_ners_dqn.py, bad input in
tests/unit/test_bad_input.py, the long soak in tests/unit/test_soak.py.)
Algorithms are listed in `CASES`: NERS-DQN (also with overlapped sampling),
ACER and NERS-SAC (all with NERS replay).
"""

import threading
import time

import numpy as np
import pytest
import ray

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_session")]
RAY_NUM_CPUS = 4  # for the conftest's `ray_session`

# Both with 2 EnvRunners that RLlib restarts at once when killed.
NERS_DQN = {
    "num_env_runners": 2,
    "rollout_fragment_length": 8,
    "learning_starts": 100,
    "min_sample_timesteps_per_iteration": 200,
    "restart_failed_env_runners": True,
}
# ACER with NERS replay: the on-policy update also trains on the fresh chunks
# of the restarted runners.
ACER = {
    "replay": {"type": "rllib_ners.NERSEpisodeReplayBuffer", "alpha": 0.6},
    "capacity": 5000,
    "num_env_runners": 2,
    "sequence_length": 8,
    "train_batch_size_per_learner": 32,
    "replay_ratio": 1.0,
    "min_sample_timesteps_per_iteration": 200,
    "restart_failed_env_runners": True,
}
# NERS-SAC on Pendulum, 2 EnvRunners.
NERS_SAC = {
    "num_env_runners": 2,
    "learning_starts": 100,
    "min_sample_timesteps_per_iteration": 200,
    "restart_failed_env_runners": True,
}
CASES = ("acer", "ners_dqn", "ners_dqn_overlapped", "ners_sac")


@pytest.fixture
def configs(small_dqn, small_acer, small_sac):
    """Case name -> its config."""
    return {
        "ners_dqn": small_dqn(**NERS_DQN),
        # EnvRunners that sample while the Learner updates: a killed one loses
        # only its request in flight.
        "ners_dqn_overlapped": small_dqn(**NERS_DQN, overlap_sampling=True),
        "acer": small_acer(**ACER),
        "ners_sac": small_sac(**NERS_SAC),
    }


def cartpole_step(obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """gymnasium's CartPole-v1 dynamics (Euler), vectorised over rows."""
    gravity, masspole, length, force_mag, tau = 9.8, 0.1, 0.5, 10.0, 0.02
    total_mass, polemass_length = 1.0 + masspole, masspole * length
    x, x_dot, theta, theta_dot = obs.astype(np.float64).T
    force = np.where(actions == 1, force_mag, -force_mag)
    cos, sin = np.cos(theta), np.sin(theta)
    temp = (force + polemass_length * theta_dot**2 * sin) / total_mass
    theta_acc = (gravity * sin - cos * temp) / (
        length * (4.0 / 3.0 - masspole * cos**2 / total_mass)
    )
    x_acc = temp - polemass_length * theta_acc * cos / total_mass
    return np.stack(
        [
            x + tau * x_dot,
            x_dot + tau * x_acc,
            theta + tau * theta_dot,
            theta_dot + tau * theta_acc,
        ],
        axis=1,
    )


def pendulum_step(obs: np.ndarray, actions: np.ndarray):
    """gymnasium's Pendulum-v1 dynamics and reward, vectorised over rows:
    (next observations, rewards)."""
    g, m, length, dt, max_speed, max_torque = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0
    cos, sin, theta_dot = obs.astype(np.float64).T
    theta = np.arctan2(sin, cos)
    u = np.clip(actions.astype(np.float64)[:, 0], -max_torque, max_torque)
    costs = theta**2 + 0.1 * theta_dot**2 + 0.001 * u**2
    new_theta_dot = (
        theta_dot
        + (3 * g / (2 * length) * np.sin(theta) + 3.0 / (m * length**2) * u) * dt
    )
    new_theta_dot = np.clip(new_theta_dot, -max_speed, max_speed)
    new_theta = theta + new_theta_dot * dt
    next_obs = np.stack([np.cos(new_theta), np.sin(new_theta), new_theta_dot], 1)
    return next_obs, -costs


def assert_stored_episodes_are_whole(buffer):
    buffer.check_invariants()
    storage = buffer.storage
    steps = np.flatnonzero(storage.is_transition)
    nxt = storage.next[steps]
    assert steps.size > 0
    # Nothing stored twice: each (episode, timestep) once.
    keys = np.stack([storage.episode_uid[steps], storage.ts[steps]], axis=1)
    assert len(np.unique(keys, axis=0)) == len(keys)
    np.testing.assert_array_equal(storage.episode_uid[nxt], storage.episode_uid[steps])
    np.testing.assert_array_equal(storage.ts[nxt], storage.ts[steps] + 1)
    obs, actions = storage.obs[steps], storage.actions[steps]
    if obs.shape[1] == 3:  # Pendulum: [cos theta, sin theta, theta dot]
        # RLlib stores SAC's actions normalised to [-1, 1] (normalize_actions)
        # and sends the env low + (a + 1) (high - low) / 2: here 2a.
        torque = 2.0 * np.clip(actions, -1.0, 1.0)
        predicted, rewards = pendulum_step(obs, torque)
        np.testing.assert_allclose(storage.rewards[steps], rewards, atol=1e-4)
    else:
        predicted = cartpole_step(obs, actions)
    np.testing.assert_allclose(storage.obs[nxt], predicted, atol=1e-5)


def test_the_chain_check_catches_a_spliced_fragment(small_dqn):
    """The physics check is not vacuous: join a transition to an observation of
    another episode (pointers, episode ids and timesteps stay consistent)."""
    algo = small_dqn(**{**NERS_DQN, "num_env_runners": 0}).build_algo()
    try:
        algo.train()
        buffer = algo.local_replay_buffer
        assert_stored_episodes_are_whole(buffer)
        storage = buffer.storage
        steps = np.flatnonzero(storage.is_transition)
        other = steps[storage.episode_uid[steps] != storage.episode_uid[steps[3]]]
        storage.obs[storage.next[steps[3]]] = storage.obs[other[-1]]
        with pytest.raises(AssertionError):
            assert_stored_episodes_are_whole(buffer)
    finally:
        algo.stop()


def test_pendulum_model_matches_the_env_and_catches_a_spliced_step():
    """The Pendulum check is exact for real transitions and fails for an
    observation taken from elsewhere."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=3)
    rows, actions, nexts, rewards = [], [], [], []
    for _ in range(50):
        action = env.action_space.sample()
        nxt, reward, *_ = env.step(action)
        rows.append(obs), actions.append(action), nexts.append(nxt)
        rewards.append(reward)
        obs = nxt
    env.close()
    predicted, predicted_rewards = pendulum_step(np.array(rows), np.array(actions))
    np.testing.assert_allclose(predicted, np.array(nexts), atol=1e-5)
    np.testing.assert_allclose(predicted_rewards, np.array(rewards), atol=1e-4)
    spliced = np.array(nexts)[::-1]
    assert not np.allclose(predicted, spliced, atol=1e-5)


@pytest.mark.parametrize("name", CASES)
def test_killed_env_runner_is_restarted_and_the_buffer_stays_sound(name, configs):
    algo = configs[name].build_algo()
    try:
        group = algo.env_runner_group
        algo.train()
        steps_before = len(algo.local_replay_buffer)
        assert group.num_healthy_remote_workers() == 2

        # Kill runner 1 between iterations, then runner 2 while train() runs.
        ray.kill(group._worker_manager._actors[1], no_restart=False)
        result = algo.train()
        killer = threading.Timer(
            0.5,
            lambda: ray.kill(group._worker_manager._actors[2], no_restart=False),
        )
        killer.start()
        try:
            for _ in range(2):
                result = algo.train()
        finally:
            killer.join()
        # Had the two calls returned before the kill, RLlib would still count
        # runner 2 healthy (it learns of a death from a failed call): this
        # call meets the killed runner either way.
        result = algo.train()

        deadline = time.time() + 60
        while group.num_healthy_remote_workers() < 2 and time.time() < deadline:
            group.probe_unhealthy_env_runners()
            time.sleep(1.0)
        assert group.num_remote_worker_restarts() >= 2
        assert group.num_healthy_remote_workers() == 2
        overlapped = getattr(algo, "overlapped_sampler", None)
        returned = dict(overlapped.fragments_returned) if overlapped else {}
        result = algo.train()  # both restarted runners sample again
        if overlapped is not None:
            for runner_id in (1, 2):
                assert overlapped.fragments_returned[runner_id] > returned.get(
                    runner_id, 0
                ), runner_id
        assert len(algo.local_replay_buffer) > steps_before
        assert result["ners"]["num_sampler_updates_lifetime"] >= 1
        assert_stored_episodes_are_whole(algo.local_replay_buffer)
    finally:
        algo.stop()
