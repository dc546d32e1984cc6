"""One request never hurts another, against real tritonservers (issue: a poisoned batch crashed
the partition).

- The exact field scenario, under the real supervisor: 12 good token-id requests to
  `text_encoder` in flight with one whose id is outside the vocabulary, 20 rounds over HTTP. Before
  the fix every round failed its whole dynamic batch and the server died of SIGSEGV (a
  `TritonError` shared by every response of the batch, docs/operations.md). Now: the bad request
  gets 400 naming `input_ids`, every good one its solo answer, the same server pid, 0 restarts.
- Every rule of the input contract, co-batched with good requests over both protocols.
- Failure isolation for what the contract cannot foresee: a tiny real ONNX model whose ids are
  doubled before the lookup, served by the same backend; only the requests that make ONNX Runtime
  fail get an error.
"""
from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from supervision import partition_pid, supervised_server, supervisor_state

pytestmark = pytest.mark.server
ENCODER = "text_encoder"
POISON_IDS = np.array([[101, 10000000, 102, 102]], np.int64)
SENTENCES = [
    "Triton batches requests dynamically.", "A full queue answers 503.", "How do I serve a model?",
    "The quick brown fox jumps over the lazy dog.", "Priorities keep realtime traffic ahead of batch work.",
    "Short.", "Sequence-length buckets cut padding inside one batch of texts of different lengths.",
    "ONNX Runtime runs the encoder.", "What is the capital of France?", "Embeddings are unit length.",
    "A crash loop must never become a silent outage.", "Every request is accounted for: a result or an explicit error.",
]
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def token_ids():
    """Real token ids of the 12 sentences (the served tokenizer.json), one [1, n] request each."""
    from tokenizers import Tokenizer

    from conftest import REPOSITORY

    tokenizer = Tokenizer.from_file(str(REPOSITORY / "text_tokenizer" / "1" / "tokenizer.json"))
    return [np.array([tokenizer.encode(s).ids], np.int64) for s in SENTENCES]


def encode(url: str, protocol: str, ids: np.ndarray, mask: np.ndarray | None = None):
    """One text_encoder request; the embedding, or the InferenceServerException it got."""
    from tritonclient.utils import InferenceServerException

    module = __import__(f"tritonclient.{protocol}", fromlist=["InferInput"])
    client = module.InferenceServerClient(url, **({"network_timeout": 30} if protocol == "http" else {}))
    mask = np.ones_like(ids) if mask is None else mask
    inputs = []
    for name, array in (("input_ids", ids), ("attention_mask", mask)):
        tensor = module.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(np.ascontiguousarray(array, np.int64))
        inputs.append(tensor)
    try:
        return client.infer(ENCODER, inputs).as_numpy("embedding")
    except InferenceServerException as exc:
        return exc
    finally:
        client.close()


