"""Private names of RLlib, Ray and torch are touched in `rllib_ners.seam` only.

A private name is one with a leading underscore (not a dunder) that this
package does not define itself. Outside the seam the package may not

* import one from `ray` or `torch` (`from ray... import _x`, `import ray._private`),
* read or write one on any object (`runner._cached_to_module`,
  `torch._foreach_mul_`, `optimizer._rllib_ners_cache = ...`), or call a
  function through `__wrapped__`,
* define one that a Ray or torch base class already has: a method override
  (`def _get_clip_function`) or an attribute set on `self` that the base class
  sets too (`self._ongoing_episodes = ...`).

Overriding a method that RLlib marks as an extension hook
(`@OverrideToImplementCustomLogic`: `RLModule._forward_train`,
`Learner._update`, `Catalog._determine_components_hook`, ...) is RLlib's public
API, and so is calling `super()` inside such an override.

`test_no_private_name_is_touched_outside_the_seam` prints what it found, name
by name, with the places.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rllib_ners"
SEAM = PACKAGE / "seam"
CONTRACT_TESTS = Path(__file__).resolve().parent

# Dunders that reach into another object's internals.
PRIVATE_DUNDERS = frozenset({"__wrapped__"})
# Python's own bookkeeping on every ABC subclass.
PYTHON_INTERNALS = frozenset({"_abc_impl"})

Place = Tuple[str, int]


def _is_private(name: str) -> bool:
    if name in PRIVATE_DUNDERS:
        return True
    return name.startswith("_") and not name.startswith("__")


def _package_files(*, seam: bool) -> List[Path]:
    files = sorted(PACKAGE.rglob("*.py"))
    return [f for f in files if (SEAM in f.parents) == seam]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _where(path: Path, node: ast.AST) -> Place:
    return str(path.relative_to(PACKAGE.parent)), node.lineno


class _Scan(ast.NodeVisitor):
    """What one module defines, and the private names it touches."""

    def __init__(self, path: Path):
        self.path = path
        self.defined: Set[str] = set()
        self.self_stores: Dict[str, List[Place]] = defaultdict(list)
        self.touched: Dict[str, List[Place]] = defaultdict(list)
        self.imported: Dict[str, List[Place]] = defaultdict(list)
        # `super()._x` inside `def _x`: allowed where `_x` is an RLlib hook.
        self.super_of_own: Dict[str, List[Place]] = defaultdict(list)
        self._function: List[str] = []

    def visit_FunctionDef(self, node):
        self.defined.add(node.name)
        self._function.append(node.name)
        self.generic_visit(node)
        self._function.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.defined.add(node.name)
        self.generic_visit(node)

    def visit_Call(self, node):
        # `self.register_buffer("_x", ...)` and `setattr(self, "_x", ...)`
        # define `_x` as surely as `self._x = ...`.
        function = node.func
        name = getattr(function, "attr", getattr(function, "id", None))
        position = {"register_buffer": 0, "register_parameter": 0, "setattr": 1}
        index = position.get(name)
        if index is not None and len(node.args) > index:
            argument = node.args[index]
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                self.defined.add(argument.value)
        self.generic_visit(node)

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Store):
            self.defined.add(node.id)

    def visit_Attribute(self, node):
        owner = node.value
        is_self = isinstance(owner, ast.Name) and owner.id in ("self", "cls")
        if isinstance(node.ctx, ast.Store) and is_self:
            self.defined.add(node.attr)
            if _is_private(node.attr):
                self.self_stores[node.attr].append(_where(self.path, node))
        elif _is_private(node.attr):
            calls_super = (
                isinstance(owner, ast.Call)
                and isinstance(owner.func, ast.Name)
                and owner.func.id == "super"
            )
            if calls_super and self._function[-1:] == [node.attr]:
                self.super_of_own[node.attr].append(_where(self.path, node))
            else:
                self.touched[node.attr].append(_where(self.path, node))
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            if any(_is_private(part) for part in alias.name.split(".")):
                self.imported[alias.name].append(_where(self.path, node))

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if module.split(".")[0] not in ("ray", "torch"):
            return
        if any(_is_private(part) for part in module.split(".")):
            self.imported[module].append(_where(self.path, node))
        for alias in node.names:
            if _is_private(alias.name):
                self.imported[alias.name].append(_where(self.path, node))


def _scan(files: List[Path]) -> List[_Scan]:
    scans = []
    for path in files:
        scan = _Scan(path)
        scan.visit(ast.parse(path.read_text(), filename=str(path)))
        scans.append(scan)
    return scans


@functools.cache
def _source(cls: type) -> str:
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        return ""


def _foreign_bases(cls: type) -> List[type]:
    return [
        base
        for base in cls.__mro__[1:]
        if base is not object and not base.__module__.startswith("rllib_ners")
    ]


def _is_rllib_hook(base: type, name: str) -> bool:
    """Whether RLlib marks `base.name` as a method to override
    (`OverrideToImplementCustomLogic*` sets `__is_overridden__ = False`)."""
    function = base.__dict__.get(name)
    function = getattr(function, "__func__", function)
    return getattr(function, "__is_overridden__", True) is False


def _our_classes(scans: List[_Scan]) -> Dict[type, _Scan]:
    classes = {}
    for scan in scans:
        module = importlib.import_module(_module_name(scan.path))
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                classes[cls] = scan
    return classes


def _overrides(scans: List[_Scan]) -> Tuple[Dict[str, List[Place]], Set[str]]:
    """Private names our classes define that a foreign base has (checked on
    every class of ours with the foreign bases it ends up with, so a mixin's
    methods count where it is mixed in); and the names of the RLlib hooks
    among them (allowed)."""
    found: Dict[str, List[Place]] = defaultdict(list)
    hooks: Set[str] = set()
    classes = _our_classes(scans)
    for cls in classes:
        bases = _foreign_bases(cls)
        if not bases:
            continue
        for own in cls.__mro__:
            scan = classes.get(own)
            if scan is None:
                continue
            where = (str(scan.path.relative_to(PACKAGE.parent)),)
            for name in own.__dict__:
                if not _is_private(name) or name in PYTHON_INTERNALS:
                    continue
                owners = [base for base in bases if name in base.__dict__]
                if not owners:
                    continue
                if any(_is_rllib_hook(base, name) for base in owners):
                    hooks.add(name)
                    continue
                found[name].append(where + (inspect.getsourcelines(own)[1],))
            for name, places in scan.self_stores.items():
                if any(f"self.{name}" in _source(base) for base in bases):
                    found[name].extend(places)
    return found, hooks


def private_names_outside_the_seam() -> Dict[str, List[Place]]:
    """Every private name of Ray or torch touched outside `rllib_ners.seam`,
    with the places that touch it."""
    scans = _scan(_package_files(seam=False))
    ours = set().union(*(scan.defined for scan in scans))
    found, hooks = _overrides(scans)
    for scan in scans:
        for name, places in scan.imported.items():
            found[name].extend(places)
        for name, places in scan.super_of_own.items():
            if name in found or name not in ours:
                found[name].extend(places)
        for name, places in scan.touched.items():
            if name in PYTHON_INTERNALS:
                continue
            if name not in ours or name in found or name in PRIVATE_DUNDERS:
                found[name].extend(places)
    return {name: sorted(set(places)) for name, places in found.items() if places}


def test_no_private_name_is_touched_outside_the_seam():
    found = private_names_outside_the_seam()
    report = "\n".join(
        f"  {name}: " + ", ".join(f"{path}:{line}" for path, line in places)
        for name, places in sorted(found.items())
    )
    assert not found, (
        f"{len(found)} private names of Ray/torch are touched outside "
        f"rllib_ners/seam (move each access into a seam function named for the "
        f"concept, with a contract test):\n{report}"
    )


def test_the_scan_finds_each_kind_of_private_access(tmp_path, monkeypatch):
    """The scan behind the test above, on a module with one access of each
    kind it looks for (and one allowed `super()` call)."""
    package = tmp_path / "rllib_ners"
    package.mkdir()
    monkeypatch.setitem(globals(), "PACKAGE", package)  # places relative to it
    sample = package / "sample.py"
    sample.write_text(
        "import torch._dynamo\n"
        "from ray.rllib.utils import _private_helper\n"
        "class Runner:\n"
        "    def _get_clip_function(self):\n"
        "        self._ongoing_episodes = []\n"
        "        return super()._get_clip_function()\n"
        "def read(runner):\n"
        "    return runner._cached_to_module\n"
    )
    (scan,) = _scan([sample])
    assert set(scan.imported) == {"torch._dynamo", "_private_helper"}
    assert set(scan.touched) == {"_cached_to_module"}
    assert set(scan.self_stores) == {"_ongoing_episodes"}
    assert set(scan.super_of_own) == {"_get_clip_function"}
    assert scan.touched["_cached_to_module"] == [("rllib_ners/sample.py", 8)]


def _seam_functions() -> Dict[str, List[str]]:
    """Public functions and classes of each seam module."""
    names = {}
    for path in _package_files(seam=True):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(_module_name(path))
        names[path.stem] = [
            name
            for name, value in vars(module).items()
            if not name.startswith("_")
            and (inspect.isfunction(value) or inspect.isclass(value))
            and value.__module__ == module.__name__
        ]
    return names


def _names_used_in_definitions(source: str) -> Set[str]:
    """The names a module's functions (tests and their helpers) and classes
    (a base included) use: read or called, as a bare name or an attribute; an
    import alone does not count."""
    used = set()
    for definition in ast.walk(ast.parse(source)):
        if not isinstance(
            definition, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            continue
        for node in ast.walk(definition):
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.Attribute):
                used.add(node.attr)
    return used


def test_an_imported_but_unused_name_counts_as_untested():
    source = (
        "from rllib_ners.seam.algorithm import LocalReplayBufferHook\n"
        "from rllib_ners.seam.replay import log_add_metrics, log_sample_metrics\n"
        "class _Hooked(LocalReplayBufferHook):\n    pass\n"
        "def _helper():\n    return log_sample_metrics\n"
        "def test_it():\n    assert _helper()\n"
    )
    used = _names_used_in_definitions(source)
    assert {"log_sample_metrics", "LocalReplayBufferHook"} <= used
    assert "log_add_metrics" not in used


@pytest.mark.parametrize("module", sorted(_seam_functions()))
def test_every_seam_function_has_a_contract_test(module):
    tests = CONTRACT_TESTS / f"test_seam_{module}.py"
    assert tests.exists(), f"rllib_ners/seam/{module}.py has no {tests.name}"
    used = _names_used_in_definitions(tests.read_text())
    untested = [name for name in _seam_functions()[module] if name not in used]
    assert not untested, (
        f"rllib_ners/seam/{module}.py: no function in {tests.name} uses {untested}"
    )
