"""ACER's framework-agnostic Learner: batch columns, metric keys, the average
policy network's Polyak update.

Training batches are columnar sequences (see `ACER.training_step`), one row per
sequence, `T` steps per row:

* `obs` `[B, T + 1, ...]`: the observation before each step, then the one after
  the row's last step (every column from there on repeats it);
* `actions`, `rewards`, `terminateds` `[B, T]`, `loss_mask` `[B, T]` (real steps);
* `action_dist_inputs` `[B, T, A]`: the behaviour policy's logits, as the
  EnvRunner stored them when it acted;
* `weights` `[B]`: importance-sampling weights of prioritised (NERS) replay;
* replayed NERS batches also carry `ts` `[B]` (timestep of each sequence's first
  step) and `sample_position` `[B]`, and the Learner returns one NERS row per
  sequence start (see `ACERTorchLearner`).
"""

from __future__ import annotations

from typing import Any, Dict

from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.utils import update_target_network
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.utils.annotations import (
    OverrideToImplementCustomLogic_CallToSuperRecommended,
    override,
)

# Batch columns beyond RLlib's `Columns`.
SEQUENCE_WEIGHTS = "weights"
SEQUENCE_START_TS = "ts"

# Metric keys (under `result["learners"][module_id]`).
POLICY_LOSS_KEY = "policy_loss"
Q_LOSS_KEY = "q_loss"
ENTROPY_KEY = "entropy"
MEAN_RHO_KEY = "mean_importance_ratio"
TRUNCATED_FRACTION_KEY = "truncated_fraction"
Q_RET_MEAN_KEY = "q_ret_mean"
KL_AVERAGE_POLICY_KEY = "kl_average_policy"
TRUST_REGION_ACTIVE_KEY = "trust_region_active_fraction"
NUM_AVERAGE_POLICY_UPDATES = "num_average_policy_updates_lifetime"


class ACERLearner(Learner):
    """Makes the average policy network and moves it after every update:
    `theta_avg <- tau * theta + (1 - tau) * theta_avg` (Wang et al.'s alpha is
    `1 - tau`)."""

    @OverrideToImplementCustomLogic_CallToSuperRecommended
    @override(Learner)
    def build(self) -> None:
        super().build()
        self.module.foreach_module(
            lambda mid, mod: (
                mod.make_target_networks()
                if isinstance(mod, TargetNetworkAPI)
                else None
            )
        )

    @override(Learner)
    def after_gradient_based_update(self, *, timesteps: Dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        for module_id, module in self.module.items():
            config = self.config.get_config_for_module(module_id)
            for main_net, average_net in module.unwrapped().get_target_network_pairs():
                update_target_network(
                    main_net=main_net, target_net=average_net, tau=config.tau
                )
            self.metrics.log_value(
                (module_id, NUM_AVERAGE_POLICY_UPDATES), 1, reduce="lifetime_sum"
            )

    @classmethod
    @override(Learner)
    def rl_module_required_apis(cls) -> list:
        return [TargetNetworkAPI]
