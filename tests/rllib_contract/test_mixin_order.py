"""Every mixin of ours comes before the RLlib classes in the MROs it joins.

A mixin of this package (a class with no RLlib or Ray base) overrides RLlib
methods and calls `super()`: listed after the RLlib class it extends, RLlib's
method would win and the mixin's would never run, silently. Its docstring says
"list it before ..."; this test checks it for every class of the package.
Where one mixin of ours overrides another's method, it extends that mixin, so
Python itself refuses the order that would shadow it (the last test).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import rllib_ners


def _is_ours(cls: type) -> bool:
    return cls.__module__.startswith("rllib_ners.")


def _is_rllib(cls: type) -> bool:
    return cls.__module__.startswith(("ray.", "gymnasium."))


def _classes_of_the_package():
    classes = {}
    for info in pkgutil.walk_packages(rllib_ners.__path__, "rllib_ners."):
        if info.name.endswith(".__main__"):  # entry points run on import
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if _is_ours(cls):
                classes[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return classes


def _mixins_after_rllib(cls: type):
    mro = cls.__mro__
    first_rllib = next((i for i, base in enumerate(mro) if _is_rllib(base)), None)
    if first_rllib is None:
        return []
    return [
        base.__name__
        for base in mro[first_rllib:]
        if _is_ours(base) and not any(_is_rllib(b) for b in base.__mro__[1:])
    ]


def test_every_mixin_of_ours_precedes_the_rllib_classes_it_extends():
    classes = _classes_of_the_package()
    joined = [cls for cls in classes.values() if any(map(_is_rllib, cls.__mro__))]
    assert len(joined) > 20  # configs, algorithms, Learners, buffers, modules
    misplaced = {
        name: after
        for name, cls in classes.items()
        if (after := _mixins_after_rllib(cls))
    }
    assert not misplaced, (
        f"mixins listed after an RLlib class (their overrides never run): "
        f"{misplaced}; list them before the RLlib class"
    )


def test_the_check_finds_a_mixin_listed_after_rllibs_class():
    from ray.rllib.algorithms.dqn import DQNConfig

    from rllib_ners.algorithms.common.config.fast_paths_config import (
        FastPathsConfigMixin,
    )

    class Misordered(DQNConfig, FastPathsConfigMixin):
        pass

    assert _mixins_after_rllib(Misordered) == ["FastPathsConfigMixin"]


def test_our_replay_mixins_cannot_be_listed_out_of_order():
    # `ReplayLoopMixin` overrides `ReplayStateMixin`'s checkpoint state and
    # `NERSSamplerRoundsMixin` the loop's per-round hook. Each extends the
    # mixin it overrides, so Python refuses the order that would shadow them.
    from ray.rllib.algorithms.dqn import DQN

    from rllib_ners.algorithms.common.training.replay_loop import ReplayLoopMixin
    from rllib_ners.algorithms.common.training.replay_state import ReplayStateMixin
    from rllib_ners.algorithms.ners.sampler_rounds import NERSSamplerRoundsMixin

    with pytest.raises(TypeError, match="consistent method resolution"):
        type("StateBeforeLoop", (ReplayStateMixin, ReplayLoopMixin, DQN), {})
    with pytest.raises(TypeError, match="consistent method resolution"):
        type("LoopBeforeRounds", (ReplayLoopMixin, NERSSamplerRoundsMixin, DQN), {})
    assert NERSSamplerRoundsMixin.__mro__[1:4] == (
        ReplayLoopMixin,
        ReplayStateMixin,
        ReplayStateMixin.__mro__[1],
    )
