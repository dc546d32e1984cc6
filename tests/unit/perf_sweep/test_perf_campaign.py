"""The pure parts of a run: manifest endpoints, input kinds, knee text, variant configs."""
import numpy as np
import pytest

from perf_sweep.campaign import describe_knee, endpoints_from_manifest, input_kind, knee_of
from perf_sweep.errors import SweepPlanError
from perf_sweep.plan import LoadMode
from perf_sweep.results import PerfRecord
from perf_sweep.variants import plan_variants, write_variant_repository
from contracts.serving_spec import Batching, ModelSpec, PriorityLevel, QueuePolicy, ServingSpec

MANIFEST = {
    "partitions": {"default": {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001", "metrics": "http://127.0.0.1:8002/metrics"}},
    "models": {"digit_classifier": {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001",
                                    "metrics": "http://127.0.0.1:8002/metrics", "partition": "default"}},
}


def test_endpoints_from_manifest():
    (endpoint,) = endpoints_from_manifest(MANIFEST)
    assert endpoint.model == "digit_classifier" and endpoint.grpc_url == "127.0.0.1:8001"
    assert endpoint.url("http") == "127.0.0.1:8000" and endpoint.server == "default"
    with pytest.raises(SweepPlanError, match="no models"):
        endpoints_from_manifest({"models": {}})
    with pytest.raises(SweepPlanError, match="lacks"):
        endpoints_from_manifest({"models": {"m": {"http": "x"}}})


def test_an_elastic_partitions_in_process_limit_is_pinned_to_every_core_it_may_borrow():
    """The in-process limits were pinned to the partition's home core while the elastic partition they
    are compared with computed on both: "served at 137-152% of the limit"."""
    from contracts.layout import SERVING_CONFIG
    from contracts.partition_plan import plan_partitions
    from contracts.serving_spec import load_serving_spec

    plan = plan_partitions(load_serving_spec(SERVING_CONFIG), cpu_count=2, gpu_present=False)
    manifest = {"partitions": plan.to_dict()["partitions"],
                "models": {m: {**p.endpoints, "partition": p.name} for p in plan.partitions for m in p.models}}
    endpoint = next(e for e in endpoints_from_manifest(manifest) if e.model == "text_embedder")
    assert plan.partition_of("text_embedder").cpus == (0,) and endpoint.limit_cpus == (0, 1)
    assert endpoint.cpus == (0,)  # the A/B server: a controlled comparison on the home core, as documented


def test_input_kind_recognises_digit_images_and_any_string_input():
    image = {"input": [{"name": "image", "data_type": "TYPE_FP32", "dims": ["1", "8", "8"]}]}
    text = {"input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": ["1"]}]}
    other = {"input": [{"name": "a", "data_type": "TYPE_INT64", "dims": ["-1"]}, {"name": "b", "data_type": "TYPE_INT64", "dims": ["-1"]}]}
    assert input_kind(image) == ("image", "image")
    assert input_kind(text) == ("text", "TEXT")
    assert input_kind(other) == ("random", "")


def _record(load, throughput, p99, status="ok"):
    return PerfRecord(sweep="s", model="m", variant="v", mode="concurrency", load=load, batch_size=1,
                      status=status, command="", throughput=throughput, p99_ms=p99)


def test_describe_knee_recommends_80_percent_and_mentions_a_failed_next_level():
    records = [_record(1, 100, 10), _record(2, 200, 10), _record(4, 205, 20), _record(8, 0, 0, "failed")]
    knee = knee_of(records)
    text = describe_knee(knee, records, LoadMode.CONCURRENCY)
    assert text.startswith("concurrency 2 (200.0 infer/s")
    assert "160 infer/s (concurrency 1)" in text and "level (concurrency 8) failed" in text


def test_describe_knee_not_reached_is_a_lower_bound():
    records = [_record(1, 100, 10), _record(2, 200, 11)]
    assert "lower bound" in describe_knee(knee_of(records), records, LoadMode.CONCURRENCY)


