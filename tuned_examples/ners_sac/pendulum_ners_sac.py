"""NERS-SAC on Pendulum-v1: SAC whose replay sampler is learned (NERS, ICLR 2021).

SAC's usual settings (`rllib_ners.algorithms.ners_sac.presets.pendulum_sac`:
256-256 ReLU MLPs, Adam 3e-4, batch 256, tau 0.005, 5000 steps before
learning, one update per env step, a 100k buffer) with the NERS buffer (alpha
0.6, beta 0.4; the `.ners()` sampler defaults). `--replay per`
or `--replay uniform` swaps in our fast buffer with PER or uniform sampling;
`--replay relo` or `--replay laber` with ReLo or LaBER (m = 4).

How to run this script
----------------------
`python tuned_examples/ners_sac/pendulum_ners_sac.py [--no-tune]
    [--num-env-runners=0] [--replay ners|per|uniform|lap|pal|relo|laber]
    [--stop-reward=-250]
    [--stop-timesteps=20000] [--seed=0]`

`--hidden`, `--lr`, `--learning-starts` and `--rollout-fragment-length` change
the network width, the learning rate, the warm-up and the env steps between
update rounds (the CI learning test uses 64-unit networks, lr 1e-3 and a short
warm-up, so that it finishes in a few minutes on 2 CPU cores).

Results to expect
-----------------
Random play scores about -1200 per episode. With the CI test's settings
(`--hidden=64 --lr=1e-3 --learning-starts=1000 --rollout-fragment-length=4
--seed=0`) the mean return reached -306 at 4000 env steps (2.5 minutes on a
shared 2-core CPU). The defaults (256-unit networks, 3e-4, 5000 warm-up
steps) were not run to the stop reward here.
"""

from ray.rllib.examples.utils import add_rllib_example_script_args

from rllib_ners.algorithms.ners_sac.presets import SAC_REPLAYS, pendulum_sac
from rllib_ners.cli import add_seed_arg, run_example

parser = add_rllib_example_script_args(default_reward=-250.0, default_timesteps=20_000)
parser.set_defaults(env="Pendulum-v1")
parser.add_argument("--replay", choices=sorted(SAC_REPLAYS), default="ners")
parser.add_argument("--hidden", type=int, default=256, help="units per layer (2)")
parser.add_argument("--lr", type=float, default=3e-4, help="actor/critic/alpha lr")
parser.add_argument("--learning-starts", type=int, default=5000)
parser.add_argument("--rollout-fragment-length", type=int, default=1)
add_seed_arg(parser)
args = parser.parse_args()

config = pendulum_sac(
    replay=args.replay,
    hiddens=(args.hidden, args.hidden),
    lr=args.lr,
    learning_starts=args.learning_starts,
    rollout_fragment_length=args.rollout_fragment_length,
).debugging(seed=args.seed)

if __name__ == "__main__":
    run_example(config, args)
