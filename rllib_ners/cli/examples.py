"""`rllib-ners examples`: list the tuned examples."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import List

from rllib_ners.cli.common import PROG, CLIError


def example_dirs() -> List[Path]:
    """tuned_examples/ next to the package (editable install) and from the CWD up."""
    candidates = [Path(__file__).resolve().parents[2] / "tuned_examples"]
    cwd = Path.cwd().resolve()
    candidates += [d / "tuned_examples" for d in (cwd, *cwd.parents)]
    found: List[Path] = []
    for candidate in candidates:
        if candidate.is_dir() and candidate.resolve() not in found:
            found.append(candidate.resolve())
    return found


def example_description(path: Path) -> str:
    """First line of a Python example's docstring, or a YAML `description`."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    if path.suffix == ".py":
        try:
            doc = ast.get_docstring(ast.parse(text)) or ""
        except SyntaxError:
            return "(syntax error)"
        return doc.strip().splitlines()[0] if doc.strip() else ""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return "(invalid YAML)"
    if isinstance(data, dict):
        if isinstance(data.get("description"), str):
            return data["description"].strip().splitlines()[0]
        for spec in data.values():
            if isinstance(spec, dict) and isinstance(spec.get("description"), str):
                return spec["description"].strip().splitlines()[0]
    for line in text.splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def cmd_examples(args: argparse.Namespace) -> int:
    directories = example_dirs()
    if not directories:
        raise CLIError(
            "no tuned_examples/ directory found next to the package or above the "
            "current directory"
        )
    for directory in directories:
        rows = []
        for path in sorted(directory.rglob("*")):
            if path.suffix not in (".py", ".yaml", ".yml") or path.name.startswith("_"):
                continue
            rows.append((str(path.relative_to(directory)), example_description(path)))
        print(f"Tuned examples in {directory}:")
        width = max((len(name) for name, _ in rows), default=0)
        for name, description in rows:
            print(f"  {name:<{width}}  {description}")
    print(f"Run one with: {PROG} train file <name> [--stop-iters N] [...]")
    return 0
