"""The stages of `benchmarks/atari_ingest.py` (its docstring), each an arm that
times one chunk of env steps."""

from __future__ import annotations

import copy
import time
from typing import Dict, List

import numpy as np
from harness import timed_method

GAME = "MsPacman"
BATCH = 32
PRESETS = ("rainbow", "der")


# ------------------------------------------------------------------ helpers
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
        self.run(steps)

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
        self.tallies: Dict[str, List[float]] = {}  # part: [calls, seconds]
        self.input_dtypes = set()
        runner = self.runner
        # Both loops run the module's own exploration pass (RLlib's loop
        # through `forward_exploration`, which toggles eval/train around it).
        forward = runner.module._forward_exploration

        def forward_seen(batch, **kwargs):
            obs = batch.get("obs")
            if obs is not None:
                self.input_dtypes.add((str(obs.dtype), tuple(obs.shape[1:])))
            return forward(batch, **kwargs)

        runner.module._forward_exploration = forward_seen
        for part, owner, method in (
            ("env step", runner.env, "step"),
            ("RLModule forward", runner.module, "_forward_exploration"),
            ("env-to-module", runner, "_env_to_module"),
            ("module-to-env", runner, "_module_to_env"),
        ):
            timed_method(owner, method, self.tally(part))
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

    def tally(self, part: str) -> List[float]:
        return self.tallies.setdefault(part, [0, 0.0])

    def run(self, steps: int):
        from ray.rllib.env.single_agent_episode import SingleAgentEpisode

        for tally in self.tallies.values():
            tally[:] = [0, 0.0]
        restore = [
            timed_method(SingleAgentEpisode, method, self.tally("to_numpy + cut"))
            for method in ("to_numpy", "cut")
        ]
        try:
            sampled = 0
            wall0, cpu0 = time.perf_counter(), time.process_time()
            while sampled < steps:
                sampled += env_steps_of(self.runner.sample())
            wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        finally:
            for put_back in restore:
                put_back()
        parts = {part: tally[1] for part, tally in self.tallies.items() if tally[0]}
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

    def run(self, steps: int):
        from rllib_ners.algorithms.common.training.fragment_shipping import (
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

    def run(self, steps: int):
        from rllib_ners.algorithms.common.training.columnar_replay import (
            replay_train_batch,
        )

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
