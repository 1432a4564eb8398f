"""Our training loop against Stable-Baselines3, stock RLlib and the bare math.

Every arm of a suite does the same work: the same networks (sizes and
activations), batch, learning rate, updates per env step, learning start and
one env in one process with one torch thread; the arms take turns
(`harness.measure`). Printed per arm: env steps/s (wall clock and per CPU
second), updates/s, the ratios to Stable-Baselines3 and to the floor (the same
network updates in a bare PyTorch loop on random batches plus bare env steps
with random actions: `baselines.py`), each arm's CPU time per env step against
its PER arm's (`per`'s; a floor arm's against `floor`'s), and for our training
loop's arms the ms per env step of each loop section and the NERS sampler's
steps.

Suites
------
sac      Hopper-v5; SAC's usual settings: actor and twin critics 256-256 ReLU
         MLPs (critics on [s, a]), batch 256, Adam 3e-4, tau 0.005, one update
         per env step from step 1000, 1M-transition buffer.
         sb3      Stable-Baselines3 SAC
         ners     NERSSACConfig, the NERS buffer (alpha 0.6, beta 0.4)
         per      NERSSACConfig, our prioritised buffer (alpha 0.6, beta 0.4)
         uniform  NERSSACConfig, our buffer with alpha 0
         lap      NERSSACConfig, LAP (alpha 0.4, min_priority 1, beta 0;
                  Huber critics)
         relo     NERSSACConfig, per's buffer with ReLo's sampler (alpha 0.5,
                  clip, epsilon 1e-5; `mujoco_sac(replay="relo")`)
         laber    NERSSACConfig, per's buffer with LaBER's sampler (m 4,
                  LaBER-mean, alpha 0, beta 0; `mujoco_sac(replay="laber")`)
         rllib    stock RLlib SACConfig with its PrioritizedEpisodeReplayBuffer
                  and its default module (256-256, but multi-stream critics:
                  RLlib 2.60 builds no [s, a] critic)
         uniform-vec8  as uniform, 8 envs per EnvRunner (8 updates per vector
                  step: the same replay ratio per env step)
         floor    bare SAC updates + bare env steps
         floor-laber  bare LaBER SAC updates (m 4) + bare env steps: what
                  LaBER's passes cost on their own
dqn      CartPole-v1; DQN with a 256-256 tanh Q-network, batch 32, Adam 5e-4,
         one update per 4 env steps from step 1000, epsilon 1 -> 0.02 over 10k
         env steps, target sync every 500 env steps, no dueling, no double Q,
         1-step targets (Stable-Baselines3's DQN has neither).
         sb3      Stable-Baselines3 DQN
         ners     NERSDQNConfig (NERS buffer, alpha 0.6, beta 0.4)
         per      RainbowDQNConfig with our prioritised buffer
         uniform  RainbowDQNConfig with our buffer, alpha 0
         relo     as per, with ReLo's sampler (alpha 0.5, clip, epsilon 1e-5)
         laber    as per, with LaBER's sampler (m 4, LaBER-mean, alpha 0, beta 0)
         rllib    stock RLlib DQNConfig with its PrioritizedEpisodeReplayBuffer
         per-vec8 as per, 8 envs per EnvRunner (2 updates per vector step)
         floor    bare DQN updates + bare env steps
td3      Hopper-v5; the TD3 paper's settings: actor and twin critics 256-256
         ReLU MLPs (critics on [s, a]), batch 256, Adam 3e-4, tau 0.005,
         target noise 0.2 clipped at 0.5, policy delay 2, exploration noise
         0.1, one update per env step from step 1000, 1M-transition buffer.
         sb3      Stable-Baselines3 TD3
         ners     TD3Config with the NERS buffer (alpha 0.6, beta 0.4)
         per      TD3Config, our prioritised buffer (alpha 0.6, beta 0.4)
         lap      TD3Config, LAP (our buffer, alpha 0.4, min_priority 1,
                  beta 0; Huber loss)
         uniform  TD3Config, our buffer with alpha 0
         relo     TD3Config, per's buffer with ReLo's sampler (alpha 0.5, clip,
                  epsilon 1e-5; `td3_config(replay="relo")`)
         laber    TD3Config, per's buffer with LaBER's sampler (m 4, LaBER-mean,
                  alpha 0, beta 0; `td3_config(replay="laber")`)
         floor    bare TD3 updates + bare env steps
         floor-laber  bare LaBER TD3 updates (m 4) + bare env steps
atari    MsPacman, data-efficient Rainbow as the NERS reference runs it (one
         update of 32 per env step, from step 1600); Stable-Baselines3 has no
         Rainbow.
         ners     NERS-Rainbow;  per  PER-Rainbow
         floor    the same RLModule's updates (the Learner's own `_update`: its
                  forward pass, C51 loss, backward and Adam) on random batches,
                  plus bare env steps

How to run
----------
    pip install -e ".[bench]"
    python benchmarks/peers.py --suite sac
    python benchmarks/peers.py --suite dqn --rounds 5 --steps 2000
    python benchmarks/peers.py --suite atari --arms ners per floor
    python benchmarks/peers.py --suite td3
    python benchmarks/peers.py --suite sac --arms per relo laber   # their costs
"""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

