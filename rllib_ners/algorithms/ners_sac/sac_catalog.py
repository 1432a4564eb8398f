"""The catalog of `SACTorchRLModule`: SAC's critic on the concatenated (s, a).

RLlib 2.60's `SACCatalog` builds each continuous-action critic as a
multi-stream encoder: an MLP on the observation, another on the action, then
fusion layers over their concatenated outputs and an output layer (for
`fcnet_hiddens=[256, 256]`: about 660k multiply-adds per transition and critic).
SAC as Haarnoja et al. (2018) define it, and Stable-Baselines3 and CleanRL run
it, uses one MLP on `[s, a]` (70k for the same hiddens), ten times less work
for each of the six critic passes of an update.

`SACCatalog` with one change: for Box actions the Q encoder is the policy's
MLP encoder (same `fcnet_hiddens`, activation and initializers) taking the
observation and the action concatenated. The policy network, the heads and
everything for Discrete actions are RLlib's.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.sac.sac_catalog import SACCatalog
from ray.rllib.core.models.base import Encoder
from ray.rllib.core.models.configs import MLPEncoderConfig
from ray.rllib.utils.annotations import override

from rllib_ners.seam.rl_module import catalog_encoder_config


class SACConcatCriticCatalog(SACCatalog):
    """`SACCatalog` whose continuous critics are MLPs on `[s, a]`."""

    @override(SACCatalog)
    def _build_qf_encoder_continuous(self, framework: str) -> Encoder:
        policy_encoder_config = catalog_encoder_config(self)
        if not isinstance(policy_encoder_config, MLPEncoderConfig) or not (
            isinstance(self.observation_space, gym.spaces.Box)
            and len(self.observation_space.shape) == 1
        ):
            raise ValueError(
                f"SACTorchRLModule's critic takes vector observations, got "
                f"observation_space={self.observation_space}. For image "
                f"observations use RLlib's DefaultSACTorchRLModule: "
                f"config.rl_module(rl_module_spec=RLModuleSpec(module_class="
                f"DefaultSACTorchRLModule))."
            )
        input_dim = int(self.observation_space.shape[0]) + int(
            np.prod(self.action_space.shape)
        )
        self.qf_encoder_config = dataclasses.replace(
            policy_encoder_config, input_dims=[input_dim]
        )
        return self.qf_encoder_config.build(framework=framework)
