"""Our replay buffers against RLlib's, and what they hold: one script, `--suite`s.

per          `FastPrioritizedEpisodeReplayBuffer` against RLlib's PER buffer on
             CartPole-sized transitions, capacity 100,000: filling it (episodes
             of 80-120 steps, 10 per `add()`), then the operations below; then
             ours alone at capacity 1,000,000 (not with `--quick`).
multi-agent  `FastMultiAgentPrioritizedEpisodeReplayBuffer` against RLlib's on
             `MultiAgentCartPole` data (one module per agent, `--agents`), both
             full (RLlib: 10,000 env steps; ours: 10,000 slots per module).
layout       the priority trees' block size: a draw of `--batch` slots and its
             priority update on trees laid out for 8 (every buffer's layout
             before the trees followed the first draw), 32 (the default) and
             the batch drawn, with 3,000, a tenth of and all `--capacity` stored.
checkpoint   size, save/restore time and peak memory (VmHWM above the resident
             size at the start) of a full NERS buffer of 100,000 transitions
             (CartPole; Atari frames stored once, stacks of 4), saved as
             `Algorithm.save_to_path()` saves the algorithm's state (`copy=True`
             rows: as a caller holding on to the state must); without
             `--no-algo` also a whole NERS-DQN CartPole algorithm.
memory       the replay memory of data-efficient Rainbow with NERS on Atari
             (capacity 100,000) against stock RLlib's float32 4-frame stacks.

The operations (alpha 0.6, beta 0.4, gamma 0.99, n_step 3, 32 items per
module), on the full buffer: `add()` of one 100-step episode (multi-agent: one
20-env-step rollout fragment); the drop-in `sample(num_items=32)` +
`update_priorities` (per module); the columnar `sample_batch(32)` +
`update_priorities` (ours, against RLlib's drop-in). The arms take turns
(`harness.take_turns`), each timing `--repeats` of every operation a round;
printed: medians over the rounds and RLlib's time over ours (> 1: ours faster).

    python benchmarks/buffers.py --suite per          # or multi-agent, layout, ...
    python benchmarks/buffers.py --suite layout --capacity 100000 --batch 32
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import logging
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Dict, List, Optional

import gymnasium as gym
import numpy as np
from harness import grown_peak_mb, header, ratio, take_turns, timed

from rllib_ners.replay_buffers.feedback import NERS_SCORES

warnings.filterwarnings("ignore")

ALPHA, BETA, GAMMA, N_STEP, BATCH = 0.6, 0.4, 0.99, 3, 32
CARTPOLE_OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
FRAME = gym.spaces.Box(0, 255, (84, 84, 1), np.uint8)
NUM_TRANSITIONS = 100_000
EPISODES_PER_FILL_ADD = 10
# Stock RLlib 2.60 DQN + PrioritizedEpisodeReplayBuffer + its Atari wrapper
# (float32 84x84x4 stacks, obs and next obs): 1.13 GB per 10k transitions.
STOCK_ATARI_BYTES_PER_TRANSITION = 1.13e9 / 10_000
# Per suite, the default --rounds and --repeats.
DEFAULTS = {"per": (30, 10), "multi-agent": (60, 1), "layout": (9, 150)}


def episode(obs, actions, rewards, obs_space, action_space):
    """A terminated, numpy'd episode (as EnvRunners send them)."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    done = SingleAgentEpisode(
        observations=list(obs),
        actions=list(actions),
        rewards=list(rewards),
        terminated=True,
        len_lookback_buffer=0,
        observation_space=obs_space,
        action_space=action_space,
    )
    return done.to_numpy()


def cartpole_episodes(rng, num_steps: int, lengths=(80, 120)) -> list:
    """Random CartPole-like episodes totalling exactly `num_steps` steps."""
    episodes, total = [], 0
    while total < num_steps:
        steps = min(int(rng.integers(lengths[0], lengths[1] + 1)), num_steps - total)
        obs = rng.standard_normal((steps + 1, 4)).astype(np.float32)
        rewards = rng.random(steps).astype(np.float32)
        episodes.append((obs, rng.integers(0, 2, steps).tolist(), rewards.tolist()))
        total += steps
    return episodes


def built(data) -> list:
    """Fresh episode objects of `cartpole_episodes` (each buffer its own)."""
    return [episode(*d, CARTPOLE_OBS, gym.spaces.Discrete(2)) for d in data]


