"""The one place where this package touches RLlib's, Ray's and torch's private names.

RLlib 2.60 has no public route for some of what the fast paths need (writing
steps into an episode in bulk, reading an EnvRunner's cached module input,
stepping a Learner's optimizers without its bookkeeping, ...). Every such
access lives here, in one module per framework object, as a function named for
the concept (`append_steps(episode, ...)`, not `episode._len += n` at the call
site). Each function has a contract test in `tests/rllib_contract/`
(`test_seam_<module>.py`) that fails with a message naming what changed, so a
Ray or torch upgrade is this package's work and its tests' verdict.

`tests/rllib_contract/test_private_names.py` lists the private names the rest
of the package touches and fails when one appears outside this package.

Modules:
    algorithm: `Algorithm`, `LearnerGroup` and `EnvRunnerGroup` internals.
    checkpoints: which components a `Checkpointable.get_state()` asks for.
    config: `AlgorithmConfig` internals.
    env_runner: `SingleAgentEnvRunner` state the sampling loop reads and writes.
    episodes: `SingleAgentEpisode` slots written in bulk.
    learner: `Learner` / `TorchLearner` internals.
    ray_runtime: Ray's post-init hooks and Tune's env registry.
    replay: RLlib's episode replay buffers' state and metrics hooks.
    rl_module: `RLModule` and `Catalog` internals.
    torch_internals: torch's optimizer, hook and multi-tensor internals.
    torch_modules: `torch.nn.Module` internals.
"""
