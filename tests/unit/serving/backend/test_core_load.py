"""serving.backend.core_load: the busy share of the wide session's worker cores, from /proc/stat text."""
from __future__ import annotations

import threading

import pytest

from serving.backend.core_load import CoreLoad, busy_share, core_times

STAT_0 = """cpu  300 0 100 600 0 0 0 0 0 0
cpu0 100 0 50 350 0 0 0 0 0 0
cpu1 200 0 50 250 0 0 0 0 0 0
intr 12345
"""
STAT_1 = """cpu  450 0 150 800 0 0 0 0 0 0
cpu0 110 0 50 440 0 0 0 0 0 0
cpu1 340 0 100 260 10 0 0 0 0 0
intr 12399
"""


def test_core_times_reads_idle_and_iowait_against_all_ticks_per_core():
    assert core_times(STAT_0) == {0: (350, 500), 1: (250, 500)}
    assert core_times(STAT_1)[1] == (270, 710)


def test_busy_share_of_the_named_cores_only():
    before, after = core_times(STAT_0), core_times(STAT_1)
    assert busy_share(before, after, [1]) == pytest.approx(190 / 210)  # core 1: 190 of 210 ticks busy
    assert busy_share(before, after, [0]) == pytest.approx(10 / 100)
    assert busy_share(before, after, [0, 1]) == pytest.approx(200 / 310)
    assert busy_share(before, before, [0, 1]) == 0.0, "no tick passed"
    assert busy_share(before, after, [7]) == 0.0, "a core /proc/stat does not list"
    assert busy_share(before, after, [1], own_ticks=100) == pytest.approx(90 / 210), "the wide session's own workers are not other work"
    assert busy_share(before, after, [1], own_ticks=500) == 0.0


def test_core_load_rereads_at_most_once_per_interval_and_takes_out_its_own_threads():
    worker_stat = "9 (w) S " + "0 " * 10 + "50 10"  # 60 ticks of the wide session's worker
    now = [0.0]
    stats = iter([STAT_0, STAT_1])
    load = CoreLoad(interval_s=0.1, read=lambda path: next(stats) if path == "/proc/stat" else worker_stat, clock=lambda: now[0])
    now[0] = 0.05
    assert load.busy([1], [9]) == 0.0, "too soon: the first reading stands"
    now[0] = 0.15
    assert round(load.busy([1], [9]), 4) == round((190 - 60) / 210, 4), "core 1: 190 busy ticks, 60 of them the worker's"
    now[0] = 0.2
    assert round(load.busy([1], [9]), 4) == round((190 - 60) / 210, 4), "not re-read within the interval"


def test_core_load_reads_this_machines_proc_stat():
    load = CoreLoad(interval_s=0.0)
    assert 0.0 <= load.busy([0], [threading.get_native_id()]) <= 1.0
