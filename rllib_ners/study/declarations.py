"""The study's declarations: tasks (what trains, how long, how it is scored)
and arms (how the replay of the same agent changes).

A task names its env, budget, evaluation, agent settings and normalisation
anchors; an arm says which buffer and sampler settings replace the task's
replay. Both are plain frozen dataclasses: the built-in ones are below (their
agents' settings come from `rllib_ners.study.agents`), and a study of your own
declares more in a Python file of its own (see
`rllib_ners.study.load_declarations`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable, Dict, List, Optional

from rllib_ners.study import agents

DEFAULT_SEEDS = (100, 101, 102, 103, 104)  # seeds 0-9 are reserved for tuning
# The agents a task can train.
ALGORITHMS = ("dqn", "sac", "td3")


class DeclarationError(ValueError):
    """A `Task` or `Arm` declared with a wrong field (the message names it)."""


# Names become folder names (`<results-dir>/<task>/<arm>/seed<k>.csv`).
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _check_name(kind: str, name) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise DeclarationError(
            f"{kind} name {name!r}: use letters, digits, '_', '-' and '.' only "
            f"(it names the results folder), e.g. 'my_task'"
        )


def _check_positive_int(owner: str, field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DeclarationError(
            f"{owner}: `{field}` must be a positive int, got {value!r}"
        )


def _check_choice(owner: str, field: str, value, choices) -> None:
    if value not in choices:
        raise DeclarationError(
            f"{owner}: `{field}` must be one of {', '.join(map(repr, choices))}, "
            f"got {value!r}"
        )


# ---------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of the study: what runs, for how long, and how it is scored.

    Attributes:
        env: gymnasium id the agent trains and is evaluated on.
        budget: training env steps per run (a multiple of `eval_every`).
        eval_every: env steps between greedy evaluations (the last one is at
            `budget`).
        eval_episodes: greedy episodes per evaluation.
        eval_max_steps: an evaluation episode is cut after this many steps (its
            return so far counts).
        log_every: env steps per training iteration, one CSV row each.
        random_return: lower normalisation anchor: the mean return of a uniform
            random policy.
        max_return: upper normalisation anchor (see `anchor_note`).
        anchor_note: where the anchors come from.
        agent: `fn(config) -> config` setting network, optimiser, n-step,
            exploration, learning starts and update ratio; the same for every arm.
        capacity: replay capacity (transitions).
        per_alpha: priority exponent of the `per` and `ners` arms (the
            `ners_reference` arm uses the reference code's 0.5).
        beta: importance-sampling exponent at the start, annealed to 1 over the
            budget.
        requires: import name of the extra package the env needs (or None).
        algo: "dqn" (the `uniform`/`per` arms build `RainbowDQNConfig`, the NERS
            arms `NERSDQNConfig`), "sac" (every arm builds `NERSSACConfig`:
            with our fast buffer it is RLlib's SAC, with the NERS buffer
            NERS-SAC) or "td3" (every arm builds `TD3Config`).
        eval_env: `fn() -> gym.Env` for the greedy evaluations, or None for
            `gym.make(env)` (Atari: whole games with unclipped rewards).
        eval_frame_stack: the evaluation stacks this many frames on the last
            axis, zeros before a game's first frame, as the agent's EnvRunner
            does (RLlib's frame stacking connector).
    """

    name: str
    env: str
    budget: int
    eval_every: int
    eval_episodes: int
    eval_max_steps: int
    log_every: int
    random_return: float
    max_return: float
    anchor_note: str
    agent: Callable
    capacity: int
    per_alpha: float = 0.6
    beta: float = 0.4
    requires: Optional[str] = None
    algo: str = "dqn"
    eval_env: Optional[Callable] = None
    eval_frame_stack: int = 1

    def __post_init__(self):
        """Checks the declaration when it is made (a user's file is loaded), so
        that a wrong field stops the study before any run starts."""
        _check_name("task", self.name)
        owner = f"task {self.name!r}"
        if not isinstance(self.env, str) or not self.env:
            raise DeclarationError(
                f"{owner}: `env` must be a gymnasium id, got {self.env!r}"
            )
        for field in (
            "budget",
            "eval_every",
            "eval_episodes",
            "eval_max_steps",
            "log_every",
            "capacity",
            "eval_frame_stack",
        ):
            _check_positive_int(owner, field, getattr(self, field))
        if self.budget % self.eval_every:
            raise DeclarationError(
                f"{owner}: `budget` ({self.budget}) must be a multiple of "
                f"`eval_every` ({self.eval_every}): evaluations are every "
                f"`eval_every` env steps and the last one is at the budget"
            )
        anchors = (self.random_return, self.max_return)
        if not all(isinstance(a, (int, float)) and math.isfinite(a) for a in anchors):
            raise DeclarationError(
                f"{owner}: `random_return` and `max_return` must be finite "
                f"numbers, got {anchors}"
            )
        if self.max_return <= self.random_return:
            raise DeclarationError(
                f"{owner}: `max_return` ({self.max_return}) must be above "
                f"`random_return` ({self.random_return}): scores are normalised "
                f"to 0 at the random return and 1 at the max return"
            )
        if not callable(self.agent):
            raise DeclarationError(
                f"{owner}: `agent` must be a function `fn(config) -> config`, "
                f"got {self.agent!r}"
            )
        if self.eval_env is not None and not callable(self.eval_env):
            raise DeclarationError(
                f"{owner}: `eval_env` must be None or a function `fn() -> gym.Env`, "
                f"got {self.eval_env!r}"
            )
        if not (isinstance(self.per_alpha, (int, float)) and self.per_alpha >= 0):
            raise DeclarationError(
                f"{owner}: `per_alpha` must be >= 0, got {self.per_alpha!r}"
            )
        if not (isinstance(self.beta, (int, float)) and 0 <= self.beta <= 1):
            raise DeclarationError(
                f"{owner}: `beta` must be in [0, 1], got {self.beta!r}"
            )
        _check_choice(owner, "algo", self.algo, ALGORITHMS)


