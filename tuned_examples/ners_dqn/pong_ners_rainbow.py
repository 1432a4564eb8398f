"""NERS with Rainbow on Pong: the data-efficient Rainbow settings, run longer.

Same agent as `ms_pacman_ners_rainbow_100k.py` (data-efficient CNN, n-step 20,
noisy nets, C51, dueling, double Q, one update per agent step, Adam 1e-4 / eps
1.5e-4; `rllib_ners.algorithms.rainbow.presets.atari_data_efficient_rainbow`)
on `ALE/Pong-v5`,
with a budget of 500k agent steps (2M frames) and beta annealed over it. Pong is
the classic "does the Atari pipeline learn at all" check: a score of +18 means
preprocessing, frame stacking, replay and the Rainbow module all work.

`--replay ners|per|uniform|relo|laber` switches the replay as in the MsPacman example.

How to run this script
----------------------
`python tuned_examples/ners_dqn/pong_ners_rainbow.py [--replay=ners]
    [--no-tune] [--num-env-runners=0] [--stop-timesteps=500000] [--seed=0]
    [--cuda-graph-updates [--act-on-learner-device]]`

Results to expect
-----------------
Not run to the end on this project's 2-core CPU (it would take over a day).
Rainbow-type agents usually reach +18 to +21 on Pong within 1-2M frames;
the game score is `env_runners/game_return_mean` (-21 for a random agent).
"""

from ray.rllib.examples.utils import add_rllib_example_script_args
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

from rllib_ners.algorithms.common.config.resources import with_learner_threads
from rllib_ners.algorithms.rainbow.presets import (
    ATARI_REPLAYS,
    atari_data_efficient_rainbow,
)
from rllib_ners.cli import (
    add_gpu_learner_args,
    add_seed_arg,
    add_torch_threads_arg,
    gpu_learner_settings,
    run_example,
)
from rllib_ners.env.atari_rllib import GAME_RETURN_MEAN

parser = add_rllib_example_script_args(
    default_reward=18.0,
    default_timesteps=500_000,
    default_iters=1_000_000,
)
parser.set_defaults(num_env_runners=0)
parser.add_argument("--replay", choices=sorted(ATARI_REPLAYS), default="ners")
add_seed_arg(parser)
add_torch_threads_arg(parser, default=2)
add_gpu_learner_args(parser)
args = parser.parse_args()

config = (
    atari_data_efficient_rainbow(
        "Pong", replay=args.replay, total_timesteps=args.stop_timesteps
    )
    .training(**gpu_learner_settings(args))
    .debugging(seed=args.seed)
)
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
