"""The path from Atari EnvRunners to the replay buffer, stage by stage, per env step.

What it costs to bring one Atari env step from the emulator into the replay
buffer, for this package's Atari config (`atari_rainbow`, or with `--preset der`
`atari_data_efficient_rainbow`; MsPacman), and which stage bounds the path:

1  bare env      `make_atari_env` stepping with random actions: the ceiling of
                 one process.
2  EnvRunner     `FastSingleAgentEnvRunner.sample()` as the algorithm calls it
                 (its fast loop keeps Atari's frame stacks itself), beside
                 RLlib's `SingleAgentEnvRunner` on the same config (its frame-
                 stacking connector rebuilding the stacks), with 1 sub-env and
                 with `--envs`; split by timers on the env's `step`, the
                 RLModule's exploration pass, the connector pipelines (RLlib's
                 loop) and the episodes' `to_numpy` / `cut`; the rest is
                 episode bookkeeping.
3  shipping      a remote EnvRunner's `sample()` output on its way to
                 `training_step`: packed (`pack_fragments`: one numpy column per
                 field, no spaces, no lookback; our training loop) and as
                 episodes (RLlib's `synchronous_parallel_sample`): the round
                 trip from a remote actor, and `pack`, `ray.put` and `ray.get`
                 in the driver; the bytes per env step (new frames, repeated
                 frames, pickled spaces); and a real remote EnvRunner sampled
                 both ways (driver wall time).
4  buffer add    `add()` of the stage-2 fragments into our PER and NERS buffers
                 with the preset's replay settings: `--bulk` `sample()` outputs
                 per call (what 8 remote EnvRunners give), packed and as
                 episodes, and one output per call.
5  buffer sample `sample_batch(32)`, `replay_train_batch` and
                 `update_priorities` per update, per env step at the preset's
                 replay ratio; also PER with the stacks channels-first in memory
                 (`frames_channels_first`, what a local GPU Learner gets).

The arms take turns (`harness.take_turns`, `--rounds` of `--steps` env steps
each, one torch thread); the table gives the median µs per env step, its share
of the whole path as the training loop runs it (EnvRunner with 1 sub-env +
packed shipping + packed add + sample, PER or NERS), the ceiling in env
steps/s that stage alone would allow, and env steps per CPU second where the
stage runs in this process. Indented rows are parts of the row above them.

How to run
----------
    pip install -e ".[atari]"
    python benchmarks/atari_ingest.py
    python benchmarks/atari_ingest.py --steps 2000 --rounds 5
    python benchmarks/atari_ingest.py --preset der --envs 1 8
"""

from __future__ import annotations

import argparse
import datetime
import os
import pickle
from typing import Dict, List, Tuple

from harness import machine, ray_in_this_process, take_turns
from ingest_arms import (
    BATCH,
    GAME,
    PRESETS,
    AddArm,
    Arm,
    BareEnvArm,
    RemoteRunnerArm,
    RunnerArm,
    SampleArm,
    ShipArm,
    build_buffer,
    env_steps_of,
    preset_config,
)


# -------------------------------------------------------------- measuring
def measure(arms: Dict[str, Arm], rounds: int, steps: int) -> Dict[str, dict]:
    """Rounds of one chunk per arm, the order rotating; per arm and part the
    median over rounds of µs per env step, plus env steps per CPU second."""

    def chunk(name: str) -> Dict[str, float]:
        env_steps, parts, cpu = arms[name].run(steps)
        per_step = {part: 1e6 * seconds / env_steps for part, seconds in parts.items()}
        return {**per_step, "cpu": env_steps / max(cpu, 1e-9)}

    return take_turns(list(arms), rounds, chunk)


