"""The onnxruntime_cpu backend's batch metrics on a real tritonserver's metrics endpoint.

They are summed in the stub and flushed once a second (serving/backend/metrics.py), so the test
sends known work, then waits for the flush: what it asserts is what an operator's dashboard reads.
"""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

from model_client.client import TritonModelClient
from serving.backend.session_choice import Reason
from conftest import poll_until, scrape_text, series_total, start_test_server

pytestmark = pytest.mark.server


def scrape(server) -> str:
    return scrape_text(server.metrics_url)


def series_sum(text: str, name: str, model: str, **labels: str) -> float:
    """The sum of every sample of `name` for `model` (over instances and other labels) having `labels`."""
    return series_total(text, name, model=model, **labels) or 0.0


def test_digit_batches_show_their_rows_and_time_as_prometheus_histograms(triton_server, digits_test_split):
    images, _ = digits_test_split
    # requests of earlier tests on this server reach the metrics up to a flush interval (1 s) later:
    # take the baseline once the sum holds still across a flush
    rows = lambda: series_sum(scrape(triton_server), "serving_batch_rows_sum", "digit_classifier")
    seen = [rows()]
    poll_until(lambda: (time.sleep(1.2), seen.append(rows()))[1], lambda _: seen[-1] == seen[-2], timeout_s=15, interval_s=0)
    rows_before = seen[-1]
    with TritonModelClient(triton_server.url("http"), "http") as client:
        for start in range(0, 15, 3):  # 5 requests of 3 images: 15 rows, however Triton batched them
            client.infer("digit_classifier", {"image": images[start:start + 3]})
    histograms = ("serving_batch_rows", "serving_batch_requests", "serving_batch_framework_seconds", "serving_batch_overhead_seconds")

    def flushed(t: str) -> bool:
        """All 15 rows counted, and no stub caught between two series of its flush: each stub sends
        its series one metric-API call at a time (serving/backend/stub_metrics.py), so a scrape can
        land after a histogram's `_count` and before its `_bucket` were sent; the next one is whole."""
        return series_sum(t, "serving_batch_rows_sum", "digit_classifier") >= rows_before + 15 and all(
            series_sum(t, f"{h}_bucket", "digit_classifier", le="+Inf") == series_sum(t, f"{h}_count", "digit_classifier")
            for h in histograms)

    text = poll_until(lambda: scrape(triton_server), flushed, timeout_s=15, interval_s=0.25)
    assert series_sum(text, "serving_batch_rows_sum", "digit_classifier") == rows_before + 15
    for histogram in histograms:
        count = series_sum(text, f"{histogram}_count", "digit_classifier")
        assert count >= 1, histogram
        # cumulative buckets: +Inf holds every observation, and no bucket holds more than a wider one
        assert series_sum(text, f"{histogram}_bucket", "digit_classifier", le="+Inf") == count, histogram
        assert f"# TYPE {histogram}_bucket counter" in text
    assert series_sum(text, "serving_batch_rows_bucket", "digit_classifier", le="1") <= series_sum(
        text, "serving_batch_rows_bucket", "digit_classifier", le="4")
    assert series_sum(text, "serving_batch_framework_seconds_sum", "digit_classifier") > 0


def test_text_batches_count_real_and_padded_tokens(triton_server):
    before = scrape(triton_server)
    computed_before = series_sum(before, "serving_batch_computed_tokens_total", "text_embedder")
    texts = np.array([[b"a short one"], [b"a somewhat longer sentence, with a few more tokens in it than the first"]], dtype=object)
    with TritonModelClient(triton_server.url("http"), "http") as client:
        client.infer("text_embedder", {"TEXT": texts})
    text = poll_until(lambda: scrape(triton_server),
                      lambda t: series_sum(t, "serving_batch_computed_tokens_total", "text_embedder") > computed_before, timeout_s=15, interval_s=0.25)
    real = series_sum(text, "serving_batch_real_tokens_total", "text_embedder")
    computed = series_sum(text, "serving_batch_computed_tokens_total", "text_embedder")
    assert 0 < real <= computed
    assert series_sum(text, "serving_batch_bucket_calls_total", "text_embedder") >= 1


