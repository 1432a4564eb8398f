"""DeepMind Atari preprocessing (`rllib_ners.env.atari`): exact frames, lives, rewards.

Most tests drive `DeepMindAtari` with a scripted single-frame env whose frames,
rewards and lives are known, so every output can be computed independently; one
test checks the real ALE against a hand-rolled reference.
"""

from __future__ import annotations

from importlib.util import find_spec

import cv2
import gymnasium as gym
import numpy as np
import pytest

from rllib_ners.env.atari import (
    GAME_LENGTH_KEY,
    GAME_RETURN_KEY,
    LIFE_LOST_KEY,
    DeepMindAtari,
    ale_env_id,
    make_atari_env,
)

HAS_ALE = find_spec("ale_py") is not None


class ScriptedFrames(gym.Env):
    """One emulator frame per step. Frame `f` (counted since the last reset,
    no-ops included) lights column block `f % 4` with value `10 + f`; reward
    is `rewards.get(f, 0)`; a life is lost at every frame in `life_frames`; the
    game ends at frame `game_over_frame`."""

    observation_space = gym.spaces.Box(0, 255, (210, 160), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, *, life_frames=(), game_over_frame=10_000, rewards=None):
        self.life_frames = set(life_frames)
        self.game_over_frame = game_over_frame
        self.rewards = rewards or {}
        self.frame = 0
        self.lives = 3
        self.num_resets = 0
        self.actions = []

    @staticmethod
    def image(f: int) -> np.ndarray:
        image = np.zeros((210, 160), dtype=np.uint8)
        block = f % 4
        image[:, block * 40 : (block + 1) * 40] = (10 + f) % 256
        return image

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.frame, self.lives = 0, 3
        self.num_resets += 1
        return self.image(0), {"lives": self.lives}

    def step(self, action):
        self.actions.append(int(action))
        self.frame += 1
        if self.frame in self.life_frames:
            self.lives -= 1
        terminated = self.frame >= self.game_over_frame
        reward = float(self.rewards.get(self.frame, 0.0))
        return self.image(self.frame), reward, terminated, False, {"lives": self.lives}


def expected(frame_a: int, frame_b: int) -> np.ndarray:
    pooled = np.maximum(ScriptedFrames.image(frame_a), ScriptedFrames.image(frame_b))
    return cv2.resize(pooled, (84, 84), interpolation=cv2.INTER_AREA)[..., None]


def test_max_pools_the_last_two_of_four_frames_then_resizes():
    env = DeepMindAtari(ScriptedFrames(), noop_max=0)
    obs, info = env.reset(seed=0)
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    assert env.observation_space.shape == (84, 84, 1)
    assert env.observation_space.contains(obs)
    np.testing.assert_array_equal(
        obs,
        cv2.resize(ScriptedFrames.image(0), (84, 84), interpolation=cv2.INTER_AREA)[
            ..., None
        ],
    )
    for step in range(1, 4):
        obs, reward, terminated, truncated, info = env.step(2)
        # Step k covers frames 4k-3 .. 4k; pooled over frames 4k-1 and 4k.
        np.testing.assert_array_equal(obs, expected(4 * step - 1, 4 * step))
        # Two different column blocks are lit: the max keeps both.
        assert len(np.unique(obs[40, :, 0] > 0)) == 2
        assert info == {}
    assert env.env.actions == [2] * 12


def test_noop_starts_take_one_to_noop_max_noop_frames():
    counts = []
    for seed in range(40):
        inner = ScriptedFrames()
        env = DeepMindAtari(inner, noop_max=30)
        env.reset(seed=seed)
        counts.append(inner.frame)
        assert inner.actions == [0] * inner.frame
    assert min(counts) >= 1 and max(counts) <= 30
    assert len(set(counts)) > 5


