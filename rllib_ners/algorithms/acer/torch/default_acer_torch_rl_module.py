"""Torch implementation of ACER's RLModule (see `default_acer_rl_module.py`).

Acting (exploration) samples from the softmax policy: the module returns the
logits as `action_dist_inputs`, and the EnvRunner stores them with every step,
so the Learner later knows the behaviour policy mu of replayed steps. Evaluation
(`explore=False`) acts greedily on the same logits.

`forward_train` and `forward_target` accept observations with any leading
dimensions, e.g. `[B, T + 1, ...]` replayed sequences (the extra column is the
observation after each sequence's last step, for bootstrapping).
"""

from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.rl_module.apis import TARGET_NETWORK_ACTION_DIST_INPUTS
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.acer.acer_catalog import ACERCatalog
from rllib_ners.algorithms.acer.default_acer_rl_module import (
    QF_PREDS,
    DefaultACERRLModule,
)


class DefaultACERTorchRLModule(TorchRLModule, DefaultACERRLModule):
    """ACER's actor-critic network in torch."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("catalog_class") is None:
            kwargs["catalog_class"] = ACERCatalog
        super().__init__(*args, **kwargs)

    def _flat_features(self, encoder, obs: torch.Tensor):
        """Encodes `[..., *obs_shape]` as one flat batch; returns the leading shape."""
        obs_shape = self.observation_space.shape
        leading = obs.shape[: obs.dim() - len(obs_shape)]
        flat = obs.reshape((-1,) + tuple(obs_shape))
        return encoder({Columns.OBS: flat})[ENCODER_OUT], leading

    @override(RLModule)
    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        features, leading = self._flat_features(self.encoder, batch[Columns.OBS])
        logits = self.pi(features)
        return {Columns.ACTION_DIST_INPUTS: logits.reshape(leading + logits.shape[1:])}

    @override(RLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        features, leading = self._flat_features(self.encoder, batch[Columns.OBS])
        logits, q_values = self.pi(features), self.qf(features)
        return {
            Columns.ACTION_DIST_INPUTS: logits.reshape(leading + logits.shape[1:]),
            QF_PREDS: q_values.reshape(leading + q_values.shape[1:]),
        }

    @override(DefaultACERRLModule)
    def forward_target(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        features, leading = self._flat_features(
            self._average_encoder, batch[Columns.OBS]
        )
        logits = self._average_pi(features)
        return {
            TARGET_NETWORK_ACTION_DIST_INPUTS: logits.reshape(
                leading + logits.shape[1:]
            )
        }
