"""The documentation cannot rot: the site builds strictly, its Python examples
run, its generated tables cover the code, and the README keeps its promises.

The examples of a page run in order (a later block may use an earlier block's
names) in a namespace of their own. All the selected pages and docstrings share
one Python process and the Ray instance the first example that needs one starts:
a process and a Ray start per page cost more than most pages' examples. A block
that cannot run here starts with `# docs: not run (<why>)`.
"""

from __future__ import annotations

import dataclasses
import json
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


def _api_sources() -> list:
    """The API reference's pages, docs/api/*.md."""
    return sorted((DOCS / "api").glob("*.md"))


def _api_articles(site: Path) -> list:
    """(site-relative path, article HTML) of every built API page, in the order
    of mkdocs.yml's nav (a page the nav leaves out last)."""
    nav = re.findall(
        r":\s*api/([\w-]+)\.md\s*$", (REPO / "mkdocs.yml").read_text(), re.M
    )
    order = [("api/" if n == "index" else f"api/{n}/") + "index.html" for n in nav]
    pages = [(r, a) for r, a in _built_pages(site) if r.startswith("api/")]
    rank = {relative: i for i, relative in enumerate(order)}
    return sorted(pages, key=lambda page: (rank.get(page[0], len(order)), page[0]))


def test_the_api_reference_documents_every_public_name(built_site):
    import collections

    import rllib_ners

    entries = collections.Counter(
        name
        for page in _api_sources()
        for name in re.findall(r"^::: rllib_ners\.(\w+)$", page.read_text(), re.M)
    )
    documented = set(entries)
    public = set(rllib_ners.__all__) - {"__version__"}
    assert documented == public, (
        f"docs/api/*.md lack {sorted(public - documented)} and document names "
        f"outside __all__: {sorted(documented - public)}"
    )
    twice = sorted(name for name, count in entries.items() if count > 1)
    assert not twice, f"names with more than one entry on the API pages: {twice}"
    api = "".join(article for _, article in _api_articles(built_site))
    for name in public:
        assert f'id="rllib_ners.{name}"' in api, f"{name} has no entry on the API pages"


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


EXAMPLE_TESTS = (
    "test_the_python_examples_on_a_page_run",
    "test_the_python_examples_in_the_api_reference_run",
)

# Runs each (where, program) of a JSON list in a namespace of its own, in order,
# and writes {where: traceback or None} as JSON after each one, so that a crash
# still leaves the verdicts of the examples before it. Ray stays up between them;
# a program that starts Ray itself gets a fresh start.
EXAMPLES_RUNNER = """
import json, logging, sys, traceback
import ray

logging.disable(logging.WARNING)
examples = json.loads(open(sys.argv[1]).read())
verdicts = {}
try:
    for where, program in examples:
        print(f"=== examples of {where}", flush=True)
        print(f"=== examples of {where}", file=sys.stderr, flush=True)
        if "ray.init(" in program:
            ray.shutdown()
        try:
            exec(compile(program, where, "exec"), {"__name__": "__main__"})
            verdicts[where] = None
        except BaseException:
            verdicts[where] = traceback.format_exc()
        open(sys.argv[2], "w").write(json.dumps(verdicts))
finally:
    ray.shutdown()
"""


def _example_program(blocks) -> str:
    return "\n\n".join(
        f"print('--- block {i + 1} of {len(blocks)}', flush=True)\n{textwrap.dedent(b)}"
        for i, b in enumerate(blocks)
    )


def _section(output: str, where: str) -> str:
    """The part of the runner's `output` that the examples of `where` printed."""
    parts = re.split(r"^=== examples of (.+)$", output, flags=re.M)
    printed = dict(zip(parts[1::2], parts[2::2], strict=True))
    return printed.get(where, "")


def _examples_of(page: Path | None = None, name: str | None = None) -> tuple:
    """(where, blocks): the examples of a docs `page`, or of the docstring of
    `rllib_ners.<name>`; the parameters of the two example tests."""
    if page is not None:
        return _relative(page), _python_blocks(page)
    return f"rllib_ners.{name}'s docstring", _docstring_blocks(name)


def _selected_examples(session) -> list:
    """(where, blocks) of every example test this session runs, in test order."""
    return [
        _examples_of(**item.callspec.params)
        for item in session.items
        if getattr(item, "originalname", None) in EXAMPLE_TESTS
    ]


@pytest.fixture(scope="module")
def example_verdicts(request, tmp_path_factory):
    """Runs the examples of every selected page and docstring in one process;
    returns (where -> traceback or None, stdout, stderr, how the process ended).
    Examples the process did not finish have no verdict."""
    folder = tmp_path_factory.mktemp("examples")
    examples = [
        (where, _example_program(blocks))
        for where, blocks in _selected_examples(request.session)
    ]
    (folder / "examples.json").write_text(json.dumps(examples))
    (folder / "runner.py").write_text(EXAMPLES_RUNNER)
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "OMP_NUM_THREADS": "1",
    }
    try:
        completed = subprocess.run(
            [sys.executable, "runner.py", "examples.json", "verdicts.json"],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=300 * len(examples) + 300,
        )
        stdout, stderr = completed.stdout, completed.stderr
        ending = f"exit code {completed.returncode}"
    except subprocess.TimeoutExpired as timed_out:
        stdout, stderr = (
            (stream.decode() if isinstance(stream, bytes) else stream or "")
            for stream in (timed_out.stdout, timed_out.stderr)
        )
        ending = f"killed after {timed_out.timeout} s"
    verdicts_file = folder / "verdicts.json"
    verdicts = json.loads(verdicts_file.read_text()) if verdicts_file.exists() else {}
    return verdicts, stdout, stderr, ending