def test_life_loss_ends_training_episodes_and_reset_continues_the_game():
    inner = ScriptedFrames(life_frames=(6,), game_over_frame=14)
    env = DeepMindAtari(inner, noop_max=0, episodic_life=True)
    env.reset(seed=0)
    _, _, terminated, _, _ = env.step(1)  # frames 1-4
    assert not terminated
    _, _, terminated, truncated, info = env.step(1)  # frames 5-8: life lost at 6
    assert terminated and not truncated
    assert info == {LIFE_LOST_KEY: True}
    # The reset continues the game with one no-op step (frames 9-12).
    obs, _ = env.reset()
    assert inner.num_resets == 1 and inner.frame == 12
    np.testing.assert_array_equal(obs, expected(11, 12))
    _, _, terminated, _, info = env.step(1)  # frames 13-14: game over
    assert terminated and GAME_RETURN_KEY in info
    # Game length counts every agent step of the game, the reset's no-op too.
    assert info[GAME_LENGTH_KEY] == 4
    env.reset()
    assert inner.num_resets == 2


def test_life_loss_does_not_end_evaluation_episodes():
    inner = ScriptedFrames(life_frames=(6,), game_over_frame=14)
    env = DeepMindAtari(inner, noop_max=0, episodic_life=False)
    env.reset(seed=0)
    dones = []
    for _ in range(4):
        _, _, terminated, truncated, info = env.step(1)
        dones.append(terminated or truncated)
        if not dones[-1]:
            assert info == {}
    assert dones == [False, False, False, True]
    assert info == {GAME_RETURN_KEY: 0.0, GAME_LENGTH_KEY: 4}


def test_rewards_are_clipped_for_training_while_the_game_return_is_not():
    rewards = {2: 10.0, 3: 50.0, 7: -3.0, 10: 0.5, 14: 0.25}
    for clip in (True, False):
        inner = ScriptedFrames(life_frames=(6,), game_over_frame=16, rewards=rewards)
        env = DeepMindAtari(inner, noop_max=0, clip_rewards=clip)
        env.reset(seed=0)
        got = []
        for _ in range(3):
            _, reward, terminated, _, info = env.step(1)
            got.append(reward)
            if terminated and LIFE_LOST_KEY in info:
                env.reset()  # one no-op step: frames 9-12
        # Steps cover frames 1-4 (10 + 50), 5-8 (-3, life lost), 13-16 (0.25,
        # game over); the reset's 0.5 reaches the game return only.
        assert got == ([1.0, -1.0, 1.0] if clip else [60.0, -3.0, 0.25])
        assert info[GAME_RETURN_KEY] == 57.75


def test_game_return_sums_unclipped_rewards_over_all_lives():
    rewards = {2: 10.0, 3: 50.0, 7: -3.0, 13: 200.0}
    inner = ScriptedFrames(life_frames=(6, 10), game_over_frame=16, rewards=rewards)
    env = DeepMindAtari(inner, noop_max=0, clip_rewards=True)
    env.reset(seed=0)
    clipped, infos = [], []
    for _ in range(10):
        _, reward, terminated, truncated, info = env.step(1)
        clipped.append(reward)
        infos.append(info)
        if GAME_RETURN_KEY in info:
            break
        if terminated:
            env.reset()
    assert infos[-1][GAME_RETURN_KEY] == 257.0
    assert all(abs(r) <= 1.0 for r in clipped)
    assert sum(LIFE_LOST_KEY in info for info in infos) == 1


def test_game_names_and_bad_settings():
    assert ale_env_id("MsPacman") == "ALE/MsPacman-v5"
    assert ale_env_id("ms_pacman") == "ALE/MsPacman-v5"
    assert ale_env_id("ALE/Pong-v5") == "ALE/Pong-v5"
    with pytest.raises(ValueError, match="game"):
        make_atari_env({})
    with pytest.raises(ValueError, match="frame_skipp"):
        make_atari_env({"game": "Pong", "frame_skipp": 4})
    with pytest.raises(ValueError, match="frame_skip"):
        DeepMindAtari(ScriptedFrames(), frame_skip=0)
    with pytest.raises(ValueError, match="grayscale"):
        DeepMindAtari(gym.make("CartPole-v1"))


