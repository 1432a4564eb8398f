"""NERS-SAC's Learner with ReLo and LaBER replay, on crafted batches.

The critics are set to known functions of the batch: with `hiddens=(4,)`
each critic's first hidden unit is `relu(s_0)`, its second `relu(a_0 + 2)`,
the others 0, so with `s_0 >= 0` and `a_0` in [-1, 1]

    Q(s, a) = w_obs * s_0 + w_act * (a_0 + 2) + bias.

The target critics ignore the action (`w_act = 0`), so the TD target of a
non-terminal item is known by hand whatever `a' ~ pi(s')` is drawn, up to
the temperature term `alpha log pi(a'|s')`, made negligible (log alpha =
-30, alpha ~ 1e-13) where the values are checked by hand. Terminal items
have `y = r` exactly.

- ReLo: the logged rows `[|delta|, online loss, target loss, position]`
  equal the hand values (squared error and Huber), on the one-backward
  update and on RLlib's own update path; and a ReLo Learner's losses,
  gradients and weights equal a PER Learner's bit for bit (ReLo changes the
  priorities only).
- LaBER: the logged surrogates equal the hand values; each critic's
  gradient is the gradient of its LaBER-weighted loss on its own drawn rows
  only, and the actor's and the temperature's that of the ordinary losses
  on the uniformly drawn rows only (a reference computed by hand on a copy
  of the weights); equal surrogates give weights 1; the sub-sampler's
  generator state round-trips through `get_state` / `set_state`.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from torch.nn import functional as F

from rllib_ners.algorithms.common.learner.deferred_updates import (
    DEFER_METRICS,
    REPLAY_FEEDBACK,
)
from rllib_ners.algorithms.common.learner.replay_methods import (
    LABER_GENERATOR_STATE,
)
from rllib_ners.algorithms.ners_sac.presets import sac_config
from rllib_ners.algorithms.ners_sac.torch.ners_sac_torch_learner import (
    NERSSACTorchLearner,
)
from rllib_ners.algorithms.ners_sac.torch.sac_update import SACNetworks
from rllib_ners.replay_buffers.feedback import (
    LABER_SURROGATES,
    NERS_SCORES,
    RELO_LOSSES,
    TD_ERRORS,
)
from rllib_ners.utils.update_graphs import EagerStandInGraph

OBS_DIM, ACT_DIM = 11, 3
GAMMA = 0.99
TIMESTEPS = {"num_env_steps_sampled_lifetime": 1000}
# (w_obs, w_act, bias) of each critic; the target critics ignore actions.
CRITICS = {
    "qf": (1.0, 0.5, 0.0),
    "qf_twin": (2.0, -1.0, 0.5),
    "target_qf": (0.5, 0.0, 1.0),
    "target_qf_twin": (1.5, 0.0, -1.0),
}


def _learner(sampler, critic_loss="mse", seed=0, **settings):
    env = gym.make("Hopper-v5")
    config = (
        sac_config("Hopper-v5", replay="per", capacity=1000, hiddens=(4,))
        .training(
            critic_loss=critic_loss,
            replay_buffer_config={"sampler": sampler, **settings},
        )
        .debugging(seed=seed)
    )
    return config.build_learner(env=env)


def _set_critics(learner, critics=CRITICS):
    """Each critic `Q = w_obs relu(s_0) + w_act relu(a_0 + 2) + bias`."""
    params = dict(learner.module[DEFAULT_MODULE_ID].named_parameters())
    with torch.no_grad():
        for name, (w_obs, w_act, bias) in critics.items():
            encoder_w = params[f"{name}_encoder.net.mlp.0.weight"]
            encoder_b = params[f"{name}_encoder.net.mlp.0.bias"]
            encoder_w.zero_()
            encoder_b.zero_()
            encoder_w[0, 0] = 1.0  # s_0
            encoder_w[1, OBS_DIM] = 1.0  # a_0 (the critics take [s, a])
            encoder_b[1] = 2.0
            head_w = params[f"{name}.net.mlp.0.weight"]
            head_w.zero_()
            head_w[0, 0], head_w[0, 1] = w_obs, w_act
            params[f"{name}.net.mlp.0.bias"].fill_(bias)


def _crafted_columns(rows, seed=0, terminal=None):
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(rows, OBS_DIM)).astype(np.float32)
    obs[:, 0] = rng.uniform(0, 2, size=rows)
    next_obs = rng.normal(size=(rows, OBS_DIM)).astype(np.float32)
    next_obs[:, 0] = rng.uniform(0, 2, size=rows)
    if terminal is None:
        terminal = np.arange(rows) % 2 == 0
    return {
        "obs": obs,
        "new_obs": next_obs,
        "actions": rng.uniform(-1, 1, size=(rows, ACT_DIM)).astype(np.float32),
        "rewards": rng.uniform(-3, 3, size=rows).astype(np.float32),
        "terminateds": np.asarray(terminal, dtype=bool),
        "truncateds": np.zeros(rows, dtype=bool),
        "weights": np.ones(rows, dtype=np.float32),
        "n_step": np.ones(rows, dtype=np.int64),
        "sample_position": rng.permutation(rows).astype(np.int64),
    }


def _batch(columns):
    rows = len(columns["rewards"])
    return MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=rows)


def _q(name, obs, actions):
    w_obs, w_act, bias = CRITICS[name]
    return w_obs * obs[:, 0] + w_act * (actions[:, 0] + 2.0) + bias


def _hand_target(columns):
    """y = r + gamma (1 - done) min_k Qbar_k(s', .) (alpha log pi ~ 1e-12)."""
    next_obs = columns["new_obs"]
    q_next = np.minimum(
        _q("target_qf", next_obs, np.zeros_like(columns["actions"])),
        _q("target_qf_twin", next_obs, np.zeros_like(columns["actions"])),
    )
    done = columns["terminateds"].astype(np.float64)
    return columns["rewards"] + GAMMA * (1.0 - done) * q_next


def _per_item_loss(critic_loss, q, y):
    q, y = torch.as_tensor(q, dtype=torch.float64), torch.as_tensor(y)
    if critic_loss == "mse":
        return (0.5 * (q - y) ** 2).numpy()
    return F.huber_loss(q, y.double(), reduction="none", delta=1.0).numpy()


def _feedback(learner, columns):
    result = learner.update(
        batch=_batch(columns), timesteps=TIMESTEPS, **{DEFER_METRICS: True}
    )
    return result[REPLAY_FEEDBACK][DEFAULT_MODULE_ID]


def test_the_learner_declares_every_layout_it_sends():
    assert NERSSACTorchLearner.replay_feedback_layouts == (
        TD_ERRORS,
        NERS_SCORES,
        RELO_LOSSES,
        LABER_SURROGATES,
    )


# ----------------------------------------------------------------- ReLo
@pytest.mark.parametrize("update", ["one_backward", "rllibs"])
@pytest.mark.parametrize("critic_loss", ["mse", "huber"])
def test_relo_rows_are_the_online_and_target_losses(
    critic_loss, update, one_torch_thread
):
    learner = _learner("relo", critic_loss)
    if update == "rllibs":
        learner.one_backward_blocker = "RLlib's update is under test"
    _set_critics(learner)
    learner.curr_log_alpha[DEFAULT_MODULE_ID].data.fill_(-30.0)
    columns = _crafted_columns(6)
    obs, actions = columns["obs"], columns["actions"]
    y = _hand_target(columns)
    online = [_q(name, obs, actions) for name in ("qf", "qf_twin")]
    target = [_q(name, obs, actions) for name in ("target_qf", "target_qf_twin")]
    expected = np.stack(
        [
            0.5 * (np.abs(online[0] - y) + np.abs(online[1] - y)),
            0.5 * sum(_per_item_loss(critic_loss, q, y) for q in online),
            0.5 * sum(_per_item_loss(critic_loss, q, y) for q in target),
            columns["sample_position"],
        ],
        axis=-1,
    )
    if critic_loss == "huber":  # both branches of the Huber loss are checked
        errors = np.abs(np.concatenate(online + target) - np.tile(y, 4))
        assert (errors < 1).any() and (errors > 1).any()
    rows = _feedback(learner, columns)
    assert rows.shape == (6, 4)
    np.testing.assert_allclose(rows, expected, rtol=1e-5, atol=1e-5)
    # The target losses differ from the online ones: not a copy.
    assert not np.allclose(rows[:, 1], rows[:, 2], rtol=1e-2)


def _random_columns(seed, rows=64):
    rng = np.random.default_rng(seed)
    columns = _crafted_columns(rows, seed)
    columns["terminateds"] = rng.random(rows) < 0.2
    columns["weights"] = rng.uniform(0.5, 1, size=rows).astype(np.float32)
    del columns["sample_position"]
    return columns


def test_relo_updates_exactly_as_per(one_torch_thread):
    """Same weights, batch, importance weights and draws: the ReLo Learner's
    losses, gradients and new weights are the PER Learner's, bit for bit, and
    its first column is PER's TD errors."""
    per, relo = _learner("priority"), _learner("relo")
    relo.set_state(per.get_state(components=["rl_module"]))
    per_params = dict(per.module[DEFAULT_MODULE_ID].named_parameters())
    relo_params = dict(relo.module[DEFAULT_MODULE_ID].named_parameters())
    for step in range(2):
        columns = _random_columns(step)
        torch.manual_seed(step)
        per_td_errors = _feedback(per, columns)
        per_losses = per.reduce_deferred_metrics()[DEFAULT_MODULE_ID]
        torch.manual_seed(step)
        relo_rows = _feedback(relo, columns)
        relo_losses = relo.reduce_deferred_metrics()[DEFAULT_MODULE_ID]
        for key in ("qf_loss", "qf_twin_loss", "policy_loss", "alpha_loss"):
            assert float(relo_losses[key].peek()) == float(per_losses[key].peek()), key
        for name, param in per_params.items():
            if not name.startswith("target"):
                assert torch.equal(param.grad, relo_params[name].grad), name
            assert torch.equal(param, relo_params[name]), name
        assert per_td_errors.shape == (64,) and relo_rows.shape == (64, 4)
        np.testing.assert_array_equal(relo_rows[:, 0], per_td_errors)
        np.testing.assert_array_equal(relo_rows[:, 3], np.arange(64))
        # Built, the target critics are the critics; after one Polyak step
        # they are not, and neither are the two losses.
        same = np.array_equal(relo_rows[:, 1], relo_rows[:, 2])
        assert same == (step == 0)


def test_relo_needs_continuous_actions():
    config = sac_config("CartPole-v1", replay="per", capacity=1000, hiddens=(4,))
    config = config.training(replay_buffer_config={"sampler": "relo"})
    with pytest.raises(ValueError, match=r"'relo'.*Box"):
        config.build_learner(env=gym.make("CartPole-v1"))


# ----------------------------------------------------------------- LaBER
class _Recorder:
    """Records the sub-sampler's draws (indices, weights) on the Learner."""

    def __init__(self, subsampler):
        self.critic_draws, self.actor_draws = [], []
        draw, uniform = subsampler.draw, subsampler.uniform

        def recorded_draw(surrogates, num):
            drawn = draw(surrogates, num)
            self.critic_draws.append(drawn)
            return drawn

        def recorded_uniform(num_rows, num, device):
            drawn = uniform(num_rows, num, device)
            self.actor_draws.append(drawn)
            return drawn

        subsampler.draw, subsampler.uniform = recorded_draw, recorded_uniform


@pytest.mark.parametrize("critic_loss", ["mse", "huber"])
def test_laber_surrogates_are_the_hand_values(critic_loss, one_torch_thread):
    learner = _learner("laber", critic_loss, laber_m=2)
    _set_critics(learner)
    learner.curr_log_alpha[DEFAULT_MODULE_ID].data.fill_(-30.0)
    recorder = _Recorder(learner.laber)
    columns = _crafted_columns(8)
    y = _hand_target(columns)
    errors = [
        np.abs(_q(name, columns["obs"], columns["actions"]) - y)
        for name in ("qf", "qf_twin")
    ]
    if critic_loss == "huber":
        assert np.concatenate(errors).max() > 1  # min(|delta|, 1) is checked
        errors = [np.minimum(e, 1.0) for e in errors]
    rows = _feedback(learner, columns)
    assert rows.shape == (8, 3)
    np.testing.assert_allclose(rows[:, 0], 0.5 * (errors[0] + errors[1]), rtol=1e-5)
    np.testing.assert_array_equal(rows[:, 2], columns["sample_position"])
    # B = 8 / m = 4 rows for each critic and the actor: 12 draws in all.
    (first, _), (second, _) = recorder.critic_draws
    (actor,) = recorder.actor_draws
    assert len(first) == len(second) == len(actor) == 4
    counts = np.bincount(np.concatenate([first, second, actor]), minlength=8)
    np.testing.assert_array_equal(rows[:, 1], counts)


def _critic_q(params, name, obs, actions):
    """Critic `name`'s Q(s, a) from `params` (the MLP written out)."""
    hidden = torch.relu(
        torch.cat([obs, actions], -1) @ params[f"{name}_encoder.net.mlp.0.weight"].T
        + params[f"{name}_encoder.net.mlp.0.bias"]
    )
    head = (
        hidden @ params[f"{name}.net.mlp.0.weight"].T + params[f"{name}.net.mlp.0.bias"]
    )
    return head.squeeze(-1)


def test_laber_gradients_come_from_the_drawn_rows_only(one_torch_thread):
    """Critic k's gradient is that of `mean(w_k (1/2)(Q_k - y)^2)` over its own
    drawn rows; the policy's and the temperature's those of SAC's ordinary
    losses over the actor's uniformly drawn rows (every item terminal: y = r)."""
    learner = _learner("laber", "mse", laber_m=4)
    _set_critics(learner)
    recorder = _Recorder(learner.laber)
    columns = _crafted_columns(16, terminal=np.ones(16, dtype=bool))
    module = learner.module[DEFAULT_MODULE_ID]
    reference = copy.deepcopy(module)
    log_alpha = learner.curr_log_alpha[DEFAULT_MODULE_ID].detach().clone()
    torch.manual_seed(7)
    _feedback(learner, columns)
    (idx_1, w_1), (idx_2, w_2) = recorder.critic_draws
    (idx_pi,) = recorder.actor_draws
    assert not torch.equal(torch.sort(idx_1)[0], torch.sort(idx_2)[0])

    # The reference: the same draws of the default generator, a' on all 16
    # rows first (its values do not enter y = r), then the actor's.
    params = dict(reference.named_parameters())
    log_alpha.requires_grad_(True)
    obs, actions = (torch.as_tensor(columns[key]) for key in ("obs", "actions"))
    y = torch.as_tensor(columns["rewards"])
    nets = SACNetworks(reference)
    torch.manual_seed(7)
    with torch.no_grad():
        nets.draw(
            nets.policy(torch.as_tensor(columns["new_obs"])), reparameterized=False
        )
    actor_actions, logp = nets.draw(nets.policy(obs[idx_pi]), reparameterized=True)
    frozen = {name: param.detach() for name, param in params.items()}
    q_actor = torch.min(
        _critic_q(frozen, "qf", obs[idx_pi], actor_actions),
        _critic_q(frozen, "qf_twin", obs[idx_pi], actor_actions),
    )
    alpha = torch.exp(log_alpha)
    target_entropy = learner.target_entropy[DEFAULT_MODULE_ID]
    total = (
        torch.mean(alpha.detach() * logp - q_actor)
        - torch.mean(log_alpha * (logp.detach() + target_entropy))
        + torch.mean(
            w_1
            * 0.5
            * (_critic_q(params, "qf", obs[idx_1], actions[idx_1]) - y[idx_1]) ** 2
        )
        + torch.mean(
            w_2
            * 0.5
            * (_critic_q(params, "qf_twin", obs[idx_2], actions[idx_2]) - y[idx_2]) ** 2
        )
    )
    total.backward()
    trained = dict(module.named_parameters())
    for name, param in params.items():
        if name.startswith("target"):
            continue
        torch.testing.assert_close(trained[name].grad, param.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        learner.curr_log_alpha[DEFAULT_MODULE_ID].grad, log_alpha.grad
    )
    # Not the gradient of the ordinary loss over all 16 rows: the draw matters.
    bias = params["qf.net.mlp.0.bias"].detach().clone().requires_grad_(True)
    every_row = {**frozen, "qf.net.mlp.0.bias": bias}
    (0.5 * torch.mean((_critic_q(every_row, "qf", obs, actions) - y) ** 2)).backward()
    assert not torch.allclose(trained["qf.net.mlp.0.bias"].grad, bias.grad, rtol=1e-3)


def test_laber_weights_are_one_for_equal_surrogates(one_torch_thread):
    learner = _learner("laber", "mse", laber_m=2)
    constant = dict.fromkeys(CRITICS, (0.0, 0.0, 1.5))
    _set_critics(learner, constant)
    recorder = _Recorder(learner.laber)
    columns = _crafted_columns(8, terminal=np.ones(8, dtype=bool))
    columns["rewards"][:] = -0.5  # |Q - y| = 2 on every row
    rows = _feedback(learner, columns)
    np.testing.assert_allclose(rows[:, 0], 2.0)
    for _, weights in recorder.critic_draws:
        np.testing.assert_array_equal(weights.numpy(), np.ones(4, dtype=np.float32))


def test_laber_generator_state_round_trips(one_torch_thread):
    """A Learner restored from another's state draws the other's rows next."""
    first, restored = (
        _learner("laber", laber_m=2, seed=1),
        _learner("laber", laber_m=2, seed=2),
    )
    first.update(
        batch=_batch(_crafted_columns(8, seed=0)),
        timesteps=TIMESTEPS,
        **{DEFER_METRICS: True},
    )
    state = first.get_state()
    assert LABER_GENERATOR_STATE in state
    restored.set_state(state)
    unrestored = _learner("laber", laber_m=2, seed=2)
    unrestored.set_state(first.get_state(not_components=[LABER_GENERATOR_STATE]))
    draws = []
    for learner in (first, restored, unrestored):
        recorder = _Recorder(learner.laber)
        torch.manual_seed(3)
        _feedback(learner, _crafted_columns(8, seed=1))
        draws.append([idx for idx, _ in recorder.critic_draws] + recorder.actor_draws)
    assert all(torch.equal(a, b) for a, b in zip(draws[0], draws[1]))
    assert not all(torch.equal(a, b) for a, b in zip(draws[0], draws[2]))
    for a, b in zip(
        first.module[DEFAULT_MODULE_ID].parameters(),
        restored.module[DEFAULT_MODULE_ID].parameters(),
    ):
        assert torch.equal(a, b)


def test_laber_refuses_rllibs_update_and_pal():
    env = gym.make("Hopper-v5")
    config = sac_config("Hopper-v5", replay="per", capacity=1000, hiddens=(4,))
    laber = config.training(replay_buffer_config={"sampler": "laber"})
    with pytest.raises(ValueError, match=r"'laber'.*torch-compiled.*another sampler"):
        laber.copy(copy_frozen=False).framework(
            torch_compile_learner=True
        ).build_learner(env=env)
    with pytest.raises(ValueError, match=r"'laber'.*critic_loss='mse'"):
        laber.copy(copy_frozen=False).training(critic_loss="pal").build_learner(env=env)


def test_laber_updates_eagerly_under_cuda_graph_updates(caplog, one_torch_thread):
    """The sub-sample is drawn on the host, which no captured graph replays:
    the Learner says so once and updates eagerly (with the stand-in graph a
    capture would otherwise be attempted)."""
    env = gym.make("Hopper-v5")
    config = sac_config("Hopper-v5", replay="per", capacity=1000, hiddens=(4,))
    config = config.training(
        cuda_graph_updates=True,
        replay_buffer_config={"sampler": "laber", "laber_m": 2},
    )
    with caplog.at_level("INFO"):
        learner = config.build_learner(env=env)
        learner.make_update_graph = EagerStandInGraph
        for seed in range(3):
            _feedback(learner, _crafted_columns(8, seed))
    assert learner.update_graphs is None
    said = [r.getMessage() for r in caplog.records if "run eagerly" in r.getMessage()]
    assert len(said) == 1 and "LaBER" in said[0]