def shipped_bytes(shipped, packed: bool = False) -> Dict[str, float]:
    """Bytes of one `sample()` output as Ray serializes it, and their parts:
    episodes, or packed (`pack_fragments`: one column per field, no spaces)."""
    import ray

    context = ray._private.worker.global_worker.get_serialization_context()
    total, spaces, facts = context.serialize(shipped).total_bytes, 0, {}
    if packed:
        steps, observations = len(shipped), shipped.observations
        frames, frame = len(observations), observations[0].nbytes
    else:
        steps, observations = env_steps_of(shipped), shipped[0].observations
        frames = sum(len(e.observations.data) for e in shipped)
        frame, observations = observations.data[0].nbytes, observations.data
        facts["episodes"] = len(shipped)
        facts["lookback"] = [e.observations.lookback for e in shipped]
        # One pickle call memoizes a space shared by several episodes, as Ray's.
        buffers = []
        spaced = [(e.observation_space, e.action_space) for e in shipped]
        head = pickle.dumps(spaced, protocol=5, buffer_callback=buffers.append)
        spaces = len(head) + sum(b.raw().nbytes for b in buffers)
    return {
        **facts,
        "steps": steps,
        "total": total,
        "frames": frames,
        "new": steps * frame,
        "repeated": (frames - steps) * frame,
        "spaces": spaces,
        "rest": total - frames * frame - spaces,
        "obs": (observations.dtype, observations.shape),
    }


# -------------------------------------------------------------- reporting
KINDS = {"per": "PER", "ners": "NERS"}
INDENT = "&nbsp;&nbsp;"
RUNNER_PARTS = RunnerArm.PARTS + ("to_numpy + cut", "episode bookkeeping, rest")
SHIP_PARTS = {"pack": "runner", "ray.put": "driver", "ray.get": "driver"}
SHIP_PARTS["actor call, transfer"] = "both"
SAMPLE_PARTS = ("sample_batch", "train batch", "update_priorities")


def path_total(results, args, kind: str, shipped: str) -> float:
    """µs per env step of the whole path (EnvRunner with the first sub-env
    count, shipping, add of `--bulk` outputs, sample) for `kind`'s buffer;
    `shipped`: "-packed" for packed fragments, "" for episodes."""
    return (
        results[f"runner-{args.envs[0]}"]["total"]
        + results[f"ship{shipped}"]["total"]
        + results[f"{kind}-add-{args.bulk}{shipped}"]["total"]
        + results[f"{kind}-sample"]["total"]
    )


def stage_rows(
    args, results, env_steps_per_update: float
) -> List[Tuple[str, str, str, str, bool, bool]]:
    """The table's rows in order: (label, where, arm, part, in the path's
    shares, with the arm's env steps per CPU second)."""
    envs = args.envs
    bare = "1 bare env (ceiling of one process)"
    rows = [(bare, "runner", "env", "total", False, True)]
    for name in [f"runner-{n}" for n in envs] + [f"rllib-runner-{envs[0]}"]:
        loop = "RLlib's loop" if name.startswith("rllib") else "our EnvRunner"
        in_path = name == f"runner-{envs[0]}"
        label = f"2 EnvRunner.sample(), {name.rsplit('-', 1)[1]} sub-env(s), {loop}"
        rows.append((label, "runner", name, "total", in_path, True))
        rows += [(INDENT + p, "runner", name, p, in_path, False) for p in RUNNER_PARTS]
    for name, how in (("remote-packed", "packed"), ("remote", "episodes")):
        if name in results:
            label = (
                f"(2+3 remote EnvRunner, {how}, as training_step samples; driver "
                f"wall, driver CPU)"
            )
            rows.append((label, "both", name, "total", False, True))
    for name, how in (("ship-packed", "packed fragments"), ("ship", "episodes")):
        in_path = name == "ship-packed"
        label = f"3 shipping {how}: actor -> driver round trip"
        rows.append((label, "both", name, "total", in_path, False))
        for part, where in SHIP_PARTS.items():
            if part != "pack" or in_path:
                rows.append((INDENT + part, where, name, part, in_path, False))
    for kind, label in KINDS.items():
        for bulk in sorted({args.bulk, 1}, reverse=True):
            for packed, how in (("-packed", "packed fragments"), ("", "episodes")):
                name = f"{kind}-add-{bulk}{packed}"
                if name in results:
                    text = f"4 buffer add of {how}, {label}, {bulk} sample() output(s)"
                    in_path = bulk == args.bulk and bool(packed)
                    rows.append(
                        (text + " per call", "driver", name, "total", in_path, 1)
                    )
    samples = [(f"{kind}-sample", label, True) for kind, label in KINDS.items()]
    samples.append(("per-sample-channels-first", "PER", False))
    for name, label, in_path in samples:
        per_update = results[name]["total"] * env_steps_per_update
        if in_path:
            label += f" ({per_update:,.0f} µs per update)"
        else:
            label += (
                f", stacks channels-first in memory (a GPU Learner's layout; "
                f"{per_update:,.0f} µs per update)"
            )
        text = f"5 buffer sample {BATCH} + priorities, {label}"
        rows.append((text, "driver", name, "total", in_path, True))
        rows += [(INDENT + p, "driver", name, p, in_path, False) for p in SAMPLE_PARTS]
    return rows


