"""Fingerprint of seeded training runs, for "no behaviour change" checks.

A refactor must leave seeded runs bit-identical. This script trains NERS-DQN and
NERS-ACER on CartPole-v1 for a few iterations with a fixed seed in one process
(`num_env_runners=0`, one torch thread) and prints a SHA-256 per run over
everything that training touches: the Learner state (RLModule weights, NERS
sampler nets, optimisers), the replay buffer's state (every stored transition,
priorities, feature cache) and each iteration's episode returns and losses.

Run it on the commit before a refactor and after it; the digests must match.
It imports only the package's public names, so it runs on either layout:

    python tools/fingerprint.py                 # this checkout
    PYTHONPATH=/path/to/old/checkout python tools/fingerprint.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re

import numpy as np


def _is_episode_id(key) -> bool:
    # RLlib's episode ids are random uuid4 hex strings, never seeded.
    return isinstance(key, str) and len(key) == 32 and _HEX.fullmatch(key) is not None


def _feed(digest, value) -> None:
    """Hashes a nested state (dicts, lists, arrays, tensors, scalars) by value.

    RLlib's episode ids are random (unseeded) uuids: ids as values hash as a
    placeholder, and dicts keyed by ids as the sorted multiset of their values.
    """
    import torch

    if isinstance(value, dict) and any(_is_episode_id(key) for key in value):
        digest.update(b"{episodes")
        for item in sorted(repr(item) for item in value.values()):
            digest.update(item.encode())
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            digest.update(str(key).encode())
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, torch.Tensor):
        _feed(digest, value.detach().cpu().numpy())
    elif isinstance(value, np.ndarray) and value.dtype == object:
        # By element: the bytes of an object array are pointers.
        digest.update(str(value.shape).encode())
        _feed(digest, value.ravel().tolist())
    elif isinstance(value, np.ndarray):
        digest.update(str((value.dtype, value.shape)).encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif _is_episode_id(value):
        digest.update(b"<episode id>")
    else:
        digest.update(repr(value).encode())


_HEX = re.compile(r"[0-9a-f]{32}")

# Result keys that are wall-clock measurements and so differ between runs.
_TIMING_WORDS = (
    "time",
    "throughput",
    "_ms",
    "per_s",
    "timer",
    "_s_",
    "memory",
    "duration",
    "env_runners/sample",
)


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


def _sha(value) -> str:
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


def fingerprint(config, iterations: int) -> dict:
    """Digests of one seeded run: of everything, and per part (to find a change)."""
    algo = config.build_algo()
    metrics, returns = [], []
    try:
        for _ in range(iterations):
            result = algo.train()
            metrics.append(_deterministic_metrics(result))
            returns.append(
                round(float(result["env_runners"].get("episode_return_mean", 0.0)), 3)
            )
        parts = {
            "metrics": _sha(metrics),
            "learner_state": _sha(algo.learner_group.get_state()),
            "buffer_state": _sha(algo.local_replay_buffer.get_state()),
        }
    finally:
        algo.stop()
    return {
        "sha256": _sha(parts),
        "parts": parts,
        "returns": returns,
        "metrics": metrics,
    }


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
        runs = (("ners_dqn", ners_dqn_config), ("ners_acer", ners_acer_config))
        for name, build in runs:
            report[name] = run = fingerprint(build(args.seed), args.iterations)
            print(f"{name:10s} sha256 {run['sha256']}  returns {run['returns']}")
            for part, digest in run["parts"].items():
                print(f"{'':10s} {part:14s} {digest}", flush=True)
    finally:
        ray.shutdown()
    if args.out:
        with open(args.out, "w") as file:
            json.dump(report, file, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
