"""What this project's server saw during a peer level: Triton's counters and the backend's
per-execution histograms, differenced between two scrapes (parsed Prometheus text, no server)."""
import math

from perf_sweep.peers.inside_server import (
    FRAMEWORK_CALLS,
    FRAMEWORK_SECONDS,
    NARROW_FORCED,
    REST_OF_EXECUTE_SECONDS,
    InsideServer,
    inside_server,
)
from perf_sweep.results import parse_prometheus_text
from serving.backend.metrics import exposed_metric_names
from serving.backend.session_choice import Reason

MODEL = "text_embedder"


def scrape(success, executions, queue_us, infer_us, framework_s, framework_n, rest_s, other_model_success=0, wide_calls=0,
           cores_busy=0):
    labels = f'model="{MODEL}",version="1"'
    return parse_prometheus_text("\n".join([
        "# HELP nv_inference_request_success Number of successful inference requests",
        f"nv_inference_request_success{{{labels}}} {success}",
        f"nv_inference_request_failure{{{labels},reason=\"REJECTED\"}} 0",
        f"nv_inference_count{{{labels}}} {success}",
        f"nv_inference_exec_count{{{labels}}} {executions}",
        f"nv_inference_queue_duration_us{{{labels}}} {queue_us}",
        f"nv_inference_compute_infer_duration_us{{{labels}}} {infer_us}",
        f'nv_inference_request_success{{model="digit_classifier",version="1"}} {other_model_success}',
        f"{FRAMEWORK_SECONDS}_sum{{{labels}}} {framework_s}",
        f"{FRAMEWORK_SECONDS}_count{{{labels}}} {framework_n}",
        f"{REST_OF_EXECUTE_SECONDS}_sum{{{labels}}} {rest_s}",
        f"{REST_OF_EXECUTE_SECONDS}_count{{{labels}}} {framework_n}",
        f'{FRAMEWORK_CALLS}{{model="{MODEL}",reason="preferred",session="wide",version="1"}} {wide_calls}',
        f'{FRAMEWORK_CALLS}{{model="{MODEL}",reason="cores_busy",session="narrow",version="1"}} {cores_busy}',
        f'{FRAMEWORK_CALLS}{{model="{MODEL}",reason="recheck",session="narrow",version="1"}} {framework_n - wide_calls - cores_busy}',
        f'{FRAMEWORK_CALLS}{{model="digit_classifier",reason="sibling_busy",session="narrow",version="1"}} 999',
    ]))


def test_a_level_is_the_difference_of_two_scrapes_per_request_and_per_execution():
    before = scrape(100, 60, 5_000, 200_000, 0.1, 60, 0.02, other_model_success=7, wide_calls=10, cores_busy=5)
    # 400 requests in 100 executions: 50 us queue and 2.5 ms compute per request; 8 ms of ONNX Runtime
    # and 1 ms of the rest of execute per execution
    after = scrape(500, 160, 25_000, 1_200_000, 0.9, 160, 0.12, other_model_success=900, wide_calls=85, cores_busy=25)
    inside = inside_server(before, after, MODEL)
    assert (inside.requests, inside.executions) == (400, 100)
    assert math.isclose(inside.requests_per_execution, 4.0)
    assert math.isclose(inside.queue_ms_per_request, 0.05) and math.isclose(inside.compute_infer_ms_per_request, 2.5)
    assert math.isclose(inside.framework_ms_per_execution, 8.0) and math.isclose(inside.rest_of_execute_ms_per_execution, 1.0)
    assert math.isclose(inside.wide_session_share, 0.75), "75 of the level's 100 framework calls ran wide"
    assert math.isclose(inside.cores_busy_share, 0.20), "20 ran narrow because the worker cores were busy"
    assert inside.sibling_busy_share == 0, "the other model's sibling-busy calls are not this model's"
    assert inside.settling_share == 0, "no call of the level was kept narrow after a sibling computed"


def test_nothing_is_said_about_a_level_without_a_successful_request():
    same = scrape(100, 60, 5_000, 200_000, 0.1, 60, 0.02)
    assert inside_server(same, same, MODEL) is None


def test_a_backend_without_its_metrics_still_gets_tritons_figures_and_plain_json():
    triton_only = {k: v for k, v in scrape(0, 0, 0, 0, 0, 0, 0).items() if not k[0].startswith("serving_")}
    after = {k: v for k, v in scrape(10, 10, 1_000, 20_000, 0, 0, 0).items() if not k[0].startswith("serving_")}
    inside = inside_server(triton_only, after, MODEL)
    assert math.isclose(inside.compute_infer_ms_per_request, 2.0) and math.isnan(inside.framework_ms_per_execution)
    data = inside.as_dict()
    assert data["framework_ms_per_execution"] is None and data["requests_per_execution"] == 1.0
    again = InsideServer.from_dict(data)
    assert again.requests == 10 and math.isnan(again.rest_of_execute_ms_per_execution)
    assert data["wide_session_share"] is None and math.isnan(again.wide_session_share)
    older = {k: v for k, v in data.items() if k != "wide_session_share"}
    assert math.isnan(InsideServer.from_dict(older).wide_session_share), "levels.jsonl written before this field still reads"


def test_the_histograms_read_are_the_ones_the_backend_publishes():
    published = exposed_metric_names()
    for name in (FRAMEWORK_SECONDS, REST_OF_EXECUTE_SECONDS):
        assert {f"{name}_sum", f"{name}_count"} <= published
    assert FRAMEWORK_CALLS in published
    assert set(NARROW_FORCED) <= {r.value for r in Reason}, "the forced reasons are the backend's own label values"
