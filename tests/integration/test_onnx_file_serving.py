"""An ONNX file a user brings (recipe `onnx_file`), built and installed by the recipe and served by a
real tritonserver: co-batched requests over HTTP and gRPC, at both priority levels, get what ONNX
Runtime computes for each row alone, and a bad request is refused alone."""
from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.server
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: A model whose memory allows batches of 8, served with priorities: shorter realtime queues and smaller
#: batch requests of its own (docs/priorities.md); 4 realtime items + one batch request of 4 = 8.
SMALL_BATCHES = {"max_batch_size": 8, "max_queue_size": {"realtime": 4}, "max_request_batch_size": {"batch": 4}}


@pytest.fixture(scope="module")
def own_model_server(tmp_path_factory):
    from contracts.model_config import TensorSpec, render_onnx_cpu_config, write_model_config
    from contracts.serving_spec import ModelSpec, load_serving_spec
    from model_build.install import install_onnx_file
    from model_build.recipes.onnx_file import build_onnx_file
    from tiny_onnx_models import dense_model, image_model, mask_weighted_model, masked_embedding_model, save

    from conftest import start_test_server

    workdir = tmp_path_factory.mktemp("own_model")
    source = save(dense_model(seed=3), workdir / "brought" / "mine.onnx")
    brought = [ModelSpec("mine", "onnx_file", partition="main", max_batch_size=32, instance_count=2,
                         max_queue_delay_microseconds=20000, options={"path": str(source)}),
               ModelSpec("weighted", "onnx_file", partition="main", max_batch_size=32,
                         options={"path": str(save(mask_weighted_model(), workdir / "brought" / "weighted.onnx"))}),
               ModelSpec("sums", "onnx_file", partition="main", max_batch_size=32,
                         options={"path": str(save(dense_model(kind="batch_only"), workdir / "brought" / "sums.onnx"))}),
               ModelSpec("doubles", "onnx_file", partition="main", max_batch_size=32,
                         options={"path": str(save(dense_model(kind="scalar_rows"), workdir / "brought" / "doubles.onnx"))}),
               # images of any height and width up to max_dims, one answer per image or a map of its size
               # (a 20-ms window: these graphs compute in microseconds, and without one two instances
               # sometimes take every request alone, which would test no batching)
               *(ModelSpec(name, "onnx_file", partition="main", max_batch_size=32, instance_count=2,
                           max_queue_delay_microseconds=20000, options={"path": str(save(image_model(spatial), workdir / "brought" / f"{name}.onnx")),
                                    "max_dims": {"x": [3, 24, 32]}})
                 for name, spatial in (("pooled_image", False), ("heat_image", True))),
               # a text encoder of its own ([batch, N] ids and a declared mask): texts padded across a batch
               ModelSpec("brought_encoder", "onnx_file", partition="main", max_batch_size=32, instance_count=2,
                         max_queue_delay_microseconds=20000, options={"path": str(save(masked_embedding_model(), workdir / "brought" / "brought_encoder.onnx")),
                                  "mask_inputs": ["attention_mask"],
                                  "max_dims": {"input_ids": [40], "attention_mask": [40]}}),
               ModelSpec("small_batches", "onnx_file", partition="main", **SMALL_BATCHES,
                         options={"path": str(save(dense_model(seed=5), workdir / "brought" / "small_batches.onnx"))})]
    serving = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    serving = dataclasses.replace(serving, models=(*serving.models, *brought))
    for model in brought:
        record = build_onnx_file(model, workdir / "artifacts" / model.name)
        install_onnx_file(model, serving, record, workdir / "artifacts" / model.name, workdir / "repository")
    # a graph the build refuses (flattened output rows), installed by hand: the backend's own guard
    save(dense_model(kind="flat_rows"), workdir / "repository" / "flat" / "1" / "model.onnx")
    flat = dataclasses.replace(brought[0], name="flat", instance_count=1, max_queue_delay_microseconds=20000)
    inputs = (TensorSpec("features", "TYPE_FP32", (3,)),)
    config = render_onnx_cpu_config(flat, dataclasses.replace(serving, models=(*serving.models, flat)), inputs,
                                    (TensorSpec("scores", "TYPE_FP32", (1,)),))
    config.ClearField("model_warmup")  # answered with the error below, a warm-up crashes Triton 2.51 at load
    write_model_config(workdir / "repository" / "flat", config)
    server = start_test_server(workdir, ("mine", "weighted", "sums", "doubles", "flat", "pooled_image", "heat_image",
                                         "brought_encoder", "small_batches"),
                               repository=workdir / "repository")
    yield server, source
    server.discard()


