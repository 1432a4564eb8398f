"""SAC's update with LaBER replay (Lahire, Geist & Rachelson, ICML 2022).

With `replay_buffer_config["sampler"] = "laber"` the buffer hands the Learner
a large batch of m*B rows drawn uniformly. `laber_sac_update` then makes one
update as the authors' SAC does (`LaBER/continuous/LABER_SAC.py`):

1. the scoring pass, without gradients, on all m*B rows
   (`laber_scoring_pass`): `a' ~ pi(s')`, the target critics on `(s', a')`,
   the online critics on `(s, a)`; the Learner's loss then takes the soft TD
   target `y` (its alpha and n-step discount, as its ordinary loss) and each
   critic's surrogate priority `s_k` (the per-item loss's gradient norm
   w.r.t. `Q_k`: `|Q_k - y|` for the squared error, `min(|Q_k - y|, 1)` for
   the Huber loss);
2. the sub-sample (the Learner's `LargeBatchSubsampler`, a seeded generator
   of its own): each critic draws its own B rows, with replacement, in
   proportion to its own surrogates, with LaBER's weights ("two lists, two
   independent mini-batches" in the authors' code); the actor and the
   temperature take B rows drawn uniformly from the large batch, unweighted;
3. the training pass on the drawn rows only (`laber_training_pass`): critic
   k on its rows, the policy on the actor's rows (a reparameterised draw,
   the critics frozen), with gradients; `y` is the large batch's, not
   recomputed (no second target pass);
4. one backward of the summed losses, the Learner's clipping and optimizer
   steps (`step_on_summed_loss`, as `one_backward_sac_update`).

The default generator draws `a'` for all m*B rows first, then the actor's
reparameterised actions; the sub-sample draws from the Learner's own
generator only, so checkpointing its state restores the same rows.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import torch
from ray.rllib.algorithms.sac.sac_learner import (
    QF_PREDS,
    QF_TARGET_NEXT,
    QF_TWIN_PREDS,
)
from ray.rllib.core.columns import Columns

from rllib_ners.algorithms.ners_sac.torch.sac_update import (
    LOGP_NEXT_RESAMPLED,
    LOGP_RESAMPLED,
    Q_CURR,
    SACNetworks,
    frozen_critics_min_q,
    sac_networks_of,
    step_on_summed_loss,
)

# The online critics' prediction keys, critic by critic (RLlib's SAC names).
CRITIC_PREDICTION_KEYS = (QF_PREDS, QF_TWIN_PREDS)


def laber_sac_update(
    learner, batch: Dict[str, Any], networks: Dict[int, SACNetworks], subsampler
) -> Tuple[Any, Any, Any]:
    """One LaBER update of `learner` on the large batch `batch` (see the
    module docstring): each module's losses from the Learner's
    `laber_loss_for_module`, then one backward and the optimizer steps.
    Returns `_update`'s `(fwd_out, loss_per_module, {})`, `fwd_out` holding
    the training pass's outputs on the drawn rows."""
    fwd_out, loss_per_module = {}, {}
    for module_id, module_batch in batch.items():
        nets = sac_networks_of(learner, module_id, networks)
        loss_per_module[module_id], fwd_out[module_id] = learner.laber_loss_for_module(
            module_id=module_id,
            config=learner.config.get_config_for_module(module_id),
            batch=module_batch,
            nets=nets,
            subsampler=subsampler,
        )
    step_on_summed_loss(learner, loss_per_module)
    return fwd_out, loss_per_module, {}


def laber_scoring_pass(nets: SACNetworks, batch: Dict[str, Any]) -> Dict[str, Any]:
    """What `soft_td_error_and_target` and the surrogates read, on every row,
    without gradients: `a' ~ pi(s')` and its log-probability, the target
    critics' min on `(s', a')`, and each online critic's Q(s, a) under
    `CRITIC_PREDICTION_KEYS`."""
    obs, actions = batch[Columns.OBS], batch[Columns.ACTIONS]
    next_obs = batch[Columns.NEXT_OBS]
    with torch.no_grad():
        actions_next, logp_next = nets.draw(
            nets.policy(next_obs), reparameterized=False
        )
        output = {
            LOGP_NEXT_RESAMPLED: logp_next,
            QF_TARGET_NEXT: nets.min_q(nets.target_critics, next_obs, actions_next),
        }
        for key, (encoder, head) in zip(CRITIC_PREDICTION_KEYS, nets.critics):
            output[key] = nets.q(encoder, head, obs, actions)
    return output


def laber_training_pass(
    nets: SACNetworks,
    batch: Dict[str, Any],
    critic_rows: Sequence[torch.Tensor],
    actor_rows: torch.Tensor,
) -> Dict[str, Any]:
    """The passes the losses differentiate, on the drawn rows only: critic k's
    Q on its rows `critic_rows[k]` (under `CRITIC_PREDICTION_KEYS[k]`), and on
    the actor's rows `actor_rows` the policy's reparameterised draw
    (`LOGP_RESAMPLED`) and the frozen critics' min Q of it (`Q_CURR`), as
    `sac_forward_train` computes them on the whole batch."""
    obs, actions = batch[Columns.OBS], batch[Columns.ACTIONS]
    output = {}
    for key, (encoder, head), rows in zip(
        CRITIC_PREDICTION_KEYS, nets.critics, critic_rows
    ):
        output[key] = nets.q(encoder, head, obs[rows], actions[rows])
    actor_obs = obs[actor_rows]
    actor_actions, output[LOGP_RESAMPLED] = nets.draw(
        nets.policy(actor_obs), reparameterized=True
    )
    output[Q_CURR] = frozen_critics_min_q(nets, actor_obs, actor_actions)
    return output


def critic_prediction_keys(nets: SACNetworks) -> List[str]:
    """The keys of `nets`' online critics' predictions (one, or the twins)."""
    return list(CRITIC_PREDICTION_KEYS[: len(nets.critics)])
