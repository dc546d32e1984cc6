"""serving.backend.session_choice: which session a lone call runs on, from made-up times."""
from __future__ import annotations

import pytest

from serving.backend.session_choice import ChoicePolicy, Reason, Session, SessionChoice, size_class

WIDE, NARROW = Session.WIDE, Session.NARROW


def run(choice: SessionChoice, size: int, seconds, calls: int, cold_extra: float = 0.0) -> list[Session]:
    """`calls` lone calls of one size, each timed as `seconds` (a dict, or a function of the session)
    says for the session it ran on, plus `cold_extra` when the previous call ran on the other one."""
    chosen, last = [], None
    for _ in range(calls):
        which = choice.choose(size)
        took = seconds[which] if isinstance(seconds, dict) else seconds(which)
        choice.record(size, which, took + (cold_extra if last not in (None, which) else 0.0))
        chosen.append(which)
        last = which
    return chosen


def test_size_classes_are_powers_of_two_of_the_elements_fed():
    assert [size_class(n) for n in (0, 1, 2, 3, 4, 22, 63, 64, 4096)] == [0, 0, 1, 1, 2, 4, 5, 6, 12]


def test_both_sessions_are_tried_in_stints_then_the_faster_one_runs():
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=0))
    chosen = run(choice, 22, {WIDE: 0.003, NARROW: 0.002}, 20)
    assert chosen[:8] == [WIDE] * 4 + [NARROW] * 4
    assert set(chosen[8:]) == {NARROW}
    assert choice.preferred() is NARROW


def test_the_first_call_after_a_switch_is_not_timed_so_a_cold_start_does_not_decide():
    """The old chooser timed the switch: with a cold start 4x the gap, it kept whichever session led."""
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=16))
    chosen = run(choice, 300, {WIDE: 0.0032, NARROW: 0.0039}, 8 + 200, cold_extra=0.003)
    assert choice.preferred() is WIDE
    assert choice.summary()[size_class(300)] == {"wide": 3.2, "narrow": 3.9}
    assert chosen[8:28] == [WIDE] * 16 + [NARROW] * 4, "16 calls on the choice, then a re-check stint"
    assert chosen[8:].count(NARROW) == 40


def test_on_a_host_where_wide_is_faster_the_other_is_rechecked_one_stint_in_n_calls():
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=32))
    chosen = run(choice, 300, {WIDE: 0.014, NARROW: 0.027}, 8 + 36 * 10)
    after = chosen[8:]
    assert after[:32] == [WIDE] * 32 and after[32:36] == [NARROW] * 4
    assert after.count(NARROW) == 40 and after.count(WIDE) == 320


def test_one_choice_for_the_instance_weighted_by_the_calls_of_each_size():
    """Short calls faster on one thread, long ones on two: the mix of calls decides for all of them,
    because switching sessions between calls would make every switch a cold start."""
    sizes = [20, 2000, 2000, 2000]  # mostly long calls
    times = {20: {WIDE: 0.003, NARROW: 0.002}, 2000: {WIDE: 0.020, NARROW: 0.035}}
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=6, recheck_every=0))
    last = None
    for i in range(80):
        size = sizes[i % 4]
        which = choice.choose(size)
        choice.record(size, which, times[size][which])
        last = which
    assert choice.preferred() is WIDE and last is WIDE
    short = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=6, recheck_every=0))
    for i in range(80):
        size = (20, 20, 20, 2000)[i % 4] if i % 40 else 2000
        which = short.choose(size)
        short.record(size, which, {20: {WIDE: 0.010, NARROW: 0.002}, 2000: {WIDE: 0.020, NARROW: 0.022}}[size][which])
    assert short.preferred() is NARROW