def _call(server, protocol: str, rows: np.ndarray, priority: int, model: str = "mine", **more: np.ndarray):
    return _infer(server, protocol, model, {"features": rows, **more}, "scores", priority)


def _infer(server, protocol: str, model: str, inputs: dict[str, np.ndarray], output: str, priority: int):
    """The output's array, or the server's InferenceServerException."""
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    if protocol == "http":
        import tritonclient.http as triton
        client = triton.InferenceServerClient(server.http_url, network_timeout=30)
    else:
        import tritonclient.grpc as triton
        client = triton.InferenceServerClient(server.grpc_url)
    tensors = []
    for name, array in inputs.items():
        tensors.append(triton.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype)))
        tensors[-1].set_data_from_numpy(array)
    try:
        return client.infer(model, tensors, priority=priority).as_numpy(output)
    except InferenceServerException as exc:
        return exc
    finally:
        client.close()


def _sent_concurrently_and_batched(server, model: str, send, calls, check, rounds: int = 3) -> None:
    """`send(server, *call)` for every call at once, `rounds` times, `check(index, answer)` each answer; then
    Triton's statistics must show fewer executions than requests (the test exercised batching)."""
    from conftest import settled_model_stats

    counted = lambda s: int(s["inference_stats"]["success"]["count"]) + int(s["inference_stats"]["fail"]["count"])  # noqa: E731
    before = settled_model_stats(server.http_url, model, counted, 0)
    for _ in range(rounds):
        with ThreadPoolExecutor(len(calls)) as pool:
            answers = list(pool.map(lambda c: send(server, *c), calls))
        for i, answer in enumerate(answers):
            check(i, answer)
    stats = settled_model_stats(server.http_url, model, counted, counted(before) + rounds * len(calls))
    executions = int(stats["execution_count"]) - int(before["execution_count"])
    assert executions < rounds * len(calls), f"no two requests to {model} were batched together: nothing was tested"


def test_co_batched_requests_get_their_own_rows_answers_and_a_bad_one_is_refused_alone(own_model_server):
    import onnxruntime as ort
    from tritonclient.utils import InferenceServerException


    server, source = own_model_server
    reference = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    requests = [rng.standard_normal((int(rng.integers(1, 4)), 3)).astype(np.float32) for _ in range(24)]
    requests[5][0, 1] = np.nan  # refused alone: the backend checks every request before the batch is formed
    calls = [(("http", "grpc")[i % 2], rows, 1 + (i % 3 == 0)) for i, rows in enumerate(requests)]

    def check(i, result):
        if i == 5:
            assert isinstance(result, InferenceServerException), result
            assert "features" in result.message() and "NaN" in result.message(), result.message()
        else:
            expected = np.concatenate([reference.run(None, {"features": row[None]})[0] for row in requests[i]])
            np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)

    _sent_concurrently_and_batched(server, "mine", _call, calls, check)
    assert server.process.process.poll() is None


def test_a_brought_models_mask_named_input_is_data_unless_declared_a_mask(own_model_server):
    """`pixel_mask` of a brought graph is a weight (values 0-3): answered, not refused as a 0/1 mask."""
    server, _ = own_model_server
    features = np.ones((1, 3), np.float32)
    weights = np.array([[0, 3, 1]], np.int64)
    for protocol in ("http", "grpc"):
        result = _call(server, protocol, features, 2, "weighted", pixel_mask=weights)
        np.testing.assert_array_equal(result, [[0.0, 3.0, 1.0]])


def test_a_model_whose_output_rows_are_not_the_batch_never_hands_one_request_anothers_rows(own_model_server):
    """A flattened output ([B*3, 1]) split per request gave each request another's values (a review,
    2026-12-07); served now, every request gets the model's error and nobody's rows."""
    from tritonclient.utils import InferenceServerException

    server, _ = own_model_server
    calls = [(("http", "grpc")[i % 2], np.full((1, 3), float(i), np.float32), 2, "flat") for i in range(12)]
    with ThreadPoolExecutor(len(calls)) as pool:
        results = list(pool.map(lambda c: _call(server, *c), calls))
    for result in results:
        assert isinstance(result, InferenceServerException), result
        assert "model cannot answer batched requests" in result.message() and "first axis is not the batch" in result.message()
    assert server.process.process.poll() is None


