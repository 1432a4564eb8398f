"""Learner state that RLlib 2.60 leaves out of checkpoints, for exact resume.

RLlib's `DQNLearner` (and so `SACLearner`) keeps the timestep of its last
target-network update in a plain attribute, `last_update_ts_by_mid`, that no
checkpoint holds: a restored Learner would sync its target nets at its first
update. `TargetUpdateStateMixin` saves it.
"""

from __future__ import annotations

from typing import Any, Dict

from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.utils.annotations import override

TARGET_UPDATE_TS_STATE = "last_target_update_ts"


class TargetUpdateStateMixin:
    """For `DQNLearner` subclasses (list it before the DQN/SAC learner class)."""

    @override(DQNTorchLearner)
    def get_state(
        self, components=None, *, not_components=None, **kwargs
    ) -> Dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(TARGET_UPDATE_TS_STATE, components, not_components):
            state[TARGET_UPDATE_TS_STATE] = dict(self.last_update_ts_by_mid)
        return state

    @override(DQNTorchLearner)
    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        if TARGET_UPDATE_TS_STATE in state:
            self.last_update_ts_by_mid.update(state[TARGET_UPDATE_TS_STATE])