def _check_examples(where: str, blocks, example_verdicts) -> None:
    """Fails with the examples' output and traceback unless those of `where`
    ran to the end."""
    assert blocks, f"{where} has no Python examples"
    verdicts, stdout, stderr, ending = example_verdicts
    if where not in verdicts:
        pytest.fail(
            f"the process that runs the examples ended ({ending}) before the "
            f"examples of {where} finished:\n{stdout[-3000:]}\n{stderr[-5000:]}"
        )
    assert verdicts[where] is None, (
        f"an example of {where} failed:\n{_section(stdout, where)[-3000:]}\n"
        f"{_section(stderr, where)[-3000:]}\n{verdicts[where]}"
    )


@pytest.mark.parametrize("page", _pages_with_examples(), ids=_relative)
def test_the_python_examples_on_a_page_run(page, example_verdicts):
    _check_examples(*_examples_of(page=page), example_verdicts)


def _api_docstrings():
    """(name, docstring) of every object the API pages render, with the members
    they list."""
    import inspect

    import rllib_ners

    api = "\n".join(page.read_text() for page in _api_sources())
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


def _docstring_blocks(name: str) -> list:
    doc = dict(_api_docstrings())[name]
    return [b for b in PYTHON_BLOCK.findall(doc) if not NOT_RUN.match(b)]


@pytest.mark.parametrize("name", _api_objects_with_examples())
def test_the_python_examples_in_the_api_reference_run(name, example_verdicts):
    _check_examples(*_examples_of(name=name), example_verdicts)


def test_every_path_the_docs_name_exists():
    named = re.compile(
        r"(?:tuned_examples|benchmarks|tests|results|rllib_ners)/[\w./-]+\.(?:py|md|sh|png|yaml)"
    )
    missing = []
    for page in [*_pages(), README]:
        for path in set(named.findall(page.read_text())):
            candidates = [REPO / path, REPO / "tuned_examples" / path]
            # A link to another page of the site (docs/results/*.md).
            candidates += [page.parent / path, DOCS / path]
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


def test_the_pages_links_lead_somewhere_read_as_markdown():
    """The pages read as Markdown in the repository too (README says so): each
    relative link names a file that exists there, relative to its page. The
    site serves the studies' files at the same paths (the hook's
    `study_links_on_the_site`), which `mkdocs build --strict` checks."""
    broken = []
    for page in _pages():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{_relative(page)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


# ------------------------------------------------------- the site as read


def _generated_hook():
    """docs/hooks/generated.py, the module that expands the pages' directives."""
    import importlib.util

    path = DOCS / "hooks" / "generated.py"
    spec = importlib.util.spec_from_file_location("docs_hooks_generated", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _built_pages(site: Path):
    """(site-relative path, the page's article HTML) of every built page."""
    pages = []
    for path in sorted(site.rglob("index.html")):
        article = re.search(r"<article[^>]*>(.*)</article>", path.read_text(), re.S)
        if article:
            pages.append((path.relative_to(site).as_posix(), article.group(1)))
    return pages


def _plain(html_text: str) -> str:
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", html_text))


# The pre-registered plans and their cost evidence: their dated amendments are
# their record.
PLAN_PAGES = re.compile(r"^results/[^/]+/(PLAN|costs)/index\.html$")


def check_tables_render(site: Path) -> list:
    """Pages where a Markdown table reached the reader as text."""
    return [
        relative
        for relative, article in _built_pages(site)
        if re.search(r"\|\s*-{3,}\s*\|", _plain(article))
    ]


def check_paragraphs_end_a_sentence(site: Path) -> list:
    """Paragraphs whose text stops without a full stop, colon, question or
    exclamation mark (a sentence cut off, or a caption left bare)."""
    unfinished = []
    for relative, article in _built_pages(site):
        article = re.sub(r"<pre.*?</pre>", "", article, flags=re.S)
        for paragraph in re.findall(r"<p>(.*?)</p>", article, re.S):
            text = " ".join(_plain(paragraph).split())
            if text and not re.search(r"[.:!?][)\"'*_]*$", text):
                unfinished.append(f"{relative}: ...{text[-70:]}")
    return unfinished


# The project's own history: work items, work sessions, the machines they ran
# on and what changed since belong in the commit log, not on the pages a user
# reads, the plans and their cost pages included. A page says what holds now.
HISTORY = re.compile(
    r"\bissues? #?\d+|\bthe issue(?:'s)?\b|\bstop's\b|\b(?:first|second|third|"
    r"fourth|fifth|previous|this|that|earlier|later|last|next) stops?\b|"
    r"\bstops? \d\b|\bVMs?\b|\b(?:three|two|several|this|that|earlier|previous|"
    r"later|next) sessions?\b|\bthe session (?:that|which)\b|"
    r"\bthe project's machines\b|\btoday(?:'s)?\b|\bfixed since\b|"
    r"\bbuilt after (?:that|this|the) runs?\b|\bprevious (?:version|default)s?\b|"
    r"\bwas lent\b|\b(?:the|our) (?:target|goal) was\b|"
    r"\bsince the \w+ was written\b|\bjoined the package\b",
    re.I,
)
# Amendments belong to a pre-registered plan's record, and nowhere else.
AMENDMENT = re.compile(r"\bamendments?\b", re.I)


def check_no_project_history(site: Path) -> list:
    leaks = []
    for relative, article in _built_pages(site):
        text = " ".join(_plain(article).split())
        words = [HISTORY] if PLAN_PAGES.match(relative) else [HISTORY, AMENDMENT]
        for pattern in words:
            for match in pattern.finditer(text):
                start = max(match.start() - 40, 0)
                leaks.append(f"{relative}: ...{text[start : match.end() + 20]}...")
    return leaks


def test_every_table_renders_as_a_table(built_site):
    raw = check_tables_render(built_site)
    assert not raw, (
        "these pages show a Markdown table as text (a table needs a blank line "
        f"before it): {raw}"
    )


def test_every_paragraph_ends_a_sentence(built_site):
    unfinished = check_paragraphs_end_a_sentence(built_site)
    assert not unfinished, "paragraphs that stop mid-sentence:\n" + "\n".join(
        unfinished
    )


def test_no_page_tells_the_projects_history(built_site):
    leaks = check_no_project_history(built_site)
    assert not leaks, (
        "pages speak of the project's work history (issues, stops, sessions, "
        "VMs, what changed since; amendments outside the study plans): say what "
        "holds now instead:\n" + "\n".join(leaks)
    )


def _blocks(article: str) -> list:
    """The plain text of each paragraph, list item and table row of a page."""
    return [
        " ".join(_plain(block).split())
        for _, block in re.findall(r"<(p|li|tr)\b[^>]*>(.*?)</\1>", article, re.S)
    ]


def _readme_blocks() -> list:
    """The README's paragraphs, list items and table rows."""
    text = re.sub(r"^```.*?^```", "", README.read_text(), flags=re.S | re.M)
    return [
        " ".join(block.split())
        for block in re.split(r"\n\s*\n|\n(?=- |\| )", text)
        if block.strip()
    ]


def _names(text: str, *names: str) -> bool:
    """Whether `text` names any of `names` as a word of its own."""
    return any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text) for n in names)


