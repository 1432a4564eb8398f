"""TD3 on Pendulum-v1 (Fujimoto et al. 2018), on RLlib's new API stack.

The TD3 paper's settings (`rllib_ners.algorithms.td3.presets.pendulum_td3`:
256-256 ReLU actor and twin critics, Adam 3e-4, batch 256, tau 0.005, target
noise 0.2 clipped at 0.5, policy delay 2, exploration noise 0.1, 1000 random
steps before learning, one update per env step, a 100k buffer) with uniform
replay from our fast buffer. `--replay per|lap|pal|ners|relo|laber` swaps in
PER, LAP, PAL, NERS-TD3, ReLo or LaBER (m = 4); `--ddpg` runs DDPG as the
TD3 paper does (one critic, no smoothing, no delay).

How to run this script
----------------------
`python tuned_examples/td3/pendulum_td3.py [--no-tune] [--num-env-runners=0]
    [--replay uniform|per|lap|pal|ners|relo|laber] [--ddpg] [--stop-reward=-250]
    [--stop-timesteps=20000] [--seed=0]`

`--hidden`, `--lr`, `--learning-starts` and `--rollout-fragment-length` change
the network width, the learning rate, the random warm-up and the env steps
between update rounds (the CI learning test uses 64-unit networks, lr 1e-3
and update rounds of 4 env steps, so that it finishes in a few minutes on 2
CPU cores).

Results to expect
-----------------
Random play scores about -1200 per episode. With the CI test's settings
(`--hidden=64 --lr=1e-3 --learning-starts=1000 --rollout-fragment-length=4
--seed=0`) the mean return reached -164 at 6400 env steps (20 s on a shared
2-core CPU). The defaults (256-unit networks, 3e-4, one update per env step)
were not run to the stop reward here.
"""

from ray.rllib.examples.utils import add_rllib_example_script_args

from rllib_ners.algorithms.td3.presets import TD3_REPLAYS, pendulum_td3
from rllib_ners.cli import add_seed_arg, run_example

parser = add_rllib_example_script_args(default_reward=-250.0, default_timesteps=20_000)
parser.set_defaults(env="Pendulum-v1")
parser.add_argument("--replay", choices=sorted(TD3_REPLAYS), default="uniform")
parser.add_argument("--ddpg", action="store_true", help="DDPG instead of TD3")
parser.add_argument("--hidden", type=int, default=256, help="units per layer (2)")
parser.add_argument("--lr", type=float, default=3e-4, help="actor and critic lr")
parser.add_argument("--learning-starts", type=int, default=1000)
parser.add_argument("--rollout-fragment-length", type=int, default=1)
add_seed_arg(parser)
args = parser.parse_args()

config = pendulum_td3(
    replay=args.replay,
    ddpg=args.ddpg,
    hiddens=(args.hidden, args.hidden),
    lr=args.lr,
    learning_starts=args.learning_starts,
    rollout_fragment_length=args.rollout_fragment_length,
).debugging(seed=args.seed)

if __name__ == "__main__":
    run_example(config, args)
