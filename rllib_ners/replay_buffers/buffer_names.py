"""Names shared by the parts of the prioritized episode buffer (no Ray).

The column keys of sampled batches (`sample_batch()`, `sample_sequences()`) and
the fixes that the errors about a buffer setting or a `sample()` argument name.
"""

# Columns of `sample_batch()`.
OBS, NEXT_OBS, ACTIONS, REWARDS = "obs", "new_obs", "actions", "rewards"
TERMINATEDS, TRUNCATEDS, WEIGHTS, N_STEP, INDICES = (
    "terminateds",
    "truncateds",
    "weights",
    "n_step",
    "indices",
)
TIMESTEPS = "ts"
NEXT_INDICES = "next_indices"
# An item's place in its sample (0 .. rows-1), in batches whose sampler takes
# feedback from several Learners' shards (NERS, ReLo, LaBER): each Learner
# returns its rows' positions so the buffer puts them back in sample order.
SAMPLE_POSITION = "sample_position"

# Appended to the errors of `check_positive_int` on buffer settings.
SETTING_FIX = "Set it in `replay_buffer_config` or the buffer's constructor."
# ... and on `sample()`'s arguments, which an RLlib algorithm takes from its
# training settings.
SAMPLE_FIX = (
    "Pass it to the buffer's `sample()`; RLlib's algorithms pass "
    "`config.training(train_batch_size_per_learner=..., n_step=...)`."
)