def test_a_class_clearly_faster_on_the_other_session_runs_that_one():
    """Digits on the Zen 4 host, medians in the server: one image 0.08-0.09 ms on one thread, 0.10-0.12
    on two; 16 images 0.30-0.33 ms on two, 0.39-0.42 on one. Most calls are single images."""
    times = {64: {WIDE: 0.00012, NARROW: 0.00008}, 512: {WIDE: 0.00020, NARROW: 0.00030}, 256: {WIDE: 0.00016, NARROW: 0.00017}}
    sizes = [64, 64, 64, 512, 64, 256] * 40
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=6, recheck_every=24, window=6, class_margin=0.15))
    chosen = []
    for size in sizes:
        which = choice.choose(size)
        choice.record(size, which, times[size][which])
        chosen.append((size, which))
    assert choice.preferred() is NARROW
    assert choice.preferred(512) is WIDE, "a batch is 1/3 faster on two threads"
    assert choice.preferred(256) is NARROW, "6% is within the margin: the instance's choice"
    last = chosen[-48:]  # two re-check stints of 4 calls among them
    others = [w for s, w in last if s != 512]
    assert {w for s, w in last if s == 512} == {WIDE} and others.count(NARROW) >= len(others) - 8


def test_a_change_of_speed_is_followed_through_the_rechecks():
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=8, window=3))
    run(choice, 50, {WIDE: 0.002, NARROW: 0.004}, 40)
    assert choice.preferred() is WIDE
    run(choice, 50, {WIDE: 0.008, NARROW: 0.004}, 40)  # e.g. the other cores got busy
    assert choice.preferred() is NARROW


def test_one_slow_call_does_not_decide():
    """A shared host stalls a call now and then. With a running average, one stalled call while a
    session was being tried held it out until its next re-check (512 calls later); the median of
    its last calls ignores the stall."""
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=8, window=5))
    spike = iter([0.0, 0.0, 0.050] + [0.0] * 1000)  # the 3rd wide call (the 2nd timed) stalls 50 ms
    chosen = run(choice, 300, lambda s: (0.003 + next(spike)) if s is WIDE else 0.004, 8 + 40)
    assert chosen[:8] == [WIDE] * 4 + [NARROW] * 4
    assert chosen[8:16] == [WIDE] * 8, "wide is chosen right after the first stints"
    assert choice.summary()[size_class(300)] == {"wide": 3.0, "narrow": 4.0}


def test_while_the_worker_cores_are_busy_lone_calls_run_narrow_untimed():
    """At c=2 a lone call is a gap between the sibling's calls: wide would take the core it needs."""
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=0, busy_cores_share=0.85))
    run(choice, 300, {WIDE: 0.003, NARROW: 0.004}, 8)
    assert choice.choose(300) is WIDE and choice.preferred() is WIDE
    choice.record(300, WIDE, 0.003)
    assert choice.choose(300, worker_cores_busy=0.95) is NARROW, "busy cores: narrow, whatever was preferred"
    choice.record(300, NARROW, 0.050)
    assert choice.choose(300, worker_cores_busy=0.95) is NARROW
    choice.record(300, NARROW, 0.050)
    assert choice.summary()[size_class(300)]["narrow"] == 4.0, "a call made beside busy cores is not timed"
    assert choice.choose(300, worker_cores_busy=0.5) is WIDE, "idle enough again: the choice is back"


def test_calls_made_while_a_sibling_computes_are_not_timed_and_make_the_next_call_cold():
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=1, recheck_every=0, settle_calls=0))
    assert choice.choose(10) is WIDE
    choice.record(10, WIDE, 0.001)                  # first of the stint: cold, not timed
    assert choice.choose(10) is WIDE
    choice.record(10, WIDE, 0.001, alone=False)     # a sibling started computing meanwhile
    choice.record(10, NARROW, 0.005, alone=False)   # a call made while it computed
    assert choice.choose(10) is WIDE
    choice.record(10, WIDE, 0.001)                  # after a narrow call: cold, not timed
    assert choice.summary() == {3: {}}
    assert choice.choose(10) is WIDE
    choice.record(10, WIDE, 0.001)
    assert choice.summary() == {3: {"wide": 1.0}}


