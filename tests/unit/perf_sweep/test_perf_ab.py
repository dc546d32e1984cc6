"""The A/B block's planning and its pure parts: roles, batcher candidates, the candidates table."""
from __future__ import annotations

from pathlib import Path

import pytest

from contracts.model_config import read_model_config
from contracts.serving_spec import ModelSpec, PriorityLevel, QueuePolicy, ServingSpec
from perf_sweep.ab import CANDIDATE_THROUGHPUT_FLOOR, candidate_rows
from perf_sweep.results import PerfRecord
from perf_sweep.variants import BatcherCandidate, VariantRole, plan_variants, variants_by_role, write_variant_repository
from test_perf_campaign import tiny_onnx

SPEC = ServingSpec(models=(ModelSpec(name="digits", recipe="digit_cnn", max_batch_size=16, instance_count=2,
                                     max_queue_delay_microseconds=0),),
                   priorities=(PriorityLevel("realtime", 1, QueuePolicy(4, 1000)), PriorityLevel("batch", 2, QueuePolicy(8, 1000))))
CANDIDATES = (BatcherCandidate(1), BatcherCandidate(4, 500), BatcherCandidate(2, 2000, (4, 8, 32)))


def _record(variant: str, load: float, throughput: float, requests: int, stalled: int = 0) -> PerfRecord:
    return PerfRecord(sweep=f"ab.{variant}.concurrency", model="m", variant=variant, mode="concurrency", load=load,
                      batch_size=1, status="ok", command="", throughput=throughput, p99_ms=5.0, requests=requests, stalled=stalled)


def test_every_variant_has_a_role_and_candidates_keep_the_policies(tmp_path):
    variants = plan_variants(SPEC, "digits", Path("m.onnx"), static_batch=8, delays_ms=(0, 2), candidates=CANDIDATES)
    roles = {v.label: v.role for v in variants}
    assert roles["dynamic"] is VariantRole.SERVED and roles["dynamic_0ms_no_queue_policy"] is VariantRole.PLAIN
    assert roles["static_b8"] is VariantRole.STATIC and not VariantRole.STATIC.closed_loop
    assert [v.label for v in variants_by_role(variants, VariantRole.DELAY)] == ["delay_0ms", "delay_2ms"]
    candidates = variants_by_role(variants, VariantRole.CANDIDATE)
    assert [c.label for c in candidates] == ["candidate_i1_d0us", "candidate_i4_d500us", "candidate_i2_d2000us_pref4_8_32"]
    assert all(c.queue_policies for c in candidates)
    assert candidates[2].preferred_batch_sizes == (4, 8)  # 32 > max_batch_size 16 is dropped


def test_candidate_configs_render_instances_delay_and_preferred_sizes(tmp_path):
    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    variants = plan_variants(SPEC, "digits", onnx_path, static_batch=8, delays_ms=(), candidates=CANDIDATES)
    repo = write_variant_repository(SPEC, "digits", variants, tmp_path / "repo")
    by_label = {v.label: read_model_config(repo / v.served_name) for v in variants}
    one = by_label["candidate_i1_d0us"]
    assert sum(g.count for g in one.instance_group) == 1 and one.dynamic_batching.priority_levels == 2
    four = by_label["candidate_i4_d500us"]
    assert sum(g.count for g in four.instance_group) == 4 and four.dynamic_batching.max_queue_delay_microseconds == 500
    assert list(by_label["candidate_i2_d2000us_pref4_8_32"].dynamic_batching.preferred_batch_size) == [4, 8]
    assert sum(g.count for g in by_label["dynamic"].instance_group) == 2  # the served model's own count


def test_candidate_rows_compare_with_the_plain_batcher_and_count_stalls():
    variants = plan_variants(SPEC, "digits", Path("m.onnx"), static_batch=8, delays_ms=(), candidates=CANDIDATES[:2])
    records = [_record("dynamic_0ms_no_queue_policy", 16, 1000, 20_000), _record("dynamic", 1, 400, 5_000),
               _record("dynamic", 16, 950, 19_000), _record("candidate_i1_d0us", 16, 700, 14_000),
               _record("candidate_i4_d500us", 16, 990, 19_800, stalled=3)]
    at16 = {r.variant: r for r in records if r.load == 16}
    rows, plain = candidate_rows(variants, at16, records)
    assert plain.throughput == 1000
    by = {r["variant"]: r for r in rows}
    assert set(by) == {"dynamic", "candidate_i1_d0us", "candidate_i4_d500us"}
    assert by["dynamic"]["served"] and by["dynamic"]["requests"] == 24_000 and by["dynamic"]["vs_plain"] == 0.95
    assert by["dynamic"]["meets"] and CANDIDATE_THROUGHPUT_FLOOR == 0.9
    assert not by["candidate_i1_d0us"]["meets"]  # 0.7x
    assert not by["candidate_i4_d500us"]["meets"] and by["candidate_i4_d500us"]["stalled"] == 3  # fast but stalled