@pytest.mark.skipif(not HAS_ALE, reason="ale-py not installed")
def test_real_ale_matches_a_hand_rolled_reference():
    """MsPacman through the wrapper equals stepping the raw single-frame ALE by
    hand: 4 frames per action, max of the last two, area resize to 84x84."""
    import ale_py

    gym.register_envs(ale_py)
    env = make_atari_env({"game": "MsPacman", "noop_max": 0})
    raw = gym.make(
        "ALE/MsPacman-v5",
        frameskip=1,
        repeat_action_probability=0.0,
        obs_type="grayscale",
        full_action_space=False,
    )
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    assert env.unwrapped._frameskip == 1
    env.reset(seed=3)
    raw.reset(seed=3)
    actions = np.random.default_rng(0).integers(0, 9, size=150)
    clipped_total = raw_total = 0.0
    for action in actions:
        obs, reward, _, _, _ = env.step(int(action))
        frames = []
        for _ in range(4):
            frame, raw_reward, _, _, _ = raw.step(int(action))
            frames.append(frame)
            raw_total += raw_reward
        reference = cv2.resize(
            np.maximum(frames[-2], frames[-1]), (84, 84), interpolation=cv2.INTER_AREA
        )
        np.testing.assert_array_equal(obs[..., 0], reference)
        clipped_total += reward
    assert raw_total > clipped_total > 0  # MsPacman pellets are worth 10
    env.close()
    raw.close()


def test_ners_buffer_replay_returns_are_unclipped_games_not_lives():
    """Lives end episodes and rewards are clipped, but the NERS replay reward
    must compare game scores: the buffer takes `game_return` from the last
    info of a game and skips episodes that ended with a lost life."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from rllib_ners.replay_buffers import NERSEpisodeReplayBuffer

    def life(id_, infos_end, rewards):
        n = len(rewards)
        return SingleAgentEpisode(
            id_=id_,
            observations=[np.zeros((4, 4, 1), np.uint8)] * (n + 1),
            infos=[{}] * n + [infos_end],
            actions=[0] * n,
            rewards=rewards,
            terminated=True,
            len_lookback_buffer=0,
        )

    buffer = NERSEpisodeReplayBuffer(100, frame_stack=4)
    buffer.add(life("life1", {LIFE_LOST_KEY: True}, [1.0, 1.0]))
    buffer.add(life("life2", {GAME_RETURN_KEY: 480.0, GAME_LENGTH_KEY: 5}, [1.0] * 3))
    # An env without game infos: the summed episode reward, as before.
    buffer.add(life("plain", {}, [2.0, 3.0]))
    assert buffer.pop_finished_episode_returns() == [480.0, 5.0]


def test_with_atari_wires_env_stacking_buffer_eval_and_metrics():
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.callbacks.callbacks import RLlibCallback

    from rllib_ners.env.atari_rllib import AtariGameMetricsCallback, with_atari

    class Mine(RLlibCallback):
        pass

    config = (
        DQNConfig()
        .training(replay_buffer_config={"type": "X", "capacity": 7})
        .callbacks(Mine)
    )
    config = with_atari(config, "Pong", env_config={"noop_max": 5})
    assert config.env == "rllib_ners.atari"
    assert config.env_config == {"game": "Pong", "noop_max": 5}
    assert config.evaluation_config["env_config"] == {
        "game": "Pong",
        "noop_max": 5,
        "episodic_life": False,
        "clip_rewards": False,
    }
    assert config.replay_buffer_config == {"type": "X", "capacity": 7, "frame_stack": 4}
    # RLlib's default lookback of 1 would zero-fill stacks after every chunk cut.
    assert config.episode_lookback_horizon == 3
    connector = config._env_to_module_connector(None, None, None)
    assert connector.num_frames == 4
    assert config.callbacks_class == [Mine, AtariGameMetricsCallback]
    with pytest.raises(ValueError, match="noop"):
        with_atari(DQNConfig(), "Pong", env_config={"noops": 5})
