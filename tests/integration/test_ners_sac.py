"""NERS-SAC inside RLlib: training on Pendulum with NERS, PER and uniform replay,
the columnar replay path against RLlib's connectors and RLlib's own SAC learner,
and a MuJoCo (Hopper-v5) smoke run.

(Resume, killed EnvRunners and several Learners are in test_resume.py,
test_faults.py and test_distributed.py; bad input in tests/unit/test_bad_input.py.)
"""

import numpy as np
import pytest
import torch
from ray.rllib.algorithms.sac import SACConfig
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from rllib_ners import (
    FastPrioritizedEpisodeReplayBuffer,
    NERSEpisodeReplayBuffer,
    NERSSACConfig,
)
from rllib_ners.algorithms.common.training.columnar_replay import replay_train_batch
from rllib_ners.algorithms.common.training.weight_sharing import local_learner
from rllib_ners.algorithms.ners.ners_learner import NERS_DIAGNOSTICS_KEYS
from rllib_ners.algorithms.ners_sac.torch.ners_sac_torch_learner import (
    soft_td_error_and_target,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("ray_session", "one_torch_thread"),
]

MID = DEFAULT_MODULE_ID
FAST = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"


def _learner(algo):
    return local_learner(algo)


def _scorer_params(algo):
    return [p.detach().clone() for p in _learner(algo).ners.scorer.parameters()]


def _stored_priorities(buffer):
    return buffer.get_priorities(np.flatnonzero(buffer.storage.is_transition))


def test_train_reports_ners_metrics_and_moves_the_sampler(small_sac):
    algo = small_sac().build_algo()
    try:
        assert algo.uses_replay_loop
        before = _scorer_params(algo)
        for _ in range(3):
            result = algo.train()
        ners = result["ners"]
        assert ners["num_sampler_updates_lifetime"] >= 1
        assert (
            algo.ners_sampler_update.num_updates == ners["num_sampler_updates_lifetime"]
        )
        for key in NERS_DIAGNOSTICS_KEYS:
            assert key in ners, key
        assert any(not torch.equal(a, b) for a, b in zip(before, _scorer_params(algo)))
        buffer = algo.local_replay_buffer
        assert type(buffer) is NERSEpisodeReplayBuffer
        buffer.check_invariants()
        # Actions are stored (and scored) as float vectors.
        assert buffer.storage.actions.dtype == np.float32
        assert buffer.storage.actions.shape[1:] == (1,)
        # Replayed transitions got learned priorities and fresh delta / q.
        scored = np.flatnonzero(buffer.slot_memory.scored)
        assert scored.size > 0
        assert np.all(np.isfinite(buffer.slot_memory.delta[scored]))
        assert not np.allclose(buffer.slot_memory.delta[scored], 1.0)
        assert not np.allclose(buffer.slot_memory.q[scored], 1.0)
        assert np.isfinite(result["learners"][MID]["qf_loss"])
    finally:
        algo.stop()


@pytest.mark.parametrize("replay", ["per", "uniform"])
def test_our_fast_buffer_plugs_in_as_the_buffer_type(replay, small_sac):
    """Stock SACConfig refuses our buffer types; NERSSACConfig takes them, builds
    no NERS sampler, and the buffer gets RLlib's SAC TD errors."""
    config = small_sac(replay)
    with pytest.raises(ValueError, match="must be of type"):
        SACConfig().environment("Pendulum-v1").training(
            replay_buffer_config=dict(config.replay_buffer_config)
        ).validate()
    algo = config.build_algo()
    try:
        result = algo.train()
        buffer = algo.local_replay_buffer
        assert type(buffer) is FastPrioritizedEpisodeReplayBuffer
        assert algo.uses_replay_loop and algo.ners_sampler_update is None
        assert _learner(algo).ners is None
        assert "ners" not in result
        buffer.check_invariants()
        leaves = _stored_priorities(buffer)
        if replay == "per":  # |TD error|^0.6: priorities moved off the initial 1
            assert np.any(np.abs(leaves - 1.0) > 1e-6)
        else:  # alpha = 0: every leaf stays 1
            np.testing.assert_array_equal(leaves, 1.0)
        assert np.isfinite(result["learners"][MID]["qf_loss"])
    finally:
        algo.stop()


