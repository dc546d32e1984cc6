import io

from contracts.progress import progress


def test_one_line_per_step_off_a_terminal_with_an_eta():
    out = io.StringIO()
    assert list(progress(["a", "b", "c"], "sensitivity", stream=out, tty=False)) == ["a", "b", "c"]
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[0].startswith("[sensitivity] 1/3 a (") and "ETA" in lines[0]
    assert lines[-1].startswith("[sensitivity] 3/3 c")


def test_caller_owned_lines_print_nothing_more_off_a_terminal():
    out = io.StringIO()
    assert list(progress(range(4), "sweep", stream=out, tty=False, lines=False)) == [0, 1, 2, 3]
    assert out.getvalue() == ""


def test_a_bar_on_a_terminal():
    out = io.StringIO()
    assert list(progress(range(5), "calibration", stream=out, tty=True)) == list(range(5))
    assert "calibration" in out.getvalue() and "/5" in out.getvalue()


def test_data_items_are_not_printed():
    import numpy as np

    out = io.StringIO()
    list(progress([{"ids": np.ones((2, 3))}], "calibration", stream=out, tty=False))
    assert out.getvalue().startswith("[calibration] 1/1 (") and "array" not in out.getvalue()
