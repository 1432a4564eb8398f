"""MkDocs hooks: the parts of the site that the code itself defines.

A page asks for generated content with an HTML comment on a line of its own:

- `<!-- settings: rllib_ners.NERSSettings -->`: a table of a dataclass's fields
  (name, default, the meaning from its docstring's `Attributes:` section);
- `<!-- settings: rllib_ners.ACERConfig.training -->`: a table of a config
  method's arguments (the meaning from its `Args:` section, the default from a
  fresh config object);
- `<!-- cli-help: train -->`: `rllib-ners train --help` as printed (no argument:
  `rllib-ners --help`; `study`, `study run`, ... for the study subcommands);
- `<!-- tuned-examples -->`: the tuned examples, with the first line of each
  docstring, as `rllib-ners examples` lists them;
- `<!-- include: results/sample_efficiency/report.md -->`: a file of the
  repository (a study's report, written by `rllib-ners study report` from the
  committed CSVs), its headings moved two levels down and its images served.

So a renamed setting, a new CLI flag or a regenerated report reaches the site
without anyone editing a page, and the site cannot disagree with `--help`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import io
import os
import re
import textwrap
from pathlib import Path
from typing import Dict, List, Tuple

from mkdocs.structure.files import File

REPO_ROOT = Path(__file__).resolve().parents[2]
DIRECTIVE = re.compile(
    r"^<!-- (settings|cli-help|tuned-examples|include)(?:: (.*?))? -->$", re.M
)
# Study files the results page shows or links to, served at their repository path.
STUDY_FILES = ("results/*/report.png", "results/*/PLAN.md", "results/*/costs.md")


def on_files(files, config):
    """Adds the studies' figures and plans, which live under results/, to the site."""
    for pattern in STUDY_FILES:
        for path in sorted(REPO_ROOT.glob(pattern)):
            relative = path.relative_to(REPO_ROOT).as_posix()
            files.append(
                File(
                    relative,
                    src_dir=str(REPO_ROOT),
                    dest_dir=config["site_dir"],
                    use_directory_urls=config["use_directory_urls"],
                )
            )
    return files


def on_page_markdown(markdown, page, config, files):
    depth = page.file.src_uri.count("/")

    def expand(match: re.Match) -> str:
        kind, argument = match.group(1), (match.group(2) or "").strip()
        if kind == "settings":
            return settings_table(argument)
        if kind == "cli-help":
            return "```text\n" + cli_help(argument.split()) + "\n```"
        if kind == "tuned-examples":
            return tuned_examples_table()
        return included_file(argument, depth)

    return DIRECTIVE.sub(expand, markdown)


# ------------------------------------------------------------------ settings


def settings_table(dotted_name: str) -> str:
    """A Markdown table of a dataclass's fields or a config method's arguments."""
    target = _import(dotted_name)
    rows: List[Tuple[str, str, str]] = []
    if dataclasses.is_dataclass(target):
        meanings = _docstring_section(inspect.getdoc(target), "Attributes")
        for field in dataclasses.fields(target):
            default = field.default
            if default is dataclasses.MISSING:
                default = field.default_factory()  # type: ignore[misc]
            rows.append((field.name, _literal(default), meanings.get(field.name, "")))
    else:
        owner = _import(dotted_name.rsplit(".", 1)[0])
        fresh = owner()
        meanings = _docstring_section(inspect.getdoc(target), "Args")
        for name in inspect.signature(target).parameters:
            if name in ("self", "kwargs"):
                continue
            default = getattr(fresh, name, None)
            rows.append((name, _literal(default), meanings.get(name, "")))
    missing = [name for name, _, meaning in rows if not meaning]
    if missing:
        raise ValueError(
            f"{dotted_name}: no docstring entry for {missing}; document every "
            "setting where it is defined, the site's table is generated from it."
        )
    lines = ["| setting | default | meaning |", "|---|---|---|"]
    lines += [f"| `{n}` | `{d}` | {_one_cell(m)} |" for n, d, m in rows]
    return "\n".join(lines)


def _import(dotted_name: str):
    module_name, _, attribute = dotted_name.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError):
        owner = _import(module_name)
        return getattr(owner, attribute)


def _docstring_section(docstring: str, section: str) -> Dict[str, str]:
    """`name: text` entries of a Google-style docstring section, joined lines."""
    entries: Dict[str, str] = {}
    lines = (docstring or "").splitlines()
    try:
        start = lines.index(f"{section}:") + 1
    except ValueError:
        return entries
    name = None
    for line in lines[start:]:
        if line and not line.startswith(" "):
            break  # the next section
        stripped = line.strip()
        entry = re.match(r"^    (\w+)(?: \(.*?\))?: ?(.*)$", line)
        if entry:
            name = entry.group(1)
            entries[name] = entry.group(2)
        elif name and stripped:
            entries[name] += " " + stripped
    return entries


def _literal(value) -> str:
    return repr(value).replace("|", "\\|")


def _one_cell(text: str) -> str:
    """Escapes the pipes a table cell holds outside code spans (inside, the
    tables extension leaves them alone)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts)


# ------------------------------------------------------------------ commands


def cli_help(words: List[str]) -> str:
    """What `rllib-ners WORDS --help` prints, at a fixed width of 88 columns."""
    from rllib_ners.cli import main

    os.environ["COLUMNS"] = "88"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([*words, "--help"])
    if code != 0:
        raise ValueError(f"`rllib-ners {' '.join(words)} --help` exited with {code}")
    return out.getvalue().rstrip()


def tuned_examples_table() -> str:
    from rllib_ners.cli.examples import example_description

    root = REPO_ROOT / "tuned_examples"
    lines = ["| example | what it runs |", "|---|---|"]
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".py", ".yaml") or path.name.startswith("_"):
            continue
        name = path.relative_to(root).as_posix()
        lines.append(f"| `{name}` | {_one_cell(example_description(path))} |")
    return "\n".join(lines)


def included_file(relative_path: str, page_depth: int) -> str:
    """A repository file's Markdown, headings two levels down, links re-rooted."""
    path = REPO_ROOT / relative_path
    text = path.read_text()
    text = re.sub(r"^(#+) ", r"##\1 ", text, flags=re.M)
    folder = Path(relative_path).parent.as_posix()
    up = "../" * page_depth

    def reroot(match: re.Match) -> str:
        target = match.group(2)
        if re.match(r"^[a-z]+:|^#|^/", target):
            return match.group(0)
        return f"{match.group(1)}({up}{folder}/{target})"

    return re.sub(r"(!?\[[^\]]*\])\(([^)]+)\)", reroot, textwrap.dedent(text))