# Every algorithm that takes `.ners(...)`, each by its names on the pages.
NERS_ALGORITHMS = {
    "NERS-DQN": ("NERS-DQN", "NERSDQNConfig"),
    "NERS-SAC": ("NERS-SAC", "NERSSACConfig"),
    "ACER": ("ACER", "ACERConfig"),
    "TD3": ("TD3", "TD3Config", "NERS-TD3"),
}


def check_algorithm_lists(blocks) -> list:
    """Lists of algorithms that left some out: a list of the Tune names
    (`rllib_ners.TUNE_NAMES`) without all of them, and a list of the NERS
    algorithms (naming NERS-DQN, NERS-SAC and ACER) without TD3.

    `blocks` are (where, text) pairs."""
    import rllib_ners

    tune_names = list(rllib_ners.TUNE_NAMES)
    problems = []
    for where, text in blocks:
        named = [n for n in tune_names if _names(text, n)]
        if "RainbowDQN" in named and len(named) >= 3 and len(named) < len(tune_names):
            missing = sorted(set(tune_names) - set(named))
            problems.append(f"{where}: lists Tune names without {missing}: {text[:90]}")
        ners = [a for a, names in NERS_ALGORITHMS.items() if _names(text, *names)]
        if {"NERS-DQN", "NERS-SAC", "ACER"} <= set(ners) and "TD3" not in ners:
            problems.append(f"{where}: lists NERS algorithms without TD3: {text[:90]}")
    return problems


def _site_blocks(site: Path, pages) -> list:
    return [
        (relative, text)
        for relative, article in _built_pages(site)
        if relative in pages
        for text in _blocks(article)
    ]


def test_every_list_of_algorithms_names_them_all(built_site):
    pages = {relative for relative, _ in _built_pages(built_site)}
    blocks = _site_blocks(built_site, pages)
    blocks += [("README.md", text) for text in _readme_blocks()]
    problems = check_algorithm_lists(blocks)
    assert not problems, (
        "lists of algorithms that leave some out (name every registered "
        "algorithm, and TD3 and DDPG among the NERS ones):\n" + "\n".join(problems)
    )


def check_verdict_first(site: Path) -> list:
    """What the home page's and the README's openings lack: the studies'
    verdict as Results states it, before any list; TD3 and DDPG among what the
    package adds; how stock SAC takes the fast buffer (`with_replay_buffer`)."""
    pages = dict(_built_pages(site))
    results = _plain(pages["results/index.html"])
    verdict = re.search(r"NERS helped in none of them\.", results)
    if not verdict:
        return ["Results no longer says 'NERS helped in none of them.'"]
    problems = []
    home = pages["index.html"]
    opening = home[: home.find("<h2")] if "<h2" in home else home
    first_list = opening.find("<ul")
    before_list = _plain(opening[:first_list] if first_list >= 0 else opening)
    if verdict.group(0) not in " ".join(before_list.split()):
        problems.append("the home page does not open with Results' verdict")
    for use in ("PER with SAC", "uniform replay with TD3", "Atari 100k"):
        if use not in " ".join(before_list.split()):
            problems.append(f"the home page's opening does not say '{use}'")
    adds = _plain(opening[first_list:]) if first_list >= 0 else ""
    for name in ("TD3Config", "DDPGConfig", "with_replay_buffer"):
        if name not in adds:
            problems.append(f"the home page's list of what it adds lacks {name}")
    readme = README.read_text()
    readme_opening = " ".join(readme[: readme.index("## ")].split())
    for words in ("NERS helped in none", "TD3", "DDPG", "with_replay_buffer"):
        if words not in readme_opening:
            problems.append(f"the README's opening lacks '{words}'")
    return problems


