"""The path from Atari EnvRunners to the replay buffer, stage by stage, per env step.

What it costs to bring one Atari env step from the emulator into the replay
buffer, for this package's Atari config (`atari_rainbow`, or with `--preset der`
`atari_data_efficient_rainbow`; MsPacman), and which stage bounds the path:

1  bare env      `make_atari_env` stepping with random actions: the ceiling of
                 one process.
2  EnvRunner     `FastSingleAgentEnvRunner.sample()` as the algorithm calls it
                 (no arguments: one rollout fragment per sub-env): its fast
                 loop, which keeps Atari's frame stacks itself; beside it
                 RLlib's `SingleAgentEnvRunner` on the same config (the frame-
                 stacking connector rebuilding the stacks from the episodes).
                 Split by timers wrapped around the env's `step`, the
                 RLModule's exploration pass, the env-to-module and
                 module-to-env connector pipelines (RLlib's loop only) and the
                 episodes' `to_numpy` / `cut`; the rest is the episode
                 bookkeeping (`add_env_step`, callbacks, metrics). Once with 1
                 sub-env (the preset) and once with 4 (`--envs`).
3  shipping      the `sample()` output of a remote EnvRunner on its way to the
                 algorithm's `training_step`, two ways: packed (our training
                 loop: `pack_fragments` on the EnvRunner, one numpy column per
                 field, no spaces, no lookback; `fragment_shipping`) and as
                 episodes (RLlib's `synchronous_parallel_sample`: Ray pickles
                 the episode objects, numpy columns out of band). Timed as the
                 round trip of the same fragments returned by a remote actor
                 (`ray.get` in the driver; packing on the actor, inside it),
                 and split into `pack`, `ray.put` (pickle + object-store copy)
                 and `ray.get` (unpickle, zero-copy) in the driver. Printed
                 beside it: the bytes per env step, split into new frames,
                 repeated frames (the lookback the EnvRunner keeps for its own
                 frame stacking, plus each fragment's first observation) and
                 the pickled spaces every episode carries; whether frames
                 travel stacked, and their dtype. Also a real remote EnvRunner
                 sampled both ways (driver wall time: the EnvRunner's work plus
                 the shipping).
4  buffer add    `FastPrioritizedEpisodeReplayBuffer.add()` (PER) and
                 `NERSEpisodeReplayBuffer.add()` (PER plus the NERS per-slot
                 memory and episode returns) with the preset's replay settings
                 (capacity, alpha, beta, `frame_stack=4`), adding the fragments
                 of stage 2 in bulk: `--bulk` (8) `sample()` outputs per `add()`
                 call, what `_sample_episodes()` returns with 8 remote
                 EnvRunners, as packed fragments and as episodes, and one
                 episode output per call.
5  buffer sample `sample_batch(32)` (n-step transitions, frame stacks rebuilt),
                 `replay_train_batch` (the Learner's batch) and
                 `update_priorities` (random TD errors / NERS rows) per update,
                 per env step at the preset's replay ratio (`atari_rainbow`: one
                 update per 4 env steps; `der`: one per env step); also PER
                 with the stacks laid out channels-first in memory
                 (`frames_channels_first`, what a local GPU Learner gets).

All arms live in this process (plus two idle Ray actors) and take turns, round
by round, the order rotating, each timing `--steps` env steps per round; the
table shows the median over `--rounds`. Columns: µs per env step, its share of
the whole path as the training loop runs it (EnvRunner with 1 sub-env +
packed shipping + packed add + sample, with the PER or the NERS buffer), the
ceiling in env steps/s that stage alone would allow, and env steps per CPU
second of this process where the stage runs here.
Indented rows are parts of the row above them. One torch thread everywhere.

How to run
----------
    pip install -e ".[atari]"
    python benchmarks/atari_ingest.py
    python benchmarks/atari_ingest.py --steps 2000 --rounds 5
    python benchmarks/atari_ingest.py --preset der --envs 1 8
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import pickle
import statistics
import time
from collections import defaultdict
from typing import Callable, Dict, List

import numpy as np
from peers import cpu_model

GAME = "MsPacman"
BATCH = 32
PRESETS = ("rainbow", "der")


# ------------------------------------------------------------------ helpers
class PartTimer:
    """Seconds spent in wrapped callables, by part."""

    def __init__(self):
        self.seconds: Dict[str, float] = defaultdict(float)

    def wrap(self, part: str, function: Callable) -> Callable:
        seconds = self.seconds
        clock = time.perf_counter

        def timed(*args, **kwargs):
            start = clock()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[part] += clock() - start

        return timed


def env_steps_of(episodes) -> int:
    return sum(len(episode) for episode in episodes)


def preset_config(preset: str, replay: str):
    from rllib_ners.algorithms.rainbow.presets import (
        atari_data_efficient_rainbow,
        atari_rainbow,
    )

    build = atari_rainbow if preset == "rainbow" else atari_data_efficient_rainbow
    return build(GAME, replay=replay).debugging(seed=0)


def renamed(fragments: List[list], tag: str) -> List[list]:
    """The same fragments under fresh episode ids (consistently, so chunks of
    one episode still continue each other), for adding them once more."""
    out = []
    for episodes in fragments:
        copies = []
        for episode in episodes:
            twin = copy.copy(episode)
            twin.id_ = f"{episode.id_}:{tag}"
            copies.append(twin)
        out.append(copies)
    return out


# --------------------------------------------------------------------- arms
class Arm:
    """Times one chunk of about `steps` env steps: `run(steps)` returns
    (env steps, {part: seconds}, cpu seconds); the part "total" is the wall."""

    where = "driver"

    def warm_up(self, steps: int) -> None:
        pass

    def run(self, steps: int):
        raise NotImplementedError

    def close(self) -> None:
        pass


class BareEnvArm(Arm):
    where = "runner"

    def __init__(self):
        from rllib_ners.env.atari import make_atari_env

        self.env = make_atari_env({"game": GAME})

    def warm_up(self, steps: int) -> None:
        self.env.reset(seed=0)
        self.env.action_space.seed(0)
        self.run(200)

    def run(self, steps: int):
        env, sample = self.env, self.env.action_space.sample
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(sample())
            if terminated or truncated:
                env.reset()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        return steps, {"total": wall}, cpu


class RunnerArm(Arm):
    """One local EnvRunner, `sample()` as the algorithm calls it; its parts
    timed by wrappers on the env, the module, the connector pipelines and the
    episodes' `to_numpy` / `cut` (class-level, only while this arm runs)."""

    where = "runner"
    PARTS = ("env step", "RLModule forward", "env-to-module", "module-to-env")

    def __init__(self, config, num_envs: int, rllib_loop: bool = False):
        from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

        from rllib_ners.env.fast_env_runner import FastSingleAgentEnvRunner

        config = config.env_runners(num_env_runners=0, num_envs_per_env_runner=num_envs)
        runner_class = SingleAgentEnvRunner if rllib_loop else FastSingleAgentEnvRunner
        self.runner = runner_class(config=config)
        self.blocker = (
            "RLlib's SingleAgentEnvRunner (for comparison)"
            if rllib_loop
            else self.runner.fast_sampling_blocker
        )
        self.timer = PartTimer()
        self.input_dtypes = set()
        runner, timer = self.runner, self.timer
        runner.env.step = timer.wrap("env step", runner.env.step)
        # Both loops run the module's own exploration pass (RLlib's loop
        # through `forward_exploration`, which toggles eval/train around it).
        forward = runner.module._forward_exploration

        def forward_seen(batch, **kwargs):
            obs = batch.get("obs")
            if obs is not None:
                self.input_dtypes.add((str(obs.dtype), tuple(obs.shape[1:])))
            return forward(batch, **kwargs)

        runner.module._forward_exploration = timer.wrap(
            "RLModule forward", forward_seen
        )
        runner._env_to_module = timer.wrap("env-to-module", runner._env_to_module)
        runner._module_to_env = timer.wrap("module-to-env", runner._module_to_env)
        self.fragments: List[list] = []

    def warm_up(self, steps: int) -> None:
        """Samples `steps` env steps and keeps the fragments (one list per
        `sample()` call) for the shipping and buffer arms."""
        self.runner.sample()
        sampled = 0
        while sampled < steps:
            episodes = self.runner.sample()
            self.fragments.append(episodes)
            sampled += env_steps_of(episodes)

    def run(self, steps: int):
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode

        timer, sample = self.timer, self.runner.sample
        timer.seconds.clear()
        originals = (SingleAgentEpisode.to_numpy, SingleAgentEpisode.cut)
        SingleAgentEpisode.to_numpy = timer.wrap("to_numpy + cut", originals[0])
        SingleAgentEpisode.cut = timer.wrap("to_numpy + cut", originals[1])
        try:
            sampled = 0
            wall0, cpu0 = time.perf_counter(), time.process_time()
            while sampled < steps:
                sampled += env_steps_of(sample())
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        finally:
            SingleAgentEpisode.to_numpy, SingleAgentEpisode.cut = originals
        parts = dict(timer.seconds)
        parts["episode bookkeeping, rest"] = wall - sum(parts.values())
        parts["total"] = wall
        return sampled, parts, cpu

    def close(self) -> None:
        self.runner.stop()


