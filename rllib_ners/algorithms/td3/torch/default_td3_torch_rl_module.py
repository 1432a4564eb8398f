"""TD3's RLModule in torch: acting, training passes and the target policy.

Acting (`_forward_exploration`): uniform random actions in `[-1, 1]` for the
first `random_timesteps` env steps (`t`, which RLlib's EnvRunners pass), then
`clip(pi(s) + N(0, exploration_noise^2), -1, 1)`, as the TD3 paper explores;
`_forward_inference` acts greedily with `pi(s)`. The actor and the critics are
plain MLPs whose layers run directly (`run_mlp_layers`: the same ops without
the per-module call overhead).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.utils.annotations import override

from rllib_ners.algorithms.td3.default_td3_rl_module import (
    QF_PREDS,
    QF_TWIN_PREDS,
    TARGET_ACTIONS,
    DefaultTD3RLModule,
)
from rllib_ners.algorithms.td3.td3_catalog import TD3Catalog
from rllib_ners.seam.rl_module import raise_catalog_error
from rllib_ners.utils.mlp_layers import mlp_layers_of, run_mlp_layers

# The bounds of TD3's normalised actions (RLlib maps them onto the env's).
ACTION_LOW, ACTION_HIGH = -1.0, 1.0


class MLPRunner:
    """Calls an MLP network by its layers when it is a plain MLP (the same ops
    as calling it), else through the network."""

    def __init__(self, network: torch.nn.Module):
        self.network = network
        self.layers = mlp_layers_of(network)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.layers is not None:
            return run_mlp_layers(self.layers, inputs)
        return self.network(inputs)


class DefaultTD3TorchRLModule(TorchRLModule, DefaultTD3RLModule):
    """See the module docstring."""

    def __init__(self, *args, **kwargs):
        if kwargs.get("catalog_class") is None:
            kwargs["catalog_class"] = TD3Catalog
        super().__init__(*args, **kwargs)

    @override(DefaultTD3RLModule)
    def setup(self):
        # RLModule.__init__ only logs catalog errors; ours are config errors.
        raise_catalog_error(self)
        super().setup()
        self._runners: Dict[int, MLPRunner] = {}

    def run(self, network: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        """`network(inputs)` for the actor or a critic (or a target copy)."""
        runner = self._runners.get(id(network))
        if runner is None or runner.network is not network:
            runner = self._runners[id(network)] = MLPRunner(network)
        return runner(inputs)

    def actions(self, obs: torch.Tensor, *, target: bool = False) -> torch.Tensor:
        """The (target) actor's action `pi(s)` in `[-1, 1]`."""
        return self.run(self.target_pi if target else self.pi, obs)

    def q_values(
        self, critic: torch.nn.Module, obs: torch.Tensor, actions: torch.Tensor
    ) -> torch.Tensor:
        """`Q(s, a)` of one critic, one value per row."""
        return self.run(critic, torch.cat([obs, actions], dim=-1)).squeeze(-1)

    def critics(self, *, target: bool = False) -> List[torch.nn.Module]:
        """The critics `[qf, qf_twin]` (one critic: `[qf]`), or their target
        copies, in that order."""
        if target:
            return [self.target_qf] + ([self.target_qf_twin] if self.twin_q else [])
        return [self.qf] + ([self.qf_twin] if self.twin_q else [])

    @override(RLModule)
    def _forward_inference(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return {Columns.ACTIONS: self.actions(batch[Columns.OBS])}

    @override(RLModule)
    def _forward_exploration(
        self, batch: Dict[str, Any], t: Optional[int] = None, **kwargs
    ) -> Dict[str, Any]:
        obs = batch[Columns.OBS]
        if t is not None and t < self.random_timesteps:
            shape = (obs.shape[0], self.catalog.action_dim)
            uniform = torch.rand(shape, device=obs.device)
            return {Columns.ACTIONS: ACTION_LOW + (ACTION_HIGH - ACTION_LOW) * uniform}
        actions = self.actions(obs)
        noise = torch.randn_like(actions) * self.exploration_noise
        return {Columns.ACTIONS: (actions + noise).clamp(ACTION_LOW, ACTION_HIGH)}

    def exploration_graph_key(self, t: Optional[int]) -> str:
        """The Python-side decision `_forward_exploration` makes from `t`, for
        a captured acting pass (`rllib_ners.env.acting_graphs`): uniform random
        actions or the policy's with noise."""
        return "random" if t is not None and t < self.random_timesteps else "policy"

    @override(RLModule)
    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        """Each critic's `Q(s, a)` for the batch's actions (what a critic loss
        reads; TD3's Learner makes its own passes, see `td3_update`)."""
        obs, actions = batch[Columns.OBS], batch[Columns.ACTIONS]
        output = {QF_PREDS: self.q_values(self.qf, obs, actions)}
        if self.twin_q:
            output[QF_TWIN_PREDS] = self.q_values(self.qf_twin, obs, actions)
        return output

    @override(TargetNetworkAPI)
    def forward_target(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        """The target actor's actions for `batch[OBS]`."""
        return {TARGET_ACTIONS: self.actions(batch[Columns.OBS], target=True)}
