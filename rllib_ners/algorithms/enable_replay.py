"""`enable_replay(config, method)`: ReLo or LaBER replay for a stock RLlib config.

ReLo (Sujit et al., NeurIPS 2023) and LaBER (Lahire et al., ICML 2022) are
samplers of this package's fast buffer (`replay_buffer_config["sampler"]`), and
each needs a Learner that sends it more than RLlib's TD errors: ReLo the
items' losses under the online and the target network, LaBER the surrogate
priorities of a large batch it sub-samples itself. RLlib's Learners send
neither, and a buffer built for one refuses to run (it would replay uniformly
or by TD error under the method's name). `enable_replay` makes the three
changes a stock config needs, the way `enable_ners` does for NERS:

* the buffer type: `rllib_ners.FastPrioritizedEpisodeReplayBuffer` (its
  capacity, alpha and beta as the config has them; from this package's buffer
  all its settings but another sampler's); a stock `SACConfig`, which accepts
  RLlib's buffer names only, gets it through `with_replay_buffer`;
* the sampler and its settings: the method's defaults (`sampler_presets`)
  where the config and `settings` give none;
* the Learner: `RainbowDQNTorchLearner` for a `DQNConfig`, `NERSSACTorchLearner`
  for a `SACConfig` (both declare the methods' feedback layouts); a Learner
  class of the user's that declares the method's layout itself is kept, any
  other one raises rather than being replaced. The buffer is told
  so (`learner_sends_feedback`), as a stock algorithm cannot tell it.

This package's own configs (`RainbowDQNConfig`, `NERSSACConfig`, `TD3Config`)
take the same call, or the buffer settings directly (their presets:
`replay="relo"`/`"laber"`).
"""

from __future__ import annotations

import logging
from typing import Any, Dict

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from rllib_ners.algorithms.common.config.buffer_config_checks import (
    buffer_settings_problem,
)
from rllib_ners.algorithms.common.config.buffer_types import (
    FAST_BUFFER_TYPE,
    is_fast_buffer,
    resolve_buffer_class,
)
from rllib_ners.algorithms.common.config.sampler_presets import (
    LABER,
    LABER_M,
    LABER_WEIGHTING,
    RELO,
    RELO_ALPHA,
    RELO_EPSILON,
    REPLAY_METHODS,
    relo_transform_for,
)
from rllib_ners.algorithms.common.config.stock_config_refusals import (
    refuse_a_users_learner_class,
    refuse_multi_agent,
    refuse_other_configs,
)
from rllib_ners.replay_buffers.rllib_compat import seed_our_buffer_at_init
from rllib_ners.replay_buffers.sampler_choice import ALL_METHOD_SETTINGS

logger = logging.getLogger(__name__)

# The settings `enable_replay(config, method, **settings)` takes per method:
# the sampler's own and the buffer's that the method leaves to the user.
# LaBER takes no alpha or beta: its large batch is uniform (alpha 0) and its
# sub-sample's weights replace importance weights (beta 0).
SETTINGS_PER_METHOD = {
    RELO: (
        "relo_transform",
        "relo_epsilon",
        "capacity",
        "alpha",
        "beta",
        "beta_final",
        "beta_annealing_timesteps",
    ),
    LABER: ("laber_m", "laber_weights", "capacity"),
}