class ShipArm(Arm):
    """The fragments of one `sample()` call each, returned by a remote actor
    (`ray.get` in the driver, the round trip), and `ray.put` / `ray.get` of the
    same fragments in the driver. `packed`: as our training loop ships them
    (`pack_fragments` on the actor, in the round trip; timed apart in the
    driver as "pack")."""

    def __init__(self, fragments: List[list], packed: bool = False):
        import ray

        from rllib_ners.replay_buffers.packed_fragments import pack_fragments

        self.pack = pack_fragments if packed else None

        @ray.remote(num_cpus=0)
        class Holder:
            def __init__(self, fragments, pack):
                # Writable copies, as an EnvRunner's own episodes are.
                self.fragments = copy.deepcopy(fragments)
                self.pack = pack
                self.next = 0

            def sample(self):
                episodes = self.fragments[self.next % len(self.fragments)]
                self.next += 1
                return self.pack(episodes) if self.pack else episodes

        self.fragments = fragments
        self.holder = Holder.remote(fragments, self.pack)

    def warm_up(self, steps: int) -> None:
        self.run(steps)

    def run(self, steps: int):
        import ray

        parts = {"total": 0.0, "pack": 0.0, "ray.put": 0.0, "ray.get": 0.0}
        clock = time.perf_counter
        sampled, cpu0 = 0, time.process_time()
        for episodes in self.fragments:
            start = clock()
            ray.get(self.holder.sample.remote())
            parts["total"] += clock() - start
            start = clock()
            shipped = self.pack(episodes) if self.pack else episodes
            packed = clock()
            ref = ray.put(shipped)
            put = clock()
            ray.get(ref)
            parts["pack"] += packed - start
            parts["ray.put"] += put - packed
            parts["ray.get"] += clock() - put
            del ref
            sampled += env_steps_of(episodes)
            if sampled >= steps:
                break
        cpu = time.process_time() - cpu0
        parts["actor call, transfer"] = parts["total"] - sum(
            parts[part] for part in ("pack", "ray.put", "ray.get")
        )
        return sampled, parts, cpu

    def close(self) -> None:
        import ray

        ray.kill(self.holder)


