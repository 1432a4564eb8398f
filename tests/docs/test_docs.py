"""The documentation cannot rot: the site builds strictly, its Python examples
run, its generated tables cover the code, and the README keeps its promises.

The examples of a page run in one fresh Python process, in order (a later block
may use an earlier block's names), with Ray started by the first one that needs
it and shut down at the end. A block that cannot run here starts with
`# docs: not run (<why>)`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
NOT_RUN = re.compile(r"^# docs: not run \(.+\)", re.M)
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
README_MAX_BYTES = 12 * 1024

pytestmark = pytest.mark.filterwarnings("ignore")


def _pages():
    return sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)


def _python_blocks(path: Path):
    return [b for b in PYTHON_BLOCK.findall(path.read_text()) if not NOT_RUN.match(b)]


def _pages_with_examples():
    pages = [p for p in _pages() if _python_blocks(p)]
    return pages + [README]


def _relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """`mkdocs build --strict` into a temporary folder; returns the folder."""
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, (
        "mkdocs build --strict failed (broken links, missing API objects or bad "
        f"references):\n{completed.stdout}\n{completed.stderr}"
    )
    return site


def _text(html_path: Path) -> str:
    return re.sub(r"<[^>]+>", " ", html_path.read_text())


def test_the_site_builds_strictly(built_site):
    assert (built_site / "index.html").is_file()
    for page in _pages():
        relative = page.relative_to(DOCS).with_suffix("")
        html = built_site / (
            "index.html" if relative.name == "index" else f"{relative}/index.html"
        )
        assert html.is_file(), f"{page} was not built"
        assert "<!-- settings:" not in html.read_text(), f"{page}: unexpanded directive"


def test_the_api_reference_documents_every_public_name(built_site):
    import rllib_ners

    documented = set(
        re.findall(r"^::: rllib_ners\.(\w+)$", (DOCS / "api.md").read_text(), re.M)
    )
    public = set(rllib_ners.__all__) - {"__version__"}
    assert documented == public, (
        f"docs/api.md lacks {sorted(public - documented)} and documents names "
        f"outside __all__: {sorted(documented - public)}"
    )
    api = (built_site / "api" / "index.html").read_text()
    for name in public:
        assert f'id="rllib_ners.{name}"' in api, f"{name} has no entry on the API page"


def test_the_settings_tables_are_generated_from_the_code(built_site):
    from rllib_ners import ACERConfig, NERSSettings

    ners_page = _text(built_site / "ners" / "index.html")
    for field in dataclasses.fields(NERSSettings):
        row = re.search(
            rf"{field.name}\s*</code>\s*</td>\s*<td>\s*<code>([^<]*)",
            (built_site / "ners" / "index.html").read_text(),
        )
        assert row, f"NERSSettings.{field.name} is missing from the NERS page's table"
        assert row.group(1) == repr(field.default), (field.name, row.group(1))
    assert "diagnostics_sample_size" in ners_page
    acer_page = (built_site / "algorithms" / "acer" / "index.html").read_text()
    row = re.search(r"replay_ratio\s*</code>\s*</td>\s*<td>\s*<code>([^<]*)", acer_page)
    assert row and row.group(1) == repr(ACERConfig().replay_ratio)


def test_the_cli_page_prints_what_the_cli_prints(built_site):
    import contextlib
    import io

    from rllib_ners.cli import main

    cli_page = (built_site / "cli" / "index.html").read_text()
    os.environ["COLUMNS"] = "88"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["train", "--help"]) == 0
    for line in out.getvalue().splitlines():
        flags = re.findall(r"--[a-z][a-z-]+", line)
        for flag in flags:
            assert flag in cli_page, f"`rllib-ners train {flag}` is not on the CLI page"
    for example in sorted((REPO / "tuned_examples").rglob("*.py")):
        name = example.relative_to(REPO / "tuned_examples").as_posix()
        assert name in cli_page, f"tuned example {name} is not listed on the CLI page"


def _run_examples(blocks, where: str, tmp_path: Path) -> None:
    """Runs `blocks` in order in one fresh Python process; fails with its output."""
    program = "\n\n".join(
        f"print('--- block {i + 1} of {len(blocks)}', flush=True)\n{textwrap.dedent(b)}"
        for i, b in enumerate(blocks)
    )
    program = (
        "import logging, ray\n"
        "logging.disable(logging.WARNING)\n"
        "try:\n" + textwrap.indent(program, "    ") + "\n"
        "finally:\n    ray.shutdown()\n"
    )
    script = tmp_path / "examples.py"
    script.write_text(program)
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "OMP_NUM_THREADS": "1",
    }
    completed = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, (
        f"an example of {where} failed:\n{completed.stdout[-3000:]}\n"
        f"{completed.stderr[-5000:]}"
    )


@pytest.mark.parametrize("page", _pages_with_examples(), ids=_relative)
def test_the_python_examples_on_a_page_run(page, tmp_path):
    blocks = _python_blocks(page)
    assert blocks, f"{page} has no Python examples"
    _run_examples(blocks, _relative(page), tmp_path)


def _api_docstrings():
    """(name, docstring) of every object the API page renders, with the members
    it lists."""
    import inspect

    import rllib_ners

    api = (DOCS / "api.md").read_text()
    entries = re.findall(r"^::: rllib_ners\.(\w+)\n((?:    .*\n)*)", api, re.M)
    docstrings = []
    for name, options in entries:
        target = getattr(rllib_ners, name)
        docstrings.append((name, inspect.getdoc(target) or ""))
        members = re.search(r"members: \[(.*)\]", options)
        for member in members.group(1).split(", ") if members else []:
            docstrings.append(
                (f"{name}.{member}", inspect.getdoc(getattr(target, member)) or "")
            )
    return docstrings


def _api_objects_with_examples():
    return [name for name, doc in _api_docstrings() if PYTHON_BLOCK.search(doc)]


@pytest.mark.parametrize("name", _api_objects_with_examples())
def test_the_python_examples_in_the_api_reference_run(name, tmp_path):
    doc = dict(_api_docstrings())[name]
    blocks = [b for b in PYTHON_BLOCK.findall(doc) if not NOT_RUN.match(b)]
    _run_examples(blocks, f"rllib_ners.{name}'s docstring", tmp_path)


def test_every_path_the_docs_name_exists():
    named = re.compile(
        r"(?:tuned_examples|benchmarks|tests|results|rllib_ners)/[\w./-]+\.(?:py|md|sh|png|yaml)"
    )
    missing = []
    for page in [*_pages(), README]:
        for path in set(named.findall(page.read_text())):
            candidates = [REPO / path, REPO / "tuned_examples" / path]
            if not any(c.exists() for c in candidates):
                missing.append(f"{_relative(page)}: {path}")
    assert not missing, "the docs name files that do not exist:\n" + "\n".join(missing)


def _option_values(words, option):
    """The words after `option` up to the next option, or None without it."""
    if option not in words:
        return None
    taken = []
    for word in words[words.index(option) + 1 :]:
        if word.startswith("--"):
            break
        taken.append(word)
    return taken


def test_the_study_reports_cover_the_committed_runs():
    from rllib_ners.study.results import load_runs

    reports = sorted(REPO.glob("results/*/report.md"))
    assert reports
    for report in reports:
        text = report.read_text()
        command = re.search(r"Generated by `rllib-ners study report ([^`]*)`", text)
        stated = re.search(r"^(\d+) finished runs", text, re.M)
        assert command and stated, f"{report}: no generating command or run count"
        words = shlex.split(command.group(1))
        folders = _option_values(words, "--results-dir") + (
            _option_values(words, "--also") or []
        )
        runs = [run for folder in folders for run in load_runs(REPO / folder)[0]]
        if _option_values(words, "--arms"):
            runs = [r for r in runs if r.arm in _option_values(words, "--arms")]
        if _option_values(words, "--tasks"):
            runs = [r for r in runs if r.task in _option_values(words, "--tasks")]
        if _option_values(words, "--seeds"):
            seeds = {int(seed) for seed in _option_values(words, "--seeds")}
            runs = [r for r in runs if r.seed in seeds]
        assert len(runs) == int(stated.group(1)), (
            f"{_relative(report)} reports {stated.group(1)} runs but the CSVs hold "
            f"{len(runs)}: regenerate it with `rllib-ners study report "
            f"{command.group(1)}`"
        )


def test_the_readme_is_short_and_starts_with_the_two_set_up_commands():
    text = README.read_text()
    assert len(text.encode()) <= README_MAX_BYTES, (
        f"README.md is {len(text.encode())} bytes; keep it under "
        f"{README_MAX_BYTES} and move details to docs/"
    )
    commands = re.findall(r"^```bash\n(.*?)\n```", text, re.S | re.M)
    assert commands[:2] == [
        "pip install torch==2.13.0 -e . && python tuned_examples/ners_dqn/"
        "cartpole_ners_dqn.py --num-env-runners=0",
        'pip install torch==2.13.0 -e ".[test]" && python -m pytest',
    ], commands[:2]
    ci = (REPO / ".ci" / "run").read_text()
    assert commands[1] in ci, ".ci/run must call the README's test command"


def test_the_readmes_links_lead_somewhere():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert targets
    broken = [t for t in targets if "://" not in t and not (REPO / t).exists()]
    assert not broken, f"README.md links to missing files: {broken}"
