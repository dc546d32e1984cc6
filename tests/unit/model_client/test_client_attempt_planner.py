"""AttemptPlanner: every retry/fallback decision of one request, pure (no server, no sleeping).

The blocking and asyncio clients only carry out its steps (tests/unit/test_client_resilient.py
checks them end to end with a scripted connection); here the decisions themselves are driven with
explicit times, so each rule shows up as a sequence of steps."""
from __future__ import annotations

import pytest

from model_client.errors import (
    ClientError,
    OverloadedError,
    QueueTimeoutError,
    RequestRejectedError,
    ServerUnavailableError,
)
from model_client.errors import ModelNotFoundError
from model_client.policies import AttemptPlanner, RetryPolicy, SendRequest, SleepBeforeRetry

SCHEDULE = (0.1, 0.2, 0.4, 0.8, 1.6)


def drive(planner: AttemptPlanner, results: list, call_s: float = 0.01):
    """Carry out the planner's steps like a client would; `results` answers each send in turn (an
    exception or "ok"). Returns the steps taken and the final error (None if answered)."""
    now, steps = planner.start_s, []
    while True:
        try:
            step = planner.next_step(now)
        except ClientError as exc:
            return steps, exc
        if isinstance(step, SleepBeforeRetry):
            steps.append(("sleep", step.seconds))
            now += step.seconds
            continue
        steps.append(("send", step.model))
        now += call_s
        result = results.pop(0)
        if result == "ok":
            return steps, None
        planner.record_failure(result)


def planner(models=("big",), retry=RetryPolicy(max_attempts=4, deadline_s=5), timeout_us=None, start_s=100.0):
    return AttemptPlanner(models, retry, SCHEDULE[:retry.max_attempts - 1], timeout_us, start_s)


def full():
    return OverloadedError("model 'big' is overloaded.")


def test_first_step_sends_to_the_primary_with_timeouts_shortened_to_the_deadline():
    p = planner(retry=RetryPolicy(deadline_s=2.0), timeout_us=5_000_000)
    step = p.next_step(100.5)  # 0.5 s of the 2 s deadline already gone
    assert step == SendRequest("big", timeout_us=1_500_000, client_timeout_s=1.5)
    assert p.calls == 1 and p.attempts == 1


def test_overload_is_retried_after_the_scheduled_sleeps_until_answered():
    p = planner()
    steps, error = drive(p, [full(), full(), "ok"])
    assert error is None
    assert steps == [("send", "big"), ("sleep", 0.1), ("send", "big"), ("sleep", 0.2), ("send", "big")]
    assert p.calls == 3 and p.attempts == 3


def test_fallback_is_tried_at_once_and_sleeping_only_when_both_are_full():
    p = planner(models=("big", "small"))
    steps, error = drive(p, [full(), full(), full(), "ok"])
    assert error is None
    assert steps == [("send", "big"), ("send", "small"), ("sleep", 0.1), ("send", "big"), ("send", "small")]
    assert p.calls == 4 and p.attempts == 2


def test_a_non_retryable_error_is_raised_as_is_and_the_fallback_is_not_tried():
    bad = RequestRejectedError("unexpected shape for input 'image'")
    steps, error = drive(planner(models=("big", "small")), [bad])
    assert error is bad and steps == [("send", "big")]


def test_a_primary_that_is_not_served_is_answered_by_its_fallback_at_once_and_not_retried():
    """An unloaded (or not ready) primary failed realtime calls although its fallback was up (a review,
    2026-12-07): "not served" now sends the fallback at once; it is not retried (the attempt's error
    is the primary's, which a retry would only repeat)."""
    missing = ModelNotFoundError("model 'big' is not served at h:1: 'big' has no available versions")
    steps, error = drive(planner(models=("big", "small")), [missing, "ok"])
    assert error is None and steps == [("send", "big"), ("send", "small")]
    steps, error = drive(planner(models=("big", "small")), [missing, full()])
    assert type(error) is ModelNotFoundError and "Fallback 'small'" in str(error)
    assert steps == [("send", "big"), ("send", "small")]
    steps, error = drive(planner(models=("big",)), [missing])  # no fallback: raised as is
    assert error is missing and steps == [("send", "big")]