def test_buffer_type_may_be_the_class_object(small_sac):
    config = small_sac(
        {"type": FastPrioritizedEpisodeReplayBuffer, "alpha": 0.6, "beta": 0.4}
    )
    config.validate()
    # A dotted string from validate() on: RLlib 2.60 crashes on class objects.
    buffer_type = config.replay_buffer_config["type"]
    assert buffer_type.endswith(".FastPrioritizedEpisodeReplayBuffer")
    algo = config.build_algo()
    try:
        assert type(algo.local_replay_buffer) is FastPrioritizedEpisodeReplayBuffer
    finally:
        algo.stop()


def _sample_twice(buffer, config, num_items):
    """The same draw as RLlib episodes and as our columns."""
    kwargs = {"n_step": config.n_step, "gamma": config.gamma, "beta": 0.4}
    rng_state = buffer.rng.bit_generator.state
    episodes = buffer.sample(num_items=num_items, sample_episodes=True, **kwargs)
    buffer.rng.bit_generator.state = rng_state
    columns = buffer.sample_batch(num_items, **kwargs)
    return episodes, columns


@pytest.mark.parametrize("replay", ["ners", "per"])
def test_columnar_replay_feeds_the_learner_what_rllibs_connectors_would(
    replay, small_sac
):
    """Our training step hands the Learner numpy columns straight from the
    buffer; SAC's learner connector, given the same transitions as episodes,
    builds the very same batch (names, dtypes, values). Both sides hold the
    buffer's own n-step values (`sample(sample_episodes=True)` is built from
    `sample_batch`): that they are right is test_fast_prioritized_buffer's."""
    algo = small_sac(replay, n_step=(1, 3), rollout_fragment_length=3).build_algo()
    try:
        algo.train()
        buffer, config = algo.local_replay_buffer, algo.config
        episodes, columns = _sample_twice(buffer, config, 16)
        learner = _learner(algo)
        expected = learner._learner_connector(
            rl_module=learner.module,
            batch={},
            episodes=episodes,
            shared_data={},
            metrics=learner.metrics,
        )[MID]
        ours = replay_train_batch(buffer, columns).policy_batches[MID]
        assert set(ours) == set(expected)
        assert len(set(np.asarray(ours["n_step"]).tolist())) > 1
        for key in expected:
            want = np.asarray(expected[key])
            np.testing.assert_array_equal(ours[key], want, err_msg=key)
            assert np.asarray(ours[key]).dtype == want.dtype, key
    finally:
        algo.stop()


LOSS_KEYS = ("qf_loss", "qf_twin_loss", "policy_loss", "alpha_loss", "total_loss")


