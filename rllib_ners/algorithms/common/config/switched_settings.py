"""Settings that act only while another setting switches them on.

`sigma0` without `noisy`, `v_min` / `v_max` with one atom, `pal_alpha` without
the PAL loss, `target_noise_clip` without target noise, `trust_region_delta`
and ACER's `tau` without the trust region, `grad_clip_by` without a
`grad_clip`, and the importance-weight and priority settings of the replay
buffer (`beta`, `beta_final`, `beta_annealing_timesteps`, `min_priority`)
with `alpha=0`, which replays uniformly with weights of 1: set to a value
other than the default while the
switch is off, each would be ignored. `SettingRangesMixin.validate()` names
them in a warning, once per config class and setting, rather than refusing
them: a Tune sweep over the switch keeps the setting for the trials that
switch it on.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, List, Optional, Tuple

from ray.util.debug import log_once

logger = logging.getLogger(__name__)

_DQN, _SAC, _TD3, _ACER = "DQNConfig", "SACConfig", "TD3Config", "ACERConfig"


@dataclasses.dataclass(frozen=True)
class SwitchedSetting:
    """A setting that acts only while another one switches it on.

    Attributes:
        setting: The config attribute, e.g. "sigma0".
        switch: The switch in words, as the warning says it: "noisy=True".
        is_on: Whether `config`'s switch is on.
        configs: Names of the config classes the rule covers.
        read: The setting's value in a config; None: the attribute `setting`.
        inert: Values that switch the setting itself off (beta=0): never
            named, whatever the switch.
    """

    setting: str
    switch: str
    is_on: Callable[[Any], bool]
    configs: Tuple[str, ...]
    read: Optional[Callable[[Any], Any]] = None
    inert: Tuple[Any, ...] = ()

    def value(self, config) -> Any:
        return getattr(config, self.setting) if self.read is None else self.read(config)


def _replay_alpha(config) -> Optional[float]:
    """`replay_buffer_config['alpha']`, or None where the buffer's default
    applies (ours and RLlib's prioritise by default)."""
    return (config.replay_buffer_config or {}).get("alpha")


SWITCHED_SETTINGS: Tuple[SwitchedSetting, ...] = (
    SwitchedSetting("sigma0", "noisy=True", lambda c: c.noisy, (_DQN,)),
    *(
        SwitchedSetting(name, "num_atoms > 1", lambda c: c.num_atoms > 1, (_DQN,))
        for name in ("v_min", "v_max")
    ),
    SwitchedSetting(
        "pal_alpha", "critic_loss='pal'", lambda c: c.critic_loss == "pal", (_SAC, _TD3)
    ),
    SwitchedSetting(
        "target_noise_clip", "target_noise > 0", lambda c: c.target_noise > 0, (_TD3,)
    ),
    # The average policy, which `tau` moves, is read by the trust region only.
    *(
        SwitchedSetting(
            name, "use_trust_region=True", lambda c: c.use_trust_region, (_ACER,)
        )
        for name in ("trust_region_delta", "tau")
    ),
    # With alpha=0 every priority is 1: draws are uniform and every weight is 1.
    *(
        SwitchedSetting(
            f"replay_buffer_config[{key!r}]",
            "replay_buffer_config['alpha'] > 0",
            lambda c: _replay_alpha(c) is None or _replay_alpha(c) > 0,
            (_DQN, _SAC, _TD3, _ACER),
            read=lambda c, key=key: (c.replay_buffer_config or {}).get(key),
            inert=inert,
        )
        for key, inert in (
            ("beta", (0.0, None)),
            ("beta_final", (None,)),
            ("beta_annealing_timesteps", (None,)),
            ("min_priority", (None,)),
        )
    ),
    # RLlib clips (and so reads `grad_clip_by`) only with a `grad_clip`.
    SwitchedSetting(
        "grad_clip_by",
        "grad_clip > 0",
        lambda c: c.grad_clip is not None,
        (_DQN, _SAC, _TD3, _ACER),
    ),
)


def warn_of_switched_off_settings(config) -> List[str]:
    """Logs a warning, once per config class and setting, for each setting of
    `SWITCHED_SETTINGS` that differs from the class's default while its switch
    is off (it would be ignored); returns the settings found.

    A warning, not an error: a Tune sweep over the switch keeps the setting
    for the trials where the switch is on."""
    config_classes = {cls.__name__ for cls in type(config).__mro__}
    defaults, ignored = None, []
    for rule in SWITCHED_SETTINGS:
        if config_classes.isdisjoint(rule.configs) or rule.is_on(config):
            continue
        defaults = defaults or type(config)()
        value, default = rule.value(config), rule.value(defaults)
        if value == default or value in rule.inert:
            continue
        ignored.append(rule.setting)
        # Once per config class and setting: validate() runs often.
        if log_once(f"switched_off_{type(config).__qualname__}_{rule.setting}"):
            logger.warning(
                "%s=%r has no effect unless %s; it is ignored. Set %s, or %s.",
                rule.setting,
                value,
                rule.switch,
                rule.switch,
                "remove it"
                if default is None
                else f"leave {rule.setting} at its default ({default!r})",
            )
    return ignored
