"""What one executed batch adds to the backend's custom metrics (pure)."""
from __future__ import annotations

import contextlib

import pytest

from serving.backend.metrics import FAMILIES, Observation, batch_observations, bucket_of
from serving.backend.batch_execution import BatchStats


def test_a_bucketed_text_batch_reports_fill_padding_buckets_and_overhead():
    stats = BatchStats(requests=5, rows=6, real_tokens=60, computed_tokens=80, framework_calls=2, framework_s=0.004,
                       failed_requests=1, calls_by_width={14: 1, 40: 1})
    observed = batch_observations(stats, execute_s=0.005, refused=2, boundaries=(16, 24, 32, 48))
    by_name = {(o.metric, o.labels): o.value for o in observed}
    assert by_name[("serving_batch_requests", ())] == 7  # every request of the execution, refused ones too
    assert by_name[("serving_batch_rows", ())] == 6
    assert by_name[("serving_batch_real_tokens_total", ())] == 60 and by_name[("serving_batch_computed_tokens_total", ())] == 80
    assert by_name[("serving_batch_bucket_calls_total", (("bucket", "16"),))] == 1
    assert by_name[("serving_batch_bucket_calls_total", (("bucket", "48"),))] == 1
    assert abs(by_name[("serving_batch_overhead_seconds", ())] - 0.001) < 1e-12
    assert by_name[("serving_rejected_requests_total", (("reason", "invalid_input"),))] == 2
    assert by_name[("serving_rejected_requests_total", (("reason", "framework_failure"),))] == 1
    assert all(o.metric in FAMILIES for o in observed)


def test_a_fixed_shape_batch_has_no_token_counters_and_one_unbucketed_call():
    stats = BatchStats(3, 4, 0, 0, 1, 0.001, 0, {0: 1})
    observed = batch_observations(stats, 0.002, refused=0)
    names = {o.metric for o in observed}
    assert "serving_batch_real_tokens_total" not in names and "serving_rejected_requests_total" not in names
    assert Observation("serving_batch_bucket_calls_total", (("bucket", "all"),), 1) in observed


def test_a_batch_refused_entirely_only_counts_the_refusals():
    assert batch_observations(None, 0.001, refused=3) == [
        Observation("serving_rejected_requests_total", (("reason", "invalid_input"),), 3)]


def test_bucket_labels_are_the_boundary_a_width_falls_into():
    assert [bucket_of(w, (16, 32)) for w in (1, 16, 17, 32, 40)] == ["16", "16", "32", "32", "32"]
    assert bucket_of(0, ()) == "all"


def test_totals_publish_a_histogram_as_the_cumulative_counters_prometheus_reads():
    from serving.backend.stub_metrics import MetricTotals

    totals = MetricTotals(FAMILIES)
    totals.add([Observation("serving_batch_rows", (), 3), Observation("serving_batch_rows", (), 1),
                Observation("serving_batch_rows", (), 500)])
    deltas = dict(totals.drain())
    bucket = {dict(labels)["le"]: value for (name, labels), value in deltas.items() if name == "serving_batch_rows_bucket"}
    # le is inclusive and cumulative: 1 -> {1}; 2 -> {1}; 4 .. 128 -> {1, 3}; +Inf -> all three
    assert bucket["1"] == 1 and bucket["2"] == 1 and bucket["4"] == 2 and bucket["128"] == 2 and bucket["+Inf"] == 3
    assert deltas[("serving_batch_rows_sum", ())] == 504 and deltas[("serving_batch_rows_count", ())] == 3
    assert totals.drain() == []  # drained: the next flush sends nothing


