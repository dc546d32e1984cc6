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


@pytest.fixture(scope="module")
def own_model_server(tmp_path_factory):
    from contracts.serving_spec import ModelSpec, load_serving_spec
    from model_build.recipes.digits import install_onnx_model
    from model_build.recipes.onnx_file import build_onnx_file
    from tiny_onnx_models import dense_model, save

    from conftest import start_test_server

    workdir = tmp_path_factory.mktemp("own_model")
    source = save(dense_model(seed=3), workdir / "brought" / "mine.onnx")
    model = ModelSpec("mine", "onnx_file", partition="main", max_batch_size=32, instance_count=2,
                      options={"path": str(source)})
    serving = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    serving = dataclasses.replace(serving, models=(*serving.models, model))
    record = build_onnx_file(model, workdir / "artifacts")
    install_onnx_model(model, serving, record, workdir / "artifacts", workdir / "repository")
    server = start_test_server(workdir, ("mine",), repository=workdir / "repository")
    yield server, source
    server.process.stop()


def _call(server, protocol: str, rows: np.ndarray, priority: int):
    from tritonclient.utils import InferenceServerException

    if protocol == "http":
        import tritonclient.http as triton
        client = triton.InferenceServerClient(server.http_url, network_timeout=30)
    else:
        import tritonclient.grpc as triton
        client = triton.InferenceServerClient(server.grpc_url)
    tensor = triton.InferInput("features", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows)
    try:
        return client.infer("mine", [tensor], priority=priority).as_numpy("scores")
    except InferenceServerException as exc:
        return exc
    finally:
        client.close()


def test_co_batched_requests_get_their_own_rows_answers_and_a_bad_one_is_refused_alone(own_model_server):
    import onnxruntime as ort
    from tritonclient.utils import InferenceServerException

    from conftest import settled_model_stats

    server, source = own_model_server
    reference = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    requests = [rng.standard_normal((int(rng.integers(1, 4)), 3)).astype(np.float32) for _ in range(24)]
    requests[5][0, 1] = np.nan  # refused alone: the backend checks every request before the batch is formed
    calls = [(("http", "grpc")[i % 2], rows, 1 + (i % 3 == 0)) for i, rows in enumerate(requests)]
    counted = lambda s: int(s["inference_stats"]["success"]["count"]) + int(s["inference_stats"]["fail"]["count"])  # noqa: E731
    before = settled_model_stats(server.http_url, "mine", counted, 0)
    for _ in range(3):
        with ThreadPoolExecutor(len(calls)) as pool:
            results = list(pool.map(lambda c: _call(server, *c), calls))
        for i, (rows, result) in enumerate(zip(requests, results)):
            if i == 5:
                assert isinstance(result, InferenceServerException), result
                assert "features" in result.message() and "NaN" in result.message(), result.message()
            else:
                expected = np.concatenate([reference.run(None, {"features": row[None]})[0] for row in rows])
                np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
    stats = settled_model_stats(server.http_url, "mine", counted, counted(before) + 3 * len(calls))
    executions = int(stats["execution_count"]) - int(before["execution_count"])
    assert executions < 3 * len(calls), "no two requests were batched together: the test exercised no batching"
    assert server.process.process.poll() is None
