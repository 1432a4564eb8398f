"""ACER's RLModule interface: the output keys and which nets exist where.

* `encoder` (shared trunk), `pi` (policy logits) and `qf` (Q values) are the
  learned nets; EnvRunners hold only `encoder` and `pi` (inference-only).
* The *average policy network* of ACER (Wang et al. 2016, section 3.3) is the
  Polyak average of `encoder` and `pi`, kept as RLlib target networks
  (`TargetNetworkAPI`): the Learner moves it toward the online nets by `tau`
  after every update, and `forward_target` gives its logits.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Dict, List, Tuple

from ray.rllib.core.learner.utils import make_target_network
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, TargetNetworkAPI
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import NetworkType

from rllib_ners.seam.rl_module import raise_catalog_error

# Forward-train output: Q(s, a) of every action.
QF_PREDS = "qf_preds"


class DefaultACERRLModule(RLModule, InferenceOnlyAPI, TargetNetworkAPI, abc.ABC):
    """Shared trunk, policy and Q heads, and an average policy network."""

    def __init__(self, *args, **kwargs):
        # RLModuleSpecs built outside an AlgorithmConfig may carry only a few
        # model_config keys; the catalog needs all of RLlib's defaults.
        model_config = kwargs.get("model_config") or {}
        if dataclasses.is_dataclass(model_config):
            model_config = dataclasses.asdict(model_config)
        kwargs["model_config"] = {
            **dataclasses.asdict(DefaultModelConfig()),
            **model_config,
        }
        super().__init__(*args, **kwargs)

    @override(RLModule)
    def setup(self):
        # RLModule.__init__ only logs catalog errors; ours are config errors.
        raise_catalog_error(self)
        self.encoder = self.catalog.build_encoder(framework=self.framework)
        self.pi = self.catalog.build_pi_head(framework=self.framework)
        if not self.inference_only:
            self.qf = self.catalog.build_q_head(framework=self.framework)

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> List[str]:
        return ["qf", "_average_encoder", "_average_pi"]

    @override(TargetNetworkAPI)
    def make_target_networks(self) -> None:
        self._average_encoder = make_target_network(self.encoder)
        self._average_pi = make_target_network(self.pi)

    @override(TargetNetworkAPI)
    def get_target_network_pairs(self) -> List[Tuple[NetworkType, NetworkType]]:
        return [(self.encoder, self._average_encoder), (self.pi, self._average_pi)]

    @abc.abstractmethod
    @override(TargetNetworkAPI)
    def forward_target(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        """Logits of the average policy network under
        `TARGET_NETWORK_ACTION_DIST_INPUTS`."""
