"""Shared experiment settings, so tuned examples, sweeps and benchmarks agree.

`cartpole_dqn(config)` applies the DQN settings of RLlib's own CartPole DQN
example (`rllib/examples/algorithms/dqn/cartpole_dqn.py`) to any DQN-family
config (stock `DQNConfig` or `NERSDQNConfig`): Adam 5e-4, batch 32, double Q,
dueling, n-step 2-5, epsilon 1 -> 0.02 over 10k steps, learning from 1000
steps, 256-unit tanh encoder and head. Replay settings are left to the caller.
"""

from __future__ import annotations

from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig


def cartpole_dqn(config, *, env: str = "CartPole-v1"):
    return (
        config.environment(env)
        .training(
            lr=5e-4,
            train_batch_size_per_learner=32,
            n_step=(2, 5),
            double_q=True,
            dueling=True,
            epsilon=[(0, 1.0), (10000, 0.02)],
            num_steps_sampled_before_learning_starts=1000,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256],
                fcnet_activation="tanh",
                head_fcnet_hiddens=[256],
                head_fcnet_activation="tanh",
            )
        )
    )
