"""Benchmark: the fast multi-agent buffer against RLlib's, side by side.

Measures `rllib_ners.FastMultiAgentPrioritizedEpisodeReplayBuffer` ("ours")
and RLlib's `MultiAgentPrioritizedEpisodeReplayBuffer` ("RLlib") in one
process, on the same `MultiAgentCartPole` data (random actions, one module per
agent: "p0", "p1", ...), for 2 and 8 agents, with alpha=0.6, beta=0.4,
gamma=0.99, n_step=3 and 32 items per module:

1. add: one rollout fragment (the episode chunks of 20 env steps, as an
   EnvRunner sends them) into a full buffer, eviction included;
2. sample: the drop-in path, `sample(num_items=32, n_step=3, ...)` followed
   by `update_priorities(..., module_id)` for every module, as RLlib's DQN
   does;
3. columnar sample (ours only, against RLlib's drop-in sample):
   `sample_batch(32, ...)` and the same priority updates.

Capacities hold the same data: RLlib's counts env steps (all agents of an
env step), ours observation slots per module, so RLlib gets `CAPACITY` env
steps and ours `CAPACITY` slots per module. Both are filled before timing.
The arms take turns through `harness.take_turns` (which goes first alternates
round by round), so load on the machine hits both alike; each figure is the
median over rounds and each ratio is RLlib's time / ours (> 1: ours faster). Targets are
informational; the script always exits with 0.

Run from the repository root:

    python benchmarks/multi_agent_buffer.py            # 2 and 8 agents
    python benchmarks/multi_agent_buffer.py --quick    # a smoke run

The reference machine is a shared 2-core VM: absolute times vary with what
else runs there; compare the ratios.
"""

from __future__ import annotations

import argparse
import copy
import gc
import logging
import time
import warnings
from functools import partial
from typing import Callable, Dict, List

import numpy as np
from harness import header, take_turns

warnings.filterwarnings("ignore")

from ray.rllib.env.multi_agent_episode import MultiAgentEpisode  # noqa: E402
from ray.rllib.examples.envs.classes.multi_agent import (  # noqa: E402
    MultiAgentCartPole,
)
from ray.rllib.utils.replay_buffers import (  # noqa: E402
    MultiAgentPrioritizedEpisodeReplayBuffer,
)

from rllib_ners import FastMultiAgentPrioritizedEpisodeReplayBuffer  # noqa: E402

ALPHA, BETA, GAMMA, N_STEP, BATCH = 0.6, 0.4, 0.99, 3, 32
CAPACITY = 10_000
FRAGMENT_ENV_STEPS = 20
TARGET_SAMPLE = 10.0


def to_module(agent_id, episode=None):
    return f"p{agent_id}"


# ----------------------------------------------------------------- episodes
def collect_fragments(num_agents: int, num_fragments: int, seed: int) -> List[list]:
    """Rollout fragments: each a list of `MultiAgentEpisode` chunks covering
    `FRAGMENT_ENV_STEPS` env steps, cut and numpy'd as an EnvRunner does."""
    env = MultiAgentCartPole({"num_agents": num_agents})
    for i, agent_id in enumerate(env.possible_agents):
        env.get_action_space(agent_id).seed(seed + i)
    fragments = []
    episode = MultiAgentEpisode(agent_to_module_mapping_fn=to_module)
    obs, infos = env.reset(seed=seed)
    episode.add_env_reset(observations=obs, infos=infos)
    for _ in range(num_fragments):
        fragment = []
        for _ in range(FRAGMENT_ENV_STEPS):
            if episode.is_done:
                fragment.append(episode.to_numpy())
                episode = MultiAgentEpisode(agent_to_module_mapping_fn=to_module)
                obs, infos = env.reset()
                episode.add_env_reset(observations=obs, infos=infos)
            actions = {
                agent_id: env.get_action_space(agent_id).sample()
                for agent_id in episode.get_agents_to_act()
            }
            obs, rewards, terminateds, truncateds, infos = env.step(actions)
            episode.add_env_step(
                obs,
                actions,
                rewards,
                infos,
                terminateds=terminateds,
                truncateds=truncateds,
            )
        if not episode.is_done:
            successor = episode.cut()
            fragment.append(episode.to_numpy())
            episode = successor
        fragments.append(fragment)
    return fragments


