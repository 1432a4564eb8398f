"""Catalog of ACER's RLModule: a shared trunk, a policy head and a Q head.

The trunk is RLlib's MLP encoder for vector observations (`fcnet_hiddens`,
`fcnet_activation`); for `[H, W, C]` images (uint8, bool or float) it is the
Nature CNN (default when the images are at least 36x36, else the small CNN), the
data-efficient or the small CNN of `rllib_ners.networks.conv_stack` (model_config
`cnn_encoder`), or RLlib's own CNN when `conv_filters` is set. Both heads are MLPs with
`head_fcnet_hiddens` / `head_fcnet_activation` (and the `head_fcnet_*`
initializers) and one output per action: the policy's logits and `Q(s, .)`.
"""

from __future__ import annotations

import gymnasium as gym
from ray.rllib.core.models.base import Encoder
from ray.rllib.core.models.catalog import Catalog
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.rainbow.torch.rainbow_networks import (
    QStream,
    RainbowCNNEncoder,
    cnn_output_dim,
)
from rllib_ners.networks.conv_stack import resolve_cnn_encoder
from rllib_ners.seam.rl_module import (
    catalog_model_config,
    clear_encoder_config,
    use_action_space_distribution,
)
from rllib_ners.utils.spaces import discrete_actions_error


def check_discrete_actions(action_space: gym.Space, who: str = "ACER") -> None:
    """ACER's Q head and bias correction sum over a finite action set."""
    message = discrete_actions_error(action_space, who)
    if message is not None:
        raise ValueError(message)


class ACERCatalog(Catalog):
    """Builds ACER's trunk (`build_encoder`), `build_pi_head` and `build_q_head`."""

    @override(Catalog)
    def _determine_components_hook(self):
        check_discrete_actions(self.action_space)
        cfg = catalog_model_config(self)
        self.check_model_config(cfg)
        self.cnn_encoder = resolve_cnn_encoder(self.observation_space, cfg)
        if self.cnn_encoder is None:
            super()._determine_components_hook()
            return
        clear_encoder_config(self)
        use_action_space_distribution(self)
        self.latent_dims = (
            cnn_output_dim(self.observation_space.shape, self.cnn_encoder),
        )

    @staticmethod
    def check_model_config(cfg: dict) -> None:
        """Raises ValueError for model_config keys ACER's module cannot honour."""
        if cfg.get("use_lstm") or cfg.get("use_attention"):
            raise ValueError(
                "ACER's RLModule is not recurrent: set model_config use_lstm=False "
                "(replayed sequences are scored step by step)."
            )
        if cfg.get("head_fcnet_use_layernorm"):
            raise ValueError(
                "ACER's policy and Q heads have no layer norm: set model_config "
                "head_fcnet_use_layernorm=False."
            )

    @override(Catalog)
    def build_encoder(self, framework: str) -> Encoder:
        if self.cnn_encoder is None:
            return super().build_encoder(framework)
        return RainbowCNNEncoder(self.observation_space.shape, self.cnn_encoder)

    def _build_head(self) -> QStream:
        cfg = catalog_model_config(self)
        return QStream(
            self.latent_dims[0],
            cfg["head_fcnet_hiddens"],
            int(self.action_space.n),
            activation=cfg["head_fcnet_activation"],
            kernel_initializer=cfg.get("head_fcnet_kernel_initializer"),
            kernel_initializer_kwargs=cfg.get("head_fcnet_kernel_initializer_kwargs"),
            bias_initializer=cfg.get("head_fcnet_bias_initializer"),
            bias_initializer_kwargs=cfg.get("head_fcnet_bias_initializer_kwargs"),
        )

    def build_pi_head(self, framework: str) -> QStream:
        """Policy logits, one per action."""
        return self._build_head()

    def build_q_head(self, framework: str) -> QStream:
        """`Q(s, a)` for every action."""
        return self._build_head()