def test_a_lost_backend_stub_is_retried_and_degraded_like_overload():
    from model_client.errors import ModelRestartingError

    restarting = ModelRestartingError("model 'big' at h:1 lost a backend process")
    steps, error = drive(planner(models=("big", "small")), [restarting, "ok"])
    assert error is None and steps == [("send", "big"), ("send", "small")]
    steps, error = drive(planner(models=("big",)), [restarting, restarting, "ok"])
    assert error is None and [kind for kind, _ in steps] == ["send", "sleep", "send", "sleep", "send"]


def test_unreachable_is_final_when_the_policy_says_so():
    retry = RetryPolicy(retry_unreachable=False)
    down = ServerUnavailableError("refused")
    steps, error = drive(planner(models=("big", "small"), retry=retry), [down])
    assert error is down and steps == [("send", "big")]


def test_giving_up_after_max_attempts_keeps_the_type_and_names_both_models():
    retry = RetryPolicy(max_attempts=2, deadline_s=60)
    steps, error = drive(planner(models=("big", "small"), retry=retry),
                         [full(), QueueTimeoutError("Request timeout expired"), full(), QueueTimeoutError("expired")])
    assert type(error) is OverloadedError  # the primary's error decides the type (and whether to retry)
    assert "model 'big' is overloaded." in str(error) and "Fallback 'small'" in str(error)
    assert "Gave up after 2 attempt(s)" in str(error) and "up to 2 attempt(s) within 60 s" in str(error)
    assert [kind for kind, _ in steps] == ["send", "send", "sleep", "send", "send"]


def test_a_fallback_that_is_missing_does_not_stop_the_overloaded_primary_from_being_retried():
    """The fallback's error used to decide: an overloaded primary whose fallback model is not served
    (or refuses the batch) gave up at once with ModelNotFoundError instead of backing off."""
    steps, error = drive(planner(models=("big", "small")),
                         [full(), ModelNotFoundError("model 'small' is not served"), full(), ModelNotFoundError("no"),
                          "ok"])
    assert error is None
    assert [kind for kind, _ in steps] == ["send", "send", "sleep", "send", "send", "sleep", "send"]
    assert steps[-1] == ("send", "big")


def test_no_sleep_crosses_the_deadline():
    retry = RetryPolicy(max_attempts=6, deadline_s=0.5)
    steps, error = drive(planner(retry=retry), [full()] * 6, call_s=0.05)
    # sends at 0, 0.15, 0.4; after the third (0.45 s gone) a 0.4 s sleep would end past 0.5 s
    assert steps == [("send", "big"), ("sleep", 0.1), ("send", "big"), ("sleep", 0.2), ("send", "big")]
    assert isinstance(error, OverloadedError) and "Gave up after 3 attempt(s)" in str(error)


def test_the_fallback_is_skipped_once_the_deadline_has_passed():
    p = planner(models=("big", "small"), retry=RetryPolicy(deadline_s=1.0))
    assert p.next_step(100.0).model == "big"
    p.record_failure(full())
    with pytest.raises(OverloadedError, match="Gave up after 1 attempt"):
        p.next_step(101.2)  # the primary took past the deadline: no fallback, no retry
    assert p.calls == 1


def test_nothing_is_sent_once_the_calls_deadline_has_passed():
    """A later request of a split call (the same start) finds the deadline spent by the earlier ones:
    it used to be sent anyway, with a 1 ms timeout it could not meet."""
    p = planner(retry=RetryPolicy(deadline_s=1.0))
    with pytest.raises(OverloadedError, match="deadline of 1 s had passed"):
        p.next_step(101.2)
    assert p.calls == 0


def test_a_sleep_that_overran_the_deadline_gives_up_with_the_last_error():
    p = planner(retry=RetryPolicy(max_attempts=4, deadline_s=1.0))
    p.next_step(100.0)
    p.record_failure(full())
    assert isinstance(p.next_step(100.05), SleepBeforeRetry)
    with pytest.raises(OverloadedError, match="Gave up after 1 attempt"):
        p.next_step(101.5)  # the sleep ended past the deadline
    assert p.calls == 1


def test_every_send_shrinks_the_timeouts_with_what_is_left():
    p = planner(retry=RetryPolicy(max_attempts=4, deadline_s=1.0), timeout_us=5_000_000)
    sent, now = [], 100.0
    for _ in range(3):
        step = p.next_step(now)
        if isinstance(step, SleepBeforeRetry):
            now += step.seconds
            step = p.next_step(now)
        sent.append(step.timeout_us)
        now += 0.05
        p.record_failure(full())
    assert sent[0] == 1_000_000 and sent[1] < sent[0] and sent[2] < sent[1]


