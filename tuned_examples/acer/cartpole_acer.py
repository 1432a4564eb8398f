"""ACER on CartPole-v1 with uniform replay (Wang et al. 2016, on RLlib's new stack).

Settings (`rllib_ners.algorithms.acer.presets.cartpole_acer`): sequences of 20 steps, an
on-policy update on the fresh rollout then Poisson(4) off-policy updates of 16
replayed sequences, Retrace critic, truncated importance sampling (c = 10) with
bias correction, entropy 0.01, efficient trust region (delta 1) against an
average policy (tau 0.01), Adam 5e-4, a 256-256 tanh trunk, uniform replay of
50k steps. `--replay per|ners` switches the replay (see
`cartpole_acer_ners.py` for NERS).

How to run this script
----------------------
`python tuned_examples/acer/cartpole_acer.py [--no-tune] [--num-env-runners=0]
    [--stop-timesteps=200000] [--stop-reward=450] [--seed=0] [--replay=uniform]`

`--as-test` makes it fail unless the stop reward is reached (the learning test).

Results to expect
-----------------
On a 2-core CPU, a mean return over 450 within about 10k-30k env steps (a minute
or two), e.g. seed 0: 450 at 10k steps.
"""

from ray.rllib.examples.utils import add_rllib_example_script_args

from rllib_ners.algorithms.acer.presets import ACER_REPLAYS, cartpole_acer
from rllib_ners.cli import add_seed_arg, run_example

parser = add_rllib_example_script_args(default_reward=450.0, default_timesteps=200_000)
parser.set_defaults(env="CartPole-v1")
parser.add_argument("--replay", choices=sorted(ACER_REPLAYS), default="uniform")
add_seed_arg(parser)
args = parser.parse_args()

config = cartpole_acer(replay=args.replay, env=args.env).debugging(seed=args.seed)

if __name__ == "__main__":
    run_example(config, args)