from baselines import (
    ATARI_BATCH,
    ATARI_GAME,
    ATARI_LEARNING_STARTS,
    DQN_BATCH,
    DQN_ENV,
    DQN_EPSILON,
    DQN_LEARNING_STARTS,
    DQN_TARGET_UPDATE,
    DQN_TRAIN_EVERY,
    SAC_BATCH,
    SAC_ENV,
    SAC_LEARNING_STARTS,
    DeviceFloorArm,
    FloorArm,
    SB3Arm,
    atari_floor_update,
    dqn_floor_update,
    graph_captured,
    on_device,
    sac_floor_update,
    sb3_dqn,
    sb3_sac,
    sb3_td3,
    td3_floor_update,
)
from harness import (
    Arm,
    chosen_arms,
    cpu_model,
    loop_sections_into,
    measure,
    ratio,
    ray_in_this_process,
    report_rates,
    suite_parser,
    time_sampler_parts,
    warmed_up,
)

SUITES = {
    "sac": (
        "sb3",
        "ners",
        "per",
        "uniform",
        "rllib",
        "uniform-vec8",
        "floor",
        "lap",
        "relo",
        "laber",
        "floor-laber",
    ),
    "dqn": (
        "sb3",
        "ners",
        "per",
        "uniform",
        "rllib",
        "per-vec8",
        "floor",
        "relo",
        "laber",
    ),
    "atari": ("ners", "per", "floor"),
    "td3": (
        "sb3",
        "ners",
        "per",
        "lap",
        "uniform",
        "floor",
        "relo",
        "laber",
        "floor-laber",
    ),
}
DEFAULT_STEPS = {"sac": 300, "dqn": 2000, "atari": 400, "td3": 300}