def _mujoco_task(
    name,
    env,
    *,
    random_return,
    max_return,
    max_note,
    budget=100_000,
    algo="sac",
):
    """A MuJoCo task of the paper-setting study (results/ners_paper_settings;
    `algo="td3"`: of results/td3_lap): SAC's usual settings (or TD3's), 100k
    env steps, 10 greedy episodes every 10k."""
    agent_by_algo = {"sac": agents.sac_agent, "td3": agents.td3_agent}
    return Task(
        name=name,
        env=env,
        budget=budget,
        eval_every=10_000,
        eval_episodes=10,
        eval_max_steps=1_000,
        log_every=1_000,
        random_return=random_return,
        max_return=max_return,
        anchor_note=f"0: uniform random policy, {random_return} (measured: 200 "
        f"episodes, env seeds 0-199); 1: {max_return}, {max_note}",
        agent=agent_by_algo[algo](hiddens=(256, 256), lr=3e-4, learning_starts=5000),
        capacity=1_000_000,
        requires="mujoco",
        algo=algo,
    )


def _atari_task(name, game, *, random_return, human_return, budget=100_000):
    """An Atari-100k task: data-efficient Rainbow for 100k agent steps, 10
    greedy whole games every 20k steps, human-normalised."""
    return Task(
        name=name,
        env=f"ALE/{game}-v5",
        budget=budget,
        eval_every=20_000,
        eval_episodes=10,
        eval_max_steps=27_000,  # 108k frames: the usual cap of an Atari game
        log_every=1_000,
        random_return=random_return,
        max_return=human_return,
        anchor_note=f"0: random play, {random_return}; 1: human, {human_return} "
        f"(the standard Atari anchors of Mnih et al. 2015 / van Hasselt et al. "
        f"2016, as the Atari-100k literature normalises)",
        agent=agents.atari_agent(game, budget),
        capacity=100_000,
        per_alpha=0.5,
        requires="ale_py",
        eval_env=agents.atari_eval_env(game),
        eval_frame_stack=4,
    )