# ------------------------------------------------------------------ timing
def timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def sample_and_update(buffer, modules: List[str], rng: np.random.Generator):
    buffer.sample(num_items=BATCH, n_step=N_STEP, gamma=GAMMA, beta=BETA)
    for module_id in modules:
        buffer.update_priorities(rng.random(BATCH), module_id)


def columnar_sample_and_update(buffer, modules, rng):
    buffer.sample_batch(BATCH, n_step=N_STEP, gamma=GAMMA, beta=BETA)
    for module_id in modules:
        buffer.update_priorities(rng.random(BATCH), module_id)


def run(num_agents: int, rounds: int, seed: int) -> Dict[str, dict]:
    """Per buffer, the median seconds of each operation over the rounds."""
    modules = [to_module(i) for i in range(num_agents)]
    fill = CAPACITY // FRAGMENT_ENV_STEPS + 5
    fragments = collect_fragments(num_agents, fill + rounds, seed)
    buffers = {
        "ours": FastMultiAgentPrioritizedEpisodeReplayBuffer(
            CAPACITY, alpha=ALPHA, beta=BETA, seed=seed
        ),
        "rllib": MultiAgentPrioritizedEpisodeReplayBuffer(CAPACITY, alpha=ALPHA),
    }
    for fragment in fragments[:fill]:
        for buffer in buffers.values():
            buffer.add(copy.deepcopy(fragment))
    # Each buffer gets its own copy of every timed fragment, made beforehand.
    timed_fragments = {
        name: [copy.deepcopy(f) for f in fragments[fill:]] for name in buffers
    }
    rng = np.random.default_rng(seed)
    turns = dict.fromkeys(buffers, 0)

    def chunk(name: str) -> Dict[str, float]:
        buffer, fragment = buffers[name], timed_fragments[name][turns[name]]
        turns[name] += 1
        seconds = {
            "add": timed(partial(buffer.add, fragment)),
            "sample": timed(partial(sample_and_update, buffer, modules, rng)),
        }
        if name == "ours":
            seconds["columnar"] = timed(
                partial(columnar_sample_and_update, buffer, modules, rng)
            )
        return seconds

    gc.collect()
    return take_turns(list(buffers), rounds, chunk)


# ------------------------------------------------------------------ report
def report(num_agents: int, rounds: int, medians: Dict[str, dict]) -> None:
    med = {
        f"{name} {key}": 1e3 * seconds
        for name, keys in medians.items()
        for key, seconds in keys.items()
    }
    print(f"\n{num_agents} agents (one module each), {rounds} rounds")
    print(f"{'operation':<46} {'ours ms':>9} {'RLlib ms':>9} {'ratio':>7}")
    rows = [
        ("add one 20-env-step fragment (full buffer)", "ours add", "rllib add", None),
        (
            "sample(32/module) + update_priorities",
            "ours sample",
            "rllib sample",
            TARGET_SAMPLE,
        ),
        (
            "sample_batch(32/module) + update_priorities",
            "ours columnar",
            "rllib sample",
            TARGET_SAMPLE,
        ),
    ]
    for label, ours, rllib, target in rows:
        faster = med[rllib] / med[ours]
        verdict = "" if target is None else (" PASS" if faster >= target else " MISS")
        target_text = "" if target is None else f" (target >= {target:.0f}x){verdict}"
        print(
            f"{label:<46} {med[ours]:>9.3f} {med[rllib]:>9.3f} {faster:>6.1f}x"
            f"{target_text}"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="10 rounds")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in ("ray", "ray.rllib", "rllib_ners"):
        logging.getLogger(name).setLevel(logging.ERROR)
    rounds = 10 if args.quick else args.rounds
    print(header())
    print(
        f"capacity {CAPACITY} (RLlib: env steps; ours: slots per module), "
        f"alpha={ALPHA}, beta={BETA}, n_step={N_STEP}, {BATCH} items per module"
    )
    for num_agents in args.agents:
        report(num_agents, rounds, run(num_agents, rounds, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
