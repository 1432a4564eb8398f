"""How the package's modules may import each other, checked on their source.

* `rllib_ners.cli`, the `rllib-ners` command line, is the outer layer: it
  imports the library (`rllib-ners study` runs `rllib_ners.study.cli`), and no
  module outside `cli/` imports it; `rllib_ners.study`, a library feature
  (declare, run and report a study), least of all. What both need lives
  outside `cli/` (`rllib_ners.env.greedy_action`, `rllib_ners.utils.log_noise`).
* No module of the package imports an underscore (private) name of another of
  its modules: a name another module needs is public, with a docstring.

Each check walks every import, those inside functions included, with relative
imports resolved, and fails naming the places.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Tuple

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "rllib_ners"
CLI = "rllib_ners.cli"

# (line, absolute module name, names of a `from` import: () for `import x`)
Import = Tuple[int, str, Tuple[str, ...]]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The module a `from` import names, a relative one resolved from `module`."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_import_call(node: ast.AST) -> bool:
    """`importlib.import_module("x")`, `import_module("x")` or `__import__("x")`."""
    if not (isinstance(node, ast.Call) and node.args):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    first = node.args[0]
    return (
        name in ("import_module", "__import__")
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
    )


def _imports(source: str, module: str, is_package: bool = False) -> Iterator[Import]:
    """Every import of a module's `source`, at any depth."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            yield node.lineno, _absolute(node, module, is_package), names
        elif _is_import_call(node):
            yield node.lineno, node.args[0].value, ()


def _package_imports(*subpackages: str) -> Iterator[Tuple[str, Import]]:
    """("path:line", import) of every module under `rllib_ners/<subpackage>`
    (the whole package without `subpackages`)."""
    roots = [PACKAGE_ROOT / name for name in subpackages] or [PACKAGE_ROOT]
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            is_package = path.name == "__init__.py"
            for found in _imports(path.read_text(), _module_name(path), is_package):
                place = f"{path.relative_to(PACKAGE_ROOT.parent)}:{found[0]}"
                yield place, found


def _reaches(found: Import, target: str) -> bool:
    """Whether an import loads module `target` or one inside it (`from
    rllib_ners import cli` loads `rllib_ners.cli`)."""
    _, module, names = found
    loaded = [module, *(f"{module}.{name}" for name in names)]
    return any(name == target or name.startswith(target + ".") for name in loaded)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_names(found: Import) -> List[str]:
    """The underscore names a `from rllib_ners...` import takes, and a private
    module it names (`rllib_ners.x._y`)."""
    _, module, names = found
    if module.split(".")[0] != "rllib_ners":
        return []  # Ray's and torch's: tests/rllib_contract/test_private_names.py
    private = [part for part in module.split(".") if _is_private(part)]
    return private + [name for name in names if _is_private(name)]


def _imports_of_the_cli(*subpackages: str) -> List[str]:
    return [
        f"{place}: {found[1]} {', '.join(found[2])}".rstrip()
        for place, found in _package_imports(*subpackages)
        if _reaches(found, CLI) and not place.startswith("rllib_ners/cli/")
    ]


def test_study_never_imports_the_cli():
    study_files = {p.name for p in (PACKAGE_ROOT / "study").glob("*.py")}
    assert {"runs.py", "cli.py"} <= study_files, "rllib_ners/study moved"
    upward = _imports_of_the_cli("study")
    assert upward == [], (
        "rllib_ners.study imports the command line (move what both need out of "
        "rllib_ners/cli):\n" + "\n".join(upward)
    )


def test_only_the_cli_imports_the_cli():
    """The command line is the package's outer layer: the library under it
    (algorithms, buffers, envs, the study harness, ...) never imports it."""
    upward = _imports_of_the_cli()
    assert upward == [], (
        "the library imports the command line (move what both need out of "
        "rllib_ners/cli):\n" + "\n".join(upward)
    )


def test_the_layer_check_sees_every_kind_of_import():
    sample = """
import rllib_ners.cli.common
from rllib_ners import cli
from ..cli.evaluate import something
from rllib_ners.study.cli import main
from rllib_ners.clip import unrelated


def later():
    import importlib

    from rllib_ners.cli.session import ray_session

    importlib.import_module("rllib_ners.cli.train")
"""
    found = _imports(sample, "rllib_ners.study.runs")
    flagged = [imp[0] for imp in found if _reaches(imp, CLI)]
    assert flagged == [2, 3, 4, 12, 14]


def test_no_module_imports_a_private_name_of_another():
    private = [
        f"{place}: from {found[1]} import {', '.join(_private_names(found))}"
        for place, found in _package_imports()
        if _private_names(found)
    ]
    assert private == [], (
        "private names imported across modules (make the name public, with a "
        "docstring, or move the code to where it is used):\n" + "\n".join(private)
    )


def test_the_private_name_check_sees_every_kind_of_import():
    sample = """
from rllib_ners.cli.common import CLIError, _one_line
from rllib_ners.utils._hidden import helper
from ray.rllib.utils.metrics import _private_of_ray
from rllib_ners import __version__


def later():
    from .common import (
        PROG,
        _last_line,
    )
"""
    found = _imports(sample, "rllib_ners.cli.train")
    flagged = {imp[0]: _private_names(imp) for imp in found if _private_names(imp)}
    assert flagged == {2: ["_one_line"], 3: ["_hidden"], 9: ["_last_line"]}