def test_a_session_is_timed_only_after_cold_calls_in_a_row_on_it():
    """In-process on the Intel Xeon the first 3-4 calls after a switch ran 1.3-2.2x a session's warm
    time. Timing from the second call of a stint judged a re-checked session on half-cold calls, and
    the instance kept whatever it chose first; from the `cold_calls` + 1-th call on, it sees warm
    times. Here each session's first 3 calls after a switch cost 2 ms more than its warm time."""
    def cold_for_three(state):
        def seconds(which):
            state["run"] = state["run"] + 1 if state["last"] is which else 1
            state["last"] = which
            return (0.003 if which is WIDE else 0.004) + (0.002 if state["run"] <= 3 else 0.0)
        return seconds

    choice = SessionChoice(ChoicePolicy(cold_calls=3, fresh_calls=0, stint_calls=8, explore_calls=10, recheck_every=0))
    chosen = run(choice, 300, cold_for_three({"last": None, "run": 0}), 8 * 4 + 4)
    assert chosen == ([WIDE] * 8 + [NARROW] * 8) * 2 + [WIDE] * 4, "two stints each (five warm calls per stint), then wide"
    assert max(choice._classes[size_class(300)].recent_s[0]) == 0.003, "no cold call in the window"
    one_cold = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=8, explore_calls=10, recheck_every=0))
    run(one_cold, 300, cold_for_three({"last": None, "run": 0}), 8 * 4 + 4)
    assert max(one_cold._classes[size_class(300)].recent_s[0]) == 0.005, "timing from a stint's 2nd call takes cold ones"


def test_after_a_call_beside_a_sibling_lone_calls_stay_narrow_until_a_streak_of_them():
    """Under moderate load lone calls and calls beside a sibling (narrow) alternate; a wide call right
    after a narrow one starts cold (in-process on the Intel Xeon: 3.46 ms against 1.83 warm), which
    warm-only timing never sees. So the instance returns to its choice only after `settle_calls` lone
    calls in a row, and those narrow calls are not timed (a sibling was computing a moment ago)."""
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=0, settle_calls=2))
    run(choice, 300, {WIDE: 0.003, NARROW: 0.004}, 9)
    assert choice.preferred() is WIDE and choice.reason is Reason.PREFERRED
    choice.record(300, NARROW, 0.009, alone=False)  # a call while the sibling computed
    assert choice.choose(300) is NARROW and choice.reason is Reason.SETTLING
    choice.record(300, NARROW, 0.009)
    assert choice.choose(300) is NARROW and choice.reason is Reason.SETTLING, "one lone call in a row is not a streak"
    choice.record(300, NARROW, 0.009, alone=False)  # the sibling started during it: the streak starts over
    for _ in range(2):
        assert choice.choose(300) is NARROW
        choice.record(300, NARROW, 0.009)
    assert choice.choose(300) is WIDE and choice.reason is Reason.PREFERRED, "two lone calls in a row: the choice again"
    choice.record(300, WIDE, 0.003)
    assert choice.summary()[size_class(300)] == {"wide": 3.0, "narrow": 4.0}, "settling calls are not timed"


def test_settling_holds_only_calls_the_choice_would_run_wide():
    """An instance that prefers the 1-thread session (digits) runs it warm after a sibling computed:
    those calls are its own choice, timed, and not counted as settling."""
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=0, settle_calls=2))
    run(choice, 64, {WIDE: 0.00012, NARROW: 0.00008}, 9)
    assert choice.preferred() is NARROW
    choice.record(64, NARROW, 0.00030, alone=False)
    timed = choice._classes[size_class(64)].timed[1]
    assert choice.choose(64) is NARROW and choice.reason is Reason.PREFERRED
    choice.record(64, NARROW, 0.00007)
    assert choice._classes[size_class(64)].timed[1] == timed + 1, "its own choice, warm: timed"


