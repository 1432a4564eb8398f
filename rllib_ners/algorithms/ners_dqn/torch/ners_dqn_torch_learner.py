"""DQN torch learner that scores every training batch with the NERS sampler.

On each update, after RLlib's DQN loss:
  1. fresh `delta_i = |Q(s_i, a_i) - y_i|` and target `y_i = R_i + gamma^n (1 - d_i)
     Q_target(s_i+n, a*)` come from the forward pass already made for the loss;
  2. the scorer scores the whole batch at once (so each score sees the batch's
     global context), without gradients;
  3. rows `[sigma_i, delta_i, y_i, position_i]` are reported under RLlib's
     TD-error key, which DQN's training step hands to the replay buffer's
     `update_priorities()`. The NERS buffer puts them in sample order by
     `position_i` and turns them into priorities and its feature cache.

The scorer, its optimiser, the REINFORCE step and the several-Learner handling
are the part the Learner holds as `self.ners`, a `TorchNERSSampler`
(`rllib_ners/algorithms/ners/torch/torch_ners_sampler.py`).
"""

from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.algorithms.dqn.dqn_learner import (
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_TARGET_NEXT_PREDS,
)
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.utils.annotations import override
from ray.rllib.utils.typing import ModuleID, TensorType

from rllib_ners.algorithms.ners.torch.torch_ners_sampler import (
    TorchNERSSampler,
)
from rllib_ners.algorithms.rainbow.torch.rainbow_dqn_torch_learner import (
    RainbowDQNTorchLearner,
)
from rllib_ners.algorithms.rainbow.torch.rainbow_torch_rl_module import (
    NEXT_OBS_ENCODER_OUT,
    OBS_ENCODER_OUT,
)
from rllib_ners.replay_buffers.feedback import NERS_SCORES, TD_ERRORS


class NERSDQNTorchLearner(RainbowDQNTorchLearner):
    """Rainbow's DQN learner (Adam with `adam_epsilon`, checkpoints holding when
    the target nets were last synced) holding the NERS sampler (see the module
    docstring)."""

    # The replay feedback it sends: TD errors, or with NERS scores NERS's
    # rows (the buffer's sampler must take one; checked when it is built).
    replay_feedback_layouts = (TD_ERRORS, NERS_SCORES)

    @override(DQNTorchLearner)
    def build(self) -> None:
        super().build()
        self.ners = TorchNERSSampler(self)

    @staticmethod
    def fresh_td_and_target(
        *,
        batch: Dict[str, TensorType],
        fwd_out: Dict[str, TensorType],
        gamma: float,
        double_q: bool,
    ):
        """`(|Q(s,a) - y|, y)` with `y = R + gamma^n (1 - terminated) Q_target(s', a*)`.

        Uses the expected Q-values the DQN forward pass already produced (for C51
        these are the means of the distributions).
        """
        actions = batch[Columns.ACTIONS].long().reshape(-1, 1)
        q_selected = torch.gather(fwd_out[QF_PREDS], -1, actions).squeeze(-1)
        q_target_next = fwd_out[QF_TARGET_NEXT_PREDS]
        greedy_source = fwd_out[QF_NEXT_PREDS] if double_q else q_target_next
        best = torch.argmax(greedy_source, dim=-1, keepdim=True)
        q_next = torch.gather(q_target_next, -1, best).squeeze(-1)
        n_step = batch.get("n_step")
        discount = gamma ** (n_step.float() if n_step is not None else 1.0)
        not_done = 1.0 - batch[Columns.TERMINATEDS].float()
        target = batch[Columns.REWARDS].float() + discount * not_done * q_next
        return (q_selected - target).abs(), target

    @override(DQNTorchLearner)
    def compute_loss_for_module(
        self,
        *,
        module_id: ModuleID,
        config: Any,
        batch: Dict[str, Any],
        fwd_out: Dict[str, TensorType],
    ) -> TensorType:
        loss = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        with torch.no_grad():
            delta, target = self.fresh_td_and_target(
                batch=batch,
                fwd_out=fwd_out,
                gamma=config.gamma,
                double_q=config.double_q,
            )
            # [score, delta, q, position] rows replace DQN's plain TD errors.
            self.ners.report_scores(
                module_id,
                batch,
                delta,
                target,
                module_encodings=(
                    fwd_out.get(OBS_ENCODER_OUT),
                    fwd_out.get(NEXT_OBS_ENCODER_OUT),
                ),
            )
        return loss