def test_an_output_of_the_batch_axis_only_is_served_as_one_column(own_model_server):
    """`sums` answers [batch] (row sums): declared [1] with a reshape, clients get [batch, 1], rows their own."""
    server, _ = own_model_server
    rows = np.arange(12, dtype=np.float32).reshape(4, 3)
    calls = [(("http", "grpc")[i % 2], rows[i:i + 1 + (i % 2)], 2, "sums") for i in range(3)] * 4
    with ThreadPoolExecutor(len(calls)) as pool:
        results = list(pool.map(lambda c: _call(server, *c), calls))
    for (_, sent, _, _), result in zip(calls, results):
        np.testing.assert_allclose(result, sent.sum(axis=1, keepdims=True), rtol=1e-6)


def test_an_input_of_the_batch_axis_only_is_sent_as_one_column(own_model_server):
    """`doubles` takes [batch] and answers [batch]: clients send and get [batch, 1]; the backend's input
    checks read the reshaped dims (it receives [batch])."""
    from tritonclient.utils import InferenceServerException

    server, _ = own_model_server
    sent = [np.array([[1.5]], np.float32), np.array([[2.0], [-3.0]], np.float32)] * 6
    calls = [(("http", "grpc")[i % 2], rows, 1 + i % 2, "doubles") for i, rows in enumerate(sent)]
    with ThreadPoolExecutor(len(calls)) as pool:
        results = list(pool.map(lambda c: _call(server, *c), calls))
    for rows, result in zip(sent, results):
        np.testing.assert_array_equal(result, rows * 2)
    refused = _call(server, "grpc", np.array([[np.nan]], np.float32), 2, "doubles")
    assert isinstance(refused, InferenceServerException) and "NaN" in refused.message()