def enable_replay(config, method: str, **settings):
    """Turns `config` (a stock `DQNConfig` or `SACConfig`, or one of this
    package's `RainbowDQNConfig`, `NERSSACConfig`, `TD3Config`) into one that
    replays with `method`: "relo" or "laber". Returns `config`, changed.

    `settings`: the method's buffer settings, over the config's and the
    defaults; each call sets the method's settings anew (a second call does
    not keep the first's `relo_*` or `laber_*` settings). ReLo:
    `relo_transform` (default "exp" for a C51 DQN, whose
    cross-entropy ReLo the authors' Atari code maps so, else "clip"),
    `relo_epsilon` (1e-5), `alpha` (the config's; 0.5 if it has none or
    replays uniformly, with alpha 0), `beta` (the config's; 0.4 if none or
    with alpha 0), `beta_final`, `beta_annealing_timesteps`,
    `capacity`. LaBER: `laber_m` (4), `laber_weights` ("mean"), `capacity`;
    alpha and beta are set to 0 (a uniform large batch, LaBER's weights).

    ```python
    from ray.rllib.algorithms.sac import SACConfig
    import rllib_ners

    config = rllib_ners.enable_replay(
        SACConfig().environment("Pendulum-v1"), "laber", laber_m=4
    )
    ```

    Raises ValueError for another method, a setting the method does not
    take, a wrong value (the buffer's own checks) or a config whose
    algorithm has no Learner for it (ACER, NERS-DQN, ...).
    """
    refuse_other_configs(
        config,
        AlgorithmConfig,
        who="enable_replay",
        instead="e.g. enable_replay(DQNConfig().environment(...), 'relo')",
    )
    if method not in REPLAY_METHODS:
        raise ValueError(
            f"enable_replay: method must be one of "
            f"{', '.join(map(repr, REPLAY_METHODS))}, got {method!r}."
        )
    unknown = sorted(set(settings) - set(SETTINGS_PER_METHOD[method]))
    if unknown:
        raise ValueError(
            f"enable_replay(config, {method!r}) takes the settings "
            f"{', '.join(SETTINGS_PER_METHOD[method])}; got {', '.join(unknown)}."
        )
    refuse_multi_agent(config, who="enable_replay")
    learner_class = _learner_class_for(config, method)
    buffer_config = _buffer_config(config, method, settings)
    problem = buffer_settings_problem(
        resolve_buffer_class(buffer_config["type"]), buffer_config
    )
    if problem is not None:
        raise ValueError(f"enable_replay: {problem}")
    # Assigned, not passed to `training()`, which would merge it into the old
    # buffer config (keeping a stock buffer's keys, or another sampler's).
    # A frozen config refuses the assignment as it refuses `training()`.
    config.replay_buffer_config = buffer_config
    if _refuses_our_buffer_type(config):
        # RLlib's SACConfig.validate() takes RLlib's buffer names only: ours
        # rides in under one of them and is swapped in at algorithm init.
        from rllib_ners.replay_buffers import FastPrioritizedEpisodeReplayBuffer
        from rllib_ners.replay_buffers.rllib_compat import with_replay_buffer

        with_replay_buffer(config, FastPrioritizedEpisodeReplayBuffer)
    if learner_class is not None:
        config.learners(learner_class=learner_class)
    return seed_our_buffer_at_init(config)


def _refuses_our_buffer_type(config) -> bool:
    """A stock `SACConfig` (not this package's `NERSSACConfig`, whose
    `validate()` takes our buffers)."""
    from ray.rllib.algorithms.sac import SACConfig

    from rllib_ners.algorithms.ners_sac import NERSSACConfig

    return isinstance(config, SACConfig) and not isinstance(config, NERSSACConfig)


def _buffer_config(config, method: str, settings: Dict[str, Any]) -> dict:
    """The fast buffer's config: what carries over from the config's, the
    method's defaults, and `settings` over them.

    From this package's fast buffer every setting carries over but another
    sampler's (and, for LaBER, alpha and beta's annealing); from another
    buffer (RLlib's) only `capacity`, `alpha` and `beta`, whose meaning is the
    same in ours."""
    old = dict(config.replay_buffer_config or {})
    if old.get("type") is not None and is_fast_buffer(
        resolve_buffer_class(old["type"])
    ):
        other_samplers = {"sampler", *ALL_METHOD_SETTINGS}
        buffer_config = {key: v for key, v in old.items() if key not in other_samplers}
    else:
        buffer_config = {k: old[k] for k in ("capacity", "alpha", "beta") if k in old}
    buffer_config["type"] = FAST_BUFFER_TYPE
    if method == RELO:
        if buffer_config.get("alpha") == 0:
            # Uniform replay (TD3's default): ReLo needs priorities, and the
            # beta of uniform replay corrected nothing, so both take ReLo's.
            del buffer_config["alpha"]
            buffer_config.pop("beta", None)
        buffer_config.setdefault("alpha", RELO_ALPHA)
        buffer_config.setdefault("beta", 0.4)
        transform = settings.get("relo_transform", relo_transform_for(config))
        buffer_config.update(
            sampler=RELO, relo_transform=transform, relo_epsilon=RELO_EPSILON
        )
    else:
        _drop_prioritized_replay_settings(config, buffer_config)
        buffer_config.update(
            sampler=LABER,
            alpha=0.0,
            beta=0.0,
            beta_final=None,
            beta_annealing_timesteps=None,
            laber_m=LABER_M,
            laber_weights=LABER_WEIGHTING,
        )
    buffer_config.update(settings)
    # The Learner set below sends the method's feedback: the buffer a stock
    # algorithm builds would refuse the method otherwise (this package's
    # algorithms set the flag from their Learner class themselves).
    buffer_config["learner_sends_feedback"] = True
    return buffer_config


