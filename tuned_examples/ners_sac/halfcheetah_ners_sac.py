"""NERS-SAC on MuJoCo HalfCheetah-v5 (gymnasium v5 env; `pip install -e ".[mujoco]"`).

SAC's usual MuJoCo settings (`rllib_ners.algorithms.ners_sac.presets.mujoco_sac`:
256-256 ReLU MLPs, Adam 3e-4, batch 256, tau 0.005, 10k steps before learning,
one update per env step, a 1M buffer) with the NERS buffer (alpha 0.6, beta
0.4; the `.ners()` sampler defaults). `--replay per` or
`--replay uniform` swaps in our fast buffer with PER or uniform sampling;
`--replay relo` or `--replay laber` with ReLo or LaBER (m = 4).

How to run this script
----------------------
`python tuned_examples/ners_sac/halfcheetah_ners_sac.py [--no-tune]
    [--num-env-runners=0] [--replay ners|per|uniform|lap|pal|relo|laber]
    [--stop-timesteps=1000000]
    [--seed=0] [--num-gpus-per-learner=1 --cuda-graph-updates
    [--act-on-learner-device]]`

Results to expect
-----------------
Published SAC reaches a return of about 10000 on HalfCheetah within 1M env steps.
Not run to the end here. On this project's 2-core CPU, one process and one
torch thread, the loop ran 72-81 env steps/s with NERS and 86-112 with PER on
Hopper (`python benchmarks/peers.py --suite sac`, 2026-11-27, the outputs in
docs/benchmarks/peers_sac_2026-11-27_*.txt), so 1M steps take 2.5-4 hours;
`rllib-ners study run --tasks halfcheetah_100k --arms uniform per ners
--results-dir results/my_halfcheetah` runs the first 100k steps with NERS, PER
and uniform replay side by side with the studies' agent, which differs from
this example's (learning from 5k env steps, PER's beta annealed to 1:
docs/results.md). A GPU Learner (`--num-gpus-per-learner=1`) made SAC on Hopper
slower, not faster, when last measured (an H200, eager updates: 45.5 against
66.9 env steps/s with PER; docs/performance.md, "With a GPU Learner").
"""

from ray.rllib.examples.utils import add_rllib_example_script_args

from rllib_ners.algorithms.ners_sac.presets import SAC_REPLAYS, mujoco_sac
from rllib_ners.cli import (
    add_gpu_learner_args,
    add_seed_arg,
    gpu_learner_settings,
    run_example,
)

parser = add_rllib_example_script_args(
    default_reward=10000.0, default_timesteps=1_000_000
)
parser.set_defaults(env="HalfCheetah-v5")
parser.add_argument("--replay", choices=sorted(SAC_REPLAYS), default="ners")
add_seed_arg(parser)
add_gpu_learner_args(parser)
args = parser.parse_args()

config = (
    mujoco_sac(args.env, replay=args.replay)
    .training(**gpu_learner_settings(args))
    .debugging(seed=args.seed)
)

if __name__ == "__main__":
    run_example(config, args)
