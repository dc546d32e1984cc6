"""The text embedder's in-process limit: the pipeline read from served configs, batches, padding."""
import os
from types import SimpleNamespace

import numpy as np
import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.text_limit import (
    TextPipeline,
    cycle_batches,
    decode_texts,
    embed_batch,
    encoder_feeds,
    measure_text_limit,
    pad_rows,
    plan_text_pipeline,
    served_version_dir,
)

PARAM = lambda value: {"string_value": value}  # noqa: E731  (Triton's config API shape)


def configs(buckets="16,24,32", onnx_file="model.onnx", backend="onnxruntime_cpu"):
    """The three configs as Triton's HTTP config API returns them for the served ensemble."""
    ensemble = {"name": "text_embedder", "platform": "ensemble", "max_batch_size": 32,
                "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": ["1"]}],
                "output": [{"name": "embedding", "data_type": "TYPE_FP32", "dims": ["384"]}],
                "ensemble_scheduling": {"step": [
                    {"model_name": "text_tokenizer", "model_version": -1, "input_map": {"TEXT": "TEXT"},
                     "output_map": {"input_ids": "ids_t", "attention_mask": "mask_t"}},
                    {"model_name": "text_encoder", "model_version": -1,
                     "input_map": {"input_ids": "ids_t", "attention_mask": "mask_t"},
                     "output_map": {"embedding": "embedding"}}]}}
    tokenizer = {"name": "text_tokenizer", "backend": "python", "max_batch_size": 64,
                 "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": ["1"]}],
                 "parameters": {"max_length": PARAM("128"), "pad_id": PARAM("0"), "tokenizer_file": PARAM("tokenizer.json")}}
    encoder = {"name": "text_encoder", "backend": backend, "max_batch_size": 32,
               "input": [{"name": "input_ids", "data_type": "TYPE_INT64", "dims": ["-1"]},
                         {"name": "attention_mask", "data_type": "TYPE_INT64", "dims": ["-1"]}],
               "parameters": {"intra_op_num_threads": PARAM("0"), "onnx_file": PARAM(onnx_file), "pad_value": PARAM("0"),
                              "sequence_buckets": PARAM(buckets), "sequence_length_input": PARAM("attention_mask")}}
    return ensemble, {"text_tokenizer": tokenizer, "text_encoder": encoder}