def test_sac_losses_on_the_columns_equal_rllibs_sac_learner(small_sac):
    """Our Learner (NERS scoring, fused gradient check, columnar batch) and
    RLlib's own SACTorchLearner (episodes through its connectors), from the
    same weights and torch seed, compute the same losses and take the same
    step; our soft TD errors are the ones RLlib's SAC reports."""
    algo = small_sac(learning_starts=10**6).build_algo()  # no update in train()
    try:
        algo.train()
        ours = _learner(algo)
        stock = SACTorchLearner(config=algo.config, module_spec=ours._module_spec)
        stock.build()
        stock.module.set_state(ours.module.get_state())
        buffer, config = algo.local_replay_buffer, algo.config
        episodes, columns = _sample_twice(buffer, config, 32)
        timesteps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: 10**6}

        torch.manual_seed(7)
        stock_results = stock.update(episodes=episodes, timesteps=timesteps)
        torch.manual_seed(7)
        our_results = ours.update(
            batch=replay_train_batch(buffer, columns), timesteps=timesteps
        )
        for key in LOSS_KEYS:
            assert float(stock_results[MID][key].peek()) == pytest.approx(
                float(our_results[MID][key].peek()), rel=1e-6, abs=1e-7
            ), key
        for ours_p, stock_p in zip(
            ours.module[MID].parameters(), stock.module[MID].parameters()
        ):
            torch.testing.assert_close(ours_p, stock_p, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(
            ours.curr_log_alpha[MID], stock.curr_log_alpha[MID], rtol=0, atol=1e-7
        )
        # RLlib's TD errors (mean over the twin critics) are our delta column.
        stock_td = np.asarray(stock_results[MID]["td_error"].peek()[0])
        rows = np.asarray(our_results[MID]["td_error"].peek()[0])
        np.testing.assert_allclose(rows[:, 1], stock_td, rtol=1e-5, atol=1e-6)
        buffer.update_priorities(rows)  # sample order: position column
    finally:
        algo.stop()


def test_soft_td_error_and_target_follow_the_sac_equations():
    """y = r + gamma^n (1 - term) (Q'_min(s', a') - alpha log pi(a'|s')) and
    delta = mean over the twin critics of |Q_k(s, a) - y|."""
    batch = {
        "rewards": torch.tensor([1.0, -2.0]),
        "terminateds": torch.tensor([False, True]),
        "n_step": torch.tensor([1, 2]),
    }
    fwd_out = {
        "q_target_next": torch.tensor([3.0, 5.0]),
        "logp_next_resampled": torch.tensor([-1.0, 0.5]),
        "qf_preds": torch.tensor([4.0, 0.0]),
        "qf_twin_preds": torch.tensor([6.0, -1.0]),
    }
    alpha, gamma = torch.tensor(0.5), 0.9
    delta, target = soft_td_error_and_target(
        batch=batch, fwd_out=fwd_out, alpha=alpha, gamma=gamma, twin_q=True
    )
    y0 = 1.0 + 0.9 * (3.0 + 0.5)
    torch.testing.assert_close(target, torch.tensor([y0, -2.0]))
    torch.testing.assert_close(
        delta, torch.tensor([0.5 * (abs(4 - y0) + abs(6 - y0)), 0.5 * (2 + 1)])
    )
    single, _ = soft_td_error_and_target(
        batch=batch, fwd_out=fwd_out, alpha=alpha, gamma=gamma, twin_q=False
    )
    torch.testing.assert_close(single, torch.tensor([abs(4 - y0), 2.0]))


def test_module_encoder_mode_scores_with_sacs_policy_encoder(small_sac):
    algo = small_sac().ners(encoder="module").build_algo()
    try:
        algo.train()
        learner = _learner(algo)
        module = learner.module[MID].unwrapped()
        assert learner.ners.scorer.encoder is None  # no encoder of its own
        assert learner.ners.module_encoder == "pi_encoder"
        obs = torch.linspace(-1.0, 1.0, 9).reshape(3, 3)
        encoded = learner.ners.module_encode(obs)
        assert encoded.shape == (3, 32)
        assert not encoded.requires_grad
        torch.testing.assert_close(
            encoded, module.pi_encoder({Columns.OBS: obs})[ENCODER_OUT].detach()
        )
        assert algo.ners_sampler_update.num_updates >= 1
    finally:
        algo.stop()


def test_mujoco_hopper_v5_trains(small_sac):
    """MuJoCo through gymnasium's v5 envs (float64 observations, 3-d actions)."""
    algo = small_sac(
        env="Hopper-v5", learning_starts=100, min_sample_timesteps_per_iteration=200
    ).build_algo()
    try:
        result = algo.train()
        buffer = algo.local_replay_buffer
        assert buffer.storage.actions.shape[1:] == (3,)
        assert buffer.storage.obs.shape[1:] == (11,)
        assert np.isfinite(result["learners"][MID]["qf_loss"])
        assert np.any(buffer.slot_memory.scored)
    finally:
        algo.stop()


def test_default_config_is_ners_replay_in_checkpoints():
    config = NERSSACConfig()
    assert config.uses_ners_replay
    assert config.store_buffer_in_checkpoints
    assert config.replay_buffer_config["type"] == "rllib_ners.NERSEpisodeReplayBuffer"
