"""The catalog of TD3's RLModule: a deterministic actor and critics on `[s, a]`.

Fujimoto, van Hoof & Meger, "Addressing Function Approximation Error in
Actor-Critic Methods", ICML 2018 (TD3), and their DDPG baseline: the actor
`pi(s)` is an MLP whose tanh output is the action in `[-1, 1]` (RLlib's
`normalize_actions` maps it onto the env's bounds); each critic `Q(s, a)` is an
MLP on the concatenated observation and action. Hidden layers, their
activation and initialisation come from `model_config` (`fcnet_hiddens`,
`fcnet_activation`, ...; by default the TD3 paper's 256-256 ReLU, PyTorch's default
initialisation).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from ray.rllib.core.models.base import Model
from ray.rllib.core.models.catalog import Catalog
from ray.rllib.core.models.configs import MLPHeadConfig

from rllib_ners.seam.rl_module import catalog_model_config

# The actor's output layer squashes into [-1, 1].
ACTOR_OUTPUT_ACTIVATION = "tanh"


class TD3Catalog(Catalog):
    """Builds TD3's actor and critics (see the module docstring)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        model_config_dict: dict,
        view_requirements=None,
    ):
        if not (
            isinstance(observation_space, gym.spaces.Box)
            and len(observation_space.shape) == 1
        ):
            raise ValueError(
                f"TD3's networks take vector observations, got "
                f"observation_space={observation_space}; flatten image or nested "
                f"observations with an env wrapper."
            )
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(
                f"TD3 acts in a Box action space, got action_space={action_space}."
            )
        super().__init__(
            observation_space=observation_space,
            action_space=action_space,
            model_config_dict=model_config_dict,
        )
        self.check_model_config(catalog_model_config(self))
        self.observation_dim = int(observation_space.shape[0])
        self.action_dim = int(np.prod(action_space.shape))

    @staticmethod
    def check_model_config(cfg: dict) -> None:
        """Raises ValueError for model_config keys the networks would ignore:
        each is one MLP built from the `fcnet_*` keys, not recurrent."""
        heads = list(cfg.get("head_fcnet_hiddens") or [])
        if heads:
            raise ValueError(
                f"model_config['head_fcnet_hiddens']={heads}: TD3's and DDPG's "
                f"actor and critics are one MLP each, built from fcnet_hiddens, "
                f"and have no head layers. Put every hidden layer into "
                f"fcnet_hiddens and remove head_fcnet_hiddens."
            )
        if cfg.get("use_lstm"):
            raise ValueError(
                "model_config['use_lstm']=True: TD3's and DDPG's networks are not "
                "recurrent. Remove use_lstm from model_config."
            )

    def _mlp(self, input_dim: int, output_dim: int, output_activation) -> MLPHeadConfig:
        # RLlib's DefaultModelConfig under the module's model_config: every
        # key is there (TD3Config's model_config includes ReLU).
        config = catalog_model_config(self)
        return MLPHeadConfig(
            input_dims=[input_dim],
            hidden_layer_dims=list(config["fcnet_hiddens"]),
            hidden_layer_activation=config["fcnet_activation"],
            hidden_layer_use_layernorm=config["fcnet_use_layernorm"],
            hidden_layer_weights_initializer=config.get("fcnet_kernel_initializer"),
            hidden_layer_weights_initializer_config=config.get(
                "fcnet_kernel_initializer_kwargs"
            ),
            hidden_layer_bias_initializer=config.get("fcnet_bias_initializer"),
            hidden_layer_bias_initializer_config=config.get(
                "fcnet_bias_initializer_kwargs"
            ),
            output_layer_dim=output_dim,
            output_layer_activation=output_activation,
        )

    def build_actor(self, framework: str = "torch") -> Model:
        """`pi(s)`: observation in, action in `[-1, 1]` out."""
        config = self._mlp(
            self.observation_dim, self.action_dim, ACTOR_OUTPUT_ACTIVATION
        )
        return config.build(framework=framework)

    def build_critic(self, framework: str = "torch") -> Model:
        """`Q(s, a)`: `[s, a]` in, one value out."""
        config = self._mlp(self.observation_dim + self.action_dim, 1, "linear")
        return config.build(framework=framework)
