"""Catalog of the Rainbow RLModule: encoder and value/advantage streams.

Model config keys read here (besides RLlib's `DefaultModelConfig` ones):

* `noisy` (bool, default False), `std_init` (float, DQN's `sigma0`, default 0.5):
  factorised-Gaussian noisy layers in every layer of both streams.
* `num_atoms` (int, default 1): C51 atoms per action (1 = expected-value DQN).
* `cnn_encoder` (None, "nature", "data_efficient" or "small"): encoder for
  `[H, W, C]` image observations (uint8 scaled by 1/255, bool as 0/1, inside).
  None picks RLlib's own CNN when `conv_filters` is set, else the Nature CNN
  when the images are at least 36x36 and the small CNN (one 3x3 stride-1 conv,
  16 channels, as MinAtar's DQN) otherwise.

Vector observations use RLlib's MLP encoder (`fcnet_hiddens`, `fcnet_activation`);
the streams use `head_fcnet_hiddens` and `head_fcnet_activation`, as RLlib's
`DQNCatalog` does.
"""

from __future__ import annotations

from ray.rllib.algorithms.dqn.dqn_catalog import DQNCatalog
from ray.rllib.core.models.base import Encoder, Model
from ray.rllib.core.models.catalog import Catalog
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.rainbow.torch.rainbow_networks import (
    QStream,
    RainbowCNNEncoder,
    cnn_output_dim,
)
from rllib_ners.networks.conv_stack import CNN_ENCODER_KEY, resolve_cnn_encoder
from rllib_ners.seam.rl_module import (
    catalog_model_config,
    clear_encoder_config,
    set_catalog_model_config,
)

NOISY_KEY = "noisy"
SIGMA0_KEY = "std_init"

# Used for keys a plain (non-DQNConfig) RLModuleSpec leaves out; the DQN-family
# configs always pass all of them.
RAINBOW_MODEL_DEFAULTS = {
    "dueling": True,
    "double_q": True,
    "num_atoms": 1,
    "v_min": -10.0,
    "v_max": 10.0,
    "epsilon": [(0, 1.0), (10000, 0.05)],
    NOISY_KEY: False,
    SIGMA0_KEY: 0.5,
    CNN_ENCODER_KEY: None,
}


class RainbowCatalog(DQNCatalog):
    """`DQNCatalog` with noisy streams and the Nature / data-efficient CNNs."""

    @override(Catalog)
    def _determine_components_hook(self):
        cfg = {**RAINBOW_MODEL_DEFAULTS, **catalog_model_config(self)}
        set_catalog_model_config(self, cfg)
        self.check_model_config(cfg)
        self.cnn_encoder = resolve_cnn_encoder(self.observation_space, cfg)
        if self.cnn_encoder is None:
            # Vector observations, or RLlib's CNN from `conv_filters`.
            super()._determine_components_hook()
            return
        clear_encoder_config(self)
        self.latent_dims = (
            cnn_output_dim(self.observation_space.shape, self.cnn_encoder),
        )

    @staticmethod
    def check_model_config(cfg: dict) -> None:
        """Raises ValueError for model_config keys the Rainbow module cannot
        honour; `cfg` is RLlib's DefaultModelConfig under the module's
        model_config (`RAINBOW_MODEL_DEFAULTS` fill in what it lacks)."""
        cfg = {**RAINBOW_MODEL_DEFAULTS, **cfg}
        if cfg.get("use_lstm"):
            raise ValueError(
                "The Rainbow RLModule is not recurrent: set model_config "
                "use_lstm=False (or use RLlib's DefaultDQNTorchRLModule)."
            )
        if cfg.get("head_fcnet_use_layernorm"):
            raise ValueError(
                "The Rainbow RLModule's streams have no layer norm (nor has "
                "RLlib's DQN head): set model_config head_fcnet_use_layernorm=False."
            )
        if cfg[NOISY_KEY] and (
            cfg.get("head_fcnet_kernel_initializer")
            or cfg.get("head_fcnet_bias_initializer")
        ):
            raise ValueError(
                "Noisy streams use the initialisation of Fortunato et al. "
                "(mu ~ U(+-1/sqrt(fan_in)), sigma = sigma0/sqrt(fan_in)): remove "
                "model_config head_fcnet_kernel_initializer / "
                "head_fcnet_bias_initializer, or set noisy=False."
            )
        if int(cfg["num_atoms"]) < 1:
            raise ValueError(f"num_atoms must be >= 1, got {cfg['num_atoms']!r}.")
        if int(cfg["num_atoms"]) > 1 and not cfg["v_min"] < cfg["v_max"]:
            raise ValueError(
                f"C51 needs v_min < v_max, got v_min={cfg['v_min']!r}, "
                f"v_max={cfg['v_max']!r}."
            )

    @override(Catalog)
    def build_encoder(self, framework: str) -> Encoder:
        if self.cnn_encoder is None:
            return super().build_encoder(framework)
        return RainbowCNNEncoder(self.observation_space.shape, self.cnn_encoder)

    def _build_stream(self, output_dim: int) -> QStream:
        cfg = catalog_model_config(self)
        return QStream(
            self.latent_dims[0],
            cfg["head_fcnet_hiddens"],
            output_dim,
            activation=cfg["head_fcnet_activation"],
            noisy=bool(cfg[NOISY_KEY]),
            sigma0=float(cfg[SIGMA0_KEY]),
            kernel_initializer=cfg.get("head_fcnet_kernel_initializer"),
            kernel_initializer_kwargs=cfg.get("head_fcnet_kernel_initializer_kwargs"),
            bias_initializer=cfg.get("head_fcnet_bias_initializer"),
            bias_initializer_kwargs=cfg.get("head_fcnet_bias_initializer_kwargs"),
        )

    @override(DQNCatalog)
    def build_af_head(self, framework: str) -> Model:
        """Advantage stream (or the Q stream without dueling): A * atoms outputs."""
        return self._build_stream(int(self.action_space.n * self.num_atoms))

    @override(DQNCatalog)
    def build_vf_head(self, framework: str) -> Model:
        """Value stream: one output per atom (C51 dueling needs V per atom)."""
        return self._build_stream(int(self.num_atoms))