def concurrently(calls):
    """Run the zero-argument `calls` at once (one thread each, released together); results in order."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.fixture(scope="module")
def supervised_encoder(tmp_path_factory):
    with supervised_server(tmp_path_factory.mktemp("isolation"), [ENCODER]) as server:
        yield server


def test_the_field_poison_scenario_answers_every_good_request_and_keeps_the_same_server(supervised_encoder, token_ids):
    from conftest import settled_model_stats

    url = supervised_encoder["http"]
    pid = partition_pid(supervised_encoder["manifest"])
    solo = [encode(url, "http", ids) for ids in token_ids]
    assert all(isinstance(s, np.ndarray) for s in solo), solo
    alone = encode(url, "http", POISON_IDS)
    assert alone.status() == "400", alone
    assert re.search(r"invalid input 'input_ids': 1 of 4 values outside \[0, 30521\] \(first: 10000000 at \[0, 1\]\)",
                     alone.message()), alone.message()
    before = settled_model_stats(url, ENCODER, lambda s: int(s["inference_count"]), 12)
    wrong, rejected = [], 0
    for _ in range(20):
        results = concurrently([lambda ids=ids: encode(url, "http", ids) for ids in token_ids]
                               + [lambda: encode(url, "http", POISON_IDS)])
        for i, (result, expected) in enumerate(zip(results[:12], solo)):
            if not (isinstance(result, np.ndarray) and np.allclose(result, expected, rtol=RTOL, atol=ATOL)):
                wrong.append((i, result))
        rejected += isinstance(results[12], Exception) and results[12].status() == "400"
    # Triton counts every request the backend executed, refused ones included: 13 per round
    after = settled_model_stats(url, ENCODER, lambda s: int(s["inference_count"]), int(before["inference_count"]) + 260)
    batches = int(after["execution_count"]) - int(before["execution_count"])
    items = int(after["inference_count"]) - int(before["inference_count"])
    print(f"\n240 good requests in 20 rounds with the poison: {240 - len(wrong)} answered exactly as alone, "
          f"{rejected}/20 poison requests refused with 400; {items} requests in {batches} executions "
          f"(average batch {items / max(batches, 1):.1f}); pid {pid} kept")
    assert not wrong, wrong[:3]
    assert rejected == 20
    assert items == 260 and batches < 200, "the requests were never co-batched: the scenario did not happen"
    assert partition_pid(supervised_encoder["manifest"]) == pid
    state = supervisor_state(supervised_encoder).partitions["default"]
    assert state.restarts == 0 and state.state == "ready", state


BROKEN_RULES = {
    # name: (input_ids, attention_mask, message pattern)
    "id outside the vocabulary": (np.array([[101, 30522, 102]]), None, r"'input_ids': 1 of 3 values outside \[0, 30521\]"),
    "negative id": (np.array([[101, -5, 102]]), None, r"'input_ids': 1 of 3 values outside \[0, 30521\] \(first: -5"),
    "lengths disagree": (np.array([[101, 2000, 102]]), np.ones((1, 8)), r"disagree in shape \('input_ids' \[1, 3\], 'attention_mask' \[1, 8\]\)"),
    "all-zero mask": (np.array([[101, 2000, 102]]), np.zeros((1, 3)), r"'attention_mask': row 0 has no 1; expected at least one real token"),
    "mask not 0/1": (np.array([[101, 2000, 102]]), np.array([[1, 3, 1]]), r"'attention_mask': 1 values are neither 0 nor 1 \(first: 3"),
    "above the maximum length": (np.full((1, 129), 2000), None, r"'input_ids': 129 tokens per row; expected at most 128"),
    "empty sequence": (np.zeros((1, 0)), None, r"'input_ids': shape \[1, 0\] has an empty variable axis"),
}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_broken_rule_is_refused_alone_while_its_batch_mates_get_their_solo_answers(triton_server, token_ids, protocol):
    from conftest import settled_model_stats

    url = triton_server.url(protocol)
    solo = [encode(url, protocol, ids) for ids in token_ids[:6]]
    cases = list(BROKEN_RULES.items())
    rounds, per_round = 3, 6 + len(cases)
    before = settled_model_stats(triton_server.http_url, ENCODER, lambda s: int(s["inference_count"]), 6)
    for _ in range(rounds):
        results = concurrently([lambda ids=ids: encode(url, protocol, ids) for ids in token_ids[:6]]
                               + [lambda c=c: encode(url, protocol, np.asarray(c[0]), None if c[1] is None else np.asarray(c[1]))
                                  for _, c in cases])
        for result, expected in zip(results[:6], solo):
            np.testing.assert_allclose(result, expected, rtol=RTOL, atol=ATOL)
        for (name, (_, _, pattern)), result in zip(cases, results[6:]):
            assert not isinstance(result, np.ndarray), f"{name}: answered instead of refused"
            assert result.status() == ("400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"), (name, result)
            assert re.search(pattern, result.message()), (name, result.message())
    # Triton counts every request the backend executed, refused ones included (as in the poison test above)
    after = settled_model_stats(triton_server.http_url, ENCODER, lambda s: int(s["inference_count"]),
                                int(before["inference_count"]) + rounds * per_round)
    items = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert executions < items, f"{items} requests in {executions} executions: never co-batched, isolation was not exercised"


# --- what validation cannot foresee: isolation by re-running halves -------------------------------

@pytest.fixture(scope="module")
def doubling_model_server(tmp_path_factory):
    """A real ONNX model (ids doubled, then looked up in a 10-row table) served by onnxruntime_cpu:
    ids >= 5 make ONNX Runtime fail, and the contract cannot see it (Mul is not a pass-through)."""
    from contracts.model_config import TensorSpec, render_onnx_cpu_config, write_model_config
    from contracts.serving_spec import serving_spec_from_dict
    from tiny_onnx_models import WIDTH, masked_embedding_model, save

    from conftest import start_test_server

    workdir = tmp_path_factory.mktemp("doubling")
    repository = workdir / "repository"
    save(masked_embedding_model(ids_through_mul=True), repository / "doubling" / "1" / "model.onnx")
    spec = serving_spec_from_dict({"models": {"doubling": {"recipe": "tiny", "max_batch_size": 32, "instance_count": 1,
                                                           "max_queue_delay_microseconds": 10000}}, "priorities": {}})
    inputs = (TensorSpec("input_ids", "TYPE_INT64", (-1,)), TensorSpec("attention_mask", "TYPE_INT64", (-1,)))
    write_model_config(repository / "doubling", render_onnx_cpu_config(
        spec.model("doubling"), spec, inputs, (TensorSpec("embedding", "TYPE_FP32", (WIDTH,)),), ragged_inputs=True))
    server = start_test_server(workdir, ("doubling",), repository=repository)
    yield server
    server.discard()


def test_a_request_that_makes_onnx_runtime_fail_is_found_and_fails_alone(doubling_model_server):
    import tritonclient.http as http
    from tritonclient.utils import InferenceServerException

    from conftest import settled_model_stats
    from tiny_onnx_models import reference_embedding

    def call(ids):
        client = http.InferenceServerClient(doubling_model_server.http_url, network_timeout=30)
        inputs = []
        for name, array in (("input_ids", ids), ("attention_mask", np.ones_like(ids))):
            tensor = http.InferInput(name, list(array.shape), "INT64")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        try:
            return client.infer("doubling", inputs).as_numpy("embedding")
        except InferenceServerException as exc:
            return exc
        finally:
            client.close()

    counted = lambda s: int(s["inference_stats"]["success"]["count"]) + int(s["inference_stats"]["fail"]["count"])  # noqa: E731
    before = settled_model_stats(doubling_model_server.http_url, "doubling", counted, 0)
    rng = np.random.default_rng(0)
    requests = [rng.integers(0, 5, size=(1, int(rng.integers(1, 6)))).astype(np.int64) for _ in range(14)]
    bad = {3, 9}
    for i in bad:
        requests[i][0, -1] = 7  # doubled: 14, past the 10-row table
    for _ in range(5):
        results = concurrently([lambda r=r: call(r) for r in requests])
        for i, (request, result) in enumerate(zip(requests, results)):
            if i in bad:
                assert isinstance(result, InferenceServerException) and result.status() == "400", result
                assert "this request's inputs made ONNX Runtime fail" in result.message()
                assert "out of data bounds" in result.message() and "the other requests of its batch were answered" in result.message()
            else:
                np.testing.assert_allclose(result, reference_embedding(request, np.ones_like(request), ids_through_mul=True),
                                           rtol=1e-6, atol=1e-6)
    stats = settled_model_stats(doubling_model_server.http_url, "doubling", counted, counted(before) + 70)
    executions = int(stats["execution_count"]) - int(before["execution_count"])
    print(f"\n70 requests (10 failing in ONNX Runtime) in {executions} executions: 60 answered exactly, 10 refused alone")
    assert counted(stats) - counted(before) == 70 and executions < 70, "requests were never co-batched: isolation was not exercised"
    assert doubling_model_server.process.process.poll() is None


# --- what Triton 2.51 itself lets through: refused per request by the preloaded request guard -----

def binary_text_request(url: str, blob: bytes, rows: int = 1):
    """A text_embedder request whose TEXT is `blob` as binary tensor data (the KServe binary
    extension, as hand-made clients and perf_analyzer input files send it): (status, body)."""
    import http.client
    import json

    header = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [rows, 1],
                                     "parameters": {"binary_data_size": len(blob)}}]}).encode()
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", "/v2/models/text_embedder/infer", header + blob,
                           {"Inference-Header-Content-Length": str(len(header))})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def bytes_element(text: bytes) -> bytes:
    return len(text).to_bytes(4, "little") + text


def test_a_bytes_element_longer_than_its_data_is_refused_alone_and_fails_no_batch_mate(triton_server):
    """Triton 2.51's core counts BYTES elements but misses one whose length prefix runs past the end
    of the data; its Python backend then fails the WHOLE batch with that request's error ("incomplete
    string data ... expecting string of length 4294967280"). serving/runtime/native/request_guard.c
    refuses it before batching; the batch mates (binary and JSON) get their answers."""
    import json

    url = triton_server.url("http")
    poison = (0xFFFFFFF0).to_bytes(4, "little") + b"abcd"
    status, body = binary_text_request(url, poison)
    assert status == 400, body
    assert re.search(r"input 'TEXT' \(BYTES\): element 0 declares 4294967280 bytes but only 4 follow in the request; "
                     r"expected each element as a 4-byte little-endian length", body.decode()), body
    short_by_six = (10).to_bytes(4, "little") + b"abcd"
    texts = [s.encode() for s in SENTENCES[:8]]
    solo = [json.loads(binary_text_request(url, bytes_element(t))[1])["outputs"][0]["data"] for t in texts]
    wrong, refused = [], 0
    for _ in range(8):
        results = concurrently([lambda t=t: binary_text_request(url, bytes_element(t)) for t in texts]
                               + [lambda: binary_text_request(url, poison), lambda: binary_text_request(url, short_by_six)])
        for i, ((status, body), expected) in enumerate(zip(results[:8], solo)):
            if status != 200 or not np.allclose(json.loads(body)["outputs"][0]["data"], expected, rtol=RTOL, atol=ATOL):
                wrong.append((i, status, body[:200]))
        refused += (results[8][0] == 400) + (results[9][0] == 400)
    assert not wrong, wrong[:3]
    assert refused == 16
    # a well-formed binary request of several elements (one empty) is untouched by the guard
    status, body = binary_text_request(url, b"".join(bytes_element(t) for t in (b"first", b"", b"third")), rows=3)
    assert status == 200 and json.loads(body)["outputs"][0]["shape"] == [3, 384], body[:300]


def test_a_shape_whose_size_overflows_is_refused_and_the_model_keeps_answering(triton_server, token_ids):
    """gRPC shape [1, 2**61 + 3] of INT64 with 24 bytes: Triton 2.51's byte-size check wraps around to
    24 and passes, and the backend stub then aborts ("array is too big"); the model answered "Stub
    process is not healthy" until the stub was restarted. Refused per request now."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    url = triton_server.url("grpc")
    solo = encode(url, "grpc", token_ids[0])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
    # [0, 2**61]: Triton drops a batch dimension of 0 and then expects 8 * 2**61 bytes = 0 (wrapped)
    for shape, values, shown in (([1, 2**61 + 3], [101, 2000, 102], r"\[1,2305843009213693955\]"),
                                 ([0, 2**61], [], r"\[0,2305843009213693952\]")):
        request = service_pb2.ModelInferRequest(model_name=ENCODER)
        for name in ("input_ids", "attention_mask"):
            tensor = request.inputs.add()
            tensor.name, tensor.datatype = name, "INT64"
            tensor.shape.extend(shape)
            request.raw_input_contents.append(np.array(values, np.int64).tobytes())
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request, timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
        assert re.search(rf"input '(input_ids|attention_mask)' has shape {shown} of INT64: more elements than "
                         r"any request can hold", refused.value.details()), refused.value.details()
    after = [encode(url, "grpc", token_ids[0]) for _ in range(4)]  # both instances, in turn or not
    for answer in after:
        np.testing.assert_allclose(answer, solo, rtol=RTOL, atol=ATOL)


