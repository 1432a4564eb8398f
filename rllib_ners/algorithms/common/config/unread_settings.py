"""RLlib settings that no update of this package's algorithms reads, refused
in `validate()` when set (`SettingRangesMixin` runs these checks): without the
error they would be ignored unseen. (RLlib itself warns of an old-stack
`model` dict.)"""

from __future__ import annotations

from rllib_ners.seam.config import raise_config_error


def check_train_batch_size_is_read(config) -> None:
    """Raises a config error where the user set `train_batch_size` to a value
    the new API stack never reads: `train_batch_size_per_learner`, when set,
    is the batch (RLlib's DQN copies `train_batch_size` into it; SAC's, TD3's
    and ACER's defaults set it, so a `train_batch_size` would be ignored)."""
    per_learner = config.train_batch_size_per_learner
    if per_learner is None or config.train_batch_size == per_learner:
        return
    if config.train_batch_size == type(config)().train_batch_size:
        return  # the class's default, not a setting of the user's
    raise_config_error(
        config,
        f"train_batch_size={config.train_batch_size} is not read on RLlib's new "
        f"API stack, where the batch is train_batch_size_per_learner="
        f"{per_learner}. Set config.training(train_batch_size_per_learner="
        f"{config.train_batch_size}) and leave train_batch_size out.",
    )


# AlgorithmConfig's settings for passes over one train batch (PPO's), which
# no update of this package's algorithms (nor RLlib's DQN or SAC) reads.
EPOCH_SETTINGS = ("num_epochs", "minibatch_size", "shuffle_batch_per_epoch")


def check_no_epoch_settings(config) -> None:
    """Raises a config error where the user set one of `EPOCH_SETTINGS`: each
    update steps once on one train batch, so they would be ignored."""
    defaults = type(config)()
    for name in EPOCH_SETTINGS:
        value = getattr(config, name)
        if value == getattr(defaults, name):
            continue
        more_updates = (
            "config.training(replay_ratio=...)"
            if hasattr(config, "replay_ratio")
            else "config.training(training_intensity=...)"
        )
        raise_config_error(
            config,
            f"{name}={value!r} is not read: each update of "
            f"{type(config).__name__.replace('Config', '')} steps once on one "
            f"train batch. Remove it (leave {name} at {getattr(defaults, name)!r}); "
            f"for more updates per env step, set {more_updates}.",
        )


def check_no_old_stack_optimizer(config) -> None:
    """Raises a config error where the user set `optimizer`, the old API
    stack's optimizer dict: the new stack's Learners build their optimizers
    from the training settings and never read it."""
    if not config.optimizer or config.optimizer == type(config)().optimizer:
        return
    raise_config_error(
        config,
        f"optimizer={config.optimizer!r} is an old-API-stack setting that RLlib's "
        f"new stack never reads. Remove it from config.training(...); the "
        f"learning rates and Adam's settings are training settings of their own "
        f"(lr, or actor_lr and critic_lr; adam_epsilon for the DQN family).",
    )