def test_the_home_page_and_readme_open_with_the_verdict(built_site):
    problems = check_verdict_first(built_site)
    assert not problems, "; ".join(problems)


def check_algorithm_pages() -> list:
    """Algorithm pages without a "Tuned examples" or "What to expect" section,
    and tuned examples (but the Tune sweeps) that no such section names."""
    sections = {}
    for page in sorted((DOCS / "algorithms").glob("*.md")):
        text = page.read_text()
        for title in ("Tuned examples", "What to expect"):
            body = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
            sections[(_relative(page), title)] = body.group(1) if body else None
    problems = [
        f"{page} has no '{title}'" for (page, title), b in sections.items() if b is None
    ]
    named = " ".join(
        b for (_, title), b in sections.items() if b and title == "Tuned examples"
    )
    for example in sorted((REPO / "tuned_examples").rglob("*.py")):
        name = example.relative_to(REPO).as_posix()
        if example.parent.name != "sweeps" and name not in named:
            problems.append(f"no algorithm page's 'Tuned examples' names {name}")
    return problems


def test_every_algorithm_page_has_its_tuned_examples_and_what_to_expect():
    problems = check_algorithm_pages()
    assert not problems, "\n".join(problems)


# Pages whose speed figures must each carry their source (README, Performance,
# the algorithm pages, Atari, Getting started).
SPEED_PAGES = [
    README,
    DOCS / "index.md",
    DOCS / "performance.md",
    DOCS / "performance-notes.md",
    DOCS / "gpu-runs.md",
    DOCS / "atari.md",
    DOCS / "drop-in.md",
    *sorted((DOCS / "algorithms").glob("*.md")),
]
# Every speed or source marker, checked or not.
ANY_MARKER = re.compile(r"<!-- (?:speed|source): [^>]*-->")
RATIO = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?x(?![\w])")


def _prose(markdown: str) -> str:
    """A page's Markdown without code blocks. Notes and admonitions count: a
    figure in a collapsed note is still read as a figure of the code."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)


def check_speed_figures(pages) -> list:
    """Speed figures that differ from the committed benchmark runs, or that
    name no source at all."""
    hook = _generated_hook()
    problems = []
    for page in pages:
        text = page.read_text()
        where = _relative(page)
        for match in hook.SPEED_MARKER.finditer(text):
            figure, suite, arm, reference = match.groups()
            expected = hook.speed_claim(suite, arm, reference)
            if figure != expected:
                problems.append(
                    f"{where}: {figure} where the committed {suite} runs give "
                    f"{expected} ({arm} vs {reference or 'env steps/s'})"
                )
        for match in hook.SOURCE_MARKER.finditer(text):
            figure, source = match.groups()
            source_text = (REPO / source).read_text()
            for number in re.findall(r"\d+(?:\.\d+)?", figure):
                if not re.search(
                    rf"(?<![\d.]){re.escape(number)}(?![\d])", source_text
                ):
                    problems.append(f"{where}: {number} ({figure}) is not in {source}")
        checked = {
            match.end(1)
            for marker in (hook.SPEED_MARKER, hook.SOURCE_MARKER)
            for match in marker.finditer(text)
        }
        for match in ANY_MARKER.finditer(text):
            if match.start() not in checked:
                line = text[: match.start()].rsplit("\n", 1)[-1][-50:]
                problems.append(
                    f"{where}: '{line}{match.group(0)}' follows no figure, so "
                    "nothing checks it: put it right after the number it backs"
                )
        if page not in SPEED_PAGES:
            continue
        prose = _prose(text)
        for match in RATIO.finditer(prose):
            if not prose.startswith("<!-- s", match.end()):
                line = prose[: match.start()].rsplit("\n", 1)[-1][-50:]
                problems.append(
                    f"{where}: '{line}{match.group(0)}' names no source: follow it "
                    "with <!-- speed: SUITE ARM vs ARM --> or <!-- source: FILE -->"
                )
    return problems


def test_every_speed_figure_matches_its_source():
    problems = check_speed_figures([README, *_pages()])
    assert not problems, (
        "speed figures out of step with the benchmark outputs committed under "
        "docs/benchmarks/ (or another named file):\n" + "\n".join(problems)
    )


# A score with its interval, as the reports print them: "0.32 [0.27, 0.37]".
INTERVAL = re.compile(r"(?<![\d.])-?\d+\.\d+ \[-?\d+\.\d+, -?\d+\.\d+\]")
REPORTS = sorted(REPO.glob("results/*/report.md"))


def check_intervals(pages) -> list:
    """Scores with intervals on a page that no committed study report prints."""
    reported = set()
    for report in REPORTS:
        reported |= set(INTERVAL.findall(report.read_text()))
    return [
        f"{_relative(page)}: {figure}"
        for page in pages
        for figure in INTERVAL.findall(page.read_text())
        if figure not in reported
    ]


def test_every_score_interval_is_in_a_report():
    unsourced = check_intervals([README, *_pages()])
    assert not unsourced, (
        "scores with intervals that no results/*/report.md prints (copy them "
        "from the report they summarise):\n" + "\n".join(unsourced)
    )


def _report_table(report: str, caption: str) -> list:
    """The rows, as dicts by column, of the first table after the line that
    starts with `caption` in a study report (none without it)."""
    lines = report.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(caption)]
    table = []
    for line in lines[starts[0] + 1 :] if starts else []:
        if line.startswith("|"):
            table.append([cell.strip() for cell in line.strip("|").split("|")])
        elif table:
            break
    return [dict(zip(table[0], row)) for row in table[2:]]


def _aggregate_scopes(scopes) -> list:
    """The scopes a study's verdicts read: its domains ("all sac tasks", ...)
    where it has them, else "all tasks"."""
    domains = [s for s in scopes if re.fullmatch(r"all \w+ tasks", s)]
    return domains or [s for s in scopes if s == "all tasks"]


def check_study_summaries() -> list:
    """What the Results page and the NERS page's "Why these defaults" leave
    out of the reports they summarise: every "X beats Y" of a study's
    aggregate final score, with its interval (on Results), and every
    P(ners_reference > ners) over a study's tasks (on both)."""
    results = (DOCS / "results.md").read_text()
    ners = (DOCS / "ners.md").read_text()
    why = re.search(r"^## Why these defaults\n(.*?)(?=^## )", ners, re.S | re.M)
    why = why.group(1) if why else ""
    problems = []
    for report in REPORTS:
        text, where = report.read_text(), _relative(report)
        beats = _report_table(text, "## Which arm beats which")
        scopes = _aggregate_scopes([row["scope"] for row in beats])
        for row in beats:
            if row["scope"] in scopes and row["score"] == "final":
                for claim in row["X beats Y: P(X > Y) [95% CI]"].split("; "):
                    interval = INTERVAL.search(claim)
                    if interval and interval.group(0) not in results:
                        problems.append(
                            f"Results lacks {where}'s {row['scope']}: {claim}"
                        )
        over_ners = _report_table(text, "Probability of improvement over ners, final")
        for row in over_ners:
            if row.get("arm") != "ners_reference":
                continue
            for scope in _aggregate_scopes(row):
                if row[scope] == "-":
                    continue
                for page, page_text in (("Results", results), ("NERS", why)):
                    if row[scope] not in page_text:
                        problems.append(
                            f"{page} lacks {where}'s P(ners_reference > ners) "
                            f"over {scope}: {row[scope]}"
                        )
    return problems


