"""Fingerprint of seeded training runs, for "no behaviour change" checks.

A refactor must leave seeded runs bit-identical. This script trains NERS-DQN and
NERS-ACER on CartPole-v1 for a few iterations with a fixed seed in one process
(`num_env_runners=0`, one torch thread) and prints a SHA-256 per run over
everything that training touches: the Learner state (RLModule weights, NERS
sampler nets, optimisers), the replay buffer's state (every stored transition,
priorities, feature cache) and each iteration's episode returns and losses.

Run it on the commit before a refactor and after it; the digests must match.
It imports only the package's public names, so it runs on either layout:

    python benchmarks/fingerprint.py                 # this checkout
    PYTHONPATH=/path/to/old/checkout python benchmarks/fingerprint.py
"""

from __future__ import annotations

import argparse
import hashlib
import json

import numpy as np


def _feed(digest, value) -> None:
    """Hashes a nested state (dicts, lists, arrays, tensors, scalars) by value."""
    import torch

    if isinstance(value, dict):
        for key in sorted(value, key=str):
            digest.update(str(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, torch.Tensor):
        _feed(digest, value.detach().cpu().numpy())
    elif isinstance(value, np.ndarray):
        digest.update(str((value.dtype, value.shape)).encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    else:
        digest.update(repr(value).encode())


# Result keys that are pure wall-clock measurements and so differ between runs.
_TIMING_WORDS = ("time", "throughput", "_ms", "per_s", "timer", "_s_", "memory")


def _deterministic_metrics(result: dict) -> dict:
    """Learner and episode metrics of one iteration, without timings."""
    flat = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}/{key}", item)
        elif isinstance(value, (int, float, np.floating, np.integer)):
            if not any(word in prefix for word in _TIMING_WORDS):
                flat[prefix] = float(value)

    for section in ("learners", "env_runners", "ners"):
        walk(section, result.get(section, {}))
    return flat


def fingerprint(config, iterations: int) -> tuple[str, list[float]]:
    algo = config.build_algo()
    digest = hashlib.sha256()
    returns = []
    try:
        for _ in range(iterations):
            result = algo.train()
            _feed(digest, _deterministic_metrics(result))
            returns.append(
                round(float(result["env_runners"].get("episode_return_mean", 0.0)), 3)
            )
        _feed(digest, algo.learner_group.get_state())
        _feed(digest, algo.local_replay_buffer.get_state())
    finally:
        algo.stop()
    return digest.hexdigest(), returns


def ners_dqn_config(seed: int):
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from rllib_ners import NERSDQNConfig

    return (
        NERSDQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(
            lr=5e-4,
            train_batch_size_per_learner=32,
            n_step=(2, 5),
            double_q=True,
            dueling=True,
            epsilon=[(0, 1.0), (10000, 0.02)],
            num_steps_sampled_before_learning_starts=1000,
            replay_buffer_config={"capacity": 50000, "alpha": 0.6, "beta": 0.4},
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256],
                fcnet_activation="tanh",
                head_fcnet_hiddens=[256],
                head_fcnet_activation="tanh",
            )
        )
        .ners(hidden_size=128, lr=1e-4, train_size=32, min_episodes_per_update=1)
        .debugging(seed=seed)
    )


def ners_acer_config(seed: int):
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from rllib_ners import ACERConfig

    return (
        ACERConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(
            gamma=0.99,
            sequence_length=20,
            replay_ratio=4.0,
            replay_ratio_distribution="poisson",
            truncation_c=10.0,
            retrace_c=1.0,
            entropy_coeff=0.01,
            q_loss_coeff=0.5,
            tau=0.01,
            use_trust_region=True,
            trust_region_delta=1.0,
            lr=5e-4,
            grad_clip=40.0,
            train_batch_size_per_learner=320,
            num_steps_sampled_before_learning_starts=200,
            replay_buffer_config={
                "type": "rllib_ners.NERSEpisodeReplayBuffer",
                "capacity": 50_000,
                "alpha": 0.6,
                "beta": 0.4,
            },
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256, 256],
                fcnet_activation="tanh",
                head_fcnet_hiddens=[],
            )
        )
        .ners(hidden_size=128, lr=1e-4, train_size=32)
        .debugging(seed=seed)
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the digests to this JSON file")
    args = parser.parse_args(argv)

    import ray
    import torch

    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        report = {}
        for name, build in (
            ("ners_dqn", ners_dqn_config),
            ("ners_acer", ners_acer_config),
        ):
            digest, returns = fingerprint(build(args.seed), args.iterations)
            report[name] = {"sha256": digest, "returns": returns}
            print(f"{name:10s} sha256 {digest}  returns {returns}", flush=True)
    finally:
        ray.shutdown()
    if args.out:
        with open(args.out, "w") as file:
            json.dump(report, file, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