# ------------------------------------------------- --suite per, multi-agent
def operations(buffers, adds, modules, args):
    """Per buffer, the median seconds per add, drop-in sample + priorities and
    (ours) columnar sample + priorities; `adds[name]` supplies the items to
    add, `modules` the module ids to update priorities for (None: single)."""
    rng, repeats = np.random.default_rng(args.seed), args.repeats

    def sample_and_update(buffer, columnar: bool) -> None:
        if columnar:
            buffer.sample_batch(BATCH, n_step=N_STEP, gamma=GAMMA, beta=BETA)
        else:
            buffer.sample(num_items=BATCH, n_step=N_STEP, gamma=GAMMA, beta=BETA)
        for module_id in modules:
            buffer.update_priorities(rng.random(BATCH), module_id)

    def chunk(name: str) -> Dict[str, float]:
        buffer, items = buffers[name], adds[name]
        seconds = {
            "add": timed(lambda: buffer.add(next(items)), repeats),
            "sample": timed(lambda: sample_and_update(buffer, False), repeats),
        }
        if name == "ours":
            seconds["columnar"] = timed(
                lambda: sample_and_update(buffer, True), repeats
            )
        return seconds

    for name in buffers:
        chunk(name)  # warm-up, untimed
    return take_turns(list(buffers), args.rounds, chunk)


def operations_table(title: str, median: Dict[str, dict], add_label: str) -> None:
    def cell(seconds: Optional[float]) -> str:
        return "-" if seconds is None else f"{1e6 * seconds:,.1f}"

    ours, rllib = median["ours"], median.get("rllib", {})
    print(f"\n{title}")
    print("| operation | ours µs | RLlib µs | RLlib / ours |")
    print("|---|---|---|---|")
    for label, key, against in (
        (f"fill ({EPISODES_PER_FILL_ADD} episodes per add)", "fill", "fill"),
        (add_label, "add", "add"),
        ("sample(32) + update_priorities", "sample", "sample"),
        ("sample_batch(32) + update_priorities (vs drop-in)", "columnar", "sample"),
    ):
        if key in ours:
            faster = ratio(rllib[against], ours[key]) if against in rllib else "-"
            print(
                f"| {label} | {cell(ours[key])} | {cell(rllib.get(against))} | "
                f"{faster} |"
            )


def fill_time(buffer, episodes: list) -> float:
    """Seconds to add `episodes`, `EPISODES_PER_FILL_ADD` per `add()` call."""
    start = time.perf_counter()
    for i in range(0, len(episodes), EPISODES_PER_FILL_ADD):
        buffer.add(episodes[i : i + EPISODES_PER_FILL_ADD])
    return time.perf_counter() - start


def per_suite(args) -> None:
    from ray.rllib.utils.replay_buffers import PrioritizedEpisodeReplayBuffer

    from rllib_ners import FastPrioritizedEpisodeReplayBuffer

    capacities = [100_000] + ([] if args.quick else [1_000_000])
    for capacity in capacities:
        rng = np.random.default_rng(args.seed + (capacity > 100_000))
        fill = cartpole_episodes(rng, capacity)
        extra = cartpole_episodes(
            rng, 100 * (args.rounds + 1) * args.repeats, (100, 100)
        )
        buffers = {
            "ours": FastPrioritizedEpisodeReplayBuffer(
                capacity=capacity, alpha=ALPHA, beta=BETA, seed=args.seed
            )
        }
        if capacity == 100_000:
            buffers["rllib"] = PrioritizedEpisodeReplayBuffer(capacity, alpha=ALPHA)
        fill_seconds = {
            name: fill_time(buffer, built(fill)) for name, buffer in buffers.items()
        }
        del fill
        adds = {name: iter(built(extra)) for name in buffers}
        median = operations(buffers, adds, [None], args)
        for name, seconds in fill_seconds.items():
            median[name]["fill"] = seconds
        operations_table(
            f"capacity {capacity:,}, obs float32[4], Discrete(2): median of "
            f"{args.rounds} rounds x {args.repeats}",
            median,
            "add one 100-step episode (full buffer)",
        )


def to_module(agent_id, episode=None) -> str:
    return f"p{agent_id}"


