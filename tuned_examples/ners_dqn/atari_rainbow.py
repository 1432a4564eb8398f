"""Rainbow on Atari with the Rainbow paper's settings, fed by many EnvRunners.

`rllib_ners.algorithms.rainbow.presets.atari_rainbow`: the Nature CNN on 4
stacked 84x84 frames, one update of 32 per 4 agent steps, n-step 3, C51 with 51
atoms, noisy nets, dueling, double Q, Adam 6.25e-5 / eps 1.5e-4, a 1M-step
buffer, learning from 20k agent steps; `--replay ners|per|uniform|relo|laber`
picks the replay (PER by default, alpha 0.5). With `--num-env-runners=N` and
`--overlap-sampling` the EnvRunners sample while the Learner updates, the
replay ratio held at one update per 4 env steps; `--weights-sync-interval=K`
then sends them the weights (28 MB) at most every K updates instead of after
every round with updates. Each request costs the driver a fixed overhead, so
with many EnvRunners `--num-envs-per-env-runner=4 --rollout-fragment-length=8`
(32 env steps per request, the 4 sub-envs' actions batched) samples faster
than the preset's fragments of 4 steps (docs/scaling.md).

How to run this script
----------------------
`python tuned_examples/ners_dqn/atari_rainbow.py [--game=MsPacman]
    [--replay=per] [--num-env-runners=8] [--overlap-sampling]
    [--weights-sync-interval=1] [--num-envs-per-env-runner=4]
    [--rollout-fragment-length=8] [--num-gpus-per-learner=1] [--cuda-graph-updates]
    [--stop-timesteps=12500000] [--seed=0]`

Results to expect
-----------------
Not run to the end here (12.5M agent steps, the paper's 50M frames, are days
on a CPU). The game score is `env_runners/game_return_mean`.
"""

from ray.rllib.examples.utils import add_rllib_example_script_args
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS

from rllib_ners.algorithms.rainbow.presets import ATARI_REPLAYS, atari_rainbow
from rllib_ners.cli import (
    add_gpu_learner_args,
    add_overlap_sampling_args,
    add_seed_arg,
    gpu_learner_settings,
    overlap_sampling_settings,
    run_example,
)
from rllib_ners.env.atari_rllib import GAME_RETURN_MEAN

parser = add_rllib_example_script_args(
    default_reward=10_000.0,
    default_timesteps=12_500_000,
    default_iters=100_000_000,
)
parser.set_defaults(num_env_runners=2)
parser.add_argument("--game", default="MsPacman", help="an ALE game, e.g. Pong")
parser.add_argument("--replay", choices=sorted(ATARI_REPLAYS), default="per")
add_seed_arg(parser)
add_overlap_sampling_args(parser)
add_gpu_learner_args(parser)
args = parser.parse_args()

config = (
    atari_rainbow(args.game, replay=args.replay, total_timesteps=args.stop_timesteps)
    .training(**overlap_sampling_settings(args), **gpu_learner_settings(args))
    .debugging(seed=args.seed)
)

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
