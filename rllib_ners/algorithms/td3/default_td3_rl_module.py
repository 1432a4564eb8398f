"""TD3's RLModule: a deterministic actor, one or two critics, target copies.

`model_config` carries, besides the networks' settings (see `TD3Catalog`),
what TD3Config puts there for acting and the target policy:
`twin_q` (two critics, the clipped double-Q target) and the exploration of
`_forward_exploration`: `exploration_noise` (the std of the Gaussian added to
the actor's action, in units of the `[-1, 1]` action range) and
`random_timesteps` (env steps of uniform random actions first).
"""

from __future__ import annotations

from typing import List, Tuple

from ray.rllib.core.learner.utils import make_target_network
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, TargetNetworkAPI
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import NetworkType

# The target actor's and critics' outputs (`forward_target`).
TARGET_ACTIONS = "target_actions"
# Forward-train outputs: each critic's Q(s, a) for the batch's actions.
QF_PREDS = "qf_preds"
QF_TWIN_PREDS = "qf_twin_preds"


class DefaultTD3RLModule(RLModule, InferenceOnlyAPI, TargetNetworkAPI):
    """The actor `pi`, the critics `qf` (and `qf_twin`) and, on the Learner,
    their target copies. EnvRunners build it inference-only: the actor alone.
    """

    @override(RLModule)
    def setup(self):
        self.twin_q = bool(self.model_config.get("twin_q", True))
        self.exploration_noise = float(self.model_config.get("exploration_noise", 0.1))
        self.random_timesteps = int(self.model_config.get("random_timesteps", 0))
        self.pi = self.catalog.build_actor(framework=self.framework)
        if not self.inference_only:
            self.qf = self.catalog.build_critic(framework=self.framework)
            if self.twin_q:
                self.qf_twin = self.catalog.build_critic(framework=self.framework)

    @override(TargetNetworkAPI)
    def make_target_networks(self) -> None:
        self.target_pi = make_target_network(self.pi)
        self.target_qf = make_target_network(self.qf)
        if self.twin_q:
            self.target_qf_twin = make_target_network(self.qf_twin)

    @override(TargetNetworkAPI)
    def get_target_network_pairs(self) -> List[Tuple[NetworkType, NetworkType]]:
        pairs = [(self.pi, self.target_pi), (self.qf, self.target_qf)]
        if self.twin_q:
            pairs.append((self.qf_twin, self.target_qf_twin))
        return pairs

    @override(InferenceOnlyAPI)
    def get_non_inference_attributes(self) -> List[str]:
        names = ["qf", "target_pi", "target_qf"]
        if self.twin_q:
            names += ["qf_twin", "target_qf_twin"]
        return names

    @override(RLModule)
    def get_initial_state(self) -> dict:
        return {}