def test_report_renders_the_candidates_table():
    from perf_sweep.report import render_markdown

    text = render_markdown({"run_id": "r", "command": "c", "host": "h", "knees": {}, "inputs": {}, "skipped": [], "headlines": [],
                            "records": [_record("dynamic", 16, 950, 19_000).as_dict()],
                            "candidates": {"plain_c16": 1000.0, "table": "| a | b |", "requests_all_closed_loop": 50_000,
                                           "stalled_all_closed_loop": 0}}, {})
    assert "### Batcher candidates" in text and "50000 requests, 0 stalled" in text and "| a | b |" in text


@pytest.mark.built
@pytest.mark.parametrize("model", ["text_embedder", "text_encoder", "digit_classifier"])
def test_a_served_variant_is_the_served_config_under_another_name(tmp_path, serving_spec, model):
    """With the served model's folder and max_batch_size, the A/B's `dynamic` variant renders the served
    config itself (a text model's tokenizer, buckets, pad id, maximum length, TEXT input, ragged batches
    and the build's measured max_batch_size included, and the tokenizer file beside the ONNX file);
    without them text_embedder's variants did not load and text_encoder's batched up to 64, not 32."""
    from contracts.layout import MODEL_REPOSITORY

    served_dir = MODEL_REPOSITORY / model
    onnx = served_dir / "1" / "model.onnx"
    served = read_model_config(served_dir)
    variants = [v for v in plan_variants(serving_spec, model, onnx, static_batch=8, delays_ms=(),
                                         served_max_batch_size=served.max_batch_size) if v.role is VariantRole.SERVED]
    repo = write_variant_repository(serving_spec, model, variants, tmp_path / "repo", served_dir=served_dir)
    (variant,) = variants
    rendered = read_model_config(repo / variant.served_name)
    rendered.name = served.name
    assert rendered == served
    assert sorted(f.name for f in (repo / variant.served_name / "1").iterdir()) == sorted(
        f.name for f in (served_dir / "1").iterdir() if f.is_file())


def test_the_ab_block_of_a_text_model_is_skipped_with_why_not_a_traceback():
    """Its in-process limit fed the requests' TEXT to an ONNX graph that takes token ids (ValueError);
    the block now says which model it measures and where text models are compared."""
    from types import SimpleNamespace

    from perf_sweep.campaign import PreparedInputs, _ab_and_isolation

    text = PreparedInputs("TEXT", "text", "inputs/text.json", None, "BYTES", "sentences")
    results = {"skipped": [], "knees": {}, "headlines": []}
    opts = SimpleNamespace(ab_model="text_embedder", models=None)
    records, samples = _ab_and_isolation(SPEC, [], {"text_embedder": text}, opts, None, results, print)
    assert (records, samples) == ([], {})
    (skipped,) = results["skipped"]
    assert "A/B block: model 'text_embedder' takes text requests" in skipped and "make perf-peers" in skipped


def test_a_served_config_without_inputs_leaves_the_variants_the_graphs_tensors(tmp_path):
    """A hand-written served config without inputs/outputs: the variants take the ONNX graph's (the
    backend has no auto-complete to fill them in), its parameters still."""
    from contracts.model_config import parse_config, write_model_config

    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    served = tmp_path / "served" / "digits"
    (served / "1").mkdir(parents=True)
    write_model_config(served, parse_config('name: "digits" parameters { key: "pad_value" value { string_value: "7" } }'))
    variants = plan_variants(SPEC, "digits", onnx_path, static_batch=8, delays_ms=())
    repo = write_variant_repository(SPEC, "digits", variants[:1], tmp_path / "repo", served_dir=served)
    config = read_model_config(repo / variants[0].served_name)
    assert [t.name for t in config.input] and [t.name for t in config.output]
    assert config.parameters["pad_value"].string_value == "7"


def test_the_ab_block_of_a_model_with_random_inputs_says_so():
    from types import SimpleNamespace

    from perf_sweep.campaign import PreparedInputs, _ab_and_isolation

    results = {"skipped": [], "knees": {}, "headlines": []}
    opts = SimpleNamespace(ab_model="text_encoder", models=None)
    _ab_and_isolation(SPEC, [], {"text_encoder": PreparedInputs("", "random", "random", None, "INT64", "")}, opts, None,
                      results, print)
    (skipped,) = results["skipped"]
    assert "has only random inputs here" in skipped and "tokenizes" not in skipped
