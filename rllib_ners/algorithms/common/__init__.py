"""Pieces the algorithms of this package share (Rainbow DQN, NERS-DQN, NERS-SAC,
TD3 / DDPG, ACER), NERS or not, in three sub-packages.

`config/`, the configs' settings and their checks in `validate()`:

* `buffer_types`: this package's buffer types by name; a `type` resolved;
  a `replay_buffer_config` update that names the current class merged;
* `buffer_config_checks`: `replay_buffer_config` checked in `validate()`;
* `config_checks`: env-space checks (actions, frame stack, CNN);
* `stock_config_refusals`: what `enable_ners` / `enable_replay` refuse to change;
* `setting_ranges`: the numeric settings' ranges and the switches, one table;
* `setting_range_checks`: its checks and the others run first in `validate()`
  (`SettingRangesMixin`);
* `switched_settings`: settings their switch leaves off, named in a warning;
* `unread_settings`: RLlib settings no update here reads, refused when set;
* `sampler_presets`: the ReLo and LaBER samplers' settings and choices;
* `rllib_validation`: RLlib's own `validate()`, its TypeErrors as ValueErrors;
* `fast_paths_config`: the fast paths' switches (`FastPathsConfigMixin`);
* `resources`: CPU threads for a local Learner (the tuned examples).

`training/`, the Algorithm's side of a training iteration:

* `replay_loop`: RLlib's DQN/SAC training step as one loop per iteration;
* `columnar_replay`: replayed numpy columns as the Learners' train batch;
* `fragment_shipping`: remote EnvRunners' fragments shipped as packed columns;
* `overlapped_sampling`: remote EnvRunners sampling while the Learner updates;
* `deferred_priorities`: priority writes kept on the GPU until a round ends;
* `weight_sharing`: the local EnvRunner acting with the local Learner's weights;
* `replay_state`: building the replay buffer, and its state in checkpoints;
* `training_ops`: ACER's training-step pieces, as RLlib's DQN step does them.

`learner/`, the torch Learners' shared base and the update pieces it composes,
each an exact speed-up of one part of RLlib's update (or, for `lap_losses`, a
loss):

* `fast_torch_learner`: `FastTorchLearner`, the base every Learner lists;
* `deferred_updates`: updates whose metrics are reduced once per iteration;
* `update_step`: the update with the modules kept in training mode;
* `gradient_step`: the gradient step with fewer passes and fused Adam steps;
* `target_updates`: multi-tensor Polyak updates, their times in checkpoints
  (`DQNTargetUpdates`, the part DQN's and SAC's Learners hold);
* `cuda_graph_updates`: a GPU Learner's updates replayed from CUDA graphs;
* `distributed`: averaging what DDP does not see over several Learners;
* `lap_losses`: LAP's and PAL's losses (NERS-SAC, TD3);
* `replay_methods`: what a Learner computes for ReLo (the target network's
  loss) and LaBER (surrogate priorities, the seeded sub-sample).

The NERS sampler's glue lives in `rllib_ners.algorithms.ners`.
"""