# Each budget leaves room for the arms to differ: with these settings CartPole
# reaches ~450 at 40-50k env steps, Acrobot leaves -500 within 5-10k, and
# MinAtar returns rise above random within the first 10k. `rllib-ners study
# status` estimates a study's CPU time; `benchmarks/study_costs.py` measures the
# arms' costs side by side.
TASKS: Dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            name="cartpole",
            env="CartPole-v1",
            budget=50_000,
            eval_every=5_000,
            eval_episodes=10,
            eval_max_steps=500,
            log_every=1_000,
            random_return=22.2,
            max_return=500.0,
            anchor_note="0: uniform random policy, 22.2 (measured: 1000 episodes, "
            "env seeds 0-999); 1: 500, the episode cap of CartPole-v1",
            agent=agents.classic_control_agent,
            capacity=50_000,
        ),
        Task(
            name="acrobot",
            env="Acrobot-v1",
            budget=50_000,
            eval_every=5_000,
            eval_episodes=10,
            eval_max_steps=500,
            log_every=1_000,
            random_return=-497.4,
            max_return=-60.0,
            anchor_note="0: uniform random policy, -497.4 (measured: 200 episodes, "
            "env seeds 0-199; nearly always the 500-step cap); 1: -60, about the "
            "best mean return reported for Acrobot-v1",
            agent=agents.classic_control_agent,
            capacity=50_000,
        ),
        Task(
            name="minatar_breakout",
            env="MinAtar/Breakout-v1",
            budget=80_000,
            eval_every=10_000,
            eval_episodes=10,
            eval_max_steps=5_000,
            log_every=1_000,
            random_return=0.38,
            max_return=20.0,
            anchor_note="0: uniform random policy, 0.38 (measured: 1000 episodes, "
            "env seeds 0-999); 1: 20, a round scale fixed before the study "
            "(MinAtar has no maximum return), not a measured return",
            agent=agents.minatar_agent(80_000),
            capacity=80_000,
            requires="minatar",
        ),
        Task(
            name="minatar_space_invaders",
            env="MinAtar/SpaceInvaders-v1",
            budget=80_000,
            eval_every=10_000,
            eval_episodes=10,
            eval_max_steps=5_000,
            log_every=1_000,
            random_return=4.1,
            max_return=100.0,
            anchor_note="0: uniform random policy, 4.1 (measured: 500 episodes, "
            "env seeds 0-499); 1: 100, a round scale fixed before the study "
            "(MinAtar has no maximum return), not a measured return",
            agent=agents.minatar_agent(80_000),
            capacity=80_000,
            requires="minatar",
        ),
        # Continuous control, not in the default suite (SUITE): run it with
        # `--tasks pendulum hopper`. Pendulum uses the CI learning test's small
        # SAC (64-unit nets, Adam 1e-3, 1000 warm-up steps, rounds of 4 steps +
        # 4 updates); Hopper SAC's usual 256x256 nets and 3e-4 with a 5000-step
        # warm-up (the usual is 10k) to fit a 30k budget, so it shows early
        # learning only (SAC needs ~1M steps for its final Hopper scores).
        Task(
            name="pendulum",
            env="Pendulum-v1",
            budget=10_000,
            eval_every=1_000,
            eval_episodes=10,
            eval_max_steps=200,
            log_every=1_000,
            random_return=-1255.5,
            max_return=-150.0,
            anchor_note="0: uniform random policy, -1255.5 (measured: 200 "
            "episodes, env seeds 0-199); 1: -150, about the best mean return "
            "reported for Pendulum-v1",
            agent=agents.sac_agent(
                hiddens=(64, 64), lr=1e-3, learning_starts=1000, rollout=4
            ),
            capacity=100_000,
            algo="sac",
        ),
        Task(
            name="hopper",
            env="Hopper-v5",
            budget=30_000,
            eval_every=5_000,
            eval_episodes=5,
            eval_max_steps=1_000,
            log_every=1_000,
            random_return=18.0,
            max_return=3500.0,
            anchor_note="0: uniform random policy, 18.0 (measured: 200 episodes, "
            "env seeds 0-199); 1: 3500, a round scale near SAC's published "
            "Hopper scores after 1M steps, fixed before the study",
            agent=agents.sac_agent(hiddens=(256, 256), lr=3e-4, learning_starts=5000),
            capacity=100_000,
            requires="mujoco",
            algo="sac",
        ),
        # The paper-setting study (results/ners_paper_settings/PLAN.md): SAC on
        # MuJoCo and data-efficient Rainbow on Atari 100k.
        _mujoco_task(
            "hopper_100k",
            "Hopper-v5",
            random_return=18.0,
            max_return=3500.0,
            max_note="a round scale near SAC's published Hopper scores after 1M "
            "steps, fixed before the study",
        ),
        _mujoco_task(
            "halfcheetah_100k",
            "HalfCheetah-v5",
            random_return=-282.7,
            max_return=12000.0,
            max_note="a round scale near SAC's published HalfCheetah scores after "
            "1M steps, fixed before the study",
        ),
        _mujoco_task(
            "walker2d_100k",
            "Walker2d-v5",
            random_return=2.1,
            max_return=5000.0,
            max_note="a round scale near SAC's published Walker2d scores after 1M "
            "steps, fixed before the study",
        ),
        # TD3 on the same robots, with the SAC tasks' anchors (one scale for
        # both agents; results/td3_lap/PLAN.md).
        _mujoco_task(
            "td3_hopper_100k",
            "Hopper-v5",
            random_return=18.0,
            max_return=3500.0,
            max_note="hopper_100k's, fixed before the study",
            algo="td3",
        ),
        _mujoco_task(
            "td3_halfcheetah_100k",
            "HalfCheetah-v5",
            random_return=-282.7,
            max_return=12000.0,
            max_note="halfcheetah_100k's, fixed before the study",
            algo="td3",
        ),
        _mujoco_task(
            "td3_walker2d_100k",
            "Walker2d-v5",
            random_return=2.1,
            max_return=5000.0,
            max_note="walker2d_100k's, fixed before the study",
            algo="td3",
        ),
        _atari_task(
            "ms_pacman_100k", "MsPacman", random_return=307.3, human_return=6951.6
        ),
        _atari_task("alien_100k", "Alien", random_return=227.8, human_return=7127.7),
        _atari_task("qbert_100k", "Qbert", random_return=163.9, human_return=13455.0),
    )
}