def test_the_results_summary_says_what_each_study_says():
    problems = check_study_summaries()
    assert not problems, (
        "summaries that leave out what a study's report says (copy the "
        "figures from the report):\n" + "\n".join(problems)
    )


def check_api_page(site: Path) -> list:
    """What the API pages lack, read in the nav's order: `.ners(...)` rendered as
    the first entry, with a signature in code, and real defaults where RLlib's
    configs say NotProvided."""
    article = "".join(article for _, article in _api_articles(site))
    problems = []
    entries = re.findall(r'<h[2-4] id="([^"]+)"', article)
    names = [e for e in entries if "." in e or e.startswith("rllib_ners")]
    if not names or not names[0].endswith("ners"):
        problems.append(f".ners(...) is not the first entry (entries: {names[:3]})")
    if not re.search(r"<code>\s*<span[^>]*>ners</span>", article) and not re.search(
        r"ners\(\s*\*,\s*hidden_size", _plain(article)
    ):
        problems.append("no signature of .ners(...) shown as code")
    if "NotProvided" in _plain(article):
        problems.append("a signature shows NotProvided instead of the default")
    return problems


def test_the_api_page_starts_with_ners_and_shows_real_defaults(built_site):
    problems = check_api_page(built_site)
    assert not problems, "the API reference: " + "; ".join(problems)


# ------------------------------------------- settings, overview, GPU, install

# The configs whose `.training(...)` settings the API page lists, each with its
# default.
CONFIGS = (
    "RainbowDQNConfig",
    "NERSDQNConfig",
    "NERSSACConfig",
    "TD3Config",
    "DDPGConfig",
    "ACERConfig",
)


def _rendered_defaults(article: str) -> set:
    """(setting, default) pairs an API page shows: the parameter lists of the
    rendered docstrings ("name (type, default: value)"), parameter tables with
    a Default column, and the generated tables' rows (setting, then default)."""
    pairs = set()
    for item in re.findall(r"<li\b[^>]*>(.*?)</li>", article, re.S):
        text = " ".join(_plain(item).split())
        match = re.match(r"(\w+) \(.*?default: (.*?) ?\) [–-]", text)
        if match:
            pairs.add((match.group(1), match.group(2)))
    for head, rows in _tables(article):
        column = head.index("Default") if "Default" in head else 1
        pairs |= {(row[0], row[column]) for row in rows if len(row) > column}
    return pairs


def check_parameter_tables(site: Path) -> list:
    """Pages that render parameters as a table with a Default column, which
    narrow pages squeeze until its values are cut."""
    return [
        relative
        for relative, article in _built_pages(site)
        if any("Default" in head for head, _ in _tables(article))
    ]


def test_no_page_renders_defaults_in_a_squeezed_column(built_site):
    pages = check_parameter_tables(built_site)
    assert not pages, (
        f"parameter tables with a Default column on {pages}: render parameters "
        "as a list (mkdocs.yml: docstring_section_style: list)"
    )