def test_a_scrape_during_a_flush_still_sees_cumulative_buckets():
    """The stub sends one series per call; sent in drain's order, every prefix of the flush keeps
    each histogram's buckets cumulative (wider first) and its _count last."""
    from serving.backend.stub_metrics import MetricTotals

    totals = MetricTotals(FAMILIES)
    shown: dict = {}
    for values in ([3, 1, 500], [2, 2, 64, 1]):  # two flushes, the second on top of the first
        totals.add([Observation("serving_batch_rows", (), v) for v in values] + [Observation("serving_batch_requests", (), 1)])
        for series, value in totals.drain():  # a scrape after each single call
            shown[series] = shown.get(series, 0) + value
            for histogram in ("serving_batch_rows", "serving_batch_requests"):
                buckets = sorted((float(dict(labels)["le"]), v) for (name, labels), v in shown.items() if name == f"{histogram}_bucket")
                assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), (series, buckets)
                assert shown.get((f"{histogram}_count", ()), 0) <= (buckets[-1][1] if buckets else 0)
        assert shown[("serving_batch_rows_count", ())] == shown[("serving_batch_rows_bucket", (("le", "+Inf"),))]


def test_totals_add_counters_and_skip_zero_increments():
    from serving.backend.stub_metrics import MetricTotals

    totals = MetricTotals(FAMILIES)
    calls = (("bucket", "16"),)
    totals.add([Observation("serving_batch_bucket_calls_total", calls, 2), Observation("serving_batch_bucket_calls_total", calls, 1),
                Observation("serving_rejected_requests_total", (("reason", "invalid_input"),), 0)])
    assert totals.drain() == [(("serving_batch_bucket_calls_total", calls), 3)]


def test_every_published_family_is_a_counter_series_the_endpoint_shows():
    from serving.backend.metrics import exposed_metric_names
    from serving.backend.stub_metrics import le_label, published_families

    names = exposed_metric_names()
    assert {"serving_batch_requests_bucket", "serving_batch_requests_sum", "serving_batch_requests_count",
            "serving_batch_real_tokens_total"} <= names and "serving_batch_requests" not in names
    assert published_families(FAMILIES)["serving_batch_framework_seconds_bucket"][::2] == ("counter", ("le",))
    assert [le_label(b) for b in (1, 0.00025, 2.0, float("inf"))] == ["1", "0.00025", "2", "+Inf"]


def test_gauges_keep_their_latest_value_and_a_histogram_shows_every_series_from_the_start():
    from serving.backend.stub_metrics import MetricTotals

    table = {"queue": ("gauge", "Waiting.", None, ()), "latency": ("histogram", "Latency.", (0.1, 1.0), ())}
    totals = MetricTotals(table)
    totals.add([Observation("queue", (), 5), Observation("queue", (), 0)])
    assert totals.drain() == [(("queue", ()), 0)]  # 0 is a value for a gauge
    assert totals.series_of("latency") == [("latency_bucket", (("le", "0.1"),)), ("latency_bucket", (("le", "1"),)),
                                           ("latency_bucket", (("le", "+Inf"),)), ("latency_sum", ()), ("latency_count", ())]


def test_framework_calls_are_counted_by_session_and_reason_and_zero_counts_are_left_out():
    stats = BatchStats(requests=2, rows=2, real_tokens=0, computed_tokens=0, framework_calls=3, framework_s=0.001,
                       failed_requests=0)
    calls = {("wide", "preferred"): 2, ("narrow", "sibling_busy"): 1}
    observed = batch_observations(stats, execute_s=0.002, refused=0, calls_by_session=calls)
    by_name = {(o.metric, o.labels): o.value for o in observed}
    assert by_name[("serving_framework_calls_total", (("reason", "preferred"), ("session", "wide")))] == 2
    assert by_name[("serving_framework_calls_total", (("reason", "sibling_busy"), ("session", "narrow")))] == 1
    observed = batch_observations(stats, execute_s=0.002, refused=0,
                                  calls_by_session={("wide", "exploring"): 0, ("narrow", "cores_busy"): 3})
    assert [o.labels for o in observed if o.metric == "serving_framework_calls_total"] == [
        (("reason", "cores_busy"), ("session", "narrow"))]
    assert not [o for o in batch_observations(stats, 0.002, 0) if o.metric == "serving_framework_calls_total"]


