"""Every mixin of ours comes before the RLlib classes in the MROs it joins.

A mixin of this package (a class with no RLlib or Ray base) overrides RLlib
methods and calls `super()`: listed after the RLlib class it extends, RLlib's
method would win and the mixin's would never run, silently. Each such mixin
extends `PrecedesInBases`, which refuses that order when a class is defined
(tested here for every mixin, and the helper itself on plain classes); the
first test checks every class of the package as well. Where one mixin of ours
overrides another's method, it extends that mixin, so Python itself refuses
the order that would shadow it (the last test).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import rllib_ners
from rllib_ners.utils.mixin_order import PrecedesInBases


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


def _mixins_joining_rllib_classes():
    mixins = set()
    for cls in _classes_of_the_package().values():
        if any(map(_is_rllib, cls.__mro__)):
            mixins.update(
                base
                for base in cls.__mro__
                if _is_ours(base) and not any(map(_is_rllib, base.__mro__))
            )
    mixins.discard(PrecedesInBases)
    return sorted(mixins, key=lambda mixin: mixin.__name__)


def test_the_check_finds_a_mixin_listed_after_rllibs_class():
    from ray.rllib.algorithms.dqn import DQNConfig

    # A mixin of the package that is no `PrecedesInBases`: only the check
    # above would see it listed after RLlib's class.
    PlainMixin = type("PlainMixin", (), {"__module__": "rllib_ners.example"})

    class Misordered(DQNConfig, PlainMixin):
        pass

    assert _mixins_after_rllib(Misordered) == ["PlainMixin"]


def test_every_mixin_of_ours_is_checked_where_a_class_lists_it():
    mixins = _mixins_joining_rllib_classes()
    assert len(mixins) >= 9  # configs', algorithms' and Learners' mixins
    unchecked = [m.__name__ for m in mixins if not issubclass(m, PrecedesInBases)]
    assert not unchecked, f"mixins that do not extend PrecedesInBases: {unchecked}"


def _rllib_class_extending(base: type) -> type:
    from ray.rllib.algorithms.dqn import DQN, DQNConfig
    from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner

    for concrete in (DQNConfig, DQN, DQNTorchLearner):
        if issubclass(concrete, base):
            return concrete
    raise AssertionError(f"no RLlib class extends {base}")


@pytest.mark.parametrize(
    "mixin", _mixins_joining_rllib_classes(), ids=lambda mixin: mixin.__name__
)
def test_a_class_listing_rllibs_class_first_is_refused_when_defined(mixin):
    # Declared by the mixin or inherited from the one it extends.
    rllib_class = _rllib_class_extending(mixin._precedes_in_bases)

    with pytest.raises(TypeError) as refused:
        type("Misordered", (rllib_class, mixin), {})
    assert str(refused.value).startswith(
        f"class Misordered lists {rllib_class.__name__} before "
    )
    assert "List the mixin first: class Misordered(" in str(refused.value)

    # The other order defines, and so do the user's subclasses of it.
    listed_first = type("ListedFirst", (mixin, rllib_class), {})
    type("UsersSubclass", (listed_first,), {})


def test_the_order_check_on_plain_classes():
    class Base:
        def hello(self):
            return "base"

    class Derived(Base):
        pass

    class Mixin(PrecedesInBases, precedes=Base):
        def hello(self):
            return "mixin+" + super().hello()

    class Good(Mixin, Derived):
        pass

    class GoodSubclass(Good):
        pass

    assert GoodSubclass().hello() == "mixin+base"
    # Listed after a subclass of the class it extends: the mixin would never run.
    with pytest.raises(TypeError, match="lists Derived before Mixin"):

        class Bad(Derived, Mixin):
            pass

    # A second mixin between them is no RLlib-side class: still fine.
    class Other:
        pass

    class WithAnother(Other, Mixin, Base):
        pass

    assert WithAnother().hello() == "mixin+base"

    # A mixin subclass keeps its parent's rule without declaring it again.
    class SubMixin(Mixin):
        pass

    with pytest.raises(TypeError, match="lists Base before Mixin"):

        class AlsoBad(Base, SubMixin):
            pass


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
