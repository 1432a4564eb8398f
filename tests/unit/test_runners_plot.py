"""`benchmarks/runners_plot.py` reads the runners suite's table as printed."""

import pytest
import runners_plot

HEADER = "| EnvRunners | arm | mode | env steps/s | driver CPU s / 1k env steps | "


def _row(runners, arm, mode, rate, busy=50):
    return f"| {runners} | {arm} | {mode} | {rate} | 1.0 | 3.0 | {busy}% | - | 0 | 0 |"


def test_each_point_is_the_median_of_its_rounds():
    text = "\n".join(
        [
            HEADER,
            _row(2, "-", "ceiling", 100.0),
            _row(2, "per", "lockstep", 40.0),
            _row(2, "per", "overlapped-k16", 50.0),
            _row(2, "per", "overlapped-k16", 70.0),
            _row(2, "per", "overlapped-k16", 60.0),
        ]
    )
    points, _ = runners_plot.read_points(text)
    rates = {(p.arm, p.mode): p.env_steps_per_s for p in points}
    assert rates == {
        ("-", "ceiling"): 100.0,
        ("per", "lockstep"): 40.0,
        ("per", "overlapped-k16"): 60.0,
    }
    assert "| 2 | 100.0 | 40.0 | 60.0 | 1.50x |" in runners_plot.summary(points)


def test_rows_of_one_request_shape_are_drawn_with_the_shape_in_the_mode():
    text = "\n".join(
        [_row(2, "-", "ceiling-f32", 100.0), _row(2, "per", "lockstep-f32", 40.0)]
    )
    points, _ = runners_plot.read_points(text)
    assert [(p.mode, p.env_steps_per_s) for p in points] == [
        ("ceiling", 100.0),
        ("lockstep", 40.0),
    ]


def test_a_run_of_several_request_shapes_is_compared_by_shape_not_drawn(
    tmp_path, capsys
):
    text = "\n".join(
        [
            _row(2, "-", "ceiling-f4-e1", 100.0),
            _row(2, "per", "overlapped-f4-e1", 40.0),
            _row(2, "-", "ceiling-f8-e4", 250.0),
            _row(2, "per", "overlapped-f8-e4", 90.0),
            _row(2, "per", "overlapped-f8-e4", 70.0),
        ]
    )
    points, _ = runners_plot.read_points(text)
    table = runners_plot.shape_summary(points)
    assert "| 2 | f4-e1 | 4 | 100.0 | 1.000 | 1.00x | 40.0 | 1.00x |" in table
    assert "| 2 | f8-e4 | 32 | 250.0 | 1.000 | 2.50x | 80.0 | 2.00x |" in table
    output = tmp_path / "runners.txt"
    output.write_text(text)
    with pytest.raises(SystemExit, match="several request shapes"):
        runners_plot.main([str(output), str(tmp_path / "figure.png")])
    assert not (tmp_path / "figure.png").exists()
