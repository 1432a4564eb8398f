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

With several Learners (`num_learners > 1`) RLlib splits each sampled batch
between them; the scorer then takes its global context over the whole batch (an
all-reduce across the Learners' process group), the scorer starts from rank 0's
weights, and REINFORCE gradients are averaged, so that every Learner holds the
same sampler at all times, as DDP keeps the RLModules equal.

The scorer and its Adam optimiser live here, on the Learner's device, outside
RLlib's optimiser registry (so DQN updates never zero or step them), and are
trained only by `ners_reinforce()`, which the algorithm calls on every Learner at
episode ends.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import torch
import torch.distributed as dist
from ray.rllib.algorithms.dqn.dqn_learner import (
    QF_NEXT_PREDS,
    QF_PREDS,
    QF_TARGET_NEXT_PREDS,
)
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.utils.annotations import override
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, TensorType

from rllib_ners.algorithms.ners_dqn.ners_dqn_learner import ners_settings_from_config
from rllib_ners.algorithms.rainbow.torch.rainbow_dqn_torch_learner import (
    RainbowDQNTorchLearner,
)
from rllib_ners.ners.scorer import NERSScorer, reinforce_loss
from rllib_ners.replay_buffers.ners_episode_buffer import (
    DELTA,
    SAMPLE_POSITION,
    TARGET_Q,
)
from rllib_ners.rng_state import global_rng_state, set_global_rng_state

NERS_SAMPLER_STATE = "ners_sampler"
# RLlib 2.60's DQNLearner keeps the timestep of its last target-network update in
# a plain attribute that no checkpoint holds: a restored Learner would sync its
# target nets at its first update. Ours saves it.
TARGET_UPDATE_TS_STATE = "last_target_update_ts"
_FEATURE_COLUMNS = ("obs", "new_obs", "actions", "rewards", DELTA, TARGET_Q, "ts")


def sampler_tensors(batch: Dict[str, Any], device) -> Dict[str, torch.Tensor]:
    """The scorer's feature columns of a numpy batch, as tensors on `device`."""
    return {
        name: torch.as_tensor(np.asarray(batch[name]), device=device)
        for name in _FEATURE_COLUMNS
    }


def _sum_over_learners(tensor: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


class NERSDQNTorchLearner(RainbowDQNTorchLearner):
    """Rainbow's DQN learner (Adam with `adam_epsilon`) plus the NERS scorer (see
    the module docstring)."""

    # Checked by NERSEpisodeReplayBuffer at build time.
    supports_ners_replay = True

    @override(DQNTorchLearner)
    def build(self) -> None:
        super().build()
        self.ners_settings = ners_settings_from_config(self.config)
        module = self.module[DEFAULT_MODULE_ID]
        external_dim = None
        if self.ners_settings.encoder == "module":
            probe = torch.as_tensor(
                np.asarray(module.observation_space.sample())[None], device=self._device
            )
            external_dim = int(self._module_encode(probe).shape[-1])
        self.ners_scorer = NERSScorer(
            module.observation_space,
            module.action_space,
            self.ners_settings,
            external_encoder_dim=external_dim,
        ).to(self._device)
        self.ners_optimizer = torch.optim.Adam(
            self.ners_scorer.parameters(), lr=self.ners_settings.lr
        )
        if self._sampler_is_distributed():
            # Learners seed differently (or not at all): start from rank 0's nets.
            for tensor in self.ners_scorer.state_dict().values():
                dist.broadcast(tensor, src=0)

    def _sampler_is_distributed(self) -> bool:
        """Whether several Learners share a torch process group (DDP)."""
        return (
            self.distributed
            and dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size() > 1
        )

    # ------------------------------------------------------------- scoring
    def _module_encode(self, obs: torch.Tensor) -> torch.Tensor:
        """The RLModule's own encoder output, detached (encoder='module')."""
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        with torch.no_grad():
            return module.encoder({Columns.OBS: obs})[ENCODER_OUT].detach()

    def _encode_fn(self):
        return self._module_encode if self.ners_settings.encoder == "module" else None

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
        if "ts" not in batch:
            raise ValueError(
                "The NERS learner needs the `ts` column that NERSEpisodeReplayBuffer "
                "adds to every sampled transition: set replay_buffer_config['type'] "
                "to 'rllib_ners.NERSEpisodeReplayBuffer'."
            )
        with torch.no_grad():
            delta, target = self.fresh_td_and_target(
                batch=batch,
                fwd_out=fwd_out,
                gamma=config.gamma,
                double_q=config.double_q,
            )
            columns = {
                "obs": batch[Columns.OBS],
                "new_obs": batch[Columns.NEXT_OBS],
                "actions": batch[Columns.ACTIONS],
                "rewards": batch[Columns.REWARDS],
                DELTA: delta,
                TARGET_Q: target,
                "ts": batch["ts"],
            }
            features = self.ners_scorer.featurize_batch(
                columns, encode=self._encode_fn()
            )
            if self._sampler_is_distributed():
                # This Learner holds a shard of the batch; the global context
                # covers the whole batch, as with a single Learner.
                scores = self.ners_scorer(features, all_reduce_sum=_sum_over_learners)
            else:
                scores = self.ners_scorer(features)
            rows = [scores, delta, target]
            if SAMPLE_POSITION in batch:
                rows.append(batch[SAMPLE_POSITION].to(scores.dtype))
        # Replace the plain TD errors DQN logged with [score, delta, q, position]
        # rows; the training step hands them (concatenated Learner by Learner) to
        # NERSEpisodeReplayBuffer.update_priorities().
        self.metrics.delete(module_id, TD_ERROR_KEY, key_error=False)
        self.metrics.log_value(
            (module_id, TD_ERROR_KEY),
            torch.stack(rows, dim=-1),
            reduce="item_series",
        )
        return loss

    # ----------------------------------------------------------- REINFORCE
    def ners_reinforce(
        self, batch: Dict[str, np.ndarray], replay_reward: float
    ) -> Dict[str, float]:
        """One REINFORCE step of the sampler on I_train (numpy columns).

        Only the sampler's parameters move: the RLModule is untouched (with
        encoder='module' its encoder output enters detached). Every Learner gets
        the same batch; with several, the gradients are averaged all the same, so
        their samplers stay identical whatever the floating-point details.
        """
        tensors = sampler_tensors(batch, self._device)
        self.ners_scorer.train()
        features = self.ners_scorer.featurize_batch(tensors, encode=self._encode_fn())
        scores = self.ners_scorer(features)
        loss = reinforce_loss(scores, replay_reward, self.ners_settings.log_eps)
        self.ners_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self._sampler_is_distributed():
            world_size = dist.get_world_size()
            for param in self.ners_scorer.parameters():
                if param.grad is not None:
                    dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)
                    param.grad /= world_size
        self.ners_optimizer.step()
        return {
            "loss": float(loss.detach().cpu()),
            "score_mean": float(scores.detach().mean().cpu()),
        }

    # --------------------------------------------------------------- state
    @override(DQNTorchLearner)
    def get_state(
        self, components=None, *, not_components=None, **kwargs
    ) -> Dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self._check_component(NERS_SAMPLER_STATE, components, not_components):
            state[NERS_SAMPLER_STATE] = {
                "scorer": {
                    k: v.detach().cpu()
                    for k, v in self.ners_scorer.state_dict().items()
                },
                "optimizer": self.ners_optimizer.state_dict(),
                # A remote Learner's own process generators (noisy-net noise).
                "global_rng": global_rng_state(),
            }
        if self._check_component(TARGET_UPDATE_TS_STATE, components, not_components):
            state[TARGET_UPDATE_TS_STATE] = dict(self.last_update_ts_by_mid)
        return state

    @override(DQNTorchLearner)
    def set_state(self, state: Dict[str, Any]) -> None:
        super().set_state(state)
        sampler_state: Optional[dict] = state.get(NERS_SAMPLER_STATE)
        if sampler_state is not None:
            self.ners_scorer.load_state_dict(sampler_state["scorer"])
            self.ners_optimizer.load_state_dict(sampler_state["optimizer"])
            if "global_rng" in sampler_state:
                set_global_rng_state(sampler_state["global_rng"])
        if TARGET_UPDATE_TS_STATE in state:
            self.last_update_ts_by_mid.update(state[TARGET_UPDATE_TS_STATE])