def report(args, config, results, arms, facts, load_before) -> None:
    load_after = os.getloadavg()
    envs = args.envs
    runner = f"runner-{envs[0]}"
    ratio = facts["env_steps_per_update"]
    print(
        f"\natari_ingest: preset {args.preset} ({GAME}), median of {args.rounds} "
        f"rounds x {args.steps} env steps per arm; {machine()}; "
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
    totals = {kind: path_total(results, args, kind, "-packed") for kind in KINDS}
    print(
        "| stage | where | µs per env step | share (PER path) | share (NERS path) | "
        "ceiling env steps/s | env steps / CPU s |"
    )
    print("|" + "---|" * 7)
    for label, where, name, part, in_path, with_cpu in stage_rows(args, results, ratio):
        micros = results[name].get(part, 0.0)
        cells = [label, where, f"{micros:,.1f}"]
        for kind in KINDS:
            cells.append(f"{100 * micros / totals[kind]:.1f}%" if in_path else "-")
        cells.append(f"{1e6 / micros:,.0f}" if micros > 0 else "-")
        cpu = results[name]["cpu"] if with_cpu else None
        cells.append(f"{cpu:,.0f}" if cpu else "-")
        print("| " + " | ".join(cells) + " |")
    planar = results["per-sample-channels-first"]
    speedup = results["per-sample"]["sample_batch"] / planar["sample_batch"]
    print(
        f"sample_batch with stacks channels-first vs channels-last, PER, same "
        f"rounds: {speedup:.2f}x as fast"
    )
    for kind, label in KINDS.items():
        episodes_path = path_total(results, args, kind, "")
        print(
            f"| total path, {label} (2 with {envs[0]} sub-env + 3 + 4 + 5, packed) "
            f"| | {totals[kind]:,.1f} | | | {1e6 / totals[kind]:,.0f} | |"
        )
        print(
            f"| total path, {label}, shipping and adding episodes instead | | "
            f"{episodes_path:,.1f} | | | {1e6 / episodes_path:,.0f} | |"
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
    add = parser.add_argument
    add("--preset", choices=PRESETS, default="rainbow")
    add("--steps", type=int, default=1000, help="env steps per arm and round")
    add("--rounds", type=int, default=3)
    add(
        "--envs",
        type=int,
        nargs="+",
        default=[1, 4],
        help="sub-envs per EnvRunner; the first is the path's",
    )
    add("--bulk", type=int, default=8, help="sample() outputs per buffer add() call")
    add(
        "--no-remote",
        action="store_true",
        help="skip the remote EnvRunner (saves ~10 s)",
    )
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with ray_in_this_process(num_cpus=2):
        arms, results, facts, config = run_arms(args)
    report(args, config, results, arms, facts, load_before)
    return 0


def run_arms(args):
    """Every stage's arms warmed up (the later ones on the first EnvRunner's
    fragments) and measured; (arms, results, facts, config)."""
    from rllib_ners.replay_buffers.packed_fragments import pack_fragments

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
        facts["packed_bytes"] = shipped_bytes(pack_fragments(fragments[-1]), True)
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
    return arms, results, facts, config


if __name__ == "__main__":
    raise SystemExit(main())