@pytest.fixture(scope="module")
def two_core_digits_server(tmp_path_factory):
    """digit_classifier (2 instances) with 2 ONNX Runtime threads per instance, as a partition of 2
    cores runs it: each instance then has a wide and a narrow session to choose from."""
    server = start_test_server(tmp_path_factory.mktemp("two-core"), ("digit_classifier",), env={"SERVING_INTRA_OP_THREADS": "2"})
    yield server
    server.discard()


def test_calls_made_alone_try_both_sessions_and_every_call_is_counted_by_session(two_core_digits_server, digits_test_split):
    """One request at a time: no sibling computes, so each instance times both sessions on its own
    calls before it prefers one (serving/backend/session_choice.py: stints of 16 calls on each in
    turn, wide first). Of 96 requests one instance gets at least 48, enough for both stints."""
    images, _ = digits_test_split
    server = two_core_digits_server
    calls = lambda t: (series_sum(t, "serving_framework_calls_total", "digit_classifier", session="wide"),
                       series_sum(t, "serving_framework_calls_total", "digit_classifier", session="narrow"),
                       series_sum(t, "serving_batch_bucket_calls_total", "digit_classifier"))
    before = calls(scrape(server))
    with TritonModelClient(server.url("http"), "http") as client:
        for i in range(96):
            client.infer("digit_classifier", {"image": images[i:i + 1]})
    # A stub sends one flush's counters one series at a time (bucket calls sort first): wait for both
    # totals, not the first alone, or a scrape in the middle of a flush reads the session counters short.
    # An uncounted call keeps the session total short for good: the assertion below then fails.
    text = poll_until(lambda: scrape(server), lambda t: calls(t)[2] >= before[2] + 96
                      and calls(t)[0] + calls(t)[1] >= before[0] + before[1] + 96, timeout_s=15, interval_s=0.25)
    wide, narrow, framework = calls(text)
    assert wide >= 3 and narrow >= 3, (wide, narrow)
    assert wide + narrow == framework, "every framework call of a model with both sessions is counted by session"
    by_reason = {r.value: series_sum(text, "serving_framework_calls_total", "digit_classifier", reason=r.value) for r in Reason}
    assert sum(by_reason.values()) == framework, f"every call says why its session ran: {by_reason}"
    assert by_reason["exploring"] >= 3, f"lone calls before a choice are exploring: {by_reason}"
    if by_reason["preferred"] + by_reason["size_class"] > 0:  # an instance chose: its medians are published
        medians = poll_until(lambda: scrape(server), lambda t: "serving_session_choice_median_seconds{" in t,
                             timeout_s=5, interval_s=0.25)
        assert re.search(r'serving_session_choice_median_seconds\{[^}]*session="narrow"[^}]*\} [0-9.e-]+$', medians, re.M)


def test_triton_publishes_exactly_the_configured_latency_quantiles(triton_server, serving_spec, digits_test_split):
    """`[server] latency_summary_quantiles` reaches Triton 2.51 (`--metrics-config summary_quantiles`):
    the request summary has those quantiles and no others (Triton's own set adds 0.999, whose cost
    docs/operations.md measures), and its count follows the requests."""
    images, _ = digits_test_split
    with TritonModelClient(triton_server.url("http"), "http") as client:
        client.infer("digit_classifier", {"image": images[:1]})
    text = scrape(triton_server)
    published = set(re.findall(r'^nv_inference_request_summary_us\{model="digit_classifier",[^}]*quantile="([^"]+)"\} ', text, flags=re.M))
    assert published == {f"{q:g}" for q, _ in serving_spec.server.latency_summary_quantiles}
    assert series_sum(text, "nv_inference_request_summary_us_count", "digit_classifier") >= 1


def test_every_rejection_reason_is_published_at_zero_from_the_models_load(triton_server):
    """The counter appeared at its first refusal, which Prometheus reads as the series' start:
    `increase()` over 3 refused requests was 0, and the dashboard's panel had no data until then
    (a review, 2026-12-06)."""
    import re

    text = scrape(triton_server)
    for model in ("digit_classifier", "text_encoder", "text_embedder"):
        for reason in ("invalid_input", "framework_failure"):
            assert re.search(rf'serving_rejected_requests_total{{[^}}]*model="{model}"[^}}]*reason="{reason}"[^}}]*}} \d', text) or \
                re.search(rf'serving_rejected_requests_total{{[^}}]*reason="{reason}"[^}}]*model="{model}"[^}}]*}} \d', text), \
                (model, reason)
