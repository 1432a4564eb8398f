"""SAC's networks as Haarnoja et al. (2018) define them, as an RLlib RLModule.

`SACTorchRLModule` is RLlib's `DefaultSACTorchRLModule` (same attributes,
forward outputs, target networks and inference-only split, so RLlib's
`SACTorchLearner` and every SAC tool of RLlib work on it) with the critics of
the paper, Stable-Baselines3 and CleanRL: `Q(s, a) = MLP([s, a])`, through
`SACConcatCriticCatalog`. RLlib's own continuous critic is a multi-stream
network about ten times as costly (see the catalog). Its greedy action (for
evaluation and `explore=False`) is the squashed mean, as the SAC paper's
(`TorchSquashedMeanGaussian`); `model_config={"greedy_action":
"pre_tanh_mean"}` keeps RLlib 2.60's, the pre-tanh mean clipped to the
bounds. Exploration and training use RLlib's distribution unchanged.
`NERSSACConfig` uses this module by default; a stock `SACConfig` gets it with
`config.rl_module(rl_module_spec=RLModuleSpec(module_class=SACTorchRLModule))`.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import gymnasium as gym
import torch
from ray.rllib.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import (
    DefaultSACTorchRLModule,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchSquashedGaussian
from ray.rllib.core.models.base import ENCODER_OUT, Encoder, Model
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.ners_sac.sac_catalog import SACConcatCriticCatalog
from rllib_ners.algorithms.ners_sac.torch.squashed_mean_gaussian import (
    TorchSquashedMeanGaussian,
)
from rllib_ners.seam.rl_module import raise_catalog_error
from rllib_ners.utils.mlp_layers import encoder_head_layers_of, run_mlp_layers

# `model_config["greedy_action"]`: the SAC paper's squashed mean (default) or
# RLlib 2.60's pre-tanh mean.
GREEDY_SQUASHED_MEAN, GREEDY_PRE_TANH_MEAN = "squashed_mean", "pre_tanh_mean"
GREEDY_ACTIONS = (GREEDY_SQUASHED_MEAN, GREEDY_PRE_TANH_MEAN)


class SACTorchRLModule(DefaultSACTorchRLModule):
    """`DefaultSACTorchRLModule` with critics on the concatenated `[s, a]`.

    ```python
    from ray.rllib.algorithms.sac import SACConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from rllib_ners.algorithms.ners_sac import SACTorchRLModule

    config = (
        SACConfig()
        .environment("Pendulum-v1")
        .rl_module(rl_module_spec=RLModuleSpec(module_class=SACTorchRLModule))
    )
    ```
    """

    def __init__(self, *args, **kwargs):
        if kwargs.get("catalog_class") is None:
            kwargs["catalog_class"] = SACConcatCriticCatalog
        super().__init__(*args, **kwargs)

    @override(DefaultSACRLModule)
    def setup(self):
        # RLModule.__init__ only logs catalog errors; ours are config errors.
        raise_catalog_error(self)
        self.greedy_action = self.model_config.get(
            "greedy_action", GREEDY_SQUASHED_MEAN
        )
        if self.greedy_action not in GREEDY_ACTIONS:
            raise ValueError(
                f"model_config['greedy_action']={self.greedy_action!r}: use "
                f"{GREEDY_SQUASHED_MEAN!r} (the SAC paper's squashed mean, the "
                f"default) or {GREEDY_PRE_TANH_MEAN!r} (RLlib 2.60's)."
            )
        super().setup()
        # The policy as plain layers (None: not a plain MLP; False: not looked
        # at yet).
        self._policy_layers = False

    @override(DefaultSACTorchRLModule)
    def get_inference_action_dist_cls(self):
        """The squashed mean as the greedy action (Box actions, unless
        `greedy_action="pre_tanh_mean"`)."""
        dist_class = super().get_inference_action_dist_cls()
        if (
            dist_class is TorchSquashedGaussian
            and self.greedy_action == GREEDY_SQUASHED_MEAN
        ):
            return TorchSquashedMeanGaussian
        return dist_class

    @override(DefaultSACTorchRLModule)
    def get_exploration_action_dist_cls(self):
        """RLlib's (the greedy action plays no part in exploring)."""
        return super().get_inference_action_dist_cls()

    @override(DefaultSACTorchRLModule)
    def get_train_action_dist_cls(self):
        """RLlib's (the greedy action plays no part in training)."""
        return super().get_inference_action_dist_cls()

    def exploration_graph_key(self, t: Optional[int]) -> Optional[str]:
        """The Python-side decision exploring makes from `t`, for a captured
        acting pass (`rllib_ners.env.acting_graphs`): none with Box actions
        (the squashed Gaussian's draw reads nothing on the host); discrete
        actions are drawn eagerly (None)."""
        return "policy" if isinstance(self.action_space, gym.spaces.Box) else None

    @override(DefaultSACTorchRLModule)
    def _forward_inference(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """RLlib's: the policy's action-distribution inputs (exploration runs
        the same pass). A plain-MLP policy runs its layers directly, the same
        ops without the encoder's and head's module calls (a third of an
        EnvRunner's forward pass on one row)."""
        layers = self._policy_layers
        if layers is False:
            layers = encoder_head_layers_of(self.pi_encoder, self.pi)
            self._policy_layers = layers
        if layers is None:
            return super()._forward_inference(batch)
        return {Columns.ACTION_DIST_INPUTS: run_mlp_layers(layers, batch[Columns.OBS])}

    @override(DefaultSACTorchRLModule)
    def _qf_forward_train_helper(
        self,
        batch: Dict[str, Any],
        encoder: Encoder,
        head: Model,
        squeeze: bool = True,
    ) -> torch.Tensor:
        """Q-values of `batch[OBS]` and (for Box actions) `batch[ACTIONS]`."""
        if isinstance(self.action_space, gym.spaces.Discrete):
            return super()._qf_forward_train_helper(batch, encoder, head, squeeze)
        inputs = torch.cat([batch[Columns.OBS], batch[Columns.ACTIONS]], dim=-1)
        q = head(encoder({Columns.OBS: inputs})[ENCODER_OUT])
        return q.squeeze(-1) if squeeze else q
