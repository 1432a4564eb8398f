"""The agents the built-in study tasks train: each function turns an RLlib
config (env set, replay not yet) into the task's agent settings, or builds the
task's evaluation env.

Ray and the algorithms are imported inside each function, when a task's config
is built, so that declaring the tasks (`rllib_ners.study.declarations`) stays
cheap and Ray-free.
"""

from __future__ import annotations


def classic_control_agent(config):
    """RLlib's CartPole DQN example settings (`presets.cartpole_dqn`): Adam 5e-4,
    batch 32, double Q, dueling, n-step 2-5 (drawn per sample), 256-unit tanh
    encoder and head, epsilon 1 -> 0.02 over 10k steps, learning from 1000 steps,
    one update of 32 per rollout fragment ("auto" = 5 env steps)."""
    from rllib_ners.algorithms.rainbow.presets import cartpole_dqn

    return cartpole_dqn(config, env=config.env)


def minatar_agent(budget: int):
    """MinAtar's DQN (Young & Tian 2019) shrunk to a short budget: its small CNN
    (one 3x3 conv, 16 channels; picked automatically for 10x10 images) and a
    128-unit head, double Q, dueling, n-step 3, Adam 2.5e-4, batch 32, target
    update every 1000 env steps, epsilon 1 -> 0.05 over the first 20% of the
    budget, learning from 2000 steps, one update of 32 every 4 env steps."""

    def agent(config):
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

        return (
            config.training(
                lr=2.5e-4,
                train_batch_size_per_learner=32,
                n_step=3,
                double_q=True,
                dueling=True,
                target_network_update_freq=1000,
                epsilon=[(0, 1.0), (budget // 5, 0.05)],
                num_steps_sampled_before_learning_starts=2000,
            )
            .env_runners(rollout_fragment_length=4)
            .rl_module(
                model_config=DefaultModelConfig(
                    head_fcnet_hiddens=[128], head_fcnet_activation="relu"
                )
            )
        )

    return agent


def sac_agent(*, hiddens, lr: float, learning_starts: int, rollout: int = 1):
    """SAC's usual setting (`ners_sac.presets.sac_config`: twin critics, a
    squashed Gaussian policy, ReLU MLPs of `hiddens`, Adam `lr` for actor,
    critics and temperature, batch 256, gamma 0.99, tau 0.005, learned
    temperature, `learning_starts` env steps before the first update, then one
    update per env step in rounds of `rollout` steps)."""

    def agent(config):
        from rllib_ners.algorithms.ners_sac.presets import sac_config

        return sac_config(
            config.env,
            config=config,
            replay="uniform",  # the arm sets the replay (build_config)
            hiddens=hiddens,
            lr=lr,
            learning_starts=learning_starts,
            rollout_fragment_length=rollout,
            # The studies' SAC runs are evaluated with RLlib 2.60's greedy
            # action, so that runs made before the squashed mean became the
            # default and runs made after compare alike.
            greedy_action="pre_tanh_mean",
        )

    return agent


def td3_agent(*, hiddens, lr: float, learning_starts: int, rollout: int = 1):
    """TD3 with the paper's settings (`td3.presets.td3_config`: a deterministic
    actor and twin critics on [s, a], ReLU MLPs of `hiddens`, Adam `lr`,
    batch 256, gamma 0.99, tau 0.005, target noise 0.2 clipped at 0.5, policy
    delay 2, exploration noise 0.1, `learning_starts` env steps of uniform
    random actions before the first update, then one update per env step in
    rounds of `rollout` steps)."""

    def agent(config):
        from rllib_ners.algorithms.td3.presets import td3_config

        return td3_config(
            config.env,
            config=config,
            replay="uniform",  # the arm sets the replay (build_config)
            hiddens=hiddens,
            lr=lr,
            learning_starts=learning_starts,
            rollout_fragment_length=rollout,
        )

    return agent


def atari_agent(game: str, budget: int):
    """Data-efficient Rainbow as the NERS reference runs it
    (`rainbow.presets.data_efficient_rainbow`: the data-efficient CNN on 4
    stacked 84x84 frames, noisy dueling C51 streams of 256 units, n = 20, Adam
    1e-4 / eps 1.5e-4, one update of 32 per env step from step 1600, target
    update every 2000 steps); DeepMind preprocessing (`with_atari`)."""

    def agent(config):
        from rllib_ners.algorithms.rainbow.presets import data_efficient_rainbow

        return data_efficient_rainbow(config, game, total_timesteps=budget)

    return agent


def atari_eval_env(game: str):
    """Whole games with the true (unclipped) score: the evaluation setting of
    `with_atari`."""

    def make():
        from rllib_ners.env.atari import make_atari_env
        from rllib_ners.env.atari_rllib import EVAL_ENV_SETTINGS

        return make_atari_env({"game": game, **EVAL_ENV_SETTINGS})

    return make
