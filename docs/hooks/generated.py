"""MkDocs hooks: the parts of the site that the code itself defines.

A page asks for generated content with an HTML comment on a line of its own:

- `<!-- settings: rllib_ners.NERSSettings -->`: a table of a dataclass's fields
  (name, default, the meaning from its docstring's `Attributes:` section);
- `<!-- settings: rllib_ners.ACERConfig.training -->`: a table of a config
  method's arguments (the meaning from its `Args:` section, the default from a
  fresh config object);
- `<!-- defaults: rllib_ners.DDPGConfig vs rllib_ners.TD3Config -->`: the
  `training()` settings whose defaults differ between two configs, each
  config's fresh value side by side;
- `<!-- cli-help: train -->`: `rllib-ners train --help` as printed (no argument:
  `rllib-ners --help`; `study`, `study run`, ... for the study subcommands);
- `<!-- tuned-examples -->`: the tuned examples, with the first line of each
  docstring, as `rllib-ners examples` lists them;
- `<!-- include: results/sample_efficiency/report.md -->`: a file of the
  repository (a study's report, written by `rllib-ners study report` from the
  committed CSVs) without its title and its figure, which the page that
  includes it titles, shows and captions itself;
- `<!-- peers-table: sac -->`: the table of `benchmarks/peers.py --suite sac`
  from the runs committed under `docs/benchmarks/`, one column entry per run.

A speed figure written in a page's prose carries a marker right after it,
`0.90-0.96x<!-- speed: sac ners vs sb3 -->`: the range over the committed runs
of that suite of the arm's env steps/s relative to the other arm's (no `vs`:
the arm's env steps/s). `tests/docs/test_docs.py` recomputes every marked
figure from the committed runs (`speed_claim`) and fails where they differ.

So a renamed setting, a new CLI flag, a regenerated report or a new benchmark
run reaches the site without anyone editing a page, and the site cannot
disagree with `--help`.
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
    r"^<!-- (settings|defaults|cli-help|tuned-examples|include|peers-table)"
    r"(?:: (.*?))? -->$",
    re.M,
)
# Benchmark outputs the pages quote, one file per run: peers_<suite>_<date>_<n>.txt.
BENCHMARKS = REPO_ROOT / "docs" / "benchmarks"
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
    markdown = study_links_on_the_site(markdown, depth)

    def expand(match: re.Match) -> str:
        kind, argument = match.group(1), (match.group(2) or "").strip()
        if kind == "settings":
            return settings_table(argument)
        if kind == "defaults":
            return differing_defaults_table(*argument.split(" vs "))
        if kind == "cli-help":
            return "```text\n" + cli_help(argument.split()) + "\n```"
        if kind == "tuned-examples":
            return tuned_examples_table()
        if kind == "peers-table":
            return peers_table(argument, depth)
        return included_file(argument, depth)

    return DIRECTIVE.sub(expand, markdown)


def study_links_on_the_site(markdown: str, depth: int) -> str:
    """A page links a study's file by its repository path, relative to the
    page's source (`../results/...` from docs/, so the link works wherever the
    Markdown is read); the site serves the file at the same path under its
    root (`on_files`), one level up less."""
    return markdown.replace(
        "](" + "../" * (depth + 1) + "results/", "](" + "../" * depth + "results/"
    )


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


def differing_defaults_table(dotted_name: str, other_dotted_name: str) -> str:
    """A Markdown table of the `training()` settings (this package's, along the
    class's MRO) whose fresh defaults differ between two configs."""
    config, other = _import(dotted_name)(), _import(other_dotted_name)()
    rows = [
        (name, _literal(getattr(config, name)), _literal(getattr(other, name)))
        for name in package_training_settings(type(config))
        if getattr(config, name) != getattr(other, name)
    ]
    if not rows:
        raise ValueError(f"{dotted_name} and {other_dotted_name}: no default differs")
    first, second = type(config).__name__, type(other).__name__
    lines = [f"| setting | `{first}` | `{second}` |", "|---|---|---|"]
    lines += [f"| `{n}` | `{a}` | `{b}` |" for n, a, b in rows]
    return "\n".join(lines)


def package_training_settings(config_class) -> List[str]:
    """The settings of every `training()` this package defines along a config
    class's MRO (RLlib's own come in through `**kwargs`)."""
    names: List[str] = []
    for owner in config_class.__mro__:
        method = owner.__dict__.get("training")
        if method is None or not owner.__module__.startswith("rllib_ners."):
            continue
        for name, parameter in inspect.signature(method).parameters.items():
            if parameter.kind is parameter.KEYWORD_ONLY and name not in names:
                names.append(name)
    return names


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
    """A repository file's Markdown without its title (`# ...`) and its figures
    (the including page titles and captions them), links re-rooted."""
    path = REPO_ROOT / relative_path
    text = path.read_text()
    text = re.sub(r"\A# .*\n+", "", text)
    text = re.sub(r"^!\[[^\]]*\]\([^)]*\)\n?", "", text, flags=re.M)
    folder = Path(relative_path).parent.as_posix()
    up = "../" * page_depth

    def reroot(match: re.Match) -> str:
        target = match.group(2)
        if re.match(r"^[a-z]+:|^#|^/", target):
            return match.group(0)
        return f"{match.group(1)}({up}{folder}/{target})"

    return re.sub(r"(!?\[[^\]]*\])\(([^)]+)\)", reroot, textwrap.dedent(text))


# ---------------------------------------------------------------- benchmarks

PEERS_LABELS = {
    "sb3": "Stable-Baselines3 2.9",
    "ners": "ours with NERS (`.ners()` defaults)",
    "per": "ours with our PER buffer",
    "lap": "ours with LAP (our buffer)",
    "relo": "ours with ReLo (our buffer's ReLo sampler)",
    "laber": "ours with LaBER, m = 4 (our buffer's LaBER sampler)",
    "uniform": "ours with our uniform buffer",
    "rllib": "stock RLlib 2.60 with its PER buffer",
    "uniform-vec8": "ours with our uniform buffer, 8 envs per EnvRunner",
    "per-vec8": "ours with our PER buffer, 8 envs per EnvRunner",
    "floor": "floor: the bare updates and env steps",
}
REFERENCE_COLUMNS = {"sb3": "vs SB3 (wall)", "floor": "vs floor (wall)"}


class BenchmarkRun:
    """One committed output of `benchmarks/peers.py`: its header fields (`# key:
    value` lines), and per arm the columns of its table as printed."""

    def __init__(self, path: Path, header: Dict[str, str], arms: Dict[str, dict]):
        self.path, self.header, self.arms = path, header, arms

    def rate(self, arm: str) -> float:
        return float(self.arms[arm]["env steps/s"])

    def ratio(self, arm: str, reference: str) -> float:
        """The arm's env steps/s over the reference's: the printed column for SB3
        and the floor, else computed from the printed rates."""
        if reference in REFERENCE_COLUMNS:
            return float(self.arms[arm][REFERENCE_COLUMNS[reference]].rstrip("x"))
        return round(self.rate(arm) / self.rate(reference), 2)


def peers_runs(suite: str) -> List[BenchmarkRun]:
    """The committed runs of one suite, oldest first."""
    runs = []
    for path in sorted(BENCHMARKS.glob(f"peers_{suite}_*.txt")):
        header, arms, columns = {}, {}, None
        for line in path.read_text().splitlines():
            field = re.match(r"^# (\w[\w ]*): (.*)$", line)
            if field:
                header[field.group(1)] = field.group(2)
            elif line.startswith("| arm |"):
                columns = [c.strip() for c in line.strip("|").split("|")]
            elif columns and line.startswith("| ") and not line.startswith("|---"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                arms[cells[0]] = dict(zip(columns, cells))
        if not arms:
            raise ValueError(f"{path}: no results table")
        runs.append(BenchmarkRun(path, header, arms))
    if not runs:
        raise ValueError(f"no committed runs of the {suite} suite in {BENCHMARKS}")
    return runs


def speed_claim(suite: str, arm: str, reference: str | None = None) -> str:
    """A speed figure as the pages write it: the range over the suite's committed
    runs ("0.90-0.96x", or "0.96x" where they agree; env steps/s without `x`)."""
    runs = [
        r for r in peers_runs(suite) if arm in r.arms and (reference or arm) in r.arms
    ]
    if not runs:
        raise ValueError(f"no committed {suite} run has both {arm} and {reference}")
    if reference:
        values = sorted(r.ratio(arm, reference) for r in runs)
        low, high = f"{values[0]:.2f}", f"{values[-1]:.2f}"
        return (low if low == high else f"{low}-{high}") + "x"
    values = sorted(r.rate(arm) for r in runs)
    low, high = f"{values[0]:.0f}", f"{values[-1]:.0f}"
    return low if low == high else f"{low}-{high}"


SPEED_MARKER = re.compile(r"(\d[\d.-]*x?)<!-- speed: (\S+) (\S+)(?: vs (\S+))? -->")
# A figure quoted from another committed file: each of its numbers is in that file.
SOURCE_MARKER = re.compile(r"(\d[\d.,-]*x?)<!-- source: (\S+) -->")


def peers_table(suite: str, page_depth: int) -> str:
    """The suite's committed runs as one table: per arm, each run's env steps/s
    and ratios, run 1 first; then the runs' sources."""
    runs = peers_runs(suite)
    arms = {arm for run in runs for arm in run.arms}
    arms = [a for a in PEERS_LABELS if a in arms] + sorted(arms - set(PEERS_LABELS))
    references = [ref for ref in REFERENCE_COLUMNS if ref in runs[0].arms]
    header = ["arm", "env steps/s"] + [
        "vs SB3" if ref == "sb3" else "vs floor" for ref in references
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for arm in arms:
        cells = [PEERS_LABELS.get(arm, f"`{arm}`")]
        cells.append(
            " / ".join(
                r.arms[arm]["env steps/s"] if arm in r.arms else "-" for r in runs
            )
        )
        for ref in references:
            cells.append(
                " / ".join(
                    r.arms[arm][REFERENCE_COLUMNS[ref]] if arm in r.arms else "-"
                    for r in runs
                )
            )
        lines.append("| " + " | ".join(cells) + " |")
    up = "../" * page_depth
    sources = [
        f"[run {i}]("
        + up
        + f"benchmarks/{run.path.name}): {run.header.get('date', '?')}"
        + (f" (arms {run.header['arms']} only)" if "arms" in run.header else "")
        for i, run in enumerate(runs, 1)
    ]
    return (
        "\n".join(lines)
        + "\n\nRuns, in the order of each cell: "
        + "; ".join(sources)
        + "."
    )
