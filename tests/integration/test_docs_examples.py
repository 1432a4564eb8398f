"""The Python examples of docs/drop-in.md run as written.

Each fenced `python` block of the page runs in this process, in a namespace
of its own, with a local Ray session (the examples build their algorithms
with tiny budgets).
"""

from __future__ import annotations

import pathlib
import re

import pytest

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "drop-in.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)

pytestmark = pytest.mark.usefixtures("ray_session")


def test_the_page_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index, one_torch_thread):
    exec(compile(BLOCKS[index], f"{PAGE.name}[{index}]", "exec"), {})
