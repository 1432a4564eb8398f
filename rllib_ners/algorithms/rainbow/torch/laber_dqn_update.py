"""LaBER's update of the DQN family (Lahire, Geist & Rachelson, "Large Batch
Experience Replay", ICML 2022), for `RainbowDQNTorchLearner`.

The Learner receives the large batch, m*B rows drawn uniformly by the buffer
(`sampler="laber"`), and per module:

1. **Scoring pass** (no grad, all m*B rows): the module's own training pass
   (online network on s_t, on s_{t+n} for double Q, target network on
   s_{t+n}), then the TD target y (scalar Q) or C51's projected target
   distribution m, and the surrogate priorities: the norm of the per-item
   loss's gradient w.r.t. the network output, `min(|delta|, 1)` for Huber,
   `|delta|` for the squared error, `||softmax(logits(s, a)) - m||_2` for C51
   (the authors' DQN and Rainbow agents).
2. **Sub-sample**: B = rows // m indices with replacement, P(i) ~ s_i, and
   their weights (LaBER-mean by default: mean(s) / s_i), from the Learner's
   `LargeBatchSubsampler` (a seeded generator in the Learner's state).
3. **Gradient step** on the drawn rows only: the online network on s_t[idx]
   with gradients, the loss against y[idx] / m[idx] (reused from the scoring
   pass, no second target pass, as the reference), each item's loss times
   its weight w_i in place of the batch's IS weights, the mean over the B
   drawn rows.

The Learner logs, under RLlib's TD-error key, one row per large-batch item
`[s_i, times drawn, position]` (`pack_laber_feedback`), and the same window-1
statistics as the ordinary update (loss, Q of the trained rows, their mean TD
error; C51's distribution metrics).

Noisy nets: the scoring pass is the module's training pass, which draws this
update's noise (online and target) once; the gradient pass is
`compute_q_values`, which draws none, so it runs with the scoring pass's
online noise sample (one noise sample per update, as the ordinary update).

The trained env steps RLlib's `Learner.update()` counts are the batch's, m*B
per update; this package's replay loop counts B.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
from ray.rllib.algorithms.dqn.dqn_learner import (
    ATOMS,
    QF_LOGITS,
    QF_PREDS,
    QF_PROBS,
)
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import TD_ERROR_KEY

from rllib_ners.algorithms.common.learner.replay_methods import (
    LargeBatchSubsampler,
    distribution_surrogate,
    pack_laber_feedback,
    surrogate_for_loss,
)
from rllib_ners.algorithms.rainbow.torch.dqn_losses import (
    c51_item_losses,
    c51_statistics,
    c51_target_distribution,
    q_statistics,
    scalar_loss_function,
    scalar_td_target,
    selected_logits,
    selected_q,
)
from rllib_ners.seam.learner import log_off_policyness
from rllib_ners.seam.rl_module import training_pass


def laber_dqn_update(
    learner, batch: Dict[str, Dict[str, Any]], subsampler: LargeBatchSubsampler
) -> Tuple[Any, Any, Any]:
    """`TorchLearner._update(batch)` with LaBER's sub-sample between the
    scoring pass and the gradient step (see the module docstring); returns
    `(fwd_out, loss_per_module, {})` as `_update` does, `fwd_out` being the
    gradient pass's outputs on the drawn rows."""
    log_off_policyness(learner, batch)
    fwd_out, loss_per_module = {}, {}
    for module_id, module_batch in batch.items():
        module = learner.module[module_id]
        if not module.training:
            module.train()
        fwd_out[module_id], loss_per_module[module_id] = laber_module_loss(
            learner, module_id, module_batch, subsampler
        )
    gradients = learner.compute_gradients(loss_per_module)
    learner.apply_gradients(learner.postprocess_gradients(gradients))
    return fwd_out, loss_per_module, {}


def laber_module_loss(
    learner, module_id, batch: Dict[str, Any], subsampler: LargeBatchSubsampler
) -> Tuple[Dict[str, Any], torch.Tensor]:
    """One module's scoring pass, sub-sample and loss on the drawn rows."""
    module = learner.module[module_id]
    config = learner.config.get_config_for_module(module_id)
    actions = batch[Columns.ACTIONS]
    rows = int(actions.shape[0])
    num_drawn = subsampler.minibatch_size(rows)
    distributional = config.num_atoms > 1
    with torch.no_grad():
        scored = training_pass(module, batch)
        if distributional:
            target = c51_target_distribution(config, batch, scored)
            logits = selected_logits(scored[QF_LOGITS], actions, config.num_atoms)
            surrogates = distribution_surrogate(torch.softmax(logits, dim=-1), target)
        else:
            target = scalar_td_target(config, batch, scored)
            delta = selected_q(scored[QF_PREDS], actions) - target
            surrogates = surrogate_for_loss(config.td_error_loss_fn)(delta)

    drawn, weights = subsampler.draw(surrogates, num_drawn)
    drawn_actions = actions[drawn]
    # Gradient pass on the drawn rows: no new noise draw (see module docstring).
    drawn_out = module.unwrapped().compute_q_values(
        {Columns.OBS: batch[Columns.OBS][drawn]}
    )
    q_selected = selected_q(drawn_out[QF_PREDS], drawn_actions)
    drawn_target = target[drawn]
    if distributional:
        td_error = c51_item_losses(
            selected_logits(drawn_out[QF_LOGITS], drawn_actions, config.num_atoms),
            drawn_target,
        )
        item_losses = td_error
    else:
        td_error = torch.abs(q_selected - drawn_target)
        item_losses = scalar_loss_function(config)(
            q_selected, drawn_target, reduction="none"
        )
    total_loss = torch.mean(weights * item_losses)

    times_drawn = subsampler.times_drawn([drawn], rows)
    learner.metrics.log_value(
        (module_id, TD_ERROR_KEY),
        pack_laber_feedback(surrogates, times_drawn, batch),
        reduce="item_series",
    )
    statistics = q_statistics(total_loss, q_selected, td_error)
    if distributional:
        statistics.update(c51_statistics(drawn_out[QF_PROBS], scored[ATOMS]))
    learner.log_statistics(module_id, statistics)
    return drawn_out, total_loss