def tiny_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((64, 10), np.float32), "W")
    shape = numpy_helper.from_array(np.array([-1, 64], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["image", "shape"], ["flat"]), helper.make_node("MatMul", ["flat", "W"], ["probabilities"])],
        "g", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 10])], [w, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_variant_repository_renders_each_variant_with_only_batching_changed(tmp_path):
    spec = ServingSpec(models=(ModelSpec(name="digits", recipe="digit_cnn", max_batch_size=64),),
                       priorities=(PriorityLevel("realtime", 1, QueuePolicy(4, 1000)), PriorityLevel("batch", 2, QueuePolicy(8, 1000))),
                       batching=Batching(max_queue_delay_microseconds=10_000))  # "dynamic" keeps the served window
    onnx_path = tiny_onnx(tmp_path / "m.onnx")
    variants = plan_variants(spec, "digits", onnx_path, static_batch=8, delays_ms=(0, 2.5))
    assert [v.label for v in variants] == ["dynamic", "dynamic_no_queue_policy", "no_batching",
                                           "no_batching_no_queue_policy", "dynamic_0ms_no_queue_policy", "static_b8",
                                           "delay_0ms", "delay_2.5ms"]
    repo = write_variant_repository(spec, "digits", variants, tmp_path / "repo")
    from contracts.model_config import read_model_config

    configs = {v.label: read_model_config(repo / v.served_name) for v in variants}
    sizes = {label: c.max_batch_size for label, c in configs.items()}
    delays = {label: c.dynamic_batching.max_queue_delay_microseconds for label, c in configs.items()}
    assert sizes["no_batching"] == 1 and sizes["no_batching_no_queue_policy"] == 1 and sizes["static_b8"] == 8
    assert delays["static_b8"] == 0 and delays["delay_2.5ms"] == 2500 and delays["dynamic"] == 10000
    assert delays["dynamic_no_queue_policy"] == 10000 and delays["dynamic_0ms_no_queue_policy"] == 0
    for label, c in configs.items():
        with_policies = not label.endswith("_no_queue_policy")
        assert (c.dynamic_batching.priority_levels == 2) == with_policies, label
        assert (len(c.dynamic_batching.priority_queue_policy) == 2) == with_policies, label
        assert c.dynamic_batching.HasField("default_queue_policy") == with_policies, label
    assert (repo / "digits_ab_dynamic" / "1" / "model.onnx").read_bytes() == onnx_path.read_bytes()
    assert not (repo / "digits_ab_dynamic" / "1" / "model.onnx").is_symlink()
    with pytest.raises(SweepPlanError, match="static_batch"):
        plan_variants(spec, "digits", onnx_path, static_batch=128)


def test_ensemble_steps_are_found_from_the_served_configs():
    from perf_sweep.campaign import ensemble_steps

    configs = [{"name": "text_embedder", "platform": "ensemble", "ensemble_scheduling": {"step": [
        {"model_name": "text_tokenizer"}, {"model_name": "text_encoder"}]}}, {"name": "digit_classifier"}]
    assert ensemble_steps(configs) == {"text_tokenizer", "text_encoder"}


def test_sweep_stops_three_levels_past_a_confirmed_knee():
    from perf_sweep.campaign import past_the_knee

    rising = [_record(1, 100, 10), _record(2, 200, 10), _record(4, 400, 11)]
    assert past_the_knee(rising) is None
    two_past = [_record(1, 100, 10), _record(2, 200, 10), _record(4, 205, 20), _record(8, 206, 40)]
    assert past_the_knee(two_past) is None
    three_past = two_past + [_record(16, 207, 80)]
    assert "knee (load 2) is 3 levels behind" in past_the_knee(three_past)


def test_a_plateau_that_a_later_level_breaks_does_not_stop_the_sweep():
    """The served digit classifier's real curve (peers run 2026-12-04 16:35): flat from c=4 to 16,
    then x1.66 at c=32. Stopping two levels past c=4 reported a peak 40% low."""
    from perf_sweep.campaign import knee_of, past_the_knee

    curve = [(1, 965, 2.3), (2, 1458, 4.2), (4, 2344, 4.6), (8, 2206, 9.9), (16, 2434, 15.3), (32, 4049, 18.4)]
    records = [_record(c, t, p) for c, t, p in curve]
    assert all(past_the_knee(records[:n]) is None for n in range(1, len(records) + 1))
    assert knee_of(records).peak.throughput == 4049


def test_limit_headlines_put_each_models_served_throughput_against_its_own_limit():
    from perf_sweep.campaign import limit_headlines

    def rec(model, sweep, load, throughput):
        return PerfRecord(sweep=sweep, model=model, variant="v", mode="concurrency", load=load, batch_size=1,
                          status="ok", command="", throughput=throughput, p99_ms=20.0)

    records = [rec("digit_classifier", "digit_classifier.concurrency", 8, 1000.0),
               rec("digit_classifier_ab_dynamic", "ab.dynamic.concurrency", 16, 1200.0),
               rec("digit_classifier_small", "digit_classifier_small.concurrency", 8, 5000.0),  # another model
               rec("text_embedder", "text_embedder.concurrency", 32, 90.0)]
    results = {"knees": {"digit_classifier.concurrency": {"knee": None, "peak": {"throughput": 1000.0}},
                         "text_embedder.concurrency": {"knee": None, "peak": {"throughput": 90.0}}},
               "limit": {"best": {"batch_size": 32, "throughput": 50000.0, "batch_latency_ms": 0.6}},
               "limits": {"text_embedder": {"best": {"batch_size": 16, "throughput": 180.0, "batch_latency_ms": 89.0},
                                            "unit": "texts/s", "what": "tokenize + int8_mixed encoder as served"}}}
    lines = limit_headlines(results, records, "digit_classifier")
    assert len(lines) == 4
    assert lines[0].startswith("digit_classifier: served throughput at the peak (knee not reached): 1000 items/s = 2.0%")
    assert "1200 items/s (ab.dynamic.concurrency at 16" in lines[1]  # not digit_classifier_small's 5000
    assert lines[2].startswith("text_embedder: served throughput at the peak (knee not reached): 90 texts/s = 50.0% "
                               "of the in-process limit 180 texts/s (batch 16; tokenize + int8_mixed encoder as served)")
    assert lines[3].endswith("= 50.0% of the in-process limit.")
    assert limit_headlines({"knees": {}}, records, None) == []


def test_a_sweep_of_one_measured_level_has_that_level_as_its_peak(monkeypatch):
    """`--max-concurrency 1`, or a second level that failed: no knee (it needs two levels), and the peak
    was stored as None too, so the A/B block ran at a made-up 100 infer/s x 80% labelled "80% of the
    served peak" (a review, 2026-12-06)."""
    from types import SimpleNamespace

    import perf_sweep.campaign as campaign
    from perf_sweep.plan import Endpoint
    from perf_sweep.results import PerfRecord

    record = PerfRecord(sweep="digit_classifier.concurrency", model="digit_classifier", variant="fp32", mode="concurrency",
                        load=1, batch_size=1, status="ok", command="", throughput=1200.0, p50_ms=0.8, p95_ms=1.0,
                        p99_ms=1.2, requests=5000)
    monkeypatch.setattr(campaign, "run_sweep", lambda sweep, folder, progress, stop_when=None: ([record], {}))
    _, knees = campaign.run_served_sweeps(Endpoint("digit_classifier", "h:1", "h:2", "h:3/metrics"), "fp32",
                                          SimpleNamespace(path="x.json"), campaign.CampaignOptions(max_concurrency=1),
                                          None, lambda line: None)
    entry = knees["digit_classifier.concurrency"]
    assert entry["knee"] is None and entry["peak"] is not None and entry["peak"]["throughput"] == 1200.0


def test_option_mistakes_are_named_before_anything_is_measured(tmp_path):
    """From a review (2026-12-07): an --ab-model typo ran the whole sweep and then listed the A/B block
    as not measured; --write-back with --no-ab wrote nothing, silently; an --out-root that is a file
    ended in NotADirectoryError; two runs within one second shared a folder."""
    import json

    from perf_sweep import campaign

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    with pytest.raises(SweepPlanError, match=r"A/B model 'digit_clasifier' is not served \(manifest has \['digit_classifier'\]\)"):
        campaign._selected_endpoints(campaign.CampaignOptions(manifest=manifest, ab_model="digit_clasifier"))
    assert campaign._selected_endpoints(campaign.CampaignOptions(manifest=manifest, ab_model=None))[0]
    with pytest.raises(SweepPlanError, match="`write_back` writes the delay the A/B block chooses"):
        campaign.CampaignOptions(write_back=True, ab_model=None)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SweepPlanError, match="is a file: allowed a folder"):
        campaign.CampaignOptions(out_root=tmp_path / "a-file")
    first = tmp_path / "runs" / "20261207-040000"
    assert campaign.unused_folder(first) == first
    first.mkdir(parents=True)
    assert campaign.unused_folder(first).name == "20261207-040000-2"