# The default `--tasks`: the DQN/Rainbow suite (results/sample_efficiency).
SUITE = ("cartpole", "acrobot", "minatar_breakout", "minatar_space_invaders")
# The paper-setting study (results/ners_paper_settings).
MUJOCO_SUITE = ("hopper_100k", "halfcheetah_100k", "walker2d_100k")
ATARI_SUITE = ("ms_pacman_100k", "alien_100k", "qbert_100k")

# ---------------------------------------------------------------------------
# Arms
# ---------------------------------------------------------------------------

FAST_BUFFER = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
NERS_BUFFER = "rllib_ners.NERSEpisodeReplayBuffer"


@dataclasses.dataclass(frozen=True)
class Arm:
    """How an arm changes the task's agent: only the replay differs.

    Attributes:
        algo: "rainbow" (`RainbowDQNConfig` with our fast buffer) or "ners"
            (`NERSDQNConfig`: the same module and learner plus the sampler).
        alpha: priority exponent, or None for the task's `per_alpha`.
        ners_settings: for "ners": the `.ners(...)` settings, written out in full
            so that a later change of the defaults does not change the arm.
        reference: for "ners": apply `ners_reference(config)` (the reference
            code's semantics, incl. 5 greedy evaluation episodes every 1000 env
            steps as the replay reward, their env steps counted separately).
        beta: None (the task's `beta`, annealed to 1 over the budget) or a
            constant importance-sampling exponent (0: no importance weights).
        min_priority: the buffer's priority floor (None: its default; LAP: 1).
        loss: None (the agent's) or "huber": the critics' (SAC, TD3) or the
            Q-network's (DQN) Huber loss with threshold 1, as LAP uses it.
        sampler: None (the buffer's default: uniform or PER by `alpha`) or
            our fast buffer's replay method, "relo" or "laber" (for "rainbow"
            arms: `RainbowDQNConfig`, `NERSSACConfig` and `TD3Config` have
            Learners that compute their feedback).
        sampler_settings: for a `sampler`: its `replay_buffer_config`
            settings, written out (`relo_epsilon`, `laber_m`, ...). ReLo's
            `relo_transform`, unless given, follows the agent's loss
            (`sampler_presets.relo_transform_for`: "exp" for C51, else "clip").
    """

    name: str
    algo: str
    alpha: Optional[float] = None
    ners_settings: Optional[dict] = None
    reference: bool = False
    description: str = ""
    beta: Optional[float] = None
    min_priority: Optional[float] = None
    loss: Optional[str] = None
    sampler: Optional[str] = None
    sampler_settings: Optional[dict] = None

    def __post_init__(self):
        """Checks the declaration when it is made (see `Task.__post_init__`)."""
        _check_name("arm", self.name)
        owner = f"arm {self.name!r}"
        _check_choice(owner, "algo", self.algo, ("rainbow", "ners"))
        if self.alpha is not None and not (
            isinstance(self.alpha, (int, float)) and self.alpha >= 0
        ):
            raise DeclarationError(
                f"{owner}: `alpha` must be None (the task's `per_alpha`) or >= 0, "
                f"got {self.alpha!r}"
            )
        if self.ners_settings is not None and not isinstance(self.ners_settings, dict):
            raise DeclarationError(
                f"{owner}: `ners_settings` must be a dict of `.ners()` settings, "
                f"got {self.ners_settings!r}"
            )
        if self.beta is not None and not (
            isinstance(self.beta, (int, float)) and 0 <= self.beta <= 1
        ):
            raise DeclarationError(
                f"{owner}: `beta` must be None (the task's, annealed) or in "
                f"[0, 1], got {self.beta!r}"
            )
        if self.min_priority is not None and not (
            isinstance(self.min_priority, (int, float)) and self.min_priority > 0
        ):
            raise DeclarationError(
                f"{owner}: `min_priority` must be None or > 0, got "
                f"{self.min_priority!r}"
            )
        if self.loss is not None:
            _check_choice(owner, "loss", self.loss, ("huber",))
        if self.algo != "ners" and (self.ners_settings or self.reference):
            raise DeclarationError(
                f"{owner}: `ners_settings` and `reference` need algo='ners'; "
                f"with algo={self.algo!r} the arm has no sampler"
            )
        self._check_sampler(owner)

    def _check_sampler(self, owner: str) -> None:
        """`sampler` a replay method of our fast buffer, on a "rainbow" arm;
        `sampler_settings` that method's settings only."""
        from rllib_ners.algorithms.common.config.sampler_presets import (
            METHOD_SETTINGS,
            REPLAY_METHODS,
        )

        if self.sampler is None:
            if self.sampler_settings:
                raise DeclarationError(
                    f"{owner}: `sampler_settings` need a `sampler` "
                    f"({', '.join(map(repr, REPLAY_METHODS))})"
                )
            return
        _check_choice(owner, "sampler", self.sampler, REPLAY_METHODS)
        if self.algo != "rainbow":
            raise DeclarationError(
                f"{owner}: `sampler` needs algo='rainbow' (our fast buffer); the "
                f"NERS buffer's sampler is NERS"
            )
        settings = self.sampler_settings or {}
        if not isinstance(settings, dict):
            raise DeclarationError(
                f"{owner}: `sampler_settings` must be a dict of the sampler's "
                f"settings, got {settings!r}"
            )
        unknown = sorted(set(settings) - set(METHOD_SETTINGS[self.sampler]))
        if unknown:
            raise DeclarationError(
                f"{owner}: `sampler_settings` of sampler={self.sampler!r} take "
                f"{', '.join(METHOD_SETTINGS[self.sampler])}, got {unknown}"
            )