def grpc_encoder_request(shape, ids, mask):
    """A raw gRPC text_encoder request: both inputs with `shape`, the data as given (not checked)."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=ENCODER)
    for name, values in (("input_ids", ids), ("attention_mask", mask)):
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = name, "INT64"
        tensor.shape.extend(shape)
        request.raw_input_contents.append(np.asarray(values, np.int64).tobytes())
    return request


def test_a_batch_dimension_triton_misreads_is_refused_alone_and_fails_no_batch_mate(triton_server, token_ids):
    """Triton 2.51 drops a batch dimension of 0 (and truncates one of 2**32 or more to 32 bits) and
    checks the data against what is left: gRPC [0, 3] of INT64 with 3 values reached the backend as a
    1-D array, the input contract raised IndexError inside `execute`, and EVERY request of that
    dynamic batch failed with a Python traceback (500); text_embedder answered a [0, 1] request with
    one row as if it were [1, 1]. Refused per request now, naming the shape and the data sent."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    url = triton_server.url("grpc")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
    poison = grpc_encoder_request([0, 3], [101, 2000, 102], [1, 1, 1])
    with pytest.raises(grpc.RpcError) as refused:
        stub.ModelInfer(poison, timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    assert re.search(r"input '(input_ids|attention_mask)' has shape \[0,3\] of INT64 \(0 elements, 0 bytes\) but 24 "
                     r"bytes were sent", refused.value.details()), refused.value.details()
    assert "Traceback" not in refused.value.details() and "IndexError" not in refused.value.details()

    def poisoned():
        try:
            stub.ModelInfer(poison, timeout=30)
            return "answered"
        except grpc.RpcError as exc:
            return exc.code()

    solo = [encode(url, "grpc", ids) for ids in token_ids]
    wrong, refusals = [], []
    for _ in range(6):
        results = concurrently([lambda ids=ids: encode(url, "grpc", ids) for ids in token_ids] + [poisoned, poisoned])
        for i, (answer, expected) in enumerate(zip(results, solo)):
            if not isinstance(answer, np.ndarray) or not np.allclose(answer, expected, rtol=RTOL, atol=ATOL):
                wrong.append((i, str(answer)[:200]))
        refusals += results[len(token_ids):]
    assert not wrong, wrong[:3]
    assert refusals == [grpc.StatusCode.INVALID_ARGUMENT] * 12, refusals
    # the same through the HTTP binary extension, to the text front-end: [0, 1] with one text
    status, body = binary_text_request(triton_server.url("http"), bytes_element(b"hello"), rows=0)
    assert status == 400 and b"has shape [0,1] of BYTES (0 elements) but 1 elements were sent" in body, body[:300]


def test_a_request_of_no_rows_is_refused_at_once_not_left_unanswered(triton_server, token_ids):
    """Triton 2.51 drops a batch dimension of 0, finds the 0 bytes sent right for what is left, and then
    never runs a batch of 0 items nor answers: alone in its batch, a [0, 0] text_encoder request waited
    for the client's deadline, counted as a success, and left ~26 KB of server memory behind each (a
    review, 2026-12-07). Refused at once now, over gRPC and HTTP JSON, and the model keeps answering."""
    import json
    import urllib.error
    import urllib.request

    import grpc
    from tritonclient.grpc import service_pb2_grpc

    url = triton_server.url("grpc")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(url))
    for shape in ([0, 0], [0, 3]):
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(grpc_encoder_request(shape, [], []), timeout=20)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
        assert re.search(rf"input '(input_ids|attention_mask)' has shape \[{shape[0]},{shape[1]}\] of INT64: no rows in "
                         r"its first \(batch\) dimension; expected at least one row", refused.value.details()), refused.value.details()
    body = json.dumps({"inputs": [{"name": name, "datatype": "INT64", "shape": [0, 0], "data": []}
                                  for name in ("input_ids", "attention_mask")]}).encode()
    request = urllib.request.Request(f"http://{triton_server.url('http')}/v2/models/{ENCODER}/infer", body,
                                     {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused_http:
        urllib.request.urlopen(request, timeout=20)
    assert refused_http.value.code == 400 and b"no rows in its first (batch) dimension" in refused_http.value.read()
    assert isinstance(encode(url, "grpc", token_ids[0]), np.ndarray)


def post_json_shape(server, shape: list[int], data: list[float]) -> tuple[int, str]:
    """One HTTP JSON request to digit_classifier declaring `shape` with `data`: (status, body)."""
    import http.client
    import json

    host, port = server.url("http").split(":")
    body = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": shape, "data": data}]})
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", "/v2/models/digit_classifier/infer", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_a_json_shape_larger_than_memory_is_refused_and_the_server_keeps_serving(triton_server, token_ids):
    """A ~400-byte HTTP JSON request with shape [2**40, 1, 8, 8]: Triton 2.51's HTTP frontend allocates
    the shape's bytes before it reads `data`, and std::bad_alloc aborted the whole server (every model
    of the partition; six in 10 minutes put it in a crash loop). The guard refuses the shape when the
    input is added, before that allocation."""
    status, text = post_json_shape(triton_server, [2**40, 1, 8, 8], [0.0] * 64)
    assert status == 400, (status, text)
    assert re.search(r"input 'image' has shape \[1099511627776,1,8,8\] of FP32: 281474976710656 bytes, more than this "
                     r"server accepts per input", text), text
    assert isinstance(encode(triton_server.url("http"), "http", token_ids[0]), np.ndarray)  # same server, still up


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory since its last reset (VmHWM)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


def test_a_tiny_json_request_cannot_make_the_server_allocate_what_no_model_takes(triton_server, token_ids):
    """A ~300-byte JSON request with shape [1048576, 1, 8, 8] (256 MiB of FP32, within the guard's
    built-in limit): Triton 2.51 allocated the 256 MiB before it refused the batch size, so 80 of them,
    16 at a time, took a server's peak RSS from 51 MB to 1.97 GB. The served limit (`[server]
    max_input_bytes`, 1 MiB: 32x the largest valid request) refuses each when its input is added, so
    8 in a row leave the server's peak RSS (VmHWM, reset first) within 64 MiB of where it was."""
    from contracts.serving_spec import DEFAULT_MAX_INPUT_BYTES

    pid = triton_server.process.pid
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current RSS
    before = peak_rss_bytes(pid)
    for _ in range(8):
        status, text = post_json_shape(triton_server, [1048576, 1, 8, 8], [0.0] * 8)
        assert status == 400, (status, text)
        assert (f"input 'image' has shape [1048576,1,8,8] of FP32: 268435456 bytes, more than this server accepts per "
                f"input ({DEFAULT_MAX_INPUT_BYTES}, SERVING_REQUEST_GUARD_MAX_INPUT_BYTES: serving.toml's [server] "
                f"max_input_bytes)") in text, text
    grown = peak_rss_bytes(pid) - before
    assert grown < 64 << 20, f"the server's peak RSS grew by {grown >> 20} MiB over 8 refused requests"
    status, text = post_json_shape(triton_server, [64, 1, 8, 8], [0.0] * 4096)  # the largest valid request
    assert status == 200, (status, text)
    assert isinstance(encode(triton_server.url("http"), "http", token_ids[0]), np.ndarray)


def test_a_body_that_is_not_the_gzip_it_claims_is_refused_not_answered_as_empty(triton_server):
    """Triton 2.51 ignores zlib's Z_DATA_ERROR: a body sent with `Content-Encoding: gzip` that is not
    gzip inflated to nothing, and text_embedder answered 200 with the empty text's embedding. And it
    inflates without a limit (a 400 KB body -> 400 MiB in the server)."""
    import gzip
    import http.client
    import json

    host, port = triton_server.url("http").split(":")

    def post(body):
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            connection.request("POST", "/v2/models/text_embedder/infer", body, {"Content-Encoding": "gzip"})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    status, body = post(b"this is not gzip at all")
    assert status == 400 and b"not valid gzip/deflate data" in body, (status, body[:300])
    status, body = post(gzip.compress(b" " * (300 << 20)))
    assert status == 400 and b"inflates to more bytes than this server accepts" in body, (status, body[:300])
    good = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["hello"]}]})
    for cut in (10, len(gzip.compress(good.encode())) - 8):  # the gzip header alone; all but the trailer
        status, body = post(gzip.compress(good.encode())[:cut])
        assert status == 400 and b"ends before its stream does" in body, (cut, status, body[:300])
    status, body = post(gzip.compress(good.encode()))
    assert status == 200 and json.loads(body)["outputs"][0]["shape"] == [1, 384], (status, body[:300])


