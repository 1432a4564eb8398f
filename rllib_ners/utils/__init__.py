"""Helpers shared across the package, each module named for what it holds.

Torch, for the RLModules, Learners and the NERS scorer:

* `action_sampling`: epsilon-greedy and squashed-Gaussian action draws, RLlib's
  draws with fewer ops;
* `mlp_layers`: a plain MLP's layers, run without `nn.Module.__call__`;
* `optimizer_steps`: fused Adam and optimizer steps with less overhead;
* `tensor_conversion`: numpy arrays as tensors on a device, as RLlib converts;
* `update_graphs`: gradient updates captured and replayed as CUDA graphs;
* `deferred_metrics`: a stand-in for RLlib's `MetricsLogger` that logs once.

Checks and small facts:

* `checks`: input validation;
* `mixin_order`: mixins that refuse being listed after the class they extend;
* `spaces`: predicates on gymnasium spaces and env ids;
* `episode_info`: the env `info` keys the package reads.

Processes and runs:

* `rng`: snapshots of the global random generators;
* `malloc`: glibc allocator tuning for Learner processes;
* `log_noise`: drops the Ray, Tune and RLlib log lines a user cannot act on;
* `package_logs`: this package's log lines at RLlib's `log_level`;
* `plotting`: learning curves from Tune run directories.

Nothing here imports Ray (`tests/unit/test_ray_free_modules.py`).
"""