def test_steps_out_of_protocol_order_are_refused():
    p = planner()
    with pytest.raises(RuntimeError, match="without a SendRequest"):
        p.record_failure(full())
    p.next_step(100.0)
    with pytest.raises(RuntimeError, match="record_failure first"):
        p.next_step(100.1)


@pytest.mark.parametrize("models, schedule, message", [
    ((), SCHEDULE, "models is empty"),
    (("big",), (0.1,), r"schedule has 1 sleep\(s\): allowed >= max_attempts - 1 \(3\)"),
])
def test_invalid_planners_are_rejected(models, schedule, message):
    with pytest.raises(ClientError, match=message):
        AttemptPlanner(models, RetryPolicy(max_attempts=4), schedule, None, 0.0)


def gone():
    return ServerUnavailableError("server at h:1 is not reachable ([Errno 111] Connection refused)")


def test_an_unreachable_server_is_retried_until_the_deadline_riding_out_a_partition_restart():
    """A killed partition is back in ~5 s (docs/partitions.md). The default policy's 4 attempts with
    sleeps of at most 0.05 + 0.1 + 0.2 s gave up after ~0.35 s, so every call during a restart failed
    (a review, 2026-12-06: 19 of 187 calls). Unreachable attempts now go on until the deadline, each
    at least UNREACHABLE_RETRY_FLOOR_S after the last, and do not use up `max_attempts`."""
    from model_client.policies import UNREACHABLE_RETRY_FLOOR_S

    p = AttemptPlanner(("big",), RetryPolicy(), (0.01, 0.02, 0.04), None, 0.0)  # the default policy: 4 attempts, 10 s
    now, sleeps = 0.0, []
    while now < 5.0:  # down for 5 s
        assert p.next_step(now) == SendRequest("big", timeout_us=int((10.0 - now) * 1e6), client_timeout_s=10.0 - now)
        p.record_failure(gone())
        step = p.next_step(now)
        assert isinstance(step, SleepBeforeRetry) and step.seconds >= UNREACHABLE_RETRY_FLOOR_S
        sleeps.append(step.seconds)
        now += step.seconds
    assert isinstance(p.next_step(now), SendRequest)  # back: answered
    assert p.attempts > 4 and p.unreachable_attempts == len(sleeps) and max(sleeps) <= UNREACHABLE_RETRY_FLOOR_S + 0.04


def test_unreachable_attempts_do_not_use_up_the_attempts_of_an_overloaded_server():
    steps, error = drive(planner(retry=RetryPolicy(max_attempts=2, deadline_s=60)), [gone(), gone(), gone(), full(), full()])
    assert type(error) is OverloadedError and "Gave up after 5 attempt(s)" in str(error)
    assert [kind for kind, _ in steps] == ["send", "sleep"] * 4 + ["send"]


def test_one_attempt_means_no_retry_of_an_unreachable_server_either():
    steps, error = drive(planner(retry=RetryPolicy(max_attempts=1)), [gone()])
    assert isinstance(error, ServerUnavailableError) and steps == [("send", "big")]


def test_with_a_fallback_the_primary_gets_half_of_what_is_left_so_a_hung_primary_leaves_time_for_it():
    """A hung main partition answers nothing until the supervisor kills it (up to ~8 s): the primary's
    request took the whole deadline and the fallback was never tried (a review, 2026-12-06: realtime
    calls with a 1 s deadline failed while the small model was idle)."""
    p = planner(models=("big", "small"), retry=RetryPolicy(deadline_s=1.0))
    first = p.next_step(100.0)
    assert first == SendRequest("big", timeout_us=500_000, client_timeout_s=0.5)
    p.record_failure(OverloadedError("model 'big' at h:1 did not answer within the client deadline (0.5 s)."))
    second = p.next_step(100.5)
    assert second == SendRequest("small", timeout_us=500_000, client_timeout_s=0.5)  # the rest, for the last model
    single = planner(models=("big",), retry=RetryPolicy(deadline_s=1.0)).next_step(100.0)
    assert single.client_timeout_s == 1.0  # no fallback: the whole deadline, as before