def test_stints_are_not_held_and_busy_cores_do_not_break_a_lone_streak():
    """An exploring or re-check stint times what it tries (its first `cold_calls` calls untimed), so a
    sibling's call does not move it to the other session; a lone call kept narrow because the worker
    cores were busy is still a lone call."""
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=0, settle_calls=2))
    assert choice.choose(300) is WIDE and choice.reason is Reason.EXPLORING
    choice.record(300, WIDE, 0.003)
    choice.record(300, NARROW, 0.009, alone=False)  # a sibling computed
    assert choice.choose(300) is WIDE and choice.reason is Reason.EXPLORING
    run(choice, 300, {WIDE: 0.003, NARROW: 0.004}, 12)
    assert choice.preferred() is WIDE
    assert choice.choose(300, worker_cores_busy=0.95) is NARROW and choice.reason is Reason.CORES_BUSY
    choice.record(300, NARROW, 0.004)
    assert choice.choose(300) is WIDE and choice.reason is Reason.PREFERRED, "no sibling computed: nothing to settle"


def test_a_wide_stint_does_not_start_right_after_a_sibling_computed():
    """Under moderate load, lone calls and calls beside a sibling alternate: a wide exploring or
    re-check stint started there would be cut into cold pieces, none timed, and exploring would not
    end. Such a stint waits for `settle_calls` lone calls in a row; one on the 1-thread session starts."""
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=8, settle_calls=2))
    choice.record(300, NARROW, 0.009, alone=False)  # the instance's first call: beside a sibling
    assert choice.choose(300) is NARROW and choice.reason is Reason.SETTLING
    choice.record(300, NARROW, 0.004)
    assert choice.choose(300) is NARROW and choice.reason is Reason.SETTLING
    choice.record(300, NARROW, 0.004)
    assert choice.choose(300) is WIDE and choice.reason is Reason.EXPLORING, "two lone calls in a row: the stint starts"
    choice.record(300, WIDE, 0.003)
    run(choice, 300, {WIDE: 0.003, NARROW: 0.004}, 3 + 4 + 1)  # the rest of it, a narrow stint, the choice
    assert choice.preferred() is WIDE
    while choice._since_check < 8:  # up to a re-check, due on the 1-thread session: it is not held
        choice.record(300, choice.choose(300), 0.003)
    choice.record(300, NARROW, 0.009, alone=False)
    assert choice.choose(300) is NARROW and choice.reason is Reason.RECHECK


def test_settling_does_not_hold_an_instance_that_never_saw_a_sibling():
    """At c=1 only the first instance computes (the rate limiter's order): its exploring stints and its
    choice are what they were; settling starts only after a call made beside a sibling."""
    settled = run(SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=16, settle_calls=2)),
                  300, {WIDE: 0.003, NARROW: 0.004}, 60)
    plain = run(SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=16, settle_calls=0)),
                300, {WIDE: 0.003, NARROW: 0.004}, 60)
    assert settled == plain and settled[:8] == [WIDE] * 4 + [NARROW] * 4


@pytest.mark.parametrize("kwargs", [{"stint_calls": 1}, {"explore_calls": 0}, {"recheck_every": -1}, {"window": 0},
                                    {"busy_cores_share": 1.5}, {"class_margin": -0.1}, {"recheck_own_calls": 0},
                                    {"settle_calls": -1}, {"cold_calls": 0}, {"stint_calls": 4, "cold_calls": 4},
                                    {"confirm_calls": -1}, {"fresh_calls": -1}])
def test_a_policy_out_of_range_is_refused_naming_the_ranges(kwargs):
    with pytest.raises(ValueError, match="cold_calls must be >= 1 and stint_calls > cold_calls"):
        ChoicePolicy(**kwargs)


