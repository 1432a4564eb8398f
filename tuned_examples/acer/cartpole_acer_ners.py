"""ACER on CartPole-v1 with the NERS replay sampler.

The ACER agent of `cartpole_acer.py`
(`rllib_ners.algorithms.acer.presets.cartpole_acer`) with
`NERSEpisodeReplayBuffer`: replayed sequences start where the learned sampler's
priority (to the power 0.6) says (IS weights with beta 0.4). Each replayed batch is
scored from its sequence starts' features `[s, a, r, s', |Q_ret - Q|, V(s), t]`
with the batch mean as global context, and after every finished episode the
sampler takes a REINFORCE step on the return improvement, as in NERS-DQN
(the `.ners()` sampler defaults).

How to run this script
----------------------
`python tuned_examples/acer/cartpole_acer_ners.py [--no-tune]
    [--num-env-runners=0] [--stop-timesteps=200000] [--stop-reward=450] [--seed=0]`

Results to expect
-----------------
On a 2-core CPU, a mean return over 450 within about 15k-40k env steps, e.g.
seed 0: 450 at 15k steps. `result["ners"]` shows the sampler's updates.
"""

from ray.rllib.examples.utils import add_rllib_example_script_args

from rllib_ners.algorithms.acer.presets import cartpole_acer
from rllib_ners.cli import add_seed_arg, run_example

parser = add_rllib_example_script_args(default_reward=450.0, default_timesteps=200_000)
parser.set_defaults(env="CartPole-v1")
add_seed_arg(parser)
args = parser.parse_args()

config = cartpole_acer(replay="ners", env=args.env).debugging(seed=args.seed)

if __name__ == "__main__":
    run_example(config, args)