class RemoteRunnerArm(Arm):
    """One remote EnvRunner sampled as `training_step` does it (driver wall):
    packed fragments (our training loop) or episodes (RLlib's)."""

    def __init__(self, config, packed: bool):
        from ray.rllib.env import INPUT_ENV_SINGLE_SPACES
        from ray.rllib.env.env_runner_group import EnvRunnerGroup

        self.config = config.env_runners(num_env_runners=1)
        self.group = EnvRunnerGroup(config=self.config, local_env_runner=False)
        self.spaces = self.group.get_spaces()[INPUT_ENV_SINGLE_SPACES]
        self.packed = packed
        self.received = None

    def warm_up(self, steps: int) -> None:
        self.run(steps)

    def run(self, steps: int):
        from rllib_ners.algorithms.common.fragment_shipping import (
            sample_remote_fragments,
        )
        from rllib_ners.seam.algorithm import sample_episodes

        sampled, timeout = 0, self.config.sample_timeout_s
        wall0, cpu0 = time.perf_counter(), time.process_time()
        while sampled < steps:
            if self.packed:
                self.received = sample_remote_fragments(
                    self.group, spaces=self.spaces, sample_timeout_s=timeout
                )
            else:
                self.received = sample_episodes(self.group, sample_timeout_s=timeout)
            sampled += env_steps_of(self.received)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        return sampled, {"total": wall}, cpu

    def close(self) -> None:
        self.group.stop()