def test_each_lone_call_says_why_it_got_its_session():
    """The backend labels every framework call with `choice.reason` (serving_framework_calls_total{reason})."""
    policy = ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=8, window=3)
    choice = SessionChoice(policy)
    reasons = []
    for _ in range(8):  # a stint on each session, then the choice
        which = choice.choose(300)
        reasons.append(choice.reason)
        choice.record(300, which, 0.003 if which is WIDE else 0.004)
    assert set(reasons) == {Reason.EXPLORING}
    assert choice.choose(300) is WIDE and choice.reason is Reason.PREFERRED
    assert choice.choose(300, worker_cores_busy=0.95) is NARROW and choice.reason is Reason.CORES_BUSY
    seen = []
    for _ in range(12):
        which = choice.choose(300)
        seen.append((which, choice.reason))
        choice.record(300, which, 0.003 if which is WIDE else 0.004)
    assert (NARROW, Reason.RECHECK) in seen and (WIDE, Reason.PREFERRED) in seen
    assert all(r is Reason.RECHECK for w, r in seen if w is NARROW), "the other session runs only to re-check it"


def test_each_decision_is_counted_so_the_backend_can_republish_the_medians():
    choice = SessionChoice(ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=8, window=3))
    run(choice, 300, {WIDE: 0.003, NARROW: 0.004}, 8)
    assert choice.decisions == 0, "no choice before both sessions were timed enough"
    run(choice, 300, {WIDE: 0.003, NARROW: 0.004}, 1)
    assert choice.decisions == 1 and choice.reason is Reason.PREFERRED
    run(choice, 300, {WIDE: 0.003, NARROW: 0.004}, 24)
    assert choice.decisions >= 3, "every re-check stint ends in a decision"


def test_the_end_of_a_slow_spell_is_noticed_at_the_first_recheck_across_size_classes():
    """The Zen 4 host's spells (docs/performance.md): for minutes a call on two threads is no faster
    than on one. The preferred session is timed at every call, so a spell's start is noticed within a
    stint; the other one only at re-checks. Its window per class held the spell's times, and a
    re-check stint spread over several classes replaced too few of them: with paragraph-length texts
    the instance stayed narrow for two or three re-checks after the spell. A re-check stint is now
    judged on its own calls of each class it timed `recheck_own_calls` of."""
    sizes = [20, 40, 80]  # three size classes, in turn
    policy = ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=10, explore_calls=3, recheck_every=16, window=6, recheck_own_calls=3)
    choice, state = SessionChoice(policy), {"spell": False, "last": None, "i": 0}

    def calls(n: int) -> None:
        for _ in range(n):
            size = sizes[state["i"] % 3]
            state["i"] += 1
            which = choice.choose(size)
            one = size * 1e-4
            wide = one * 1.08 if state["spell"] else one / 1.6
            cold = 0.001 if state["last"] not in (None, which) else 0.0
            choice.record(size, which, (wide if which is WIDE else one) + cold)
            state["last"] = which

    calls(120)
    assert choice.preferred() is WIDE
    state["spell"] = True
    calls(120)
    assert choice.preferred() is NARROW, "the spell is noticed"
    state["spell"] = False
    calls(policy.recheck_every + policy.stint_calls + 1)  # at most one re-check stint on wide, then its decision
    assert choice.preferred() is WIDE, "back at the first re-check, judged on its own 3 wide calls per class"


def _flip_by_one_noisy_recheck(policy: ChoicePolicy) -> tuple[SessionChoice, list[Session]]:
    """Wide truly faster (3.0 against 3.3 ms); the calls of one narrow re-check stint come out at 2.0 ms
    (noise: a stint times a few calls per class), which moves the instance to narrow."""
    choice = SessionChoice(policy)
    chosen = run(choice, 300, {WIDE: 0.0030, NARROW: 0.0033}, 8 + policy.recheck_every)  # explore, then wide
    assert choice.preferred() is WIDE
    chosen += run(choice, 300, {WIDE: 0.0030, NARROW: 0.0020}, policy.stint_calls)  # the noisy re-check stint
    chosen += run(choice, 300, {WIDE: 0.0030, NARROW: 0.0033}, 1)  # decided at this call, the first after the stint
    assert choice.preferred() is NARROW and chosen[-1] is NARROW, "the re-check moved the instance"
    return choice, chosen


