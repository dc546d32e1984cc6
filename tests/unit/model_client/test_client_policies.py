"""Retry, backoff, fallback and priority-size policies of model_client (pure; no server)."""
from __future__ import annotations

import random
import statistics

import pytest

from model_client.errors import (ClientError, ModelNotFoundError, OverloadedError, QueueTimeoutError,
    RequestRejectedError, ServerUnavailableError)
from model_client.policies import (FallbackPolicy, PriorityLimits, RetryPolicy, backoff_ceiling_s, backoff_schedule,
    gave_up, is_retryable, next_retry_delay, server_timeout_us)


def test_backoff_ceilings_grow_exponentially_up_to_the_cap():
    policy = RetryPolicy(base_delay_s=0.05, multiplier=2.0, max_delay_s=0.3)
    assert [backoff_ceiling_s(policy, k) for k in range(5)] == pytest.approx([0.05, 0.1, 0.2, 0.3, 0.3])
    assert backoff_ceiling_s(policy, 10_000) == 0.3  # no float overflow for absurd indices


def test_backoff_schedule_is_full_jitter_and_reproducible_with_a_seed():
    policy = RetryPolicy(max_attempts=6, base_delay_s=0.05, multiplier=2.0, max_delay_s=0.4)
    schedule = backoff_schedule(policy, random.Random(7))
    assert len(schedule) == 5  # one sleep before each retry
    expected_rng = random.Random(7)
    assert schedule == tuple(expected_rng.uniform(0, c) for c in (0.05, 0.1, 0.2, 0.4, 0.4))
    assert schedule == backoff_schedule(policy, random.Random(7))
    assert schedule != backoff_schedule(policy, random.Random(8))


def test_full_jitter_spreads_uniformly_over_the_whole_window():
    """Full jitter (not 'equal jitter'): draws cover [0, ceiling] with mean ceiling / 2, so clients
    rejected together do not return together."""
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.2, max_delay_s=0.2)
    rng = random.Random(0)
    draws = [backoff_schedule(policy, rng)[0] for _ in range(4000)]
    assert 0 <= min(draws) < 0.01 and 0.19 < max(draws) <= 0.2
    assert statistics.fmean(draws) == pytest.approx(0.1, abs=0.005)


def test_one_attempt_means_no_sleeps():
    assert backoff_schedule(RetryPolicy(max_attempts=1), random.Random(0)) == ()


@pytest.mark.parametrize("kwargs, message", [
    ({"max_attempts": 0}, r"RetryPolicy.max_attempts = 0: allowed an integer between 1 and 100"),
    ({"base_delay_s": 0}, r"RetryPolicy.base_delay_s = 0: allowed > 0"),
    ({"multiplier": 0.5}, r"RetryPolicy.multiplier = 0.5: allowed >= 1"),
    ({"base_delay_s": 1.0, "max_delay_s": 0.5}, r"RetryPolicy.max_delay_s = 0.5: allowed >= base_delay_s"),
    ({"deadline_s": -1}, r"RetryPolicy.deadline_s = -1: allowed seconds > 0 and <= 86400"),
    # infinity crashed the queue timeout's conversion to microseconds (`--deadline-s inf`, a review)
    ({"deadline_s": float("inf")}, r"RetryPolicy.deadline_s = inf: allowed seconds > 0 and <= 86400"),
    ({"deadline_s": float("nan")}, r"RetryPolicy.deadline_s = nan: allowed seconds > 0"),
])
def test_invalid_retry_policies_name_the_field_value_and_rule(kwargs, message):
    with pytest.raises(ClientError, match=message):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize("error, retryable", [
    (OverloadedError("queue full"), True),
    (QueueTimeoutError("Request timeout expired"), True),
    (ServerUnavailableError("refused"), True),
    (RequestRejectedError("bad shape"), False),
    (ModelNotFoundError("no such model"), False),
])
def test_only_503_unavailable_and_unreachable_are_retried(error, retryable):
    assert is_retryable(error, RetryPolicy()) is retryable


def test_unreachable_is_not_retried_when_the_policy_says_so():
    assert not is_retryable(ServerUnavailableError("refused"), RetryPolicy(retry_unreachable=False))


def test_next_retry_delay_follows_the_schedule_then_gives_up_after_max_attempts():
    policy = RetryPolicy(max_attempts=3, deadline_s=100)
    schedule = (0.01, 0.02)
    overloaded = OverloadedError("full")
    assert next_retry_delay(policy, overloaded, 1, 0.0, schedule) == 0.01
    assert next_retry_delay(policy, overloaded, 2, 0.0, schedule) == 0.02
    assert next_retry_delay(policy, overloaded, 3, 0.0, schedule) is None


def test_next_retry_delay_never_sleeps_across_the_deadline_nor_retries_bad_input():
    policy = RetryPolicy(max_attempts=5, deadline_s=1.0)
    assert next_retry_delay(policy, OverloadedError("full"), 1, 0.95, (0.1, 0.1, 0.1, 0.1)) is None
    assert next_retry_delay(policy, RequestRejectedError("bad"), 1, 0.0, (0.1, 0.1, 0.1, 0.1)) is None


def test_giving_up_keeps_the_error_type_and_says_how_long_it_tried():
    error = gave_up(OverloadedError("model 'm' is overloaded."), 3, 1.234, RetryPolicy(max_attempts=3, deadline_s=2))
    assert isinstance(error, OverloadedError)
    assert "Gave up after 3 attempt(s) in 1.23 s (up to 3 attempt(s) within 2 s; an unreachable server until the deadline)" in str(error)
    bad = RequestRejectedError("bad")
    assert gave_up(bad, 1, 0.0, RetryPolicy()) is bad