# ------------------------------------------------------------------ arms
class RLlibArm(Arm):
    """An RLlib algorithm; one chunk is one `train()` iteration. It warms up
    until the config's own learning start has passed (the first iteration with
    updates, then one more)."""

    def __init__(self, config, steps: int, batch_size: int):
        self.config = (
            config.env_runners(num_env_runners=0)
            .reporting(
                min_sample_timesteps_per_iteration=steps,
                min_time_s_per_iteration=0,
            )
            .debugging(seed=0)
        )
        self.batch_size = batch_size
        self.algo = None
        self.counts = (0, 0)
        # Our training loop's section timers over the measured rounds.
        self.loop_times: Dict[str, List[float]] = {}

    def build(self):
        """The algorithm (subclasses change it before it trains)."""
        return self.config.build_algo()

    def warm_up(self) -> None:
        self.algo = self.build()
        while self._read(self.algo.train())[1] == 0:
            pass
        self._read(self.algo.train())
        self.sampler_times = time_sampler_parts(self.algo)
        self.measured_from = self.counts[0]

    def train_to(self, env_steps: int) -> None:
        """Builds the algorithm where not yet built, then trains it (untimed)
        until it has sampled `env_steps` env steps."""
        if self.algo is None:
            self.algo = self.build()
        while self.counts[0] < env_steps:
            self._read(self.algo.train())

    def _read(self, result) -> Tuple[int, int]:
        from ray.rllib.utils.metrics import (
            ALL_MODULES,
            ENV_RUNNER_RESULTS,
            LEARNER_RESULTS,
            NUM_ENV_STEPS_SAMPLED_LIFETIME,
            NUM_ENV_STEPS_TRAINED_LIFETIME,
        )

        env_steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
        trained = int(
            result.get(LEARNER_RESULTS, {})
            .get(ALL_MODULES, {})
            .get(NUM_ENV_STEPS_TRAINED_LIFETIME, 0)
        )
        before, self.counts = self.counts, (env_steps, trained // self.batch_size)
        return self.counts[0] - before[0], self.counts[1] - before[1]

    def run(self, steps: int) -> Tuple[int, int]:
        with loop_sections_into(self.algo, self.loop_times):
            return self._read(self.algo.train())

    def close(self) -> None:
        if self.algo is not None:
            self.algo.stop()


class HostFramesArm(RLlibArm):
    """The algorithm without the GPU copy of its buffer's frames: sampled
    frame stacks built on the host and copied to the Learner, as before
    `device_frames`."""

    def build(self):
        algo = super().build()
        algo.local_replay_buffer.device_frames = None
        return algo


# ------------------------------------------------------------- suites
def sac_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    """The sac suite's arms; also `gpu.py`'s, whose names add a device and
    switches (`baselines.on_device`)."""
    import gymnasium as gym
    from ray.rllib.algorithms.sac import SACConfig

    from rllib_ners.algorithms.ners_sac.presets import sac_config

    env = gym.make(SAC_ENV)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    arms: Dict[str, Arm] = {}
    for name in names:
        kind = name.split("-")[0]
        if kind == "sb3":
            device = "cuda" if "-gpu" in name else "cpu"
            arms[name] = SB3Arm(
                lambda d=device: sb3_sac(d), SAC_LEARNING_STARTS, SAC_BATCH
            )
        elif kind == "floor":
            arm = sac_floor_arm(name, obs_dim, act_dim)
            if arm is not None:
                arms[name] = arm
        elif name == "rllib":
            config = sac_config(
                SAC_ENV,
                replay="per",
                learning_starts=SAC_LEARNING_STARTS,
                config=SACConfig(),
            ).training(
                replay_buffer_config={
                    "type": "PrioritizedEpisodeReplayBuffer",
                    "capacity": 1_000_000,
                    "alpha": 0.6,
                    "beta": 0.4,
                }
            )
            arms[name] = RLlibArm(config, steps, SAC_BATCH)
        else:
            config = sac_config(
                SAC_ENV, replay=kind, learning_starts=SAC_LEARNING_STARTS
            )
            vec = name.partition("-vec")[2]
            if vec:
                config = config.env_runners(num_envs_per_env_runner=int(vec))
            arms[name] = RLlibArm(on_device(config, name), steps, SAC_BATCH)
    return arms


def sac_floor_arm(name: str, obs_dim: int, act_dim: int):
    """The bare SAC updates on the CPU (`floor`) or on the GPU (`floor-gpu`),
    there eager or captured in a CUDA graph (`floor-gpu-graph`); None where
    the capture failed (reported: the other arms still run)."""
    import gymnasium as gym

    def make_env():
        return gym.make(SAC_ENV)

    if "-gpu" not in name:
        update = sac_floor_update(obs_dim, act_dim, laber_m=_floor_laber_m(name))
        return FloorArm(make_env, update, every=1)
    graph = name.endswith("graph")
    update = sac_floor_update(obs_dim, act_dim, device="cuda", capturable=graph)
    if graph:
        try:
            update = graph_captured(update)
        except Exception as error:
            print(f"{name} left out: graph capture failed: {error!r}")
            return None
    return DeviceFloorArm(make_env, update, every=1)


def _dqn_config(config, buffer: dict):
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return (
        config.environment(DQN_ENV)
        .env_runners(rollout_fragment_length=DQN_TRAIN_EVERY)
        .training(
            lr=5e-4,
            gamma=0.99,
            train_batch_size_per_learner=DQN_BATCH,
            training_intensity=DQN_BATCH / DQN_TRAIN_EVERY,
            n_step=1,
            double_q=False,
            dueling=False,
            epsilon=DQN_EPSILON,
            target_network_update_freq=DQN_TARGET_UPDATE,
            num_steps_sampled_before_learning_starts=DQN_LEARNING_STARTS,
            replay_buffer_config=buffer,
        )
        .rl_module(
            model_config=DefaultModelConfig(
                fcnet_hiddens=[256],
                fcnet_activation="tanh",
                head_fcnet_hiddens=[256],
                head_fcnet_activation="tanh",
            )
        )
    )


def _sampler_settings() -> Dict[str, dict]:
    from rllib_ners.algorithms.common.config.sampler_presets import (
        laber_buffer_settings,
        relo_buffer_settings,
    )

    return {"relo": relo_buffer_settings("clip"), "laber": laber_buffer_settings()}


_SAMPLER_SETTINGS = _sampler_settings()


def _floor_laber_m(name: str) -> int:
    """The large batch's factor of a floor arm: LaBER's (`floor-laber`) or 1."""
    return _SAMPLER_SETTINGS["laber"]["laber_m"] if name == "floor-laber" else 1


def cost_against_per(median: Dict[str, dict]):
    """The rates table's last column: an arm's CPU time per env step against
    its PER arm's (`floor`'s for a floor arm, else `per`'s), where both ran."""

    def cell(name: str) -> str:
        reference = "floor" if name.startswith("floor") else "per"
        if name == reference or reference not in median:
            return "-"
        return ratio(median[reference]["cpu"], median[name]["cpu"])

    return ("CPU time per env step vs per", cell)


def dqn_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    import gymnasium as gym
    from ray.rllib.algorithms.dqn import DQNConfig

    from rllib_ners import NERSDQNConfig, RainbowDQNConfig

    fast = "rllib_ners.FastPrioritizedEpisodeReplayBuffer"
    arms: Dict[str, Arm] = {}
    for name in names:
        if name == "sb3":
            arms[name] = SB3Arm(sb3_dqn, DQN_LEARNING_STARTS, DQN_BATCH)
            continue
        if name == "floor":
            env = gym.make(DQN_ENV)
            update = dqn_floor_update(
                env.observation_space.shape[0], env.action_space.n
            )
            arms[name] = FloorArm(
                lambda: gym.make(DQN_ENV), update, every=DQN_TRAIN_EVERY
            )
            continue
        buffer = {"capacity": 50_000, "alpha": 0.6, "beta": 0.4}
        if name == "ners":
            config = _dqn_config(NERSDQNConfig(), buffer)
        elif name == "rllib":
            buffer["type"] = "PrioritizedEpisodeReplayBuffer"
            config = _dqn_config(DQNConfig(), buffer)
        else:
            replay, _, vec = name.partition("-vec")
            buffer.update(type=fast, alpha=0.6 if replay == "per" else 0.0)
            # ReLo and LaBER: per's buffer with the method's sampler settings
            # (scalar Q-values: ReLo's "clip" map).
            buffer.update(_SAMPLER_SETTINGS.get(replay, {}))
            config = _dqn_config(RainbowDQNConfig(), buffer)
            if vec:
                config = config.env_runners(
                    num_envs_per_env_runner=int(vec),
                    rollout_fragment_length=max(1, DQN_TRAIN_EVERY // int(vec)),
                )
        arms[name] = RLlibArm(config, steps, DQN_BATCH)
    return arms


def td3_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    import gymnasium as gym

    from rllib_ners.algorithms.td3.presets import td3_config

    arms: Dict[str, Arm] = {}
    for name in names:
        if name == "sb3":
            arms[name] = SB3Arm(sb3_td3, SAC_LEARNING_STARTS, SAC_BATCH)
        elif name.startswith("floor"):
            env = gym.make(SAC_ENV)
            update = td3_floor_update(
                env.observation_space.shape[0],
                env.action_space.shape[0],
                laber_m=_floor_laber_m(name),
            )
            arms[name] = FloorArm(lambda: gym.make(SAC_ENV), update, every=1)
        else:
            config = td3_config(
                SAC_ENV, replay=name, learning_starts=SAC_LEARNING_STARTS
            )
            arms[name] = RLlibArm(config, steps, SAC_BATCH)
    return arms


def atari_arms(names: List[str], steps: int) -> Dict[str, Arm]:
    """The atari suite's arms; also `gpu.py`'s, whose names add a device and
    switches (`baselines.on_device`; `-hostframes`: `HostFramesArm`)."""
    from rllib_ners.algorithms.rainbow.presets import atari_data_efficient_rainbow
    from rllib_ners.env.atari import make_atari_env

    arms: Dict[str, Arm] = {}
    for name in names:
        kind = name.split("-")[0]
        if kind == "floor":
            config = atari_data_efficient_rainbow(ATARI_GAME, replay="per")
            floor_class = DeviceFloorArm if "-gpu" in name else FloorArm
            arms[name] = floor_class(
                lambda: make_atari_env({"game": ATARI_GAME}),
                atari_floor_update(on_device(config, name), ATARI_GAME, ATARI_BATCH),
                every=1,
            )
        else:
            config = atari_data_efficient_rainbow(
                ATARI_GAME, replay=kind, learning_starts=ATARI_LEARNING_STARTS
            )
            arm_class = HostFramesArm if name.endswith("-hostframes") else RLlibArm
            arms[name] = arm_class(on_device(config, name), steps, ATARI_BATCH)
    return arms


BUILDERS = {
    "sac": sac_arms,
    "dqn": dqn_arms,
    "atari": atari_arms,
    "td3": td3_arms,
}


# -------------------------------------------------------------- main
def main(argv=None) -> int:
    parser = suite_parser(__doc__, SUITES)
    args = parser.parse_args(argv)
    args.steps = args.steps or DEFAULT_STEPS[args.suite]
    names = chosen_arms(parser, args, SUITES)
    with ray_in_this_process():
        load_before = os.getloadavg()[0]
        arms = BUILDERS[args.suite](names, args.steps)
        with warmed_up(arms):
            median = measure(arms, args.rounds, args.steps)
    machine = f"{cpu_model()}, {os.cpu_count()} cores, 1 torch thread"
    references = {"sb3": "SB3", "floor": "floor"}
    report_rates(
        args.suite,
        median,
        args,
        machine,
        load_before,
        arms,
        references=references,
        extra=cost_against_per(median),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