def build_buffer(config, ners: bool):
    from rllib_ners import FastPrioritizedEpisodeReplayBuffer, NERSEpisodeReplayBuffer

    settings = {k: v for k, v in config.replay_buffer_config.items() if k != "type"}
    settings["seed"] = 0
    if ners:
        return NERSEpisodeReplayBuffer(scored_by_ners_learner=True, **settings)
    return FastPrioritizedEpisodeReplayBuffer(**settings)


class AddArm(Arm):
    """`buffer.add()` of the stage-2 fragments, `bulk` `sample()` outputs per
    call, under fresh episode ids every round."""

    def __init__(self, buffer, fragments: List[list], bulk: int, packed=False):
        self.buffer, self.fragments, self.bulk = buffer, fragments, bulk
        self.packed = packed
        self.calls = 0

    def warm_up(self, steps: int) -> None:
        self.run(steps)

    def run(self, steps: int):
        self.calls += 1
        fragments = renamed(self.fragments, f"{self.bulk}-{self.calls}")
        if self.packed:
            from rllib_ners.replay_buffers.packed_fragments import pack_fragments

            spaces = (fragments[0][0].observation_space, fragments[0][0].action_space)
            fragments = [[pack_fragments(f).with_spaces(*spaces)] for f in fragments]
        groups = [
            [
                episode
                for episodes in fragments[i : i + self.bulk]
                for episode in episodes
            ]
            for i in range(0, len(fragments), self.bulk)
        ]
        add, clock = self.buffer.add, time.perf_counter
        wall, sampled, cpu0 = 0.0, 0, time.process_time()
        for episodes in groups:
            start = clock()
            add(episodes)
            wall += clock() - start
            sampled += env_steps_of(episodes)
        cpu = time.process_time() - cpu0
        return sampled, {"total": wall}, cpu


class SampleArm(Arm):
    """Per update: `sample_batch(32)`, the Learner's batch and the priority
    update, as `_replay_updates` does them; `steps` env steps' worth of updates."""

    def __init__(
        self,
        buffer,
        config,
        env_steps_per_update: float,
        ners: bool,
        channels_first: bool = False,
    ):
        self.buffer, self.config, self.ners = buffer, config, ners
        self.env_steps_per_update = env_steps_per_update
        self.channels_first = channels_first
        self.rng = np.random.default_rng(0)

    def warm_up(self, steps: int) -> None:
        self.run(steps)

    def run(self, steps: int):
        from rllib_ners.algorithms.common.columnar_replay import replay_train_batch

        buffer, config, clock = self.buffer, self.config, time.perf_counter
        beta = config.replay_buffer_config.get("beta")
        updates = max(1, round(steps / self.env_steps_per_update))
        parts = {"sample_batch": 0.0, "train batch": 0.0, "update_priorities": 0.0}
        # The buffer is shared with another arm: the layout is this arm's only
        # while it runs.
        buffer.frames_channels_first = self.channels_first
        cpu0 = time.process_time()
        for _ in range(updates):
            if self.ners:  # [sigma, delta, q] per item, in sample order
                rows = self.rng.uniform(0.01, 1.0, (BATCH, 3))
            else:
                rows = np.abs(self.rng.standard_normal(BATCH))
            start = clock()
            columns = buffer.sample_batch(
                BATCH, n_step=config.n_step, gamma=config.gamma, beta=beta
            )
            sampled = clock()
            replay_train_batch(buffer, columns)
            built = clock()
            buffer.update_priorities(rows)
            parts["sample_batch"] += sampled - start
            parts["train batch"] += built - sampled
            parts["update_priorities"] += clock() - built
        cpu = time.process_time() - cpu0
        buffer.frames_channels_first = False
        parts["total"] = sum(parts.values())
        self.stacked = (columns["obs"].dtype, columns["obs"].shape)
        return round(updates * self.env_steps_per_update), parts, cpu