ARMS: Dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "uniform",
            "rainbow",
            alpha=0.0,
            description="our fast buffer, alpha 0: uniform replay",
        ),
        Arm(
            "per",
            "rainbow",
            description="our fast buffer, alpha = the task's per_alpha: PER",
        ),
        Arm(
            "ners_reference",
            "ners",
            ners_settings={},
            reference=True,
            description="NERS-DQN + ners_reference(config): the paper's semantics",
        ),
        Arm(
            "ners",
            "ners",
            # The recommended variant, written out so that a later change of
            # the `.ners()` defaults does not silently change this arm. Chosen
            # on tuning seeds only, never on study seeds: the replay-reward
            # oracle's seeds 0-2 (tests/sampler_oracle.py) and, for the
            # bound on the learned log-correction, Acrobot seeds 0-1.
            ners_settings={
                "encoder": "separate",
                "objective": "log_prob",
                "parameterization": "per_residual",
                "max_log_correction": 5.0,
                "baseline": "ema",
                "baseline_decay": 0.9,
                "linear_skip": True,
                "linear_skip_lr": 3e-2,
                "lr": 1e-4,
                "train_size": 256,
                "train_draw": "uniform_set",
                "normalizer_size": 1024,
                "feature_normalization": "running",
                "replay_reward_mode": "train_return",
                "min_episodes_per_update": 1,
            },
            description="NERS-DQN with the recommended variant",
        ),
        Arm(
            "lap",
            "rainbow",
            alpha=0.4,
            beta=0.0,
            min_priority=1.0,
            loss="huber",
            description="LAP (Fujimoto et al. 2020): priority max(|delta|, 1)^0.4, "
            "no importance weights, Huber loss",
        ),
        # ReLo and LaBER (issue 65): the papers' recommended settings, written
        # out (`sampler_presets` holds the presets' same values; a test checks
        # they agree).
        Arm(
            "relo",
            "rainbow",
            alpha=0.5,
            sampler="relo",
            sampler_settings={"relo_epsilon": 1e-5},
            description="ReLo (Sujit et al. 2023): PER with alpha 0.5 and the "
            "task's beta annealed to 1, priority from the reducible loss "
            "L_online - L_target: max(ReLo, 0) + 1e-5, or ReLo + 1 if ReLo >= 0 "
            "else exp(ReLo) for C51",
        ),
        Arm(
            "laber",
            "rainbow",
            alpha=0.0,
            beta=0.0,
            sampler="laber",
            sampler_settings={"laber_m": 4, "laber_weights": "mean"},
            description="LaBER (Lahire et al. 2022): a uniform large batch of "
            "4 x the batch, sub-sampled by the Learner with LaBER-mean weights",
        ),
    )
}
# The recommended variant with encoder="module": the sampler reads the
# Q-network's (detached) encoder features instead of training a CNN or MLP of
# its own; cheaper on images (benchmarks/study_costs.py --arms ners_module). Not
# in the study's default arms.
ARMS["ners_module"] = dataclasses.replace(
    ARMS["ners"],
    name="ners_module",
    ners_settings={**ARMS["ners"].ners_settings, "encoder": "module"},
    description="NERS-DQN with the recommended variant and encoder='module'",
)
# What the study runs unless told otherwise (`--arms`).
STUDY_ARMS = ("uniform", "per", "ners_reference", "ners")