def check_training_settings_on_api(site: Path) -> list:
    """Settings of a config's `training()` that no API page shows with the
    default a fresh config of that class holds."""
    import rllib_ners

    article = "".join(article for _, article in _api_articles(site))
    shown = _rendered_defaults(article)
    # The package's training() settings along a config's MRO (the walk the
    # docs hook makes for its tables of defaults).
    settings_of = _generated_hook().package_training_settings
    missing = []
    for name in CONFIGS:
        config_class = getattr(rllib_ners, name)
        fresh = config_class()
        for setting in settings_of(config_class):
            default = repr(getattr(fresh, setting))
            if (setting, default) not in shown:
                missing.append(f"{name}.training({setting}=...), default {default}")
    return missing


def test_every_configs_training_settings_are_on_the_api_page(built_site):
    missing = check_training_settings_on_api(built_site)
    assert not missing, (
        "settings a user cannot look up on the API page (render the training() "
        "docstring that defines them, its Args naming each):\n" + "\n".join(missing)
    )


def check_no_pointer_to_unrendered_text(site: Path) -> list:
    """Rendered pages that send the reader to a module docstring, which no
    page shows."""
    return [
        relative
        for relative, article in _built_pages(site)
        if re.search(r"module docstring", _plain(article), re.I)
    ]


def test_no_page_points_to_a_module_docstring(built_site):
    pointers = check_no_pointer_to_unrendered_text(built_site)
    assert not pointers, (
        "pages that say 'see the module docstring', which the site does not "
        f"show (say what the reader needs there instead): {pointers}"
    )


def _tables(article: str) -> list:
    """Each table of a page as (header cells, rows of plain cells)."""
    tables = []
    for table in re.findall(r"<table\b[^>]*>(.*?)</table>", article, re.S):
        head = [
            " ".join(_plain(c).split())
            for c in re.findall(r"<th\b[^>]*>(.*?)</th>", table, re.S)
        ]
        rows = [
            [
                " ".join(_plain(c).split())
                for c in re.findall(r"<td\b[^>]*>(.*?)</td>", row, re.S)
            ]
            for row in re.findall(r"<tr\b[^>]*>(.*?)</tr>", table, re.S)
        ]
        tables.append((head, [row for row in rows if row]))
    return tables


OVERVIEW_COLUMNS = (
    "actions",
    "multi-agent",
    "GPU Learner",
    "replay methods",
    "presets",
)


def check_algorithm_overview(site: Path) -> list:
    """What the algorithm overview lacks: the page in the nav, a column for each
    of OVERVIEW_COLUMNS, a row for every registered algorithm in each table,
    and presets that exist."""
    import importlib

    import rllib_ners

    pages = dict(_built_pages(site))
    if "algorithms/index.html" not in pages:
        return ["no algorithm overview page (docs/algorithms.md, /algorithms/)"]
    if not re.search(
        r"^\s+- \w[^:]*: algorithms\.md$", (REPO / "mkdocs.yml").read_text(), re.M
    ):
        return ["mkdocs.yml's nav does not list algorithms.md"]
    tables = _tables(pages["algorithms/index.html"])
    problems = []
    headers = " | ".join(cell for head, _ in tables for cell in head)
    for column in OVERVIEW_COLUMNS:
        if column not in headers:
            problems.append(f"no '{column}' column")
    for head, rows in tables:
        named = {row[0].strip('`"') for row in rows}
        for name in rllib_ners.TUNE_NAMES:
            if name not in named:
                problems.append(f"the table of {head} has no row for {name}")
        if "presets" in head:
            column = head.index("presets")
            modules = [
                importlib.import_module(f"rllib_ners.algorithms.{package}.presets")
                for package in ("rainbow", "ners_sac", "td3", "acer", "ners")
            ]
            for row in rows:
                for function in re.findall(r"(\w+)\(", row[column]):
                    if not any(hasattr(module, function) for module in modules):
                        problems.append(f"{row[0]}: no preset {function}()")
    return problems


def test_the_algorithm_overview_covers_every_algorithm(built_site):
    problems = check_algorithm_overview(built_site)
    assert not problems, "the algorithm overview: " + "; ".join(problems)


def check_gpu_page(site: Path) -> list:
    """What the GPU and many-EnvRunners page lacks: its sections, a link to
    every committed GPU and EnvRunner output, and the commands that run them."""
    pages = dict(_built_pages(site))
    if "gpu/index.html" not in pages:
        return ["no GPU and many-EnvRunners page (docs/gpu.md, /gpu/)"]
    article = pages["gpu/index.html"]
    text = " ".join(_plain(article).split())
    problems = []
    for title in (
        "What is measured",
        "What is not measured yet",
        "Measure it yourself",
    ):
        if not re.search(rf"<h2[^>]*>{title}", article):
            problems.append(f"no section '{title}'")
    outputs = sorted(DOCS.glob("benchmarks/gpu_*.txt")) + sorted(
        DOCS.glob("benchmarks/runners_*.txt")
    )
    for output in outputs:
        if f'href="../benchmarks/{output.name}"' not in article:
            problems.append(f"no link to docs/benchmarks/{output.name}")
    for command in (
        "--num-env-runners",
        "--num-learners",
        "--num-gpus-per-learner",
        "python -m pytest -m gpu tests/gpu",
        "python benchmarks/gpu.py --suite runners",
    ):
        if command not in text:
            problems.append(f"does not say '{command}'")
    return problems


def test_the_gpu_page_says_what_is_measured_and_how_to_run_it(built_site):
    problems = check_gpu_page(built_site)
    assert not problems, "the GPU and many-EnvRunners page: " + "; ".join(problems)