def multi_agent_fragments(num_agents: int, count: int, seed: int) -> List[list]:
    """Rollout fragments: each the `MultiAgentEpisode` chunks of 20 env steps,
    cut and numpy'd as an EnvRunner does."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    env = MultiAgentCartPole({"num_agents": num_agents})
    for i, agent_id in enumerate(env.possible_agents):
        env.get_action_space(agent_id).seed(seed + i)

    def started(**reset):
        new = MultiAgentEpisode(agent_to_module_mapping_fn=to_module)
        obs, infos = env.reset(**reset)
        new.add_env_reset(observations=obs, infos=infos)
        return new

    fragments, running = [], started(seed=seed)
    for _ in range(count):
        fragment = []
        for _ in range(20):
            if running.is_done:
                fragment.append(running.to_numpy())
                running = started()
            actions = {
                agent: env.get_action_space(agent).sample()
                for agent in running.get_agents_to_act()
            }
            obs, rewards, terminated, truncated, infos = env.step(actions)
            step = {"terminateds": terminated, "truncateds": truncated}
            running.add_env_step(obs, actions, rewards, infos, **step)
        if not running.is_done:
            successor = running.cut()
            fragment.append(running.to_numpy())
            running = successor
        fragments.append(fragment)
    return fragments


def multi_agent_suite(args) -> None:
    from ray.rllib.utils.replay_buffers import MultiAgentPrioritizedEpisodeReplayBuffer

    from rllib_ners import FastMultiAgentPrioritizedEpisodeReplayBuffer

    capacity = 10_000
    for num_agents in args.agents:
        fill = capacity // 20 + 5
        fragments = multi_agent_fragments(
            num_agents, fill + (args.rounds + 1) * args.repeats, args.seed
        )
        buffers = {
            "ours": FastMultiAgentPrioritizedEpisodeReplayBuffer(
                capacity, alpha=ALPHA, beta=BETA, seed=args.seed
            ),
            "rllib": MultiAgentPrioritizedEpisodeReplayBuffer(capacity, alpha=ALPHA),
        }
        for fragment in fragments[:fill]:
            for buffer in buffers.values():
                buffer.add(copy.deepcopy(fragment))
        # Each buffer gets its own copy of every timed fragment, made beforehand.
        adds = {name: iter(copy.deepcopy(fragments[fill:])) for name in buffers}
        modules = [to_module(i) for i in range(num_agents)]
        median = operations(buffers, adds, modules, args)
        operations_table(
            f"{num_agents} agents (one module each), capacity {capacity} (RLlib: "
            f"env steps; ours: slots per module): median of {args.rounds} rounds "
            f"x {args.repeats}",
            median,
            "add one 20-env-step fragment (full buffer)",
        )


# ---------------------------------------------------------- --suite layout
def laid_out(capacity: int, num_filled: int, layout_batch: int):
    """A PER sampler (alpha 0.6) with `num_filled` random priorities, its trees
    laid out for `layout_batch`."""
    from rllib_ners.replay_buffers.priority_sampler import PrioritySampler

    sampler = PrioritySampler(capacity, alpha=0.6, beta=0.4)
    sampler.lay_out_for(layout_batch)
    priorities = np.random.default_rng(0).random(num_filled) + 0.1
    sampler.set_leaves(np.arange(num_filled), priorities)
    return sampler


def draws_and_updates(sampler, rng, args) -> float:
    """µs per draw of `--batch` slots and the priority update of those slots."""
    live = np.ones(args.batch, dtype=bool)
    start = time.perf_counter()
    for _ in range(args.repeats):
        slots, _ = sampler.draw(args.batch, 0.4, rng)
        sampler.set_priorities(slots, rng.random(args.batch) * 3.0, live)
    return 1e6 * (time.perf_counter() - start) / args.repeats


def layout_suite(args) -> None:
    layouts = {"8": 8, "32": 32, "drawn": args.batch}
    rows = []
    for fill in sorted({3000, args.capacity // 10, args.capacity}):
        samplers = {
            name: laid_out(args.capacity, fill, b) for name, b in layouts.items()
        }
        rngs = {name: np.random.default_rng(1) for name in layouts}
        median = take_turns(
            list(layouts),
            args.rounds,
            lambda n: {"µs": draws_and_updates(samplers[n], rngs[n], args)},  # noqa: B023
        )
        fanouts = {name: samplers[name].sum_tree.fanout for name in layouts}
        rows.append((fill, {name: median[name]["µs"] for name in layouts}, fanouts))
        print(f"{fill} stored: done", flush=True)
    print(
        f"\ncapacity {args.capacity}, draws of {args.batch} + their priority "
        f"update: median of {args.rounds} rounds x {args.repeats} per arm"
    )
    print("| stored | " + " | ".join(f"laid out for {n}" for n in layouts) + " |")
    print("|---|" + "---|" * len(layouts))
    for fill, micros, fanouts in rows:
        cells = [
            f"{micros[n]:,.0f} µs (fanout {fanouts[n]}, "
            f"{ratio(micros['8'], micros[n])})"
            for n in layouts
        ]
        print(f"| {fill:,} | " + " | ".join(cells) + " |")


# ------------------------------------------- --suite checkpoint, memory
def ners_buffer(kind: str, **settings):
    from rllib_ners import NERSEpisodeReplayBuffer

    if kind == "atari":
        settings["frame_stack"] = 4
    return NERSEpisodeReplayBuffer(**{"alpha": 0.6, **settings})


def filled_buffer(kind: str, seed: int = 0):
    """100,000 transitions, learned priorities and a feature cache, as after
    training."""
    rng = np.random.default_rng(seed)
    if kind == "cartpole":
        space, length, actions = CARTPOLE_OBS, 200, gym.spaces.Discrete(2)
        frames = lambda n: rng.normal(size=(n, 4)).astype(np.float32)  # noqa: E731
    else:
        space, length, actions = FRAME, 1000, gym.spaces.Discrete(6)
        frames = lambda n: rng.integers(0, 256, (n, 84, 84, 1), np.uint8)  # noqa: E731
    num_episodes = NUM_TRANSITIONS // length
    # One slot per transition plus one tail slot per stored episode.
    buffer = ners_buffer(kind, capacity=NUM_TRANSITIONS + num_episodes, seed=seed)
    for _ in range(num_episodes):
        taken, rewards = rng.integers(0, actions.n, length), rng.normal(size=length)
        buffer.add(episode(frames(length + 1), taken, rewards, space, actions))
    for _ in range(200):
        buffer.sample_batch(32, n_step=3)
        # What a NERS Learner sends: scores, |TD errors|, target Q, and each
        # row's position in the sample.
        columns = [rng.random(32), rng.random(32), rng.normal(size=32), np.arange(32)]
        buffer.update_priorities(NERS_SCORES.pack_columns(columns, np.stack))
    assert len(buffer) == NUM_TRANSITIONS
    return buffer


def state_digest(state) -> str:
    """A digest of a (nested) state: every array's dtype, shape and bytes (an
    object array's items), every other value's repr, in key order."""
    digest = hashlib.blake2b(digest_size=16)

    def feed(value) -> None:
        if isinstance(value, dict):
            for key in sorted(value, key=repr):
                digest.update(repr(key).encode())
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(f"{type(value).__name__}{len(value)}".encode())
            for item in value:
                feed(item)
        elif isinstance(value, np.ndarray) and value.dtype != object:
            digest.update(f"{value.dtype}{value.shape}".encode())
            digest.update(np.ascontiguousarray(value).data)
        elif isinstance(value, np.ndarray):  # its items, not their addresses
            feed(value.tolist())
        else:
            digest.update(repr(value).encode())

    feed(state)
    return digest.hexdigest()


def save_and_restore_buffer(kind: str, directory: Path, copy: bool) -> dict:
    import ray.cloudpickle as pickle

    buffer = filled_buffer(kind)
    path = directory / f"{kind}_algorithm_state.pkl"
    r = {"arrays MB": buffer.storage_nbytes() / 2**20}
    grown, start = grown_peak_mb(), time.perf_counter()
    state = {"replay_buffer": buffer.get_state(copy=copy)}
    r["get_state s"] = time.perf_counter() - start
    with open(path, "wb") as file:
        pickle.dump(state, file)
    r["save s"], r["save +MB"] = time.perf_counter() - start, grown()
    saved = state_digest(state)  # untimed: to check the restore, below
    del state
    r["file MB"] = path.stat().st_size / 2**20
    fresh = ners_buffer(kind, capacity=buffer.capacity)
    del buffer
    grown, start = grown_peak_mb(), time.perf_counter()
    with open(path, "rb") as file:
        fresh.set_state(pickle.load(file)["replay_buffer"], copy=copy)
    r["restore s"], r["restore +MB"] = time.perf_counter() - start, grown()
    assert len(fresh) == NUM_TRANSITIONS
    assert state_digest({"replay_buffer": fresh.get_state()}) == saved, (
        "the restored buffer's state differs from the saved one"
    )
    assert fresh.storage.obs.flags.writeable  # adopted arrays take new episodes
    path.unlink()
    return r


def save_and_restore_algorithm(directory: Path) -> str:
    """A NERS-DQN CartPole algorithm with the 100k buffer, through RLlib."""
    import ray
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_ners import NERSDQNConfig

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        algo = (
            NERSDQNConfig()
            .environment("CartPole-v1")
            .env_runners(num_env_runners=0)
            .training(
                replay_buffer_config={"capacity": NUM_TRANSITIONS + 500, "alpha": 0.6}
            )
            .build_algo()
        )
        algo.local_replay_buffer.set_state(filled_buffer("cartpole").get_state())
        path = directory / "algo_ckpt"
        grown = grown_peak_mb()
        save = timed(lambda: algo.save_to_path(str(path)))
        save_peak = grown()
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20
        algo.stop()
        restored = []
        restore = timed(lambda: restored.append(Algorithm.from_checkpoint(str(path))))
        assert len(restored[0].local_replay_buffer) == NUM_TRANSITIONS
        restored[0].stop()
    finally:
        ray.shutdown()
    return (
        f"NERS-DQN CartPole algorithm checkpoint (buffer + modules + optimisers + "
        f"sampler): {size:.1f} MB on disk, save_to_path {save:.2f} s "
        f"(+{save_peak:.0f} MB peak), from_checkpoint {restore:.2f} s"
    )


def checkpoint_suite(args) -> None:
    directory = Path(tempfile.mkdtemp(prefix="ckpt_bench_"))
    columns = ("arrays MB", "file MB", "get_state s", "save s", "save +MB")
    columns += ("restore s", "restore +MB")
    print(f"| buffer (100k transitions) | {' | '.join(columns)} |")
    print("|---|" + "---|" * len(columns))
    try:
        for kind, copy, label in (
            ("cartpole", False, "CartPole (4,) f32"),
            ("cartpole", True, "CartPole, copy=True"),
            ("atari", False, "Atari 84x84x1 u8, stack 4"),
            ("atari", True, "Atari, copy=True"),
        ):
            r = save_and_restore_buffer(kind, directory, copy)
            cells = [f"{r[c]:.0f}" if "+MB" in c else f"{r[c]:.2f}" for c in columns]
            print(f"| {label} | {' | '.join(cells)} |", flush=True)
        if not args.no_algo:
            print(save_and_restore_algorithm(directory))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def memory_suite(args) -> None:
    from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow

    config = atari_data_efficient_rainbow("MsPacman", replay="ners")
    settings = dict(config.replay_buffer_config)
    settings.pop("type")
    buffer = ners_buffer("atari", scored_by_ners_learner=True, **settings)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (101, 84, 84, 1), np.uint8)
    buffer.add(episode(frames, [0] * 100, [0.0] * 100, FRAME, gym.spaces.Discrete(9)))
    capacity, nbytes = settings["capacity"], buffer.storage_nbytes()
    stock = STOCK_ATARI_BYTES_PER_TRANSITION * capacity
    print(
        f"data-efficient Rainbow with NERS on Atari, capacity {capacity}: "
        f"{nbytes / 1e9:.4f} GB of arrays ({nbytes / capacity:.0f} B per "
        f"transition; allocated in full at the first add) against stock RLlib's "
        f"{stock / 1e9:.2f} GB: {stock / nbytes:.1f}x smaller"
    )


SUITES = {
    "per": per_suite,
    "multi-agent": multi_agent_suite,
    "layout": layout_suite,
    "checkpoint": checkpoint_suite,
    "memory": memory_suite,
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=list(SUITES), default="per")
    parser.add_argument("--rounds", type=int, help="per, multi-agent, layout")
    parser.add_argument("--repeats", type=int, help="of each operation per round")
    parser.add_argument("--quick", action="store_true", help="3 rounds; per: no 1M")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--capacity", type=int, default=1_000_000, help="layout")
    parser.add_argument("--batch", type=int, default=256, help="layout")
    parser.add_argument("--no-algo", action="store_true", help="checkpoint")
    args = parser.parse_args(argv)
    rounds, repeats = DEFAULTS.get(args.suite, (1, 1))
    args.rounds = args.rounds or (3 if args.quick else rounds)
    args.repeats = args.repeats or repeats
    for name in ("ray", "ray.rllib", "rllib_ners"):
        logging.getLogger(name).setLevel(logging.ERROR)
    print(header())
    load_before = os.getloadavg()[0]
    SUITES[args.suite](args)
    print(f"load average before {load_before:.2f}, after {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
