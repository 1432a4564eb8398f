"""A griffe extension for the API page: real defaults instead of `NotProvided`.

RLlib's config methods (`.training(...)`, and our `.ners(...)`) take every
setting as `name=NotProvided`, "leave it as it is", so their rendered
signatures showed `NotProvided` for every default. This extension replaces each
such default with the value a fresh config of the class holds (for `.ners()`,
`rllib_ners.NERSSettings`'s default), which is what a user gets by leaving the
setting out. The package's code is unchanged; only what the page shows is.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict

import griffe

# Methods whose NotProvided defaults are replaced, with how to read the real
# default of a setting: the class whose fresh instance holds it.
METHODS = {
    "rllib_ners.algorithms.ners.ners_config.NERSConfigMixin.ners": "ners",
    # The fast paths' settings: the same defaults on every config that takes
    # them (tests/docs checks each config's against the page).
    "rllib_ners.algorithms.common.config.fast_paths_config.FastPathsConfigMixin."
    "training": "rllib_ners.algorithms.rainbow.rainbow_dqn.RainbowDQNConfig",
    "rllib_ners.algorithms.acer.acer.ACERConfig.training": (
        "rllib_ners.algorithms.acer.acer.ACERConfig"
    ),
    "rllib_ners.algorithms.td3.td3.TD3Config.training": (
        "rllib_ners.algorithms.td3.td3.TD3Config"
    ),
    "rllib_ners.algorithms.ners_sac.ners_sac.NERSSACConfig.training": (
        "rllib_ners.algorithms.ners_sac.ners_sac.NERSSACConfig"
    ),
}


def _defaults_of(source: str) -> Callable[[str], Any]:
    if source == "ners":
        from rllib_ners.ners.settings import NERSSettings

        defaults: Dict[str, Any] = NERSSettings().to_dict()
        return defaults.__getitem__
    module_name, _, class_name = source.rpartition(".")
    fresh = getattr(importlib.import_module(module_name), class_name)()
    return lambda name: getattr(fresh, name)


class RealDefaults(griffe.Extension):
    """Replaces `NotProvided` defaults of the methods in METHODS."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "rllib_ners":
            return
        for path, source in METHODS.items():
            function = pkg.get_member(path.split(".", 1)[1])
            real_default = _defaults_of(source)
            for parameter in function.parameters:
                if (
                    parameter.kind
                    in (
                        griffe.ParameterKind.var_positional,
                        griffe.ParameterKind.var_keyword,
                    )
                    or str(parameter.default) != "NotProvided"
                ):
                    continue
                try:
                    parameter.default = repr(real_default(parameter.name))
                except (AttributeError, KeyError):
                    # No attribute of that name: say what leaving it out does.
                    parameter.default = "unchanged"