def test_a_compressed_json_of_millions_of_values_is_refused_before_it_is_parsed(triton_server):
    """Triton 2.51 parses an HTTP body's JSON into a DOM of ~17 times its size before any check: a
    253 KB gzip body inflating to 255 MB of `"data": [0,0,0,...]` held 4.7 GB in the server for 4 s
    (the main pod's memory limit is 5120 MiB), within the inflated-size limit. The request guard counts
    the bytes that can start a JSON value as the body inflates and refuses it past 4 Mi of them."""
    import http.client
    import json
    import zlib

    def peak_mb():
        with open(f"/proc/{triton_server.process.process.pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) >> 10

    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip
    head = b'{"inputs":[{"name":"input_ids","shape":[1,3],"datatype":"INT64","data":['
    tail = b'0]},{"name":"attention_mask","shape":[1,3],"datatype":"INT64","data":[1,1,1]}]}'
    bomb = b"".join([deflate.compress(head), *(deflate.compress(b"0," * (1 << 20)) for _ in range(32)),
                     deflate.compress(tail), deflate.flush()])  # 64 MiB of JSON in ~64 KB
    host, port = triton_server.url("http").split(":")
    before = peak_mb()
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", f"/v2/models/{ENCODER}/infer", bomb, {"Content-Encoding": "gzip"})
        response = connection.getresponse()
        status, body = response.status, response.read()
    finally:
        connection.close()
    assert peak_mb() - before < 256, f"the server's peak memory grew {peak_mb() - before} MB for a {len(bomb) >> 10} KB body"
    assert status == 400 and b"the body inflates to more JSON values" in body, (status, body[:300])
    good = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT64", "data": [101, 2000, 102]},
                                  {"name": "attention_mask", "shape": [1, 3], "datatype": "INT64", "data": [1, 1, 1]}]})
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", f"/v2/models/{ENCODER}/infer", zlib.compress(good.encode()), {"Content-Encoding": "deflate"})
        response = connection.getresponse()
        assert response.status == 200, response.read()[:300]
    finally:
        connection.close()


