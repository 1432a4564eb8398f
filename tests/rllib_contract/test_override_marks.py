"""Every method of ours that overrides an RLlib method carries `@override(...)`.

RLlib's `override` decorator raises at class definition when the parent lost the
method, so a Ray upgrade that renames or removes a hook we override fails at
import time, naming the method, instead of silently leaving our override unused.
This test finds overrides that lack the mark: for every class of ours with an
RLlib class in its MRO, each method that one of our classes in that MRO defines
(mixins included) and that an RLlib class also defines must be decorated.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap

from ray.rllib.algorithms.dqn import DQN
from ray.rllib.utils.annotations import override

import rllib_ners


def _our_classes():
    for info in pkgutil.walk_packages(rllib_ners.__path__, "rllib_ners."):
        if info.name.startswith("rllib_ners.cli"):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                yield cls


def _decorated_methods(cls) -> dict:
    """Method name -> whether its `def` carries an `override(...)` decorator."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    marks = {}
    for node in tree.body[0].body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            marks[node.name] = any(
                "override" in ast.unparse(decorator)
                for decorator in node.decorator_list
            )
    return marks


def _is_rllib(cls) -> bool:
    return cls.__module__.startswith("ray.")


def unmarked_overrides(classes, is_ours) -> set:
    """`module.Class.method` of each method of a class `is_ours` in the MROs
    of `classes` that an RLlib class in the same MRO also defines, and that
    carries no `@override(...)`."""
    missing = set()
    for cls in classes:
        rllib_bases = [base for base in cls.__mro__ if _is_rllib(base)]
        if not rllib_bases:
            continue
        for ours in cls.__mro__:
            if not is_ours(ours):
                continue
            for name, marked in _decorated_methods(ours).items():
                if marked or name.startswith("__"):
                    continue
                if any(name in vars(base) for base in rllib_bases):
                    missing.add(f"{ours.__module__}.{ours.__qualname__}.{name}")
    return missing


class _Mixin:
    def training_step(self):  # unmarked, and DQN has it: found where mixed in
        return None


class _Sample(_Mixin, DQN):
    @override(DQN)
    def setup(self, config):
        return None

    def own_helper(self):  # not RLlib's: needs no mark
        return None


def test_the_check_finds_an_unmarked_override_in_a_mixin():
    def is_ours(cls):
        return cls in (_Mixin, _Sample)

    assert unmarked_overrides([_Sample], is_ours) == {
        f"{__name__}._Mixin.training_step"
    }


def test_every_override_of_an_rllib_method_is_marked():
    missing = unmarked_overrides(
        _our_classes(), lambda cls: cls.__module__.startswith("rllib_ners")
    )
    assert not missing, (
        "These methods override RLlib methods without @override(Parent): "
        + ", ".join(sorted(missing))
    )
