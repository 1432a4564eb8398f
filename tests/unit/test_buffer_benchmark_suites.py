"""`benchmarks/buffers.py`'s checkpoint and memory suites still run against
the buffer they measure: a filled NERS buffer (learned priorities fed as a
NERS Learner sends them) saved and restored whole, on a smaller fill."""

from __future__ import annotations

import re

import buffers
import pytest


@pytest.mark.parametrize("copy", [False, True])
def test_the_checkpoint_suite_saves_and_restores_a_filled_buffer(
    tmp_path, monkeypatch, copy
):
    monkeypatch.setattr(buffers, "NUM_TRANSITIONS", 2000)
    # It asserts that the restored state equals the saved one.
    result = buffers.save_and_restore_buffer("cartpole", tmp_path, copy)
    assert result["file MB"] > 0.5 * result["arrays MB"] > 0


def test_the_memory_suite_prints_the_atari_buffers_size(capsys):
    """Each 84x84 frame is stored once (not four times, as stock RLlib's
    stacks are): about 7 kB per transition, the rest small columns."""
    buffers.memory_suite(None)
    out = capsys.readouterr().out
    per_transition = float(re.search(r"\((\d+) B per transition", out)[1])
    assert 84 * 84 <= per_transition < 1.05 * 84 * 84
    times = float(re.search(r"GB: (\S+)x smaller", out)[1])
    stock = buffers.STOCK_ATARI_BYTES_PER_TRANSITION
    assert times == pytest.approx(stock / per_transition, abs=0.05)