def test_a_recheck_that_changed_the_choice_is_confirmed_soon_so_noise_does_not_hold_it_for_an_interval():
    """In the server at text c=1 (2-core Intel Xeon), one re-check stint moved an instance to the 1-thread
    session, 7-8% slower per call there, for a whole `recheck_every` interval: 512 of ~3,000 lone calls
    (docs/measurements/2026-12-05-intel-xeon/session-settling/)."""
    policy = ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=64, window=3, confirm_calls=8)
    choice, _ = _flip_by_one_noisy_recheck(policy)
    after = run(choice, 300, {WIDE: 0.0030, NARROW: 0.0033}, 7 + 4 + 1)
    assert after[:7] == [NARROW] * 7 and after[7:11] == [WIDE] * 4, "after confirm_calls (8 with the deciding one), wide is re-checked"
    assert choice.preferred() is WIDE and after[11] is WIDE
    plain = ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=64, window=3, confirm_calls=0)
    choice, _ = _flip_by_one_noisy_recheck(plain)
    assert set(run(choice, 300, {WIDE: 0.0030, NARROW: 0.0033}, 60)) == {NARROW}, "without: narrow until the interval ends"


def test_a_confirmed_change_keeps_the_usual_interval_and_confirming_happens_once():
    policy = ChoicePolicy(cold_calls=1, fresh_calls=0, stint_calls=4, explore_calls=3, recheck_every=64, window=3, confirm_calls=8)
    choice, _ = _flip_by_one_noisy_recheck(policy)
    # the change was real: narrow stays faster, so the confirming re-check of wide keeps narrow ...
    after = run(choice, 300, {WIDE: 0.0030, NARROW: 0.0020}, 7 + 4 + 1)
    assert after[7:11] == [WIDE] * 4 and choice.preferred() is NARROW and after[11] is NARROW
    # ... and the next re-check comes after the usual interval, not after confirm_calls
    later = run(choice, 300, {WIDE: 0.0030, NARROW: 0.0020}, 63 + 4)
    assert set(later[:63]) == {NARROW} and later[63:] == [WIDE] * 4
    # a re-check that does not change the choice keeps the interval too
    steady = SessionChoice(policy)
    chosen = run(steady, 300, {WIDE: 0.0030, NARROW: 0.0033}, 8 + 3 * 68)
    assert chosen[8:].count(NARROW) == 3 * 4, "one re-check stint per 64 + 4 calls"


def test_a_fresh_sessions_first_calls_are_not_timed_so_the_first_choice_is_not_made_on_them():
    """In the server (2-core Intel Xeon, text c=1), the wide session's first stint ran at load, beside
    the other partition loading its models: its calls 5-16 took 1.4-6x its later time, and the 1-thread
    session's first ten calls 1.2-2.3x; the first choice, made on them, was the 1-thread session in
    most starts (docs/measurements/2026-12-05-intel-xeon/session-settling/)."""
    sizes = [20, 40, 80]  # three size classes in turn: each class's window holds few calls of a stint

    def start(policy: ChoicePolicy) -> SessionChoice:
        choice, calls_on = SessionChoice(policy), {WIDE: 0, NARROW: 0}
        for i in range(200):
            size = sizes[i % 3]
            which = choice.choose(size)
            calls_on[which] += 1
            steady = size * 1e-4 * (1.0 if which is WIDE else 1.1)
            choice.record(size, which, steady * ((3.0 if which is WIDE else 1.5) if calls_on[which] <= 16 else 1.0))
        return choice

    assert start(ChoicePolicy(cold_calls=4, stint_calls=16, explore_calls=24, recheck_every=512)).preferred() is WIDE
    timed_fresh = start(ChoicePolicy(cold_calls=4, stint_calls=16, explore_calls=24, recheck_every=512, fresh_calls=0))
    assert timed_fresh.preferred() is NARROW, "timed from their 5th call, the fresh stints decided"
