"""Pieces every algorithm of this package shares, NERS or not.

`replay_checkpoint` (building the replay buffer, buffer/RNG state in
checkpoints), `training_ops` (EnvRunner sampling into the buffer, weight sync),
`columnar_replay` (DQN's and SAC's training step on numpy columns),
`config_checks` (env-space checks run in `validate()`), `fast_torch_learner`
(exact speed-ups of RLlib's TorchLearner).
"""