def test_server_timeout_is_the_callers_shortened_to_the_remaining_deadline():
    assert server_timeout_us(None, 2.5) == 2_500_000
    assert server_timeout_us(100_000, 2.5) == 100_000
    assert server_timeout_us(5_000_000, 0.5) == 500_000
    assert server_timeout_us(None, -1.0) == 1000  # never 0 (0 would mean "no timeout" to Triton)
    assert server_timeout_us(0, 2.5) == 2_500_000  # Triton's 0 ("the model's default"), not 1 us


def test_fallback_applies_to_listed_levels_only():
    policy = FallbackPolicy.of({"digit_classifier": "digit_classifier_small"})
    assert policy.fallback_for("digit_classifier", level=1) == "digit_classifier_small"
    assert policy.fallback_for("digit_classifier", level=2) is None  # batch work backs off instead
    assert policy.fallback_for("text_embedder", level=1) is None


@pytest.mark.parametrize("pairs, message", [
    ((("m", "m"),), r"must name two different models"),
    ((("m", "a"), ("m", "b")), r"a primary model appears twice"),
])
def test_invalid_fallback_policies_are_rejected(pairs, message):
    with pytest.raises(ClientError, match=message):
        FallbackPolicy(pairs)


def test_priority_limits_come_from_the_committed_serving_configuration():
    from contracts.serving_spec import load_serving_spec

    from conftest import SERVING_CONFIG

    limits = PriorityLimits.from_serving_config(SERVING_CONFIG)
    spec = load_serving_spec(SERVING_CONFIG)
    assert limits.default_level == spec.default_priority_level
    assert limits.max_items == tuple((p.level, p.max_request_batch_size) for p in spec.priorities)


LIMITS = PriorityLimits(default_level=2, max_items=((1, 1), (2, 8)))


def test_lowest_level_work_is_split_into_requests_of_its_size():
    assert LIMITS.plan_requests(20, priority=2) == ((0, 8), (8, 16), (16, 20))
    assert LIMITS.plan_requests(20, priority=0) == ((0, 8), (8, 16), (16, 20))  # 0: the default level
    assert LIMITS.plan_requests(3, priority=2) == ((0, 3),)


def test_oversize_realtime_requests_are_refused_before_sending():
    assert LIMITS.plan_requests(1, priority=1) == ((0, 1),)
    with pytest.raises(RequestRejectedError, match=r"2 items at priority level 1: at most 1 per request"):
        LIMITS.plan_requests(2, priority=1)


def test_priority_outside_the_levels_means_the_default_level_like_triton():
    assert LIMITS.effective_level(0) == 2 and LIMITS.effective_level(7) == 2 and LIMITS.effective_level(1) == 1


def test_a_model_with_its_own_request_sizes_is_split_by_them_and_a_fallback_by_the_smaller(tmp_path):
    """`[models.<name>] max_request_batch_size` (serving.toml) reaches the client: that model's batch work
    is cut into its own size; a call that may fall back re-sends a part whole, so it uses the smaller."""
    from conftest import SERVING_CONFIG
    from model_client.resilient import plan_call

    import numpy as np

    text = SERVING_CONFIG.read_text()
    assert "[models.digit_classifier_small]\n" in text
    config = tmp_path / "serving.toml"
    config.write_text(text.replace("[models.digit_classifier_small]\n",
                                   "[models.digit_classifier_small]\nmax_request_batch_size = { batch = 3 }\n"))
    limits = PriorityLimits.from_serving_config(config)
    assert dict(limits.model_items) == {"digit_classifier_small": ((1, 1), (2, 3))}
    assert limits.plan_requests(7, priority=2, models=("digit_classifier_small",)) == ((0, 3), (3, 6), (6, 7))
    assert limits.plan_requests(9, priority=2, models=("digit_classifier",)) == ((0, 8), (8, 9))  # the shared 8
    plan = plan_call("digit_classifier", {"x": np.zeros((9, 1, 8, 8), np.float32)}, 2, limits,
                     FallbackPolicy((("digit_classifier", "digit_classifier_small"),), frozenset({2})))
    assert plan.models == ("digit_classifier", "digit_classifier_small") and plan.ranges == ((0, 3), (3, 6), (6, 9))
    with pytest.raises(RequestRejectedError, match=r"at most 1 per request at this level"):
        limits.plan_requests(2, priority=1, models=("digit_classifier_small",))
    # the refusal names where the smallest size is set: a fallback on the shared sizes, or a model's own table
    mixed = PriorityLimits(2, ((1, 1), (2, 8)), {"big": ((1, 4), (2, 8)), "small": ((1, 1), (2, 2))})
    with pytest.raises(RequestRejectedError, match=r"at most 1 per request .*\(serving.toml max_request_batch_size, plain "
                                                   r"on the shared sizes\)"):
        mixed.plan_requests(3, priority=1, models=("big", "plain"))
    with pytest.raises(RequestRejectedError, match=r"at most 4 per request .*\(models.big.max_request_batch_size\)"):
        mixed.plan_requests(5, priority=1, models=("big",))
    with pytest.raises(ClientError, match=r"model_items\['m'\] .* expected a size >= 1 for each of the levels \[1, 2\]"):
        PriorityLimits(default_level=2, max_items=((1, 1), (2, 8)), model_items={"m": ((1, 1),)})


def test_invalid_priority_limits_are_rejected():
    with pytest.raises(ClientError, match=r"levels = \[1, 3\]: allowed 1..N without gaps"):
        PriorityLimits(default_level=1, max_items=((1, 1), (3, 8)))
    with pytest.raises(ClientError, match=r"default_level = 5"):
        PriorityLimits(default_level=5, max_items=((1, 1), (2, 8)))
