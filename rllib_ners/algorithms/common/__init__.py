"""Pieces every algorithm of this package shares, NERS or not.

`replay_checkpoint` (building the replay buffer, buffer/RNG state in
checkpoints), `training_ops` (EnvRunner sampling into the buffer, weight sync),
`columnar_replay` (DQN's and SAC's training step on numpy columns),
`config_checks` (env-space checks run in `validate()`); the torch Learners'
update pieces, each an exact speed-up of one part of RLlib's update:
`deferred_updates` (metrics reduced once per iteration), `gradient_step`
(fused gradient step), `target_updates` (multi-tensor Polyak updates),
`update_step` (the forward pass without a mode switch) and `distributed`
(averaging over several Learners).
"""