def test_the_session_choice_medians_are_gauges_per_instance_session_and_size_range():
    from serving.backend.metrics import choice_observations
    from serving.backend.stub_metrics import MetricTotals

    observed = choice_observations(1, {4: {"wide": 0.0032, "narrow": 0.0039}, 6: {"wide": 0.0075}})
    assert [(o.labels, o.value) for o in observed] == [
        ((("model_instance", "1"), ("session", "narrow"), ("size_class", "16-31")), 0.0039),
        ((("model_instance", "1"), ("session", "wide"), ("size_class", "16-31")), 0.0032),
        ((("model_instance", "1"), ("session", "wide"), ("size_class", "64-127")), 0.0075)]
    totals = MetricTotals(FAMILIES)
    totals.add(observed)
    totals.add(choice_observations(1, {4: {"wide": 0.003, "narrow": 0.0039}}))
    drained = dict(totals.drain())
    assert drained[("serving_session_choice_median_seconds", observed[1].labels)] == 0.003, "a gauge keeps the latest median"


def test_no_custom_family_declares_a_label_that_prometheus_or_triton_sets_itself():
    """Prometheus sets `job` and `instance` on every scraped sample (a sample's own `instance` becomes
    `exported_instance` under the default honor_labels: false, and queries on it see nothing); Triton
    adds `model` and `version` to every custom metric. A family declaring one of them would be misread."""
    from serving.generation.metrics import family_table

    reserved = {"job", "instance", "model", "version"}
    for table in (FAMILIES, family_table()):
        for name, (_kind, _help, _buckets, labels) in table.items():
            assert not reserved & set(labels), f"{name} declares {sorted(reserved & set(labels))}"


class _RecordingPbUtils:
    """The part of the Python backend's `pb_utils` that StubMetrics calls, recording what it is sent
    (the stub's aggregation is tested here; tests/integration/test_backend_metrics_serving.py reads the
    real server's endpoint)."""

    class Logger:
        warnings: list = []

        @classmethod
        def log_warn(cls, message):
            cls.warnings.append(message)

    class MetricFamily:
        COUNTER, GAUGE = "counter", "gauge"
        sent: list = []

        def __init__(self, name, description, kind):
            self.name = name

        def Metric(self, labels):  # noqa: N802 (pb_utils' name)
            family, sent = self.name, self.sent

            class Metric:
                def increment(self, value):
                    sent.append((family, labels.get("le"), value))

                def set(self, value):
                    sent.append((family, labels.get("le"), value))

            return Metric()


def _batch_of(requests: int, framework_s: float = 0.002) -> BatchStats:
    """What a one-call execution of `requests` one-row requests of a model without a sequence axis cost."""
    return BatchStats(requests=requests, rows=requests, real_tokens=0, computed_tokens=0, framework_calls=1,
                      framework_s=framework_s, failed_requests=0, calls_by_width={0: 1})


def test_record_later_builds_the_observations_on_the_flush_and_sends_them_once():
    """The backend queues what a batch cost; the flush thread turns it into observations, so the
    request's path only appends (stub_metrics.py says why)."""
    from serving.backend.stub_metrics import StubMetrics

    pb = _RecordingPbUtils
    pb.MetricFamily.sent.clear()
    built = []

    def observe(stats, execute_s):
        built.append(execute_s)
        return batch_observations(stats, execute_s, 0, (), {})

    stub = StubMetrics(pb, FAMILIES, "digits", "1", flush_interval_s=3600)
    try:
        stats = _batch_of(3)
        stub.record_later(observe, stats, 0.003)
        stub.record_later(observe, stats, 0.005)
        assert built == []  # nothing built on the serving path
        stub.flush()
        assert built == [0.003, 0.005]
        sent = {(family, le): value for family, le, value in pb.MetricFamily.sent}
        assert sent[("serving_batch_requests_count", None)] == 2 and sent[("serving_batch_requests_sum", None)] == 6
        assert sent[("serving_batch_overhead_seconds_sum", None)] == pytest.approx(0.001 + 0.003)
        pb.MetricFamily.sent.clear()
        stub.flush()
        assert pb.MetricFamily.sent == [] and built == [0.003, 0.005]  # queued once, built once, sent once
    finally:
        stub.close()