@pytest.mark.parametrize("model, output", [("pooled_image", "pooled"), ("heat_image", "heat")])
def test_images_of_any_size_up_to_max_dims_are_batched_by_equal_shapes_and_answered_as_alone(own_model_server, model, output):
    """A graph of variable height and width (options.max_dims): Triton batches only requests of equal
    shapes, nothing is padded (a zero border would change a convolution's answer), so every image gets
    what ONNX Runtime computes for it alone, whatever it was sent beside; outputs of the image's own
    size ("heat") come back at that size; an image over max_dims is refused alone, naming them."""
    import onnxruntime as ort
    from tritonclient.utils import InferenceServerException


    server, source = own_model_server
    reference = ort.InferenceSession(str(source.parent / f"{model}.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    sizes = [(24, 32)] * 10 + [(8, 8)] * 7 + [(17, 5)] * 7  # runs of equal shapes, sent in this order
    images = [rng.standard_normal((1 + i % 2, 3, h, w)).astype(np.float32) for i, (h, w) in enumerate(sizes)]
    images[7] = rng.standard_normal((1, 3, 25, 32)).astype(np.float32)  # one row over max_dims [3, 24, 32]
    calls = [(("http", "grpc")[i % 2], model, {"x": rows}, output, 1 + (i % 3 == 0)) for i, rows in enumerate(images)]
    expected = [np.concatenate([reference.run(None, {"x": row[None]})[0] for row in rows]) for rows in images]

    def check(i, result):
        if i == 7:
            assert isinstance(result, InferenceServerException), result
            assert "'x'" in result.message() and "['rows', 3, 24, 32]" in result.message(), result.message()
        else:
            assert not isinstance(result, Exception), result
            assert result.shape == expected[i].shape
            np.testing.assert_allclose(result, expected[i], rtol=1e-4, atol=1e-5)

    _sent_concurrently_and_batched(server, model, _infer, calls, check)
    assert server.process.process.poll() is None


def test_make_perf_sweeps_a_brought_model_with_synthetic_rows_it_answers(own_model_server, tmp_path):
    """`make perf` has no data of a brought model: it sends contracts.synthetic_requests' rows (at max_dims,
    masks ones, ids in range) through the real perf_analyzer, and every request is answered."""
    from perf_sweep import inputs as gen
    from perf_sweep.campaign import fetch_model_config
    from perf_sweep.plan import Measurement, SweepSpec
    from perf_sweep.runner import RunFolder, run_sweep

    server, source = own_model_server
    repository = source.parent.parent / "repository"  # the fixture's workdir: brought/ and repository/
    quick = Measurement(interval_ms=500, stability_percentage=100, max_trials=3, warmup_requests=10)
    for model in ("pooled_image", "weighted"):
        config = fetch_model_config(server.http_url, model)
        data, described = gen.synthetic_input_data(config, repository / model / "1" / "model.onnx", seed=0)
        shapes = {name: entry["shape"] for name, entry in data["data"][0].items()}
        assert shapes == ({"x": [3, 24, 32]} if model == "pooled_image" else {"features": [3], "pixel_mask": [3]})
        assert "synthetic rows" in described and "not production data" in described
        path = gen.write_input_data(tmp_path / f"{model}.synthetic.json", data)
        (record,), _ = run_sweep(SweepSpec(name=f"{model}.concurrency", levels=(2,), model=model, url=server.grpc_url,
                                           input_data=str(path), measurement=quick, metrics_url=server.metrics_url),
                                 RunFolder(tmp_path / model), lambda line: None)
        assert record.status in ("ok", "unstable"), record.note
        assert record.requests > 0 and record.errors == 0 and record.server["requests_failed"] == 0


def test_a_brought_text_encoder_batches_texts_of_any_length_padded_each_answered_as_alone(own_model_server):
    """Token sequences with a declared mask: requests of different lengths share a batch (padded to the
    longest, the mask zero there), each answered as ONNX Runtime answers it alone; ids and mask of
    different lengths, or past max_dims, are refused alone."""
    from tritonclient.utils import InferenceServerException

    from tiny_onnx_models import VOCAB, reference_embedding

    server, _ = own_model_server
    rng = np.random.default_rng(2)
    lengths = [40, 3, 17, 1, 29, 5, 2, 9] * 3  # length buckets 16, 24, 32, 40: one call per bucket
    sent = [rng.integers(0, VOCAB, size=(1 + i % 2, n)).astype(np.int64) for i, n in enumerate(lengths)]
    calls = [(("http", "grpc")[i % 2], "brought_encoder", {"input_ids": ids, "attention_mask": np.ones_like(ids)},
              "embedding", 1 + (i % 3 == 0)) for i, ids in enumerate(sent)]
    calls[5][2]["attention_mask"] = np.ones((2, 6), np.int64)  # one mask entry more than the ids
    calls[6][2].update(input_ids=np.zeros((1, 41), np.int64), attention_mask=np.ones((1, 41), np.int64))  # past 40

    def check(i, result):
        if i in (5, 6):
            assert isinstance(result, InferenceServerException), result
            assert ("disagree in shape" if i == 5 else "41 tokens per row; expected at most 40") in result.message()
        else:
            assert not isinstance(result, Exception), result
            np.testing.assert_allclose(result, reference_embedding(sent[i], np.ones_like(sent[i])), rtol=1e-5, atol=1e-6)

    _sent_concurrently_and_batched(server, "brought_encoder", _infer, calls, check)



def test_a_model_with_batches_of_8_keeps_priorities_with_its_own_sizes_and_the_client_splits_by_them(own_model_server):
    """max_batch_size 8 could not be served with priorities on the shared sizes (24 realtime + a batch
    request of 8). With its own tables: Triton holds its realtime queue to 4, and `model_client` cuts
    its batch work into requests of 4 (and refuses an oversize realtime one before sending it)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from contracts.serving_spec import ModelSpec, load_serving_spec
    from model_client.errors import RequestRejectedError
    from model_client.policies import PriorityLimits
    from model_client.resilient import ResilientClient

    from conftest import http_call

    server, _ = own_model_server
    config = text_format.Parse((server.log_path.parent / "repository" / "small_batches" / "config.pbtxt").read_text(),
                               model_config_pb2.ModelConfig())
    assert config.max_batch_size == 8
    assert {level: p.max_queue_size for level, p in config.dynamic_batching.priority_queue_policy.items()} == {1: 4, 2: 256}
    serving = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    serving = dataclasses.replace(serving, models=(*serving.models, ModelSpec("small_batches", "onnx_file", **SMALL_BATCHES)))
    limits = PriorityLimits.from_spec(serving)

    def counts() -> tuple[int, int]:
        _, stats = http_call(server, "GET", "/v2/models/small_batches/stats")
        s = stats["model_stats"][0]
        return s["inference_stats"]["success"]["count"], s["inference_count"]

    rows = np.random.default_rng(7).normal(size=(10, 3)).astype(np.float32)
    alone = np.concatenate([_call(server, "http", rows[i:i + 1], priority=2, model="small_batches") for i in range(10)])
    before = counts()
    with ResilientClient("http", url=server.http_url, limits=limits) as client:
        outcome = client.infer("small_batches", {"features": rows}, priority=2)
        np.testing.assert_allclose(outcome.outputs["scores"], alone, rtol=1e-5, atol=1e-6)
        assert counts() == (before[0] + 3, before[1] + 10)  # 10 items as requests of 4, 4 and 2
        with pytest.raises(RequestRejectedError, match=r"2 items at priority level 1: at most 1 per request"):
            client.infer("small_batches", {"features": rows[:2]}, priority=1)
    assert counts() == (before[0] + 3, before[1] + 10)  # refused before it was sent
