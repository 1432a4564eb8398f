"""ACER on Atari Pong with the paper's settings (uniform, PER or NERS replay).

`rllib_ners.algorithms.acer.presets.atari_acer`: 16 envs acting 20 steps each per
training step,
replay ratio Poisson(4), 50k-step replay (each 84x84 frame stored once as uint8,
stacks of 4 rebuilt at sample time), learning from 10k stored steps, lr 7e-4,
grad norm clip 10, c = 10, trust region delta 1, the Nature CNN with a
512-unit layer before the policy and Q heads; DeepMind preprocessing with
episodic life and clipped rewards for training, whole games for the score.

How to run this script
----------------------
`python tuned_examples/acer/pong_acer.py [--replay=uniform|per|ners]
    [--num-env-runners=0] [--num-envs-per-env-runner=16]
    [--stop-timesteps=10000000] [--seed=0]`

Results to expect
-----------------
Not run to the end on this project's 2-core CPU (ACER's Pong curve needs about
10M frames). The paper's ACER reaches Pong scores near +20; the game score is
`env_runners/game_return_mean` (-21 for a random agent).
"""

from ray.rllib.examples.utils import add_rllib_example_script_args
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

from rllib_ners.algorithms.acer.presets import ACER_REPLAYS, atari_acer
from rllib_ners.algorithms.common.config.resources import with_learner_threads
from rllib_ners.cli import add_seed_arg, add_torch_threads_arg, run_example
from rllib_ners.env.atari_rllib import GAME_RETURN_MEAN

parser = add_rllib_example_script_args(
    default_reward=18.0, default_timesteps=10_000_000, default_iters=10_000_000
)
parser.set_defaults(num_env_runners=0, num_envs_per_env_runner=16)
parser.add_argument("--replay", choices=sorted(ACER_REPLAYS), default="uniform")
add_seed_arg(parser)
add_torch_threads_arg(parser, default=2)
args = parser.parse_args()

config = atari_acer(
    "Pong",
    replay=args.replay,
    num_envs_per_env_runner=args.num_envs_per_env_runner,
).debugging(seed=args.seed)
config = with_learner_threads(config, args.torch_threads)

if __name__ == "__main__":
    run_example(
        config,
        args,
        stop={
            f"{ENV_RUNNER_RESULTS}/{GAME_RETURN_MEAN}": args.stop_reward,
            f"{ENV_RUNNER_RESULTS}/num_env_steps_sampled_lifetime": args.stop_timesteps,
        },
        success_metric={f"{ENV_RUNNER_RESULTS}/{GAME_RETURN_MEAN}": args.stop_reward},
    )
