"""rllib_ners: the Neural Experience Replay Sampler (NERS) for Ray RLlib 2.60.

Importing the package registers its algorithms with Ray Tune under "NERS-DQN",
"NERS-SAC", "RainbowDQN", "ACER", "TD3" and "DDPG" (so `tune.Tuner("NERS-DQN",
...)` works) and
the Atari env creator under "rllib_ners.atari"; it has no other side effects.
"""

from rllib_ners.algorithms.acer import ACER, ACERConfig
from rllib_ners.algorithms.enable_replay import enable_replay
from rllib_ners.algorithms.ners_dqn import (
    NERSDQN,
    NERSCallback,
    NERSDQNConfig,
    enable_ners,
)
from rllib_ners.algorithms.ners_sac import NERSSAC, NERSSACConfig
from rllib_ners.algorithms.rainbow import (
    NoisyLinear,
    RainbowCatalog,
    RainbowDQN,
    RainbowDQNConfig,
    RainbowTorchRLModule,
)
from rllib_ners.algorithms.td3 import DDPG, TD3, DDPGConfig, TD3Config
from rllib_ners.env.atari_rllib import register_atari_env, with_atari
from rllib_ners.ners import NERSScorer, NERSSettings
from rllib_ners.replay_buffers import (
    FastMultiAgentPrioritizedEpisodeReplayBuffer,
    FastPrioritizedEpisodeReplayBuffer,
    NERSEpisodeReplayBuffer,
    with_replay_buffer,
)
from rllib_ners.seam.ray_runtime import run_after_every_ray_init

__version__ = "0.1.0"

__all__ = [
    "ACER",
    "ACERConfig",
    "DDPG",
    "DDPGConfig",
    "FastMultiAgentPrioritizedEpisodeReplayBuffer",
    "FastPrioritizedEpisodeReplayBuffer",
    "NERSCallback",
    "NERSDQN",
    "NERSDQNConfig",
    "NERSEpisodeReplayBuffer",
    "NERSSAC",
    "NERSSACConfig",
    "NERSScorer",
    "NERSSettings",
    "NoisyLinear",
    "RainbowCatalog",
    "RainbowDQN",
    "RainbowDQNConfig",
    "RainbowTorchRLModule",
    "TD3",
    "TD3Config",
    "__version__",
    "enable_ners",
    "enable_replay",
    "register_with_tune",
    "with_atari",
    "with_replay_buffer",
]


# The names Tune knows this package's algorithms by.
TUNE_NAMES = {
    "NERS-DQN": NERSDQN,
    "NERS-SAC": NERSSAC,
    "RainbowDQN": RainbowDQN,
    "ACER": ACER,
    "TD3": TD3,
    "DDPG": DDPG,
}


def register_with_tune() -> None:
    """Registers this package's algorithms under their `TUNE_NAMES` and the
    Atari env creator with Tune.

    Runs on import and after every `ray.init()`. Tune's registry forgets names
    at `ray.shutdown()`; code that looks them up while Ray is down after a
    shutdown (e.g. `get_trainable_cls`) calls this first, as RLlib re-registers
    its own algorithms on lookup.
    """
    from ray.tune.registry import register_trainable

    for name, algorithm in TUNE_NAMES.items():
        register_trainable(name, algorithm)
    register_atari_env()


register_with_tune()
# Tune forgets import-time registrations at ray.shutdown(); register again
# after every ray.init().
run_after_every_ray_init(register_with_tune)