# -------------------------------------------------------------- measuring
def measure(arms: Dict[str, Arm], rounds: int, steps: int) -> Dict[str, dict]:
    """Rounds of one chunk per arm, the order rotating; per arm and part the
    median over rounds of µs per env step, plus env steps per CPU second."""
    per_step: Dict[str, Dict[str, list]] = {name: defaultdict(list) for name in arms}
    names = list(arms)
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            env_steps, parts, cpu = arms[name].run(steps)
            for part, seconds in parts.items():
                per_step[name][part].append(1e6 * seconds / env_steps)
            per_step[name]["cpu"].append(env_steps / max(cpu, 1e-9))
        print(f"round {round_index + 1}/{rounds} done", flush=True)
    return {
        name: {part: statistics.median(values) for part, values in parts.items()}
        for name, parts in per_step.items()
    }


def shipped_bytes(episodes) -> Dict[str, float]:
    """Bytes of one `sample()` output as Ray serializes it, and their parts."""
    import ray

    context = ray._private.worker.global_worker.get_serialization_context()
    total = context.serialize(episodes).total_bytes
    steps = env_steps_of(episodes)
    frame = episodes[0].observations.data[0].nbytes
    frames = sum(len(e.observations.data) for e in episodes)

    def pickled(value) -> int:
        buffers = []
        head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
        return len(head) + sum(b.raw().nbytes for b in buffers)

    # One pickle call memoizes a space shared by several episodes, as Ray's does.
    spaces = pickled([(e.observation_space, e.action_space) for e in episodes])
    return {
        "steps": steps,
        "episodes": len(episodes),
        "total": total,
        "frames": frames,
        "frame_bytes": frame,
        "new": steps * frame,
        "repeated": (frames - steps) * frame,
        "spaces": spaces,
        "rest": total - frames * frame - spaces,
        "lookback": [e.observations.lookback for e in episodes],
        "obs": (
            episodes[0].observations.data.dtype,
            episodes[0].observations.data.shape,
        ),
    }


def packed_bytes(packed) -> Dict[str, float]:
    """Bytes of one `sample()` output packed (`pack_fragments`) as Ray
    serializes it, and their parts (no spaces travel)."""
    import ray

    context = ray._private.worker.global_worker.get_serialization_context()
    total = context.serialize(packed).total_bytes
    steps, frames = len(packed), len(packed.observations)
    frame = packed.observations[0].nbytes
    return {
        "steps": steps,
        "total": total,
        "frames": frames,
        "new": steps * frame,
        "repeated": (frames - steps) * frame,
        "rest": total - frames * frame,
        "obs": (packed.observations.dtype, packed.observations.shape),
    }


def machine_line() -> str:
    import platform

    import ray
    import torch

    return (
        f"{cpu_model()}, {os.cpu_count()} cores; Python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} thread), ray "
        f"{ray.__version__}"
    )


