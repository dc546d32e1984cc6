"""serving.backend.session_choice: which session a call made alone runs on, from made-up times."""
from __future__ import annotations

import pytest

from serving.backend.session_choice import ChoicePolicy, Session, SessionChoice, size_class


def run(choice: SessionChoice, size: int, seconds: dict[Session, float], calls: int) -> list[Session]:
    """`calls` calls of one size, each timed as `seconds` says for the session it ran on."""
    chosen = []
    for _ in range(calls):
        which = choice.choose(size)
        choice.record(size, which, seconds[which])
        chosen.append(which)
    return chosen


def test_size_classes_are_powers_of_two_of_the_elements_fed():
    assert [size_class(n) for n in (0, 1, 2, 3, 4, 22, 63, 64, 4096)] == [0, 0, 1, 1, 2, 4, 5, 6, 12]


def test_both_sessions_are_tried_alternately_then_the_faster_one_runs():
    choice = SessionChoice(ChoicePolicy(explore_calls=3, recheck_every=0))
    chosen = run(choice, 22, {Session.WIDE: 0.003, Session.NARROW: 0.002}, 20)
    assert chosen[:6] == [Session.WIDE, Session.NARROW] * 3
    assert set(chosen[6:]) == {Session.NARROW}
    assert choice.preferred(22) is Session.NARROW


def test_on_a_host_where_wide_is_faster_wide_stays_and_the_other_is_rechecked_one_call_in_n():
    choice = SessionChoice(ChoicePolicy(explore_calls=2, recheck_every=8))
    chosen = run(choice, 300, {Session.WIDE: 0.014, Session.NARROW: 0.027}, 4 + 64)
    after = chosen[4:]
    assert after.count(Session.NARROW) == 8 and after.count(Session.WIDE) == 56


def test_classes_are_chosen_independently():
    """Short calls may prefer one thread while long ones gain from two (measured: docs/performance.md)."""
    choice = SessionChoice(ChoicePolicy(explore_calls=1, recheck_every=0))
    run(choice, 20, {Session.WIDE: 0.003, Session.NARROW: 0.002}, 4)
    run(choice, 2000, {Session.WIDE: 0.020, Session.NARROW: 0.035}, 4)
    assert choice.preferred(20) is Session.NARROW and choice.preferred(2000) is Session.WIDE
    assert choice.preferred(31) is Session.NARROW, "22 and 31 elements share a class"
    assert choice.preferred(64) is None, "a class never timed is still exploring"


def test_a_change_of_speed_is_followed_through_the_rechecks():
    choice = SessionChoice(ChoicePolicy(explore_calls=2, recheck_every=4, smoothing=0.5))
    run(choice, 50, {Session.WIDE: 0.002, Session.NARROW: 0.004}, 20)
    assert choice.preferred(50) is Session.WIDE
    run(choice, 50, {Session.WIDE: 0.008, Session.NARROW: 0.004}, 20)  # e.g. the other cores got busy
    assert choice.preferred(50) is Session.NARROW


def test_a_call_chosen_but_not_timed_alone_does_not_count_as_tried():
    choice = SessionChoice(ChoicePolicy(explore_calls=1, recheck_every=0))
    assert choice.choose(10) is Session.WIDE
    assert choice.choose(10) is Session.WIDE, "nothing was recorded, so wide is still the one to time"
    choice.record(10, Session.WIDE, 0.001)
    assert choice.choose(10) is Session.NARROW


@pytest.mark.parametrize("kwargs", [{"explore_calls": 0}, {"recheck_every": -1}, {"smoothing": 0.0}, {"smoothing": 1.5}])
def test_a_policy_out_of_range_is_refused_naming_the_ranges(kwargs):
    with pytest.raises(ValueError, match="explore_calls must be >= 1"):
        ChoicePolicy(**kwargs)
