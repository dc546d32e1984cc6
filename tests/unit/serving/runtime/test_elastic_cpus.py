"""Elastic CPU sets: who lends cores to whom, and when a partition counts as busy (pure)."""
from __future__ import annotations

from serving.runtime.elastic_cpus import Activity, ActivityTracker, lend_idle_cores

IDLE, BUSY, SATURATED = Activity.IDLE, Activity.BUSY, Activity.SATURATED
HOME = {"main": (0,), "fallback": (1,)}
SHARES = {"main": 50, "fallback": 50}


def test_a_saturated_partition_borrows_the_idle_ones_cores_and_the_idle_one_keeps_its_own():
    assert lend_idle_cores(HOME, SHARES, {"main": SATURATED, "fallback": IDLE}) == {"main": (0, 1), "fallback": (1,)}
    assert lend_idle_cores(HOME, SHARES, {"main": IDLE, "fallback": SATURATED}) == {"main": (0,), "fallback": (0, 1)}


def test_a_busy_partition_borrows_too_and_a_busy_one_lends_nothing():
    assert lend_idle_cores(HOME, SHARES, {"main": BUSY, "fallback": IDLE}) == {"main": (0, 1), "fallback": (1,)}
    assert lend_idle_cores(HOME, SHARES, {"main": BUSY, "fallback": IDLE}, frozenset({SATURATED})) == HOME
    assert lend_idle_cores(HOME, SHARES, {"main": SATURATED, "fallback": BUSY}) == HOME
    assert lend_idle_cores(HOME, SHARES, {"main": IDLE, "fallback": IDLE}) == HOME


def test_spare_cores_go_to_the_saturated_partitions_in_proportion_to_their_shares():
    home = {"a": (0, 1, 2), "b": (3,), "idle": (4, 5, 6, 7)}
    lent = lend_idle_cores(home, {"a": 75, "b": 25, "idle": 1}, {"a": SATURATED, "b": SATURATED, "idle": IDLE})
    assert lent == {"a": (0, 1, 2, 4, 5, 6), "b": (3, 7), "idle": (4, 5, 6, 7)}


def test_never_more_cores_are_handed_out_than_are_spare_and_a_down_partition_borrows_none():
    """Rounding each borrower's share on its own gave 30/30/30/10 of 2 spare cores as 1+1+0+0... or
    more than 2; and a restarting partition was recorded as borrowing the idle one's cores."""
    home = {"a": (0,), "b": (1,), "c": (2,), "d": (3,), "idle": (4, 5)}
    shares = {"a": 30, "b": 30, "c": 30, "d": 10, "idle": 1}
    lent = lend_idle_cores(home, shares, {"a": SATURATED, "b": SATURATED, "c": SATURATED, "d": SATURATED, "idle": IDLE})
    borrowed = [core for name in "abcd" for core in lent[name] if core not in home[name]]
    assert sorted(borrowed) == [4, 5]  # each spare core to exactly one borrower
    assert lend_idle_cores(HOME, SHARES, {"main": Activity.DOWN, "fallback": IDLE}) == HOME


def test_activity_is_set_at_once_and_cleared_only_after_a_quiet_spell():
    tracker = ActivityTracker(busy_fraction=0.05, burst_fraction=0.25, saturated_fraction=0.85, idle_after_s=2.0)
    assert tracker.update("p", 10.0, now=0.0) is IDLE              # first sample: no rate yet
    assert tracker.update("p", 10.1, now=0.2) is BUSY              # 0.5 of a core in one tick
    assert tracker.update("p", 10.3, now=0.4) is SATURATED         # 1.0 of its one core
    assert tracker.update("p", 10.3, now=1.0) is SATURATED         # quiet, but not for 2 s yet
    assert tracker.update("p", 10.3, now=2.5) is BUSY              # the 1 s window at 1.0 still held the work
    assert tracker.update("p", 10.3, now=3.1) is IDLE              # 2.1 s since it was last busy
    assert tracker.update("p", 10.301, now=3.3) is IDLE            # 0.005 of a core: below the threshold


def test_housekeeping_spikes_do_not_make_a_partition_busy_but_steady_light_work_does():
    tracker = ActivityTracker(busy_fraction=0.05, burst_fraction=0.25, window_s=1.0)
    cpu, now = 0.0, 0.0
    for step in range(10):  # a 20 ms spike once a second: 2% of a core
        now += 0.2
        cpu += 0.02 if step % 5 == 0 else 0.0
        assert tracker.update("idle", cpu, now) is IDLE
    cpu, now = 0.0, 0.0
    states = []
    for _ in range(10):  # 8% of a core, steadily: below the burst level, above the window's
        now += 0.2
        cpu += 0.016
        states.append(tracker.update("light", cpu, now))
    assert states[0] is IDLE and states[-1] is BUSY


def test_saturation_is_relative_to_the_partitions_home_cores():
    tracker = ActivityTracker()
    tracker.update("p", 0.0, now=0.0, home_cores=2)
    assert tracker.update("p", 0.2, now=0.2, home_cores=2) is BUSY  # one core's worth of two
    tracker.forget("p")
    assert tracker.update("p", 5.0, now=3.0) is IDLE


def test_processes_joining_a_partition_bring_no_burst_of_past_cpu_time():
    """Stubs listed after a reload brought all the CPU time they had used: an idle partition read as saturated."""
    tracker = ActivityTracker(busy_fraction=0.05, burst_fraction=0.25, saturated_fraction=0.85, idle_after_s=2.0)
    for t in range(11):
        assert tracker.update("p", 1.0 + 0.001 * t, float(t)) is IDLE
    tracker.rebase("p", 2.0)  # two seconds of CPU the newcomers had used before they were listed
    assert tracker.update("p", 3.0 + 0.011, 11.0) is IDLE


def test_lent_cores_keep_a_physical_cores_threads_with_one_borrower():
    """SMT host, siblings (c, c+4): homes are whole cores; lent in CPU-number order, two borrowers each got one
    thread of cores 0+4 and 1+5 (a review, 2026-12-08)."""
    home = {"a": (0, 1, 4, 5), "b": (2, 6), "c": (3, 7)}
    activity = {"a": Activity.IDLE, "b": Activity.BUSY, "c": Activity.BUSY}
    lent = lend_idle_cores(home, {"a": 50, "b": 25, "c": 25}, activity, core_order=(0, 4, 1, 5, 2, 6, 3, 7))
    assert lent == {"a": (0, 1, 4, 5), "b": (0, 2, 4, 6), "c": (1, 3, 5, 7)}