def test_a_flush_that_fails_midway_sends_the_rest_with_the_next_one():
    """drain() empties the totals before sending: a failure midway lost the rest of the flush, and a
    histogram's _count stayed below its +Inf bucket."""
    from serving.backend.stub_metrics import StubMetrics

    pb = _RecordingPbUtils
    pb.MetricFamily.sent.clear()
    stub = StubMetrics(pb, FAMILIES, "digits", "1", flush_interval_s=3600)
    try:
        stub.record(batch_observations(_batch_of(3), 0.003, 0, (), {}))
        stub.flush()
        expected = list(pb.MetricFamily.sent)
        pb.MetricFamily.sent.clear()
        stub.record(batch_observations(_batch_of(3), 0.003, 0, (), {}))
        real_series, calls = stub._series, []

        def failing_once(series):
            calls.append(series)
            if len(calls) == 3:
                raise RuntimeError("Triton is unloading the model")
            return real_series(series)

        stub._series = failing_once
        with pytest.raises(RuntimeError, match="1 of .* metric updates failed"):
            stub.flush()
        stub._series = real_series
        stub.flush()
        assert sorted(pb.MetricFamily.sent, key=repr) == sorted(expected, key=repr)  # every delta once
        # one that always fails is dropped after MAX_SEND_TRIES flushes, and never holds up the others
        pb.MetricFamily.sent.clear()
        broken = calls[2]
        stub._series = lambda series: (_ for _ in ()).throw(RuntimeError("refused")) if series == broken else real_series(series)
        for _ in range(StubMetrics.MAX_SEND_TRIES + 2):
            stub.record(batch_observations(_batch_of(3), 0.003, 0, (), {}))
            with contextlib.suppress(RuntimeError):
                stub.flush()
        assert stub.unsent == [] or all(series == broken for series, _, _ in stub.unsent)
        assert len(stub.unsent) < StubMetrics.MAX_SEND_TRIES
        assert len(pb.MetricFamily.sent) == (StubMetrics.MAX_SEND_TRIES + 2) * (len(expected) - 1)
    finally:
        stub.close()


def test_record_later_an_execution_whose_figures_fail_to_build_loses_only_its_own():
    """A queued callback that raises is skipped and logged; the other executions of the interval are sent."""
    from serving.backend.stub_metrics import StubMetrics

    pb = _RecordingPbUtils
    pb.MetricFamily.sent.clear()
    pb.Logger.warnings.clear()

    def broken(stats, execute_s):
        raise ValueError("no figures")

    stub = StubMetrics(pb, FAMILIES, "digits", "1", flush_interval_s=3600)
    try:
        stats = _batch_of(3)
        stub.record_later(lambda st, s: batch_observations(st, s, 0, (), {}), stats, 0.003)
        stub.record_later(broken, stats, 0.004)
        stub.record_later(lambda st, s: batch_observations(st, s, 0, (), {}), stats, 0.005)
        stub.flush()
        sent = {(family, le): value for family, le, value in pb.MetricFamily.sent}
        assert sent[("serving_batch_requests_count", None)] == 2 and sent[("serving_batch_requests_sum", None)] == 6
        assert len(pb.Logger.warnings) == 1 and "1 of 3 queued executions" in pb.Logger.warnings[0]
        assert "ValueError: no figures" in pb.Logger.warnings[0]
    finally:
        stub.close()


def test_record_later_builds_at_once_beyond_the_queue_bound():
    """A flush that does not come (a hung send) leaves the queue at its bound; what comes after is
    added to the totals at once, so nothing is lost and memory stays bounded."""
    from serving.backend.stub_metrics import StubMetrics

    pb = _RecordingPbUtils
    pb.MetricFamily.sent.clear()
    stub = StubMetrics(pb, FAMILIES, "digits", "1", flush_interval_s=3600)
    stub.MAX_PENDING = 2
    try:
        stats = _batch_of(1, framework_s=0.001)
        for _ in range(5):
            stub.record_later(lambda st, s: batch_observations(st, s, 0, (), {}), stats, 0.002)
        assert len(stub.pending) == 2
        stub.flush()
        sent = {(family, le): value for family, le, value in pb.MetricFamily.sent}
        assert sent[("serving_batch_requests_count", None)] == 5
    finally:
        stub.close()