# Settings of prioritized replay that LaBER's uniform large batch replaces.
_PRIORITIZED_REPLAY_SETTINGS = (
    "alpha",
    "beta",
    "beta_final",
    "beta_annealing_timesteps",
    "min_priority",
)


def _drop_prioritized_replay_settings(config, buffer_config: dict) -> None:
    """Removes from `buffer_config` the settings LaBER replaces, and names
    those the user set (values other than the config class's defaults) in a
    warning: the large batch is uniform and LaBER's weights replace the
    importance weights."""
    defaults = dict(type(config)().replay_buffer_config or {})
    replaced = {}
    for key in _PRIORITIZED_REPLAY_SETTINGS:
        if key in buffer_config:
            value = buffer_config.pop(key)
            if value != defaults.get(key) and value not in (None, 0, 0.0):
                replaced[key] = value
    if replaced:
        logger.warning(
            "enable_replay(config, 'laber'): LaBER draws its large batch uniformly "
            "and weighs the sub-sample itself, so the config's %s are replaced "
            "(alpha 0, beta 0, no annealing or priority floor).",
            ", ".join(f"{key}={value!r}" for key, value in replaced.items()),
        )


def _learner_class_for(config, method: str):
    """The Learner class to set (None: keep the config's), or ValueError for a
    config without one."""
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.sac import SACConfig

    from rllib_ners.algorithms.ners_dqn import NERSDQNConfig
    from rllib_ners.algorithms.td3 import TD3Config

    if isinstance(config, NERSDQNConfig):
        raise ValueError(
            f"enable_replay: NERSDQNConfig replays with NERS; for {method!r} "
            f"replay use rllib_ners.RainbowDQNConfig (the same module and "
            f"Learner) or a stock DQNConfig."
        )
    if isinstance(config, TD3Config):
        return None  # its Learner computes ReLo and LaBER itself
    if isinstance(config, DQNConfig):
        from rllib_ners.algorithms.rainbow.torch.rainbow_dqn_torch_learner import (
            RainbowDQNTorchLearner as package_learner,
        )
    elif isinstance(config, SACConfig):
        from rllib_ners.algorithms.ners_sac.torch.ners_sac_torch_learner import (
            NERSSACTorchLearner as package_learner,
        )
    else:
        raise ValueError(
            f"enable_replay: {type(config).__name__} has no Learner that computes "
            f"{method!r} replay's feedback; it works with a DQNConfig or SACConfig "
            f"(stock or this package's) or a TD3Config."
        )
    if _sends_layout(config.learner_class, method):
        return None  # a Learner of the user's that sends it already
    refuse_a_users_learner_class(config, package_learner, who="enable_replay")
    return package_learner


def _sends_layout(learner_class, method: str) -> bool:
    """Whether `learner_class` declares the feedback layout `method` needs."""
    from rllib_ners.replay_buffers import feedback

    layout = feedback.RELO_LOSSES if method == RELO else feedback.LABER_SURROGATES
    layouts = getattr(learner_class, feedback.LEARNER_FEEDBACK_LAYOUTS_ATTR, ())
    return layout in layouts
