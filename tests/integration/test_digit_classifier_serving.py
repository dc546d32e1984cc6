"""The digit classifier served by a real tritonserver, over HTTP and gRPC."""
from __future__ import annotations

import numpy as np
import pytest

from model_client.client import TritonModelClient, classify
from model_client.errors import ModelNotFoundError, RequestRejectedError, ServerUnavailableError
from conftest import ARTIFACTS, in_process_probabilities
from contracts.build_record import read_build_record

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]
MODEL = "digit_classifier"


def test_served_model_interface_is_derived_from_the_onnx_graph(client):
    interface = client.interface(MODEL)
    assert [(t.name, t.datatype, t.shape) for t in interface.inputs] == [("image", "FP32", (-1, 1, 8, 8))]
    assert [(t.name, t.datatype, t.shape) for t in interface.outputs] == [("probabilities", "FP32", (-1, 10))]


def test_batched_request_equals_in_process_onnxruntime(client, digits_test_split):
    images, labels = digits_test_split
    batch = images[:48]
    served = client.infer(MODEL, {"image": batch})["probabilities"]
    np.testing.assert_allclose(served, in_process_probabilities(MODEL, batch), rtol=1e-5, atol=1e-6)
    assert served.shape == (48, 10)
    assert (served.argmax(1) == labels[:48]).mean() > 0.9


def test_whole_test_split_accuracy_matches_build_report(client, digits_test_split):
    images, labels = digits_test_split
    predictions = []
    for start in range(0, len(images), 64):  # max_batch_size is 64
        predictions += classify(client, MODEL, images[start:start + 64], top_k=3)
    accuracy = np.mean([p.top1 == t for p, t in zip(predictions, labels)])
    expected = float((in_process_probabilities(MODEL, images).argmax(1) == labels).mean())
    assert accuracy == pytest.approx(expected)
    # ... and the build report's own figure for the served file (a stale or swapped model.onnx agrees
    # with itself in process, not with the record of what was built and validated)
    record = read_build_record(ARTIFACTS / MODEL)
    (served,) = [v for v in record.variants.values() if v.get("file") == record.served_file]
    assert served["metric"] == "top1_accuracy" and record.data["test_samples"] == len(labels)
    assert accuracy == pytest.approx(served["value"]), (record.served_file, served["value"])
    assert all(len(p.labels) == 3 and p.scores[0] >= p.scores[1] >= p.scores[2] for p in predictions)


def test_concurrent_single_requests_are_each_answered_correctly(triton_server, digits_test_split):
    """Many one-image requests at once: the dynamic batcher merges them; each answer must still be
    the one for its own image (the backend splits the batched output back per request)."""
    from concurrent.futures import ThreadPoolExecutor

    images, _ = digits_test_split
    expected = in_process_probabilities(MODEL, images[:32])

    def one(i):
        with TritonModelClient(triton_server.http_url, "http") as c:
            return i, c.infer(MODEL, {"image": images[i:i + 1]})["probabilities"][0]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(32)))
    for i, probs in results:
        np.testing.assert_allclose(probs, expected[i], rtol=1e-5, atol=1e-6)


def _assert_still_serving(client, digits_test_split):
    images, _ = digits_test_split
    served = client.infer(MODEL, {"image": images[:4]})["probabilities"]
    np.testing.assert_allclose(served, in_process_probabilities(MODEL, images[:4]), rtol=1e-5, atol=1e-6)


def test_wrong_shape_gets_a_clear_error_and_server_keeps_serving(client, digits_test_split):
    with pytest.raises(RequestRejectedError, match=r"(?i)shape|dims"):
        client.infer(MODEL, {"image": np.zeros((2, 1, 7, 8), np.float32)})
    _assert_still_serving(client, digits_test_split)


def test_wrong_dtype_gets_a_clear_error_and_server_keeps_serving(client, digits_test_split):
    wire = client._module.InferInput("image", [1, 1, 8, 8], "FP64")
    wire.set_data_from_numpy(np.zeros((1, 1, 8, 8), np.float64))
    with pytest.raises(Exception, match=r"(?i)data-type|datatype|FP64|TYPE_FP32"):
        client._client.infer(MODEL, [wire])
    _assert_still_serving(client, digits_test_split)


def test_unknown_model_gets_a_clear_error_and_server_keeps_serving(client, digits_test_split):
    with pytest.raises(ModelNotFoundError, match="no_such_model"):
        client.infer("no_such_model", {"image": np.zeros((1, 1, 8, 8), np.float32)})
    _assert_still_serving(client, digits_test_split)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_server_down_is_reported_in_one_line(protocol):
    from conftest import free_ports

    (port,) = free_ports(1)
    with pytest.raises(ServerUnavailableError, match="not reachable") as info:
        with TritonModelClient(f"127.0.0.1:{port}", protocol) as c:
            c.infer(MODEL, {"image": np.zeros((1, 1, 8, 8), np.float32)})
    assert "\n" not in str(info.value)


def test_the_cli_classifies_the_shipped_example_png_and_summarises_with_top_k_and_labels(triton_server, capsys):
    """The README's first classify command used a digit.png nobody had; it now names the example PNG
    shipped with the client (a 7 of the held-out split, dark ink on white as a scan would be). And
    `--summary` (what `make demo` prints) listed only the top class, whatever --top-k said."""
    from contracts.layout import PROJECT_ROOT
    from model_client.cli import SUMMARY_ROWS, main

    example = PROJECT_ROOT / "clients" / "model_client" / "examples" / "digit-7.png"
    assert main(["classify", "--png", str(example), "--top-k", "3", "--url", triton_server.http_url]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{example}: 7:") and len(line.split("  ")) == 3, line
    assert main(["classify", "--test-samples", "0:16", "--summary", "--top-k", "3", "--url", triton_server.http_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == SUMMARY_ROWS + 1 and lines[-1].startswith("[http] digit_classifier at") and "/16 = " in lines[-1]
    for row in lines[:-1]:
        classes, label = row.split("  (label ")
        assert len(classes.split(": ", 1)[1].split("  ")) == 3, row
