"""NERS-DQN on CartPole-v1: DQN whose replay sampler is learned (NERS, ICLR 2021).

The DQN settings are those of RLlib's own `cartpole_dqn.py` example
(`rllib_ners.algorithms.rainbow.presets.cartpole_dqn`: Adam 5e-4, batch 32,
double Q, dueling,
n-step 2-5, 256-unit tanh layers, epsilon 1 -> 0.02 over 10k steps), with
the replay buffer switched to `NERSEpisodeReplayBuffer` and the sampler's
defaults (docs/ners.md, "Settings": PER's priority times a learned correction,
the log-probability objective, an update at every episode end, replay reward
from the training episodes against a moving baseline).

How to run this script
----------------------
`python tuned_examples/ners_dqn/cartpole_ners_dqn.py [--no-tune]
    [--num-env-runners=0] [--stop-timesteps=60000] [--stop-reward=450] [--seed=0]
    [--overlap-sampling] [--weights-sync-interval=1]`

One update of 32 per 5 env steps (`training_intensity=6.4`): exactly so
without remote EnvRunners and with `--overlap-sampling`; in lockstep with N
remote EnvRunners RLlib's round weights make it (N + 1) / N times that,
rounded to whole updates per round (docs/scaling.md, "Overlapped sampling").
`--overlap-sampling` (with
`--num-env-runners=2` or more) lets the EnvRunners sample while the Learner
updates (`config.training(overlap_sampling=True)`), with the weights sent to
them at most every `--weights-sync-interval` updates.

`--as-test` makes it fail unless the stop reward is reached (the learning test).
Use `--no-tune` and `--num-env-runners=0` to debug in one process.

Results to expect
-----------------
On a 2-core CPU (no GPU), a mean return over 450 within 30k-60k env steps
(about 3-6 minutes), e.g.:
+---------------------+------------+-------------+------------------------+
| Trial               | iterations | env steps   | episode_return_mean    |
|---------------------+------------+-------------+------------------------|
| NERSDQN_CartPole-v1 |         ~40 |     ~40000 |                  >=450 |
+---------------------+------------+-------------+------------------------+
"""

from ray.rllib.examples.utils import add_rllib_example_script_args

from rllib_ners import NERSDQNConfig
from rllib_ners.algorithms.rainbow.presets import cartpole_dqn
from rllib_ners.cli import (
    add_overlap_sampling_args,
    add_seed_arg,
    overlap_sampling_settings,
    run_example,
)

parser = add_rllib_example_script_args(
    default_reward=450.0,
    default_timesteps=60000,
)
parser.set_defaults(env="CartPole-v1")
add_seed_arg(parser)
add_overlap_sampling_args(parser)
args = parser.parse_args()

config = (
    cartpole_dqn(NERSDQNConfig(), env=args.env)
    .training(
        replay_buffer_config={"capacity": 50000, "alpha": 0.6, "beta": 0.4},
        # Trained / sampled env steps: one batch of 32 per 5 env steps.
        training_intensity=32 / 5,
        **overlap_sampling_settings(args),
    )
    .ners()  # the sampler's defaults (docs/ners.md, "Settings")
    .debugging(seed=args.seed)
)

if __name__ == "__main__":
    run_example(config, args)
