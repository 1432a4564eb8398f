"""`benchmarks/buffers.py`'s checkpoint and memory suites still run against
the buffer they measure: a filled NERS buffer (learned priorities fed as a
NERS Learner sends them) saved and restored whole, on a smaller fill."""

from __future__ import annotations

import buffers
import pytest


@pytest.mark.parametrize("copy", [False, True])
def test_the_checkpoint_suite_saves_and_restores_a_filled_buffer(
    tmp_path, monkeypatch, copy
):
    monkeypatch.setattr(buffers, "NUM_TRANSITIONS", 2000)
    result = buffers.save_and_restore_buffer("cartpole", tmp_path, copy)
    assert result["file MB"] > 0.5 * result["arrays MB"] > 0


def test_the_memory_suite_prints_the_atari_buffers_size(capsys):
    buffers.memory_suite(None)
    out = capsys.readouterr().out
    assert "GB of arrays" in out and "smaller" in out