def check_install_advice() -> list:
    """Install advice that contradicts itself: a torch pin in a command other
    than the README's two set-up commands (CI's), an Install section without a
    CPU and a CUDA route, or an unpinned `[bench]` extra."""
    import tomllib

    readme = README.read_text()
    set_up = re.findall(r"^```bash\n(.*?)\n```", readme, re.S | re.M)[:2]
    problems = []
    for page in [README, *_pages()]:
        text = page.read_text()
        # "pip install torch==...", the command possibly broken over two lines
        for pin in re.finditer(r"pip install\s+(?:[^\s`]+\s+)*?torch==", text):
            start = text.rfind("\n", 0, pin.start()) + 1
            line = text[start : text.find("\n", pin.start())]
            if line not in set_up:
                problems.append(f"{_relative(page)} pins torch: {line.strip()}")
    index = (DOCS / "index.md").read_text()
    install = re.search(r"^## Install\n(.*?)(?=^## )", index, re.S | re.M)
    install = install.group(1) if install else ""
    for route in ("download.pytorch.org/whl/cpu", "CUDA"):
        if route not in install:
            problems.append(f"Getting started's Install does not say '{route}'")
    with open(REPO / "pyproject.toml", "rb") as file:
        extras = tomllib.load(file)["project"]["optional-dependencies"]
    for requirement in extras["bench"]:
        if "==" not in requirement:
            problems.append(f"[bench] leaves {requirement} unpinned")
    return problems


def test_the_install_advice_is_consistent():
    problems = check_install_advice()
    assert not problems, "\n".join(problems)


# ------------------------------------------------------- the site as seen


# Rendered words a page may have: past it, a page mixes reference with logs and
# notes that belong on a page of their own.
MAX_PAGE_WORDS = 2500
# Pages the word limit leaves alone: the pre-registered plans, whose record is
# whole by design.
LONG_PAGES = re.compile(r"^results/[^/]+/PLAN/index\.html$")


def rendered_words(article: str) -> int:
    """The words a reader sees in an article: every tag a word break (a table
    cell's text is not glued to the next cell's), and each formula once
    (KaTeX writes it twice: as MathML for screen readers, and as HTML)."""
    import html

    article = re.sub(
        r'<span class="katex-mathml">.*?</math></span>', " ", article, flags=re.S
    )
    return len(html.unescape(re.sub(r"<[^>]+>", " ", article)).split())


def check_page_lengths(site: Path) -> list:
    """Pages over MAX_PAGE_WORDS rendered words (their article's text)."""
    return [
        f"{relative}: {words} words"
        for relative, article in _built_pages(site)
        if not LONG_PAGES.match(relative)
        and (words := rendered_words(article)) > MAX_PAGE_WORDS
    ]


def test_no_page_is_over_the_word_limit(built_site):
    long_pages = check_page_lengths(built_site)
    assert not long_pages, (
        f"pages over {MAX_PAGE_WORDS} rendered words (split reference from "
        "benchmark records and design notes, as Performance and NERS do):\n"
        + "\n".join(long_pages)
    )


