"""TD3 on MuJoCo Hopper-v5 (gymnasium's v5 env; `pip install -e ".[mujoco]"`).

The TD3 paper's MuJoCo settings (`rllib_ners.algorithms.td3.presets.mujoco_td3`:
256-256 ReLU actor and twin critics, Adam 3e-4, batch 256, tau 0.005, target
noise 0.2 clipped at 0.5, policy delay 2, exploration noise 0.1, 10k random
steps before learning, one update per env step, a 1M buffer) with uniform
replay from our fast buffer. `--replay per|lap|pal|ners|relo|laber` swaps in
PER, LAP, PAL, NERS-TD3, ReLo or LaBER (m = 4); `--ddpg` runs DDPG as the
TD3 paper does.

How to run this script
----------------------
`python tuned_examples/td3/hopper_td3.py [--no-tune] [--num-env-runners=0]
    [--replay uniform|per|lap|pal|ners|relo|laber] [--ddpg]
    [--stop-timesteps=1000000]
    [--seed=0] [--num-gpus-per-learner=1 --cuda-graph-updates
    [--act-on-learner-device]]`

Results to expect
-----------------
The TD3 paper reports a return of about 3500 on Hopper after 1M env steps.
Not run to the end here; `rllib-ners study run --tasks td3_hopper_100k
--arms uniform per lap ners --results-dir results/my_td3_hopper` runs the
first 100k steps with uniform, PER, LAP and NERS replay side by side with the
study's agent, whose settings differ from this example's (docs/results.md).
"""

from ray.rllib.examples.utils import add_rllib_example_script_args

from rllib_ners.algorithms.td3.presets import TD3_REPLAYS, mujoco_td3
from rllib_ners.cli import (
    add_gpu_learner_args,
    add_seed_arg,
    gpu_learner_settings,
    run_example,
)

parser = add_rllib_example_script_args(
    default_reward=3500.0, default_timesteps=1_000_000
)
parser.set_defaults(env="Hopper-v5")
parser.add_argument("--replay", choices=sorted(TD3_REPLAYS), default="uniform")
parser.add_argument("--ddpg", action="store_true", help="DDPG instead of TD3")
add_seed_arg(parser)
add_gpu_learner_args(parser)
args = parser.parse_args()

config = (
    mujoco_td3(args.env, replay=args.replay, ddpg=args.ddpg)
    .training(**gpu_learner_settings(args))
    .debugging(seed=args.seed)
)

if __name__ == "__main__":
    run_example(config, args)
