"""Each package whose `__init__` docstring maps its modules names every one.

A reader finds their way through a package by its map (one line per module in
the `__init__` docstring), so a map that misses a module misleads. This fails
when a module or sub-package is added, moved or renamed without its line,
naming what the map leaves out. A name counts as mapped when it is part of a
code span (`` `atari` ``, `` `ners_config.NERSConfigMixin` ``,
`` `rllib_ners.env.atari_rllib` ``) or labels a line (`algorithm: ...`, the
seam's layout). Entry points (`__main__`) need no line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Set

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "rllib_ners"

# Package (under rllib_ners/) -> whether its map also names the modules of its
# sub-packages (`algorithms/common` maps those of config/, training/, learner/).
MAPPED = {
    "algorithms": False,
    "algorithms/common": True,
    "algorithms/ners": True,
    "cli": False,
    "env": False,
    "ners": False,
    "replay_buffers": False,
    "seam": False,
    "study": False,
    "utils": False,
}


def _members(package: Path, recursive: bool) -> Set[str]:
    """The modules and sub-packages of `package` its map must name."""
    names = set()
    for path in package.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            names.add(path.name)
            if recursive:
                names |= _members(path, recursive=True)
        elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
            names.add(path.stem)
    return names


def _mapped_names(docstring: str) -> Set[str]:
    """The identifiers in the docstring's code spans and line labels."""
    spans = re.findall(r"`([^`]+)`", docstring)
    in_code = {part for span in spans for part in re.split(r"\W+", span) if part}
    labels = set(re.findall(r"^\s*(\w+):", docstring, re.MULTILINE))
    return in_code | labels


def _left_out(init: Path, recursive: bool) -> Set[str]:
    """What the map in package `__init__` file `init` does not name."""
    docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
    return _members(init.parent, recursive) - _mapped_names(docstring)


@pytest.mark.parametrize("package", sorted(MAPPED))
def test_the_package_map_names_every_module(package):
    init = PACKAGE_ROOT / package / "__init__.py"
    assert init.exists(), f"rllib_ners/{package} moved: update MAPPED"
    left_out = _left_out(init, MAPPED[package])
    assert left_out == set(), (
        f"rllib_ners/{package}/__init__.py's docstring map leaves out "
        f"{sorted(left_out)}: give each a line saying what it holds"
    )


def test_the_map_check_sees_a_missing_module(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(
        '"""Map.\n\n* `mapped`: here;\n* `sub.deep.Thing`: there;\nlabelled: too.\n'
        'Free text naming forgotten does not count."""\n'
    )
    for name in ("mapped", "labelled", "forgotten", "__main__"):
        (package / f"{name}.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "deep.py").write_text("")
    (package / "sub" / "hidden.py").write_text("")
    init = package / "__init__.py"
    assert _left_out(init, recursive=False) == {"forgotten"}
    assert _left_out(init, recursive=True) == {"forgotten", "hidden"}