@pytest.fixture
def repository(tmp_path):
    for path in ("text_tokenizer/1/tokenizer.json", "text_encoder/1/model.onnx", "text_encoder/2/model.onnx"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("x")
    return tmp_path


def test_pipeline_is_read_from_the_served_configs_and_repository(repository):
    ensemble, steps = configs()
    pipeline = plan_text_pipeline(ensemble, steps, repository)
    assert pipeline.tokenizer_file == repository / "text_tokenizer" / "1" / "tokenizer.json"
    assert pipeline.encoder_onnx == repository / "text_encoder" / "2" / "model.onnx"  # latest version, as served
    assert pipeline.max_length == 128 and pipeline.max_batch_size == 32
    assert pipeline.feeds == (("input_ids", "input_ids"), ("attention_mask", "attention_mask"))
    assert pipeline.buckets == (16, 24, 32) and pipeline.length_input == "attention_mask"
    assert pipeline.intra_op_threads(1) == 1
    described = pipeline.describe(repository)
    assert "`text_tokenizer/1/tokenizer.json` (truncation at 128 tokens)" in described
    assert "sequence buckets 16,24,32 on `attention_mask`" in described


def test_pipeline_without_buckets_and_with_explicit_threads(repository):
    ensemble, steps = configs(buckets="")
    steps["text_encoder"]["parameters"]["intra_op_num_threads"] = PARAM("3")
    pipeline = plan_text_pipeline(ensemble, steps, repository)
    assert pipeline.buckets == () and pipeline.length_input == ""
    assert pipeline.intra_op_threads(1) == 3
    assert "no sequence buckets" in pipeline.describe(repository)


def test_pipeline_errors_name_what_is_wrong(repository):
    ensemble, steps = configs(onnx_file="missing.onnx")
    with pytest.raises(SweepPlanError, match="onnx_file.*missing.onnx"):
        plan_text_pipeline(ensemble, steps, repository)
    ensemble, steps = configs(backend="onnxruntime")
    with pytest.raises(SweepPlanError, match="onnxruntime_cpu"):
        plan_text_pipeline(ensemble, steps, repository)
    ensemble, steps = configs(buckets="32,16")
    with pytest.raises(SweepPlanError, match="text_encoder.*sequence_buckets"):
        plan_text_pipeline(ensemble, steps, repository)
    ensemble, steps = configs()
    del steps["text_tokenizer"]["parameters"]["max_length"]
    with pytest.raises(SweepPlanError, match="text_tokenizer: parameter `max_length`"):
        plan_text_pipeline(ensemble, steps, repository)
    ensemble, steps = configs()
    ensemble["ensemble_scheduling"]["step"][1]["input_map"]["attention_mask"] = "elsewhere"
    with pytest.raises(SweepPlanError, match="'attention_mask' of text_encoder is not fed"):
        plan_text_pipeline(ensemble, steps, repository)
    ensemble, steps = configs()
    ensemble["ensemble_scheduling"]["step"].pop()
    with pytest.raises(SweepPlanError, match="2 steps"):
        plan_text_pipeline(ensemble, steps, repository)
    with pytest.raises(SweepPlanError, match="no numbered version"):
        served_version_dir(repository, "absent")


def test_pipeline_rejects_a_length_input_that_is_not_an_encoder_input(tmp_path):
    with pytest.raises(SweepPlanError, match="sequence_length_input"):
        TextPipeline("t", "e", tmp_path, 128, tmp_path, (("input_ids", "input_ids"),), buckets=(16,), length_input="mask")


def test_cycle_batches_cover_every_sample_once_with_full_batches():
    batches = cycle_batches(10, 4)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert [b.tolist() for b in cycle_batches(3, 8)] == [[0, 1, 2, 0, 1, 2, 0, 1]]
    with pytest.raises(SweepPlanError):
        cycle_batches(0, 4)


def test_encoder_feeds_right_pad_like_the_served_backend():
    encodings = [SimpleNamespace(ids=[101, 7, 102], attention_mask=[1, 1, 1], type_ids=[0, 0, 0]),
                 SimpleNamespace(ids=[101, 102], attention_mask=[1, 1], type_ids=[0, 0])]
    feeds = encoder_feeds(encodings, (("input_ids", "input_ids"), ("attention_mask", "attention_mask")), pad_value=0)
    np.testing.assert_array_equal(feeds["input_ids"], [[101, 7, 102], [101, 102, 0]])
    np.testing.assert_array_equal(feeds["attention_mask"], [[1, 1, 1], [1, 1, 0]])
    assert feeds["input_ids"].dtype == np.int64
    np.testing.assert_array_equal(pad_rows([[5], [1, 2]], pad_value=9), [[5, 9], [1, 2]])
    with pytest.raises(SweepPlanError):
        pad_rows([])


def test_decode_texts_takes_the_samples_perf_analyzer_sends():
    samples = np.array([["a".encode()], ["é".encode()]], dtype=object)
    assert decode_texts(samples) == [b"a", "é".encode()]


class WordTokenizer:
    """tokenizers.Tokenizer's encode_batch on whitespace words: [CLS]=1 word ids [SEP]=2."""

    def encode_batch(self, texts):
        return [SimpleNamespace(ids=[1] + [len(w) + 2 for w in t.split()] + [2], attention_mask=[1] * (len(t.split()) + 2),
                                type_ids=[0] * (len(t.split()) + 2)) for t in texts]


def test_embed_batch_buckets_by_real_length_and_keeps_row_order(tmp_path):
    calls = []

    def run(feeds):
        calls.append(feeds["input_ids"].shape)
        return [feeds["input_ids"].sum(axis=1, keepdims=True).astype(np.float32)]

    pipeline = TextPipeline("t", "e", tmp_path, 128, tmp_path, (("input_ids", "input_ids"), ("attention_mask", "attention_mask")),
                            buckets=(4, 8), length_input="attention_mask")
    texts = [b"a bb ccc dddd eeeee ffffff", b"x", b"yy zz"]
    (out,) = embed_batch(WordTokenizer(), run, pipeline, texts)
    assert sorted(calls) == [(1, 8), (2, 4)]  # the short rows are not padded to the long one
    np.testing.assert_array_equal(out[:, 0], [1 + 3 + 4 + 5 + 6 + 7 + 8 + 2, 1 + 3 + 2, 1 + 4 + 4 + 2])
    calls.clear()
    unbucketed = TextPipeline("t", "e", tmp_path, 128, tmp_path, pipeline.feeds)
    (same,) = embed_batch(WordTokenizer(), run, unbucketed, texts)
    assert calls == [(3, 8)]  # one call, padded to the longest
    np.testing.assert_array_equal(same, out)


def test_measure_text_limit_tokenizes_and_encodes_every_text(tmp_path):
    """Real tokenizers + ONNX Runtime on a tiny graph (mean of the ids over the mask), pinned."""
    import onnx
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "a": 1, "b": 2, "c": 3}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    graph = helper.make_graph(
        [helper.make_node("Cast", ["input_ids"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["f", "m"], ["fm"]),
         helper.make_node("ReduceSum", ["fm"], ["embedding"], keepdims=1)], "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["N", "S"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["N", "S"])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["N", 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "model.onnx"))
    pipeline = TextPipeline("t", "e", tmp_path / "tokenizer.json", 8, tmp_path / "model.onnx",
                            (("input_ids", "input_ids"), ("attention_mask", "attention_mask")),
                            buckets=(2, 4, 8), length_input="attention_mask", max_batch_size=4)
    texts = [b"a b c", b"c", b"a a a a a a a a a a", b"b b", b"x"]
    points = measure_text_limit(pipeline, texts, partition_threads=1, cpus=(min(os.sched_getaffinity(0)),),
                                batch_sizes=(1, 2, 8), seconds_per_batch=0.02)
    assert [p.batch_size for p in points] == [1, 2, 4]  # 8 is above the encoder's max_batch_size
    assert all(p.throughput > 0 for p in points)


def test_text_limit_entry_reports_both_runs_and_keeps_the_ceiling(repository):
    from perf_sweep.limits import LimitPoint
    from perf_sweep.plan import Endpoint
    from perf_sweep.text_limit import text_limit_entry

    pipeline = plan_text_pipeline(*configs(), repository)
    where = Endpoint("text_encoder", "h:1", "h:2", "m", server="main", cpus=(0,), intra_op_threads=1)
    runs = {"before the sweeps": [LimitPoint(1, 90.0, 11.1), LimitPoint(32, 120.0, 266.0)],
            "after the sweeps": [LimitPoint(1, 95.0, 10.5), LimitPoint(32, 100.0, 320.0)]}
    entry = text_limit_entry(pipeline, where, "int8_mixed", 400, runs, repository)
    assert entry["best"] == {"batch_size": 32, "throughput": 120.0, "batch_latency_ms": 266.0}
    assert [p["throughput"] for p in entry["points"]] == [95.0, 120.0]
    assert entry["unit"] == "texts/s" and entry["what"] == "tokenize + int8_mixed encoder as served"
    assert "pinned to CPUs [0] with 1 ONNX Runtime thread(s) like partition `main`" in entry["text"]
    assert "before the sweeps: best 120 texts/s; after the sweeps: best 100 texts/s" in entry["text"]
    assert entry["runs"]["after the sweeps"][1]["throughput"] == 100.0


def test_the_fused_text_model_is_its_own_pipeline(tmp_path):
    """The served text_embedder: one onnxruntime_cpu model with the text front-end."""
    from perf_sweep.text_limit import is_fused_text_model, plan_fused_text_pipeline
    from tiny_onnx_models import masked_embedding_model, save

    save(masked_embedding_model(), tmp_path / "text_embedder" / "1" / "model.onnx")
    (tmp_path / "text_embedder" / "1" / "tokenizer.json").write_text("x")
    config = {"name": "text_embedder", "backend": "onnxruntime_cpu", "max_batch_size": 32,
              "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": ["1"]}],
              "parameters": {"tokenizer_file": PARAM("tokenizer.json"), "max_length": PARAM("128"), "pad_value": PARAM("0"),
                             "sequence_buckets": PARAM("16,32"), "sequence_length_input": PARAM("attention_mask")}}
    assert is_fused_text_model(config) and not is_fused_text_model(configs()[1]["text_encoder"])
    pipeline = plan_fused_text_pipeline(config, tmp_path)
    assert (pipeline.tokenizer_model, pipeline.encoder_model) == ("text_embedder", "text_embedder")
    assert pipeline.feeds == (("input_ids", "input_ids"), ("attention_mask", "attention_mask"))
    assert pipeline.buckets == (16, 32) and pipeline.max_length == 128 and pipeline.max_batch_size == 32
    with pytest.raises(SweepPlanError, match="not an onnxruntime_cpu model with a `tokenizer_file`"):
        plan_fused_text_pipeline({**config, "parameters": {}}, tmp_path)