def test_a_brought_models_inputs_are_synthetic_rows_and_others_unrecognised_ones_are_not_swept(tmp_path):
    """recipe onnx_file: swept with valid synthetic rows, said to be synthetic; any other model whose
    inputs are not the project's kinds stays unswept (perf_analyzer's random ids would be refused)."""
    import json
    from pathlib import Path

    from perf_sweep import campaign
    from tiny_onnx_models import ids_interact_model, save

    save(ids_interact_model(), tmp_path / "repo" / "ids" / "1" / "model.onnx")
    config = {"name": "ids", "input": [{"name": "ids", "data_type": "TYPE_INT64", "dims": [2]}],
              "parameters": {"mask_inputs": {"string_value": ""}}}
    opts = campaign.CampaignOptions(config=tmp_path / "repo" / "serving.toml")
    brought = campaign.prepare_inputs("ids", config, tmp_path / "inputs", opts, brought=True)
    assert brought.kind == "synthetic" and "not production data" in brought.description
    rows = [entry["ids"]["content"] for entry in json.loads(Path(brought.path).read_text())["data"]]
    assert len(rows) == 32 and all(0 <= i <= 3 for row in rows for i in row)  # the graph's table has 4 rows
    assert campaign.prepare_inputs("ids", config, tmp_path / "inputs", opts).kind == "random"


def test_synthetic_rows_of_a_padded_text_model_are_as_long_as_it_takes(tmp_path):
    """A brought encoder served padded (max_sequence_length 8, no max_input_dims): rows 8 tokens long, not
    the 16 of the default, which the backend would refuse (every request of the sweep a 400)."""
    from perf_sweep import inputs as gen
    from tiny_onnx_models import masked_embedding_model, save

    path = save(masked_embedding_model(), tmp_path / "encoder.onnx")
    config = {"input": [{"name": "input_ids", "data_type": "TYPE_INT64", "dims": [-1]},
                        {"name": "attention_mask", "data_type": "TYPE_INT64", "dims": [-1]}],
              "parameters": {"mask_inputs": {"string_value": "attention_mask"}, "max_sequence_length": {"string_value": "8"}}}
    data, described = gen.synthetic_input_data(config, path)
    assert {name: entry["shape"] for name, entry in data["data"][0].items()} == {"input_ids": [8], "attention_mask": [8]}
    assert all(v == 1 for entry in data["data"] for v in entry["attention_mask"]["content"])
    assert "token sequences ['input_ids', 'attention_mask'] 8 long" in described
