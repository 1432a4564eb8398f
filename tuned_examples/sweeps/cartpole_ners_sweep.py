"""A Ray Tune sweep over the NERS sampler's settings on CartPole-v1, with ASHA.

Searches NERS's alpha, the sampler's learning rate, |I_train| and the
replay-reward mode (the DQN settings are those of
`tuned_examples/ners_dqn/cartpole_ners_dqn.py`). ASHA stops weak trials early on
the smoothed training return; at most `--max-concurrent-trials` trials run at
once (default: one per CPU, each trial is a single process with its EnvRunner
inside). It prints the best configuration and writes a results table (CSV).

How to run this script
----------------------
`python tuned_examples/sweeps/cartpole_ners_sweep.py [--num-samples 8]
    [--max-env-steps 16000] [--output results/ners_sweep.csv]`

Results to expect
-----------------
At the default budget (8 trials, at most 16k env steps each, ASHA grace period
4k steps) it finishes in well under 10 minutes on a 2-core CPU; returns after
16k steps are typically 50-200 (CartPole's maximum is 500), so read the table
for trends, not for final scores.
"""

import argparse
import os

import ray
from ray import tune
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)
from ray.tune.schedulers import ASHAScheduler

from rllib_ners import NERSDQNConfig
from rllib_ners.algorithms.rainbow.presets import cartpole_dqn

METRIC = f"{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"
SEARCHED = {
    "alpha": "config/replay_buffer_config/alpha",
    "sampler_lr": "config/ners_config/lr",
    "train_size": "config/ners_config/train_size",
    "replay_reward_mode": "config/ners_config/replay_reward_mode",
}


def build_param_space():
    return (
        cartpole_dqn(NERSDQNConfig())
        .env_runners(num_env_runners=0)
        .training(
            replay_buffer_config={
                "capacity": 50000,
                "alpha": tune.choice([0.4, 0.6, 0.8]),
                "beta": 0.4,
            }
        )
        .ners(
            lr=tune.loguniform(3e-5, 1e-3),
            linear_skip_lr=tune.loguniform(3e-3, 1e-1),
            train_size=tune.choice([64, 256, 1024]),
            replay_reward_mode=tune.choice(["train_return", "eval_return"]),
        )
        # Needed by the eval_return trials: 2 evaluation episodes per sampler
        # update, run by the local evaluation worker (RLlib's own evaluation
        # schedule is pushed out of reach).
        .evaluation(
            evaluation_interval=10**6,
            evaluation_duration=2,
            evaluation_duration_unit="episodes",
        )
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-samples", type=int, default=8)
    parser.add_argument("--max-env-steps", type=int, default=16000)
    parser.add_argument("--grace-env-steps", type=int, default=4000)
    parser.add_argument(
        "--max-concurrent-trials", type=int, default=os.cpu_count() or 1
    )
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--storage-path", default=None)
    parser.add_argument("--output", default="results/ners_sweep.csv")
    args = parser.parse_args(argv)

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    scheduler = ASHAScheduler(
        time_attr=NUM_ENV_STEPS_SAMPLED_LIFETIME,
        max_t=args.max_env_steps,
        grace_period=args.grace_env_steps,
        reduction_factor=2,
    )
    tuner = tune.Tuner(
        "NERS-DQN",
        param_space=build_param_space(),
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode="max",
            scheduler=scheduler,
            num_samples=args.num_samples,
            max_concurrent_trials=args.max_concurrent_trials,
        ),
        run_config=tune.RunConfig(
            name="cartpole_ners_sweep",
            storage_path=os.path.abspath(args.storage_path)
            if args.storage_path
            else None,
            stop={NUM_ENV_STEPS_SAMPLED_LIFETIME: args.max_env_steps},
            verbose=1,
        ),
    )
    results = tuner.fit()
    table = results.get_dataframe(filter_metric=METRIC, filter_mode="max")
    columns = ["trial_id", METRIC, NUM_ENV_STEPS_SAMPLED_LIFETIME, *SEARCHED.values()]
    table = table[[c for c in columns if c in table.columns]].rename(
        columns={v: k for k, v in SEARCHED.items()}
    )
    table = table.sort_values(METRIC, ascending=False)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    table.to_csv(args.output, index=False)
    print(table.to_string(index=False))
    best = results.get_best_result(scope="all")
    best_return = best.metrics[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]
    print(f"\nBest trial {best.metrics['trial_id']}: return {best_return:.1f}")
    print("Best NERS settings:", best.config["ners_config"])
    print("Best alpha:", best.config["replay_buffer_config"]["alpha"])
    print(f"Results table written to {args.output}")
    ray.shutdown()


if __name__ == "__main__":
    main()