# ---------------------------------------------------------------------------
# Your own tasks and arms
# ---------------------------------------------------------------------------


def in_declaration_order(arm_names) -> List[str]:
    """Arm names in the order `ARMS` declares them (as reports list arms),
    undeclared ones (whose declarations file was not loaded) after them."""
    names = set(arm_names)
    return [arm for arm in ARMS if arm in names] + sorted(names - set(ARMS))


def load_declarations(path) -> None:
    """Adds the tasks and arms a Python file declares to `TASKS` and `ARMS`.

    The file defines `TASKS` and/or `ARMS`, lists of `Task` and `Arm` (names
    must not clash with the built-in ones), e.g.::

        from rllib_ners.study import Arm, Task

        def my_agent(config):  # the same for every arm
            return config.training(lr=5e-4, train_batch_size_per_learner=32)

        TASKS = [
            Task(name="lunar", env="LunarLander-v3", budget=100_000,
                 eval_every=10_000, eval_episodes=10, eval_max_steps=1000,
                 log_every=1000, random_return=-180.0, max_return=200.0,
                 anchor_note="random play; the env's 'solved' return",
                 agent=my_agent, capacity=100_000)
        ]

    Child processes of `rllib-ners study run` load the same files.
    """
    import importlib.util
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"--declarations: no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"_study_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except DeclarationError as error:
        raise SystemExit(f"{path}: {error}") from error
    for kind, registry, cls in (("TASKS", TASKS, Task), ("ARMS", ARMS, Arm)):
        for item in getattr(module, kind, []):
            if not isinstance(item, cls):
                raise SystemExit(
                    f"{path}: {kind} must hold {cls.__name__} objects, got "
                    f"{type(item).__name__}"
                )
            if item.name in registry and registry[item.name] is not item:
                raise SystemExit(
                    f"{path}: {cls.__name__.lower()} {item.name!r} is declared "
                    f"already (built in or in another file); choose another name"
                )
            registry[item.name] = item