def test_json_nested_millions_of_levels_deep_is_refused_and_the_server_keeps_serving(triton_server, token_ids):
    """Triton 2.51 parses an HTTP body with rapidjson's recursive parser, a stack frame per level of
    '[' or '{': a 4 MB body of '[' (or 4,023 bytes of it gzipped) overflowed the server's 256 MiB thread
    stack and the whole server died of SIGSEGV. The request guard follows the nesting as a plain body
    is read from an HTTP connection and as a compressed one inflates, and refuses more than 1024 levels
    with 400; the connection's next requests (pipelined, chunked) and binary data full of '[' bytes are
    read as before."""
    import gzip
    import json
    import socket

    host, port = triton_server.url("http").split(":")
    pid = triton_server.process.process.pid
    good = json.dumps({"inputs": [{"name": "input_ids", "shape": [1, 3], "datatype": "INT64", "data": [[101, 2000, 102]]},
                                  {"name": "attention_mask", "shape": [1, 3], "datatype": "INT64", "data": [[1, 1, 1]]}]}).encode()
    deep = b'{"inputs":' + b"[" * 4_000_000

    def plain(body, headers=""):
        return f"POST /v2/models/{ENCODER}/infer HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {len(body)}\r\n\r\n".encode() + body

    def chunked(body, size=4096):
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size]) for i in range(0, len(body), size))
        return f"POST /v2/models/{ENCODER}/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode() + chunks + b"0\r\n\r\n"

    def answers(wire: bytes, count: int) -> list[tuple[int, bytes]]:
        """Send `wire` on one connection and read `count` responses (status, body)."""
        with socket.create_connection((host, int(port)), timeout=60) as connection:
            connection.sendall(wire)
            reader, got = connection.makefile("rb"), []
            for _ in range(count):
                status_line = reader.readline()
                assert status_line, f"the connection closed without an answer (server alive: {triton_server.process.process.poll() is None})"
                status = int(status_line.split()[1])
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                got.append((status, reader.read(length)))
            return got

    expected = re.compile(rb"its JSON nests deeper than 1024 levels of '\[' or '\{'|the body's JSON nests deeper than this server parses")
    for name, wire in (("plain", plain(deep)), ("gzip", plain(gzip.compress(deep), "Content-Encoding: gzip\r\n")),
                       ("pipelined", plain(good) + plain(deep) + plain(good)),
                       ("chunked", chunked(good) + chunked(deep) + chunked(good))):
        got = answers(wire, 3 if name in ("pipelined", "chunked") else 1)
        deep_answer = got[1] if len(got) == 3 else got[0]
        assert deep_answer[0] == 400 and expected.search(deep_answer[1]), (name, deep_answer[0], deep_answer[1][:300])
        for status, body in (got[0], got[2]) if len(got) == 3 else ():
            assert status == 200 and json.loads(body)["outputs"][0]["shape"] == [1, 384], (name, status, body[:300])
        assert triton_server.process.process.poll() is None, f"the server died on the {name} body"
    # a repeated header Triton reads the first of (it parsed the JSON the scan believed absent or compressed):
    # the 4 MB body killed the server with SIGSEGV (a review, 2026-12-06); now the connection is closed unread
    for name, headers in (("json length, then 0", f"Inference-Header-Content-Length: {len(deep)}\r\n"
                                                  "Inference-Header-Content-Length: 0\r\n"),
                          ("identity, then gzip", "Content-Encoding: identity\r\nContent-Encoding: gzip\r\n")):
        try:
            got = answers(plain(deep, headers), 1)
        except (AssertionError, ConnectionError):
            got = []  # closed without an answer
        assert not got or got[0][0] == 400, (name, got[0][0] if got else None)
        assert triton_server.process.process.poll() is None, f"the server died on the body with {name}"
    # obsolete line folding: evhtp joins a line that starts with a tab onto the previous header, so a folded
    # Content-Length ("4" then "\t000010") was the body's length to Triton and 4 bytes to the guard, and the body
    # reached rapidjson and killed the server (SIGSEGV; a review, 2026-12-07); a name with a space before
    # its ':' is as unsure. Now the connection is closed unread.
    head, size = f"POST /v2/models/{ENCODER}/infer HTTP/1.1\r\nHost: x\r\n", str(len(deep))
    chunks = chunked(deep).split(b"\r\n\r\n", 1)[1]
    for name, wire in (("folded Content-Length", f"{head}Content-Length: {size[0]}\r\n\t{size[1:]}\r\n\r\n".encode() + deep),
                       ("folded Transfer-Encoding", f"{head}Transfer-Encoding: c\r\n\thunked\r\n\r\n".encode() + chunks),
                       ("folded JSON length", f"{head}Content-Length: {size}\r\nInference-Header-Content-Length: 0\r\n"
                                              f"\t{size}\r\n\r\n".encode() + deep),
                       ("space before ':'", f"{head}Content-Length : {size}\r\n\r\n".encode() + deep),
                       # a second review (2026-12-07): Triton reads this header with atoi (the low 32 bits of a
                       # long, white space such as \v skipped), the guard read it as atoll (negative: 0)
                       ("negative JSON length that wraps", f"{head}Inference-Header-Content-Length: {len(deep) - 2**32}\r\n"
                                                           f"Content-Length: {size}\r\n\r\n".encode() + deep),
                       ("JSON length after a vertical tab", f"{head}Inference-Header-Content-Length: \x0b{size}\r\n"
                                                            f"Content-Length: {size}\r\n\r\n".encode() + deep),
                       # a third review: the guard dropped every space of a value, Triton's atoi stops at the
                       # first: "N dddddddddd" was N bytes of JSON to Triton and 10 (low 32 bits) to the guard
                       ("JSON length with a space inside", f"{head}Inference-Header-Content-Length: {len(deep)} "
                                                           f"{(10 - len(deep) * 10**10) % 2**32:010d}\r\n"
                                                           f"Content-Length: {size}\r\n\r\n".encode() + deep),
                       # evhtp skips a bare LF after the request line and reads on for headers
                       ("bare LF after the request line", f"POST /v2/models/{ENCODER}/infer HTTP/1.1\r\n\n"
                                                          f"Content-Length: {size}\r\nHost: x\r\n\r\n".encode() + deep)):
        try:
            got = answers(wire, 1)
        except (AssertionError, ConnectionError):
            got = []  # closed without an answer
        assert not got or got[0][0] == 400, (name, got[0][0] if got else None)
        assert triton_server.process.process.poll() is None, f"the server died on the body with a {name}"
    # evhtp ends a chunked request at its first trailer line; the guard read trailers on to a blank line, so
    # the next request's head was a trailer to it and its body went unread (a second review, 2026-12-07)
    import time

    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(chunked(good).replace(b"0\r\n\r\n", b"0\r\nX: y\r\n"))
        time.sleep(0.5)
        try:
            connection.sendall(plain(deep))
            connection.recv(4096)
        except OSError:
            pass  # closed at the trailer
    time.sleep(0.5)
    assert triton_server.process.process.poll() is None, "the server died on the body after a chunked trailer"
    # no false alarm: '[' and '{' inside JSON strings and in binary tensor data are not nesting
    import tritonclient.http as triton_http

    client = triton_http.InferenceServerClient(triton_server.url("http"), network_timeout=60)
    try:
        for binary_data in (False, True):
            texts = triton_http.InferInput("TEXT", [2, 1], "BYTES")
            texts.set_data_from_numpy(np.array([[b"[" * 5000], [b"{" * 5000]], dtype=object), binary_data=binary_data)
            assert client.infer("text_embedder", [texts]).as_numpy("embedding").shape == (2, 384)
    finally:
        client.close()
    assert triton_server.process.process.pid == pid and triton_server.process.process.poll() is None
    assert isinstance(encode(triton_server.url("http"), "http", token_ids[0]), np.ndarray)  # same server, still up