# -------------------------------------------------------------- reporting
def report(args, config, results, arms, facts, load_before) -> None:
    load_after = os.getloadavg()
    envs = args.envs
    runner = f"runner-{envs[0]}"
    ratio = facts["env_steps_per_update"]
    print(
        f"\natari_ingest: preset {args.preset} ({GAME}), median of {args.rounds} "
        f"rounds x {args.steps} env steps per arm; {machine_line()}; "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; "
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}"
    )
    print(
        f"config: rollout_fragment_length {config.get_rollout_fragment_length()}, "
        f"episode_lookback_horizon {config.episode_lookback_horizon}, n_step "
        f"{config.n_step}, replay {facts['replay']}, one update of {BATCH} per "
        f"{ratio:g} env steps"
    )
    print(f"fast loop blocked: {facts['blocker'] or 'no (the fast loop samples)'}")
    print(f"RLModule inputs when acting (dtype, shape): {sorted(facts['inputs'])}")
    b = facts["bytes"]
    per = 1.0 / b["steps"]
    print(
        f"shipped per sample() call ({envs[0]} sub-env): {b['episodes']} episode "
        f"chunk(s), {b['steps']} env steps, observations {b['obs'][0]} "
        f"{b['obs'][1][1:]} per frame (one frame per step, not stacked), "
        f"lookback {b['lookback']}; {b['frames'] * per:.2f} frames per env step "
        f"travel (1.00 = each once)"
    )
    print(
        f"bytes per env step (Ray's serialization): {b['total'] * per:,.0f} = new "
        f"frames {b['new'] * per:,.0f} + repeated frames {b['repeated'] * per:,.0f} "
        f"+ pickled spaces {b['spaces'] * per:,.0f} + rest {b['rest'] * per:,.0f}; "
        f"{b['total'] / b['new']:.2f}x the frames themselves"
    )
    p = facts["packed_bytes"]
    per = 1.0 / p["steps"]
    print(
        f"packed (what our training loop ships): {p['total'] * per:,.0f} bytes per "
        f"env step = new frames {p['new'] * per:,.0f} + repeated frames (each "
        f"fragment's first observation) {p['repeated'] * per:,.0f} + rest "
        f"{p['rest'] * per:,.0f}; {p['total'] / p['new']:.2f}x the frames; "
        f"observations {p['obs'][0]} {p['obs'][1]}; "
        f"{b['total'] / p['total']:.2f}x fewer bytes than the episodes"
    )
    if facts.get("remote"):
        r = facts["remote"]
        print(
            f"a remote EnvRunner's sample() as training_step receives it: "
            f"{r['episodes']} episode chunk(s), {r['steps']} env steps, "
            f"observations {r['obs'][0]} {r['obs'][1][1:]}, lookback "
            f"{r['lookback']}, {r['total'] / r['steps']:,.0f} bytes per env step"
        )
    print(f"learner batch from the buffer: obs {facts['stacked']} (stacks rebuilt)")

    # The path as our training loop runs it: packed fragments shipped and added.
    ship = results["ship-packed"]
    totals = {
        kind: results[runner]["total"]
        + ship["total"]
        + results[f"{kind}-add-{args.bulk}-packed"]["total"]
        + results[f"{kind}-sample"]["total"]
        for kind in ("per", "ners")
    }
    episodes_path = {
        kind: results[runner]["total"]
        + results["ship"]["total"]
        + results[f"{kind}-add-{args.bulk}"]["total"]
        + results[f"{kind}-sample"]["total"]
        for kind in ("per", "ners")
    }
    header = (
        "| stage | where | µs per env step | share (PER path) | share (NERS path) | "
        "ceiling env steps/s | env steps / CPU s |"
    )
    print(header)
    print("|" + "---|" * 7)

    def row(label, where, micros, cpu=None, shares=True):
        cells = [label, where, f"{micros:,.1f}"]
        for kind in ("per", "ners"):
            cells.append(f"{100 * micros / totals[kind]:.1f}%" if shares else "-")
        cells.append(f"{1e6 / micros:,.0f}" if micros > 0 else "-")
        cells.append(f"{cpu:,.0f}" if cpu else "-")
        print("| " + " | ".join(cells) + " |")

    row(
        "1 bare env (ceiling of one process)",
        "runner",
        results["env"]["total"],
        results["env"]["cpu"],
        shares=False,
    )
    for name in [f"runner-{n}" for n in envs] + [f"rllib-runner-{envs[0]}"]:
        num_envs = int(name.rsplit("-", 1)[1])
        in_path = name == runner
        r = results[name]
        loop = "RLlib's loop" if name.startswith("rllib") else "our EnvRunner"
        row(
            f"2 EnvRunner.sample(), {num_envs} sub-env(s), {loop}",
            "runner",
            r["total"],
            r["cpu"],
            shares=in_path,
        )
        for part in RunnerArm.PARTS + ("to_numpy + cut", "episode bookkeeping, rest"):
            row(f"&nbsp;&nbsp;{part}", "runner", r.get(part, 0.0), shares=in_path)
    for name, how in (("remote-packed", "packed"), ("remote", "episodes")):
        if name in results:
            row(
                f"(2+3 remote EnvRunner, {how}, as training_step samples; driver "
                f"wall, driver CPU)",
                "both",
                results[name]["total"],
                results[name]["cpu"],
                shares=False,
            )
    for name, how in (("ship-packed", "packed fragments"), ("ship", "episodes")):
        in_path = name == "ship-packed"
        row(
            f"3 shipping {how}: actor -> driver round trip",
            "both",
            results[name]["total"],
            shares=in_path,
        )
        for part in ("pack", "ray.put", "ray.get", "actor call, transfer"):
            if part == "pack" and not in_path:
                continue
            where = {"actor call, transfer": "both", "pack": "runner"}
            where = where.get(part, "driver")
            row(f"&nbsp;&nbsp;{part}", where, results[name][part], shares=in_path)
    for kind, label in (("per", "PER"), ("ners", "NERS")):
        for bulk in sorted({args.bulk, 1}, reverse=True):
            for packed in ("-packed", ""):
                name = f"{kind}-add-{bulk}{packed}"
                if name not in results:
                    continue
                how = "packed fragments" if packed else "episodes"
                row(
                    f"4 buffer add of {how}, {label}, {bulk} sample() output(s) "
                    f"per call",
                    "driver",
                    results[name]["total"],
                    results[name]["cpu"],
                    shares=bulk == args.bulk and bool(packed),
                )
    for kind, label in (("per", "PER"), ("ners", "NERS")):
        s = results[f"{kind}-sample"]
        row(
            f"5 buffer sample {BATCH} + priorities, {label} "
            f"({s['total'] * ratio:,.0f} µs per update)",
            "driver",
            s["total"],
            s["cpu"],
        )
        for part in ("sample_batch", "train batch", "update_priorities"):
            row(f"&nbsp;&nbsp;{part}", "driver", s[part])
    planar = results["per-sample-channels-first"]
    row(
        f"5 buffer sample {BATCH} + priorities, PER, stacks channels-first in "
        f"memory (a GPU Learner's layout; {planar['total'] * ratio:,.0f} µs per "
        f"update)",
        "driver",
        planar["total"],
        planar["cpu"],
        shares=False,
    )
    for part in ("sample_batch", "train batch", "update_priorities"):
        row(f"&nbsp;&nbsp;{part}", "driver", planar[part], shares=False)
    speedup = results["per-sample"]["sample_batch"] / planar["sample_batch"]
    print(
        f"sample_batch with stacks channels-first vs channels-last, PER, same "
        f"rounds: {speedup:.2f}x as fast"
    )
    for kind, label in (("per", "PER"), ("ners", "NERS")):
        print(
            f"| total path, {label} (2 with {envs[0]} sub-env + 3 + 4 + 5, packed) "
            f"| | {totals[kind]:,.1f} | | | {1e6 / totals[kind]:,.0f} | |"
        )
        print(
            f"| total path, {label}, shipping and adding episodes instead | | "
            f"{episodes_path[kind]:,.1f} | | | {1e6 / episodes_path[kind]:,.0f} | |"
        )
    driver = {
        how: results[f"ship{suffix}"]["ray.get"]
        + results[f"per-add-{args.bulk}{suffix}"]["total"]
        for how, suffix in (("packed", "-packed"), ("episodes", ""))
    }
    print(
        f"driver time per env step to receive (ray.get) and add (PER, bulk "
        f"{args.bulk}): packed {driver['packed']:,.1f} µs, episodes "
        f"{driver['episodes']:,.1f} µs ({driver['episodes'] / driver['packed']:.2f}x "
        f"as much); round trip packed vs episodes: "
        f"{results['ship']['total'] / results['ship-packed']['total']:.2f}x as fast"
    )
    rllib_runner = results[f"rllib-runner-{envs[0]}"]["total"]
    print(
        f"our EnvRunner vs RLlib's SingleAgentEnvRunner, {envs[0]} sub-env(s), "
        f"same config, same rounds: {rllib_runner / results[runner]['total']:.2f}x "
        f"env steps/s"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=PRESETS, default="rainbow")
    parser.add_argument(
        "--steps", type=int, default=1000, help="env steps per arm and round"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--envs",
        type=int,
        nargs="+",
        default=[1, 4],
        help="sub-envs per EnvRunner; the first is the path's",
    )
    parser.add_argument(
        "--bulk", type=int, default=8, help="sample() outputs per buffer add() call"
    )
    parser.add_argument(
        "--no-remote",
        action="store_true",
        help="skip the remote EnvRunner (saves ~10 s)",
    )
    args = parser.parse_args(argv)

    import ray
    import torch

    from rllib_ners.cli.quiet import silence_known_noise
    from rllib_ners.replay_buffers.packed_fragments import pack_fragments

    silence_known_noise()
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    config = preset_config(args.preset, "per")
    ners_config = preset_config(args.preset, "ners")
    env_steps_per_update = config.total_train_batch_size / config.training_intensity
    arms: Dict[str, Arm] = {}
    facts = {"env_steps_per_update": env_steps_per_update}
    try:
        arms["env"] = BareEnvArm()
        for num_envs in args.envs:
            arms[f"runner-{num_envs}"] = RunnerArm(config.copy(), num_envs)
        arms[f"rllib-runner-{args.envs[0]}"] = RunnerArm(
            config.copy(), args.envs[0], rllib_loop=True
        )
        for name, arm in list(arms.items()):
            print(f"warming up {name}", flush=True)
            arm.warm_up(args.steps)
        path_runner = arms[f"runner-{args.envs[0]}"]
        fragments = path_runner.fragments
        facts["blocker"] = path_runner.blocker
        facts["inputs"] = path_runner.input_dtypes
        facts["bytes"] = shipped_bytes(fragments[-1])
        facts["replay"] = {
            k: v
            for k, v in ners_config.replay_buffer_config.items()
            if k in ("type", "capacity", "alpha", "frame_stack")
        }
        facts["packed_bytes"] = packed_bytes(pack_fragments(fragments[-1]))
        later = {
            "ship-packed": ShipArm(fragments, packed=True),
            "ship": ShipArm(fragments),
        }
        if not args.no_remote:
            later["remote-packed"] = RemoteRunnerArm(config.copy(), packed=True)
            later["remote"] = RemoteRunnerArm(config.copy(), packed=False)
        buffers = {
            "per": build_buffer(config, False),
            "ners": build_buffer(ners_config, True),
        }
        for kind, buffer in buffers.items():
            for bulk in sorted({args.bulk, 1}, reverse=True):
                later[f"{kind}-add-{bulk}"] = AddArm(buffer, fragments, bulk)
            later[f"{kind}-add-{args.bulk}-packed"] = AddArm(
                buffer, fragments, args.bulk, packed=True
            )
            later[f"{kind}-sample"] = SampleArm(
                buffer, config, env_steps_per_update, kind == "ners"
            )
        later["per-sample-channels-first"] = SampleArm(
            buffers["per"], config, env_steps_per_update, False, channels_first=True
        )
        for name, arm in later.items():
            print(f"warming up {name}", flush=True)
            arms[name] = arm
            arm.warm_up(args.steps)
        if "remote" in arms:
            facts["remote"] = shipped_bytes(arms["remote"].received)
        results = measure(arms, args.rounds, args.steps)
        facts["stacked"] = arms["per-sample"].stacked
    finally:
        for arm in arms.values():
            arm.close()
        ray.shutdown()
    report(args, config, results, arms, facts, load_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
