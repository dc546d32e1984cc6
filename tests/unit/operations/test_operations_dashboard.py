"""The Grafana dashboard: generated == committed, valid structure, and only real Triton metric names."""
from __future__ import annotations

import json
import re

from operations.dashboard import DASHBOARD_PATH, PANELS, promql_metric_names, render_dashboard, triton_metric_names


def dashboard_metric_names(dashboard: dict) -> set[str]:
    names = {n for p in dashboard["panels"] for t in p["targets"] for n in promql_metric_names(t["expr"])}
    for variable in dashboard["templating"]["list"]:
        match = re.fullmatch(r"label_values\((\w+), *\w+\)", variable["query"])
        names |= {match.group(1)} if match else set()
    return names


def test_committed_dashboard_is_the_generated_one():
    assert json.loads(DASHBOARD_PATH.read_text()) == render_dashboard(), "run `python -m operations.dashboard`"


def test_dashboard_structure_is_valid_grafana():
    dashboard = render_dashboard()
    assert dashboard["uid"] and dashboard["title"] and isinstance(dashboard["schemaVersion"], int)
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "model"}
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels) == len(PANELS)
    cells = set()
    for panel in panels:
        assert panel["type"] == "timeseries" and panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
        area = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area
        assert panel["targets"], panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip()


def test_dashboard_shows_what_operators_need():
    titles = " | ".join(p["title"].lower() for p in render_dashboard()["panels"])
    for topic in ("p99", "throughput", "queue time", "batch size", "rejections", "queue depth", "error rate",
                  "padding efficiency", "bucket", "outside the framework"):
        assert topic in titles, topic


def test_dashboard_queries_name_only_real_triton_metrics():
    used = dashboard_metric_names(render_dashboard())
    assert {"nv_inference_request_summary_us", "nv_inference_count", "nv_inference_exec_count"} <= used
    from serving.backend.metrics import exposed_metric_names

    known = triton_metric_names() | exposed_metric_names()
    assert used - {"up"} <= known, used - known


def test_promql_metric_names_skips_functions_labels_and_variables():
    expr = 'sum by (model) (rate(nv_inference_count{model=~"$model"}[$__rate_interval])) / 1e6 > bool on(model) up offset 5m'
    assert promql_metric_names(expr) == {"nv_inference_count", "up"}