def _css_rules(css: str) -> list:
    """(selector, declarations) of each rule of a stylesheet."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    return [
        (" ".join(selector.split()), body)
        for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css)
    ]


def _site_stylesheets() -> list:
    """Our own stylesheets (mkdocs.yml's extra_css but the KaTeX copy)."""
    return [p for p in sorted((DOCS / "stylesheets").glob("*.css")) if p.is_file()]


def check_code_blocks_unwrapped(stylesheets) -> list:
    """Rules that wrap the lines of code blocks: a wrapped line breaks the
    aligned columns of a printout (`51.9 /` on one line, `174.6` on the next)."""
    wrapping = re.compile(
        r"white-space\s*:\s*(?:pre-wrap|pre-line|break-spaces|normal)"
        r"|overflow-wrap\s*:\s*(?:anywhere|break-word)|word-break\s*:\s*break-all"
    )
    return [
        f"{css.name}: {selector} {{{' '.join(body.split())}}}"
        for css in stylesheets
        for selector, body in _css_rules(css.read_text())
        if re.search(r"\bpre\b", selector) and wrapping.search(body)
    ]


def test_code_blocks_keep_their_lines_whole():
    wrapping = check_code_blocks_unwrapped(_site_stylesheets())
    assert not wrapping, (
        "stylesheets wrap code blocks' lines, which breaks aligned printouts; "
        "let long lines scroll sideways instead:\n" + "\n".join(wrapping)
    )


def check_table_defaults_wrap(stylesheets) -> list:
    """Stylesheet rules that keep a settings table's second column (the
    defaults) on one line: a long default (a `replay_buffer_config` dict)
    then pushes the meaning column out of sight."""
    second_column = re.compile(r"td:nth-child\((?:2|-n\s*\+\s*[2-9])\)")
    return [
        f"{css.name}: {selector} {{{' '.join(body.split())}}}"
        for css in stylesheets
        for selector, body in _css_rules(css.read_text())
        if second_column.search(selector) and "nowrap" in body
    ]


def test_table_defaults_wrap_so_the_meaning_stays_in_sight():
    rules = check_table_defaults_wrap(_site_stylesheets())
    assert not rules, (
        "stylesheets keep settings tables' defaults on one line; a long default "
        "hides the meaning column:\n" + "\n".join(rules)
    )


# Columns a table written on a page may have before it no longer fits the
# text column on a laptop's screen and hides its last columns behind a
# sideways scroll. (The study reports' tables, one column per task, are
# generated and scroll.)
MAX_TABLE_COLUMNS = 8
TABLE_HEADER = re.compile(r"^(\|.*\|)\n\|(?:\s*:?-{3,}:?\s*\|)+\s*$", re.M)


def check_wide_tables(pages) -> list:
    """Tables written in the pages' Markdown with more than MAX_TABLE_COLUMNS
    columns."""
    wide = []
    for page in pages:
        for header in TABLE_HEADER.findall(_prose(page.read_text())):
            columns = header.strip().strip("|").split("|")
            if len(columns) > MAX_TABLE_COLUMNS:
                first = " | ".join(c.strip() for c in columns)[:70]
                wide.append(f"{_relative(page)}: {len(columns)} columns ({first}...)")
    return wide


def test_no_table_is_too_wide_to_read():
    wide = check_wide_tables(_pages())
    assert not wide, (
        f"tables of more than {MAX_TABLE_COLUMNS} columns (split them into two "
        "tables that share their first column):\n" + "\n".join(wide)
    )


def check_figures(site: Path, stylesheets) -> list:
    """Study figures a reader cannot read: an image not linked to its full-size
    file, or pages with figures kept to the text column's width (a 2772-px
    figure shown at about 690 px)."""
    problems = []
    for relative, article in _built_pages(site):
        for figure in re.findall(r"<figure\b.*?</figure>", article, re.S):
            link = re.search(
                r'<a href="([^"]+)"[^>]*>\s*<img [^>]*src="([^"]+)"', figure
            )
            if not link or link.group(1) != link.group(2):
                problems.append(f"{relative}: a figure does not link to its image")
    widened = [
        body
        for css in stylesheets
        for selector, body in _css_rules(css.read_text())
        if re.search(r":has\([^)]*\bfigure\b", selector) and "md-grid" in selector
    ]
    if not any(
        float(width) >= 80
        for body in widened
        for width in re.findall(r"max-width\s*:\s*(\d+(?:\.\d+)?)rem", body)
    ):
        problems.append(
            "no stylesheet widens pages with figures (`.md-main__inner.md-grid:"
            "has(.md-typeset figure img) { max-width: 80rem or more }`)"
        )
    return problems


def test_study_figures_are_shown_wide_and_link_to_full_size(built_site):
    problems = check_figures(built_site, _site_stylesheets())
    assert not problems, "\n".join(problems)


BENCHMARK_DIR = DOCS / "benchmarks"
RUN_SECTION = re.compile(r"^(?:--- run|## run) (\d+)", re.M)
RATE_LINE = re.compile(r"^(.*?)(\d+(?:\.\d+)?) env steps/s", re.M)


def _rates_by_run(source: str) -> dict:
    """{label: [rate of run 1, rate of run 2, ...]} of an output with several
    runs, for the labels every run prints once ("round 1 gpu:")."""
    starts = [m.start() for m in RUN_SECTION.finditer(source)]
    runs = [source[a:b] for a, b in zip(starts, [*starts[1:], len(source)])]
    by_label = {}
    for run in runs:
        labels = [(label.strip(), rate) for label, rate in RATE_LINE.findall(run)]
        for label, rate in labels:
            if [lbl for lbl, _ in labels].count(label) == 1:
                by_label.setdefault(label, []).append(rate)
    return {k: v for k, v in by_label.items() if len(v) == len(runs) > 1}


def check_every_run_quoted(pages) -> list:
    """Rates a page quotes from one run of a committed output that holds
    several, without the other runs' rates of the same arm."""
    problems = []
    for page in pages:
        text = _prose(page.read_text())
        for name in sorted(set(re.findall(r"benchmarks/([\w.-]+\.txt)", text))):
            source = BENCHMARK_DIR / name
            if not source.is_file():
                continue
            for label, rates in _rates_by_run(source.read_text()).items():
                quoted = [r for r in rates if _names(text, r)]
                if quoted and len(quoted) < len(rates):
                    problems.append(
                        f"{_relative(page)}: quotes {quoted} of {name}'s "
                        f"'{label}' but not all its runs: {rates}"
                    )
    return problems


def test_a_figure_from_several_runs_quotes_every_run():
    problems = check_every_run_quoted([README, *_pages()])
    assert not problems, (
        "figures quoted from one run of an output that holds several (quote "
        "each run, or their range):\n" + "\n".join(problems)
    )


def check_tabled_runs_dated(pages) -> list:
    """Pages whose text before their first benchmark table leaves out a date of
    the committed runs that their tables show (`<!-- peers-table: SUITE -->`)."""
    problems = []
    for page in pages:
        text = page.read_text()
        suites = re.findall(r"^<!-- peers-table: (\w+) -->$", text, re.M)
        if not suites:
            continue
        before = text[: text.index("<!-- peers-table:")]
        for suite in suites:
            for run in sorted(BENCHMARK_DIR.glob(f"peers_{suite}_*.txt")):
                date = re.search(r"_(\d{4}-\d\d-\d\d)_", run.name).group(1)
                if date not in before:
                    problems.append(
                        f"{_relative(page)}: its {suite} table shows {run.name}, "
                        f"and the text before its tables does not say {date}"
                    )
    return problems


def test_the_text_before_the_benchmark_tables_dates_their_runs():
    problems = check_tabled_runs_dated(_pages())
    assert not problems, "\n".join(problems)
