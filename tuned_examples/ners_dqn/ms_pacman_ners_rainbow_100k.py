"""NERS with data-efficient Rainbow on MsPacman, 100k agent steps (Atari 100k).

The NERS paper's Atari setting, as its reference code runs it (youngmin0oh/NERS on
Kaixhin/Rainbow): 100k agent steps (400k frames), replay capacity 100k, learning
from 1600 steps, one update of batch 32 per agent step, n-step 20, target update
every 2000 steps, Adam lr 1e-4 and eps 1.5e-4, value/advantage streams of 256
units, 51 atoms in [-10, 10], noisy nets (sigma0 0.1, no epsilon), priority
exponent 0.5, importance-sampling beta 0.4 -> 1, the data-efficient CNN (two 5x5
stride-5 convs) on 4 stacked 84x84 grayscale frames. All of it is
`rllib_ners.algorithms.rainbow.presets.atari_data_efficient_rainbow`.

`--replay` switches the sampler: `ners` (NERSDQN, the default), `per` (our
prioritized buffer, alpha 0.5), `uniform` (alpha 0), `relo` (ReLo: alpha 0.5,
the reducible loss as priority) or `laber` (LaBER: m = 4), all else equal.

Atari here: `rllib_ners.with_atari()` registers env "rllib_ners.atari" (ALE v5
from ale-py's bundled ROMs, frameskip 4 with max-pooling, no sticky actions,
30 no-op starts, episodic life and clipped rewards for training, whole games
and raw rewards for evaluation), stacks 4 frames for acting with RLlib's
`FrameStackingEnvToModule`, and lets the replay buffer store each uint8 frame
once and rebuild the stacks when sampling. The game score is
`env_runners/game_return_mean` (RLlib's `episode_return_mean` is per life and
clipped).

How to run this script
----------------------
`python tuned_examples/ners_dqn/ms_pacman_ners_rainbow_100k.py [--replay=ners]
    [--no-tune] [--num-env-runners=0] [--stop-timesteps=100000] [--seed=0]
    [--cuda-graph-updates [--act-on-learner-device]]`

On a GPU machine the Learner takes the GPU by itself; `--cuda-graph-updates`
replays its updates from CUDA graphs (one launch each instead of a few
hundred), and `--act-on-learner-device` makes the local EnvRunner act on that
GPU, from a graph too (docs/performance.md, "With a GPU Learner").

Use `--no-tune --num-env-runners=0` to debug in one process. `--torch-threads`
(default 2) is what the Algorithm's process may use: acting and learning
alternate there, so on a 2-core machine both cores serve the Learner.

Results to expect
-----------------
Data-efficient Rainbow scores 1204 on MsPacman at 100k steps (van Hasselt et
al. 2019; random 307, human 6952); the NERS paper reports NERS above PER and
uniform there. On this project's 2-core CPU a 100k run takes hours, not
minutes: see docs/atari.md ("Costs") for measured speed.

Cost: the sampler keeps the paper's own CNN encoder here; it runs on every
replayed batch, and NERS trains at ~0.8x PER's env steps per second
(`benchmarks/study_costs.py --tasks ms_pacman_100k --arms per ners ners_module`).
`.ners(encoder="module")` on the config scores with the Q-network's own
features instead (taken from the training pass, no second CNN): ~0.9x PER. How
well those features shape replay is not yet measured on Atari.
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
    default_reward=1204.0,
    default_timesteps=100_000,
    default_iters=100_000,
)
parser.set_defaults(num_env_runners=0)
parser.add_argument("--replay", choices=sorted(ATARI_REPLAYS), default="ners")
parser.add_argument("--game", default="MsPacman", help="any ALE game, e.g. Breakout")
add_seed_arg(parser)
add_torch_threads_arg(parser, default=2)
add_gpu_learner_args(parser)
args = parser.parse_args()

config = (
    atari_data_efficient_rainbow(
        args.game, replay=args.replay, total_timesteps=args.stop_timesteps
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
