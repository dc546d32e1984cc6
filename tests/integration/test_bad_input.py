"""Bad input against the real server: each case gets a clear error (status code and message) and
the server keeps answering correctly afterwards. Ends with a seeded, bounded random mix of bad and
good requests, sent concurrently so bad ones share dynamic batches with good ones.

One bad input is NOT survivable by Triton 2.51 itself (an HTTP JSON request declaring a shape
larger than memory aborts the process): see test_faults.py, where the supervisor contains it."""
from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from dataclasses import dataclass

import numpy as np
import pytest
from conftest import http_call, in_process_probabilities, raw_triton_client

pytestmark = pytest.mark.server
MODEL = "digit_classifier"
TEXT_MODEL = "text_embedder"
PROTOCOLS = ["http", "grpc"]
TIMEOUT_S = 10.0
HTTP_STATUS = {"invalid": "400", "not_found": "404", "parse": "400"}
GRPC_STATUS = {"invalid": "StatusCode.INVALID_ARGUMENT", "not_found": "StatusCode.NOT_FOUND"}


@pytest.fixture(scope="module")
def expected(digits_test_split):
    """In-process ONNX Runtime answers for the whole test split (the reference for good requests)."""
    images, _ = digits_test_split
    return in_process_probabilities(MODEL, images)


def raw_client(server, protocol):
    return raw_triton_client(server, protocol, TIMEOUT_S)


def infer(module, client, model, name, array, datatype, shape=None, **kwargs):
    tensor = module.InferInput(name, list(array.shape if shape is None else shape), datatype)
    tensor.set_data_from_numpy(array)
    if module.__name__.endswith("grpc"):
        kwargs.setdefault("client_timeout", TIMEOUT_S)
    return client.infer(model, [tensor], **kwargs)


def assert_rejected(call, protocol: str, kind: str, pattern: str):
    """`call` must fail with Triton's status for `kind` and a message matching `pattern`."""
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match=pattern) as info:
        call()
    expected_status = (HTTP_STATUS if protocol == "http" else GRPC_STATUS)[kind]
    assert info.value.status() == expected_status, f"{info.value.status()}: {info.value.message()}"
    return info.value


def assert_still_serving(server, expected, images):
    """Both protocols answer a fresh batch exactly as in-process ONNX Runtime does."""
    for protocol in PROTOCOLS:
        module, client = raw_client(server, protocol)
        try:
            result = infer(module, client, MODEL, "image", images[10:14], "FP32").as_numpy("probabilities")
        finally:
            client.close()
        np.testing.assert_allclose(result, expected[10:14], rtol=1e-5, atol=1e-6)


def http_post(server, path: str, body: bytes, headers: dict | None = None) -> tuple[int, str]:
    """(status, Triton's error message, or the body as text on success) of a raw JSON POST."""
    status, answer = http_call(server, "POST", path, body, {"Content-Type": "application/json", **(headers or {})},
                               TIMEOUT_S)
    if isinstance(answer, dict):
        return status, answer["error"] if status >= 400 else json.dumps(answer)
    return status, answer or ""


# --- the digit classifier --------------------------------------------------------------------------

def _json_body(**tensor) -> bytes:
    base = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0] * 64}
    return json.dumps({"inputs": [{**base, **tensor}]}).encode()


MALFORMED_JSON = {
    # name: (body, HTTP status, message pattern). Triton 2.51 answers JSON it cannot parse with 500;
    # the preloaded request guard makes it 400 and adds the expected form (docs/operations.md).
    "not JSON": (b"{not json", 400, r"failed to parse the request JSON buffer"),
    "not UTF-8": (b"\xff\xfe{}", 400, r"failed to parse the request JSON buffer"),
    "a list": (b"[]", 400, r"Unable to parse 'inputs'"),
    "no inputs": (b"{}", 400, r"Unable to parse 'inputs'"),
    "inputs not a list": (b'{"inputs": "image"}', 400, r"Unable to parse 'inputs'"),
    "empty inputs": (b'{"inputs": []}', 400, r"expected 1 inputs but got 0 inputs"),
    # Triton's words for an entry with no data, given for entries that are no objects too
    "an input not an object": (b'{"inputs": [5]}', 400, r"But no field is set; expected each entry of \"inputs\" to "
                               r"be an object \{\"name\": "),
    "an input name not a string": (b'{"inputs": [{"name": 5}]}', 400, r"expected each entry of \"inputs\" to be an object"),
    "too little data": (_json_body(data=[0.0, 1.0]), 400, r"Shape does not match true shape of 'data' field"),
    "data not numbers": (_json_body(data=["a"] * 64), 400, r"attempt to access JSON non-number"),
    "negative dimension": (_json_body(shape=[-1, 1, 8, 8]), 400, r"Unable to parse 'shape'"),
    "parameters not an object": (json.dumps({"inputs": json.loads(_json_body())["inputs"], "parameters": "x"}).encode(),
                                 400, r"failed to get request params.: attempt to get members for non-object"),
    "unknown datatype": (_json_body(datatype="FLOAT99"), 400, r"invalid datatype for input image"),
    "unknown input name": (_json_body(name="img"), 400, r"unexpected inference input 'img'"),
    "NaN in JSON": (b'{"inputs":[{"name":"image","shape":[1,1,8,8],"datatype":"FP32","data":[' + b",".join([b"NaN"] * 64) + b"]}]}",
                    400, r"invalid input 'image': 64 NaN and 0 Inf values"),
}


#: the cases Triton 2.51 itself answers with 500 (its HTTP frontend's JSON reader)
TRITON_JSON_ERRORS = ("not JSON", "not UTF-8", "a list", "no inputs", "inputs not a list", "too little data",
                      "data not numbers", "negative dimension", "parameters not an object")


@pytest.mark.parametrize("case", list(MALFORMED_JSON), ids=list(MALFORMED_JSON))
def test_malformed_json_gets_a_clear_error(triton_server, expected, digits_test_split, case):
    body, status, pattern = MALFORMED_JSON[case]
    got_status, message = http_post(triton_server, f"/v2/models/{MODEL}/infer", body)
    assert got_status == status and message
    assert re.search(pattern, message), message
    if case in TRITON_JSON_ERRORS:  # Triton's own 500, made 400 by the request guard, with the form expected
        assert "expected a JSON body of the KServe v2 inference protocol" in message, message
    assert_still_serving(triton_server, expected, digits_test_split[0])


@pytest.mark.parametrize("body", [b"[1, 2]", b'"image"', b"5"], ids=["a list", "a string", "a number"])
def test_a_generate_body_that_is_not_a_json_object_gets_400(triton_server, expected, digits_test_split, body):
    """Triton 2.51 answered 500 "attempt to get members for non-object" (as for "parameters": "x" at
    /infer); the request guard makes it 400 with the expected form."""
    status, message = http_post(triton_server, f"/v2/models/{MODEL}/generate", body)
    assert status == 400, (status, message)
    assert "attempt to get members for non-object" in message and "expected a JSON body" in message, message
    assert_still_serving(triton_server, expected, digits_test_split[0])


def test_thousands_of_request_parameters_are_refused_without_starving_the_http_threads(triton_server, expected,
                                                                                        digits_test_split):
    """Triton 2.51's HTTP frontend looks every request parameter up again by name (linear), so a 1 MB
    body of 60,000 parameters held an HTTP thread ~3 s; a dozen at once held all of them, the liveness
    probe went unanswered for 3 x 2 s and the supervisor killed the partition as hung (every request in
    flight lost). The request guard refuses the 129th parameter, which ends that loop."""
    from concurrent.futures import ThreadPoolExecutor

    body = json.dumps({"inputs": json.loads(_json_body())["inputs"], "parameters": {f"p{i}": i for i in range(60_000)}}).encode()
    with ThreadPoolExecutor(12) as pool:
        flood = [pool.submit(http_post, triton_server, f"/v2/models/{MODEL}/infer", body) for _ in range(12)]
        time.sleep(0.5)
        started = time.monotonic()
        with urllib.request.urlopen(f"http://{triton_server.http_url}/v2/health/live", timeout=10) as response:
            assert response.status == 200
        live_after_s = time.monotonic() - started
        answers = [f.result() for f in flood]
    assert live_after_s < 2.0, f"/v2/health/live took {live_after_s:.1f} s (the supervisor's probe gives up after 2 s)"
    for status, message in answers:
        assert status == 400 and "request parameters: more than 128 on one request; expected at most 128" in message, \
            (status, message[:300])
    allowed = json.dumps({"inputs": json.loads(_json_body())["inputs"], "parameters": {f"p{i}": i for i in range(128)}})
    assert http_post(triton_server, f"/v2/models/{MODEL}/infer", allowed.encode())[0] == 200
    assert_still_serving(triton_server, expected, digits_test_split[0])


def test_binary_header_length_outside_the_body_is_refused(triton_server, expected, digits_test_split):
    status, message = http_post(triton_server, f"/v2/models/{MODEL}/infer", b'{"inputs":[]}',
                                {"Inference-Header-Content-Length": "999"})
    assert status == 400 and "inference header size should be in range" in message
    assert_still_serving(triton_server, expected, digits_test_split[0])


@pytest.mark.parametrize("value, pattern", [
    ("abc", r"'raw_input' is the whole body taken as one binary tensor.*expected that header to be the byte length"),
    ("12x", r"failed to parse the request JSON buffer"),  # Triton reads the leading digits, as atoll does
    ("-5", r"inference header size should be in range"),
], ids=["not a number", "digits then letters", "negative"])
def test_a_binary_header_length_that_is_not_a_byte_count_gets_an_answer(triton_server, expected, digits_test_split,
                                                                        value, pattern):
    """The request guard follows HTTP bodies to find their JSON part (docs/operations.md); it read this
    header strictly and closed the connection on "abc" or "12x" (no answer at all). It now reads it as
    Triton does, so the client gets Triton's 400, with what the header should have been."""
    status, message = http_post(triton_server, f"/v2/models/{MODEL}/infer", b'{"inputs":[]}',
                                {"Inference-Header-Content-Length": value})
    assert status == 400 and re.search(pattern, message), (status, message)
    assert_still_serving(triton_server, expected, digits_test_split[0])


WRONG_TENSORS = {
    # name: (array, wire datatype, kind, message pattern)
    "FP64 instead of FP32": (np.zeros((1, 1, 8, 8), np.float64), "FP64", "invalid", r"data-type is 'FP64', but model 'digit_classifier' expects 'FP32'"),
    "INT32 instead of FP32": (np.zeros((1, 1, 8, 8), np.int32), "INT32", "invalid", r"data-type is 'INT32', but model 'digit_classifier' expects 'FP32'"),
    "strings instead of FP32": (np.array([b"x"] * 64, dtype=object).reshape(1, 1, 8, 8), "BYTES", "invalid", r"data-type is 'BYTES', but model 'digit_classifier' expects 'FP32'"),
    "wrong image size": (np.zeros((2, 1, 7, 8), np.float32), "FP32", "invalid", r"unexpected shape for input 'image'.*Expected \[-1,1,8,8\], got \[2,1,7,8\]"),
    "missing batch axis": (np.zeros((1, 64), np.float32), "FP32", "invalid", r"unexpected shape for input 'image'"),
    "batch above the maximum": (np.zeros((65, 1, 8, 8), np.float32), "FP32", "invalid", r"batch-size must be <= 64"),
    "oversized image": (np.zeros((1, 1, 512, 512), np.float32), "FP32", "invalid", r"Expected \[-1,1,8,8\], got \[1,1,512,512\]"),
    "NaN pixels": (np.full((1, 1, 8, 8), np.nan, np.float32), "FP32", "invalid", r"invalid input 'image': 64 NaN and 0 Inf values out of 64"),
    "Inf pixels": (np.where(np.eye(8, dtype=bool), np.inf, 0).astype(np.float32).reshape(1, 1, 8, 8), "FP32", "invalid",
                   r"invalid input 'image': 0 NaN and 8 Inf values out of 64; expected finite numbers"),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("case", list(WRONG_TENSORS), ids=list(WRONG_TENSORS))
def test_wrong_tensors_get_a_clear_error(triton_server, expected, digits_test_split, protocol, case):
    array, datatype, kind, pattern = WRONG_TENSORS[case]
    module, client = raw_client(triton_server, protocol)
    try:
        assert_rejected(lambda: infer(module, client, MODEL, "image", array, datatype), protocol, kind, pattern)
    finally:
        client.close()
    assert_still_serving(triton_server, expected, digits_test_split[0])


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model,version,pattern", [
    ("no_such_model", "", r"Request for unknown model: 'no_such_model' is not found"),
    ("../digit_classifier", "", r"unknown model|not found|Not Found"),
    (MODEL, "7", r"Request for unknown model: 'digit_classifier' version 7 is not found"),
    (MODEL, "latest", r"Not Found|version should be an integral value > 0"),
], ids=["unknown model", "path in model name", "unknown version", "non-numeric version"])
def test_unknown_model_or_version_gets_not_found(triton_server, expected, digits_test_split, protocol, model, version, pattern):
    from tritonclient.utils import InferenceServerException

    module, client = raw_client(triton_server, protocol)
    try:
        with pytest.raises(InferenceServerException, match=pattern) as info:
            infer(module, client, model, "image", np.zeros((1, 1, 8, 8), np.float32), "FP32", model_version=version)
        assert info.value.status() in ({"404", "400"} if protocol == "http" else {"StatusCode.NOT_FOUND", "StatusCode.INVALID_ARGUMENT"})
    finally:
        client.close()
    assert_still_serving(triton_server, expected, digits_test_split[0])


def test_model_client_maps_bad_input_to_non_retryable_errors(triton_server):
    """What a caller of our client library sees: one line, and the right type to act on."""
    from model_client.client import TritonModelClient
    from model_client.errors import ModelNotFoundError, RequestRejectedError

    for protocol in PROTOCOLS:
        with TritonModelClient(triton_server.url(protocol), protocol) as client:
            with pytest.raises(RequestRejectedError, match=r"invalid input 'image'") as info:
                client.infer(MODEL, {"image": np.full((1, 1, 8, 8), np.nan, np.float32)})
            assert "\n" not in str(info.value)
            with pytest.raises(RequestRejectedError, match=r"batch-size must be <= 64"):
                client.infer(MODEL, {"image": np.zeros((65, 1, 8, 8), np.float32)})
            with pytest.raises(ModelNotFoundError, match="no_such_model"):
                client.infer("no_such_model", {"image": np.zeros((1, 1, 8, 8), np.float32)})


def test_nan_request_batched_with_good_ones_fails_alone(triton_server, expected, digits_test_split):
    """Concurrent requests share dynamic batches: only the NaN request, and the finite one the model
    overflows on (pixels of 3e38: NaN probabilities, once answered with status 200), may fail."""
    from concurrent.futures import ThreadPoolExecutor

    from tritonclient.utils import InferenceServerException

    images, _ = digits_test_split

    def one(i):
        module, client = raw_client(triton_server, "grpc" if i % 2 else "http")
        batch = images[i:i + 2].copy()
        if i % 4 == 0:
            batch[1, 0, 3, 3] = np.nan
        elif i % 4 == 2:  # finite, but the model overflows on it: its answer would be NaN
            batch[0] = 3e38
        try:
            return i, infer(module, client, MODEL, "image", batch, "FP32").as_numpy("probabilities")
        except InferenceServerException as exc:
            return i, exc
        finally:
            client.close()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(32)))
    for i, outcome in results:
        if i % 4 == 0:
            assert isinstance(outcome, InferenceServerException) and "1 NaN and 0 Inf" in outcome.message(), outcome
        elif i % 4 == 2:
            assert isinstance(outcome, InferenceServerException), f"answered {outcome} for pixels of 3e38"
            assert "output 'probabilities' for it holds" in outcome.message() and "NaN/Inf" in outcome.message(), outcome
            assert outcome.status() in ("400", "StatusCode.INVALID_ARGUMENT"), outcome
        else:
            np.testing.assert_allclose(outcome, expected[i:i + 2], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("megabytes", [16, 64])
def test_large_http_bodies_get_an_error_not_a_crash(triton_server, expected, digits_test_split, megabytes):
    """Triton 2.51 needs ~2x a body's size of thread stack (upstream issue #5840): with the default
    8 MiB stack a 4 MiB body killed the server. The launcher raises RLIMIT_STACK (serving.runtime.server).
    The whole body is read; its one input is over the served per-input limit (`[server]
    max_input_bytes`), which the request guard names (it was Triton's "batch-size must be <= 64")."""
    size = megabytes << 20
    header = json.dumps({"inputs": [{"name": "image", "shape": [size // 256, 1, 8, 8], "datatype": "FP32",
                                     "parameters": {"binary_data_size": size}}]}).encode()
    status, message = http_post(triton_server, f"/v2/models/{MODEL}/infer", header + bytes(size),
                                {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"})
    assert status == 400 and f"[{size // 256},1,8,8] of FP32: {size} bytes, more than this server accepts per input" in message, message
    assert_still_serving(triton_server, expected, digits_test_split[0])


def test_large_grpc_message_gets_an_error(triton_server, expected, digits_test_split):
    module, client = raw_client(triton_server, "grpc")
    try:
        assert_rejected(lambda: infer(module, client, MODEL, "image", np.zeros((1, 1, 4096, 4096), np.float32), "FP32"),
                        "grpc", "invalid", r"shape \[1,1,4096,4096\] of FP32: 67108864 bytes, more than this server accepts per input")
    finally:
        client.close()
    assert_still_serving(triton_server, expected, digits_test_split[0])


def test_oversized_png_is_refused_by_the_client_before_decoding(tmp_path):
    from PIL import Image

    from model_client.errors import ClientError
    from model_client.images import MAX_IMAGE_PIXELS, image_array_from_png

    path = tmp_path / "huge.png"
    Image.new("1", (4097, 4097)).save(path)
    with pytest.raises(ClientError, match=rf"image is 4097x4097; at most {MAX_IMAGE_PIXELS} pixels are accepted"):
        image_array_from_png(path)
    (tmp_path / "junk.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    with pytest.raises(ClientError, match="not a readable image"):
        image_array_from_png(tmp_path / "junk.png")


# --- the text embedder (helper A1's ensemble: TEXT [1] string -> embedding [384]) ------------------

@pytest.fixture(scope="module")
def text_model(serving_spec):
    if TEXT_MODEL not in {m.name for m in serving_spec.models}:
        pytest.skip(f"model {TEXT_MODEL!r} (the text ensemble) is not in model_repository/serving.toml")
    return TEXT_MODEL


def embed(server, protocol, texts, datatype="BYTES"):
    module, client = raw_client(server, protocol)
    try:
        array = np.array([[t] for t in texts], dtype=object) if datatype == "BYTES" else texts
        result = infer(module, client, TEXT_MODEL, "TEXT", array, datatype)
        return result.as_numpy("embedding")
    finally:
        client.close()


def assert_text_still_served(server, protocol):
    vectors = embed(server, protocol, [b"a cat sits on the mat", b"a cat sits on the mat"])
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-4)
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_empty_and_blank_texts_get_the_defined_cls_sep_embedding(triton_server, text_model, protocol):
    vectors = embed(triton_server, protocol, [b"", b"   ", b"\n\t"])
    assert vectors.shape == (3, 384) and np.isfinite(vectors).all()
    np.testing.assert_allclose(vectors[1], vectors[0], atol=1e-5)
    np.testing.assert_allclose(vectors[2], vectors[0], atol=1e-5)
    assert_text_still_served(triton_server, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_oversized_text_is_truncated_to_128_tokens(triton_server, text_model, protocol):
    """A 200 kB text is answered (within the timeout) with the embedding of its first 128 tokens."""
    start = time.monotonic()
    long_text, its_prefix = ("word " * 40_000).encode(), ("word " * 300).encode()
    vectors = embed(triton_server, protocol, [long_text, its_prefix])
    assert time.monotonic() - start < TIMEOUT_S
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-5)
    assert_text_still_served(triton_server, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_non_utf8_text_is_rejected_naming_the_row_and_byte(triton_server, text_model, protocol):
    assert_rejected(lambda: embed(triton_server, protocol, [b"fine", b"caf\xe9 \xff"]), protocol, "invalid",
                    r"TEXT row 1 is not valid UTF-8 \(invalid continuation byte at byte 3\)")
    assert_text_still_served(triton_server, protocol)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_wrong_text_tensors_are_rejected(triton_server, text_model, protocol):
    module, client = raw_client(triton_server, protocol)
    try:
        config = client.get_model_config(TEXT_MODEL, **({"as_json": True} if protocol == "grpc" else {}))
        max_batch = int(config.get("config", config)["max_batch_size"])  # sized at build time
        assert_rejected(lambda: infer(module, client, TEXT_MODEL, "TEXT", np.zeros((1, 1), np.float32), "FP32"),
                        protocol, "invalid", r"data-type is 'FP32', but model 'text_embedder' expects 'BYTES'")
        assert_rejected(lambda: infer(module, client, TEXT_MODEL, "TEXT", np.array([[b"x"]] * (max_batch + 1), dtype=object), "BYTES"),
                        protocol, "invalid", rf"batch-size must be <= {max_batch}")
    finally:
        client.close()
    assert_text_still_served(triton_server, protocol)


def binary_texts(server, texts: list[bytes], timeout_s: float = 120.0) -> tuple[int, bytes]:
    """One text_embedder request holding `texts` as binary tensor data: (status, body)."""
    import http.client

    blob = b"".join(len(t).to_bytes(4, "little") + t for t in texts)
    header = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1],
                                     "parameters": {"binary_data_size": len(blob)}}]}).encode()
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        connection.request("POST", f"/v2/models/{TEXT_MODEL}/infer", header + blob,
                           {"Inference-Header-Content-Length": str(len(header))})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_text_input_over_the_guards_string_limit_is_refused_before_the_backend_copies_it(triton_server, text_model):
    """A BYTES input's declared shape ([1, 1]) says nothing of its bytes, so the shape limit never
    applied: a 50 MB prompt was copied whole into its stub's shared-memory region (which keeps its
    largest size) before the model refused it (a review, 2026-12-07). Over 32 MiB now refused by the
    request guard, before any stub sees it: 400 naming the input and the limit, no region grew, and
    the model answers the next text."""
    import os

    from contracts.shared_memory import triton_shm_regions

    def region_bytes():
        return sum(os.stat(r).st_size for r in triton_shm_regions(triton_server.process.pid) if os.path.exists(r))

    before = region_bytes()
    status, body = binary_texts(triton_server, [b"word " * ((32 << 20) // 5 + 1)])
    assert status == 400, body[:300]
    assert b"input 'TEXT' (BYTES) carries 33554439 bytes, more than this server accepts per text input (33554432" in body
    assert region_bytes() == before
    status, body = binary_texts(triton_server, [b"word " * 1000])  # a long text within the limit: answered
    assert status == 200, body[:300]


def test_texts_whose_words_start_late_do_not_hold_up_the_other_text_requests(triton_server, text_model):
    """16,385 spaces and then CJK up to 262,144 characters: the text front-end tokenized all of it (its
    first 16,384 characters hold no token), 0.5 s a row; one request of a full batch of such rows held
    its batch 16 s, and two of them kept both instances busy for 28 s while every other text_embedder
    request timed out in the queue (503 after 5 s). Now the text is read on in windows and tokenized
    from the start that fills the model's 128 tokens: every request is answered, each row as alone."""
    from concurrent.futures import ThreadPoolExecutor

    module, client = raw_client(triton_server, "http")
    try:
        rows = int(client.get_model_config(TEXT_MODEL)["max_batch_size"])
    finally:
        client.close()
    late = (" " * 16_385 + "中" * (262_144 - 16_385)).encode()
    status, body = binary_texts(triton_server, [late])
    assert status == 200, body[:300]
    late_alone = np.array(json.loads(body)["outputs"][0]["data"], np.float32)
    good = [b"a cat sits on the mat", b"How do I serve a model?"]
    good_alone = [np.array(json.loads(binary_texts(triton_server, [t])[1])["outputs"][0]["data"], np.float32) for t in good]
    with ThreadPoolExecutor(12) as pool:
        slow = [pool.submit(binary_texts, triton_server, [late] * rows) for _ in range(2)]
        time.sleep(1.0)  # the two are being tokenized
        quick = [pool.submit(binary_texts, triton_server, [good[i % 2]]) for i in range(8)]
        answers = [q.result() for q in quick]
        slow_answers = [s.result() for s in slow]
    for i, (status, body) in enumerate(answers):
        assert status == 200, (i, status, body[:200])  # was 503 "Request timeout expired"
        np.testing.assert_allclose(json.loads(body)["outputs"][0]["data"], good_alone[i % 2], rtol=1e-4, atol=1e-5)
    for status, body in slow_answers:
        assert status == 200, body[:200]
        vectors = np.array(json.loads(body)["outputs"][0]["data"], np.float32).reshape(rows, -1)
        np.testing.assert_allclose(vectors, np.broadcast_to(late_alone, vectors.shape), rtol=1e-4, atol=1e-5)


# --- a seeded random mix of bad and good requests --------------------------------------------------

BAD_KINDS = ("nan", "inf", "wrong_shape", "wrong_dtype", "batch_too_big", "unknown_model", "unknown_version", "malformed_json")
EXPECTED_ERRORS = {  # kind: (status kind, message pattern)
    "nan": ("invalid", "NaN"), "inf": ("invalid", "Inf values"), "wrong_shape": ("invalid", "unexpected shape"),
    "wrong_dtype": ("invalid", r"data-type is 'FP64', but model 'digit_classifier' expects 'FP32'"), "batch_too_big": ("invalid", "batch-size must be <= 64"),
    "unknown_model": ("not_found", "unknown model"), "unknown_version": ("not_found", "version 99 is not found"),
    "malformed_json": ("parse", "failed to parse the request JSON buffer"),
}


@dataclass(frozen=True)
class PlannedRequest:
    kind: str
    protocol: str
    start: int
    batch: int


def plan_mixed_requests(seed: int, count: int, n_images: int) -> list[PlannedRequest]:
    """Half good, half spread over BAD_KINDS; batch 1..8; random protocol (malformed JSON is HTTP)."""
    rng = np.random.default_rng(seed)
    plan = []
    for _ in range(count):
        kind = "good" if rng.random() < 0.5 else str(rng.choice(BAD_KINDS))
        protocol = "http" if kind == "malformed_json" else str(rng.choice(PROTOCOLS))
        batch = int(rng.integers(1, 9))
        plan.append(PlannedRequest(kind, protocol, int(rng.integers(0, n_images - batch)), batch))
    return plan


def send_planned(server, planned: PlannedRequest, images: np.ndarray, clients: threading.local):
    """Returns the probabilities for a good request; raises for a bad one."""
    from tritonclient.utils import InferenceServerException

    if planned.kind == "malformed_json":
        status, message = http_post(server, f"/v2/models/{MODEL}/infer", b'{"inputs": [{"name": "image", ')
        raise InferenceServerException(message, status=str(status))
    if not hasattr(clients, planned.protocol):
        setattr(clients, planned.protocol, raw_client(server, planned.protocol))
    module, client = getattr(clients, planned.protocol)
    batch = images[planned.start:planned.start + planned.batch].copy()
    model, datatype, kwargs = MODEL, "FP32", {}
    if planned.kind == "nan":
        batch[-1, 0, 0, 0] = np.nan
    elif planned.kind == "inf":
        batch[0, 0, 7, 7] = -np.inf
    elif planned.kind == "wrong_shape":
        batch = np.ascontiguousarray(batch[:, :, :7, :])
    elif planned.kind == "wrong_dtype":
        batch, datatype = batch.astype(np.float64), "FP64"
    elif planned.kind == "batch_too_big":
        batch = np.zeros((65, 1, 8, 8), np.float32)
    elif planned.kind == "unknown_model":
        model = "no_such_model"
    elif planned.kind == "unknown_version":
        kwargs["model_version"] = "99"
    return infer(module, client, model, "image", batch, datatype, **kwargs).as_numpy("probabilities")


def test_random_mix_of_bad_and_good_requests_answers_every_good_one_correctly(triton_server, expected, digits_test_split):
    from concurrent.futures import ThreadPoolExecutor

    from tritonclient.utils import InferenceServerException

    images, _ = digits_test_split
    plan = plan_mixed_requests(seed=20241129, count=240, n_images=len(images))
    assert plan == plan_mixed_requests(seed=20241129, count=240, n_images=len(images))  # reproducible
    clients = threading.local()

    def run(planned):
        start = time.monotonic()
        try:
            return planned, send_planned(triton_server, planned, images, clients), time.monotonic() - start
        except InferenceServerException as exc:
            return planned, exc, time.monotonic() - start

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, plan))
    assert len(results) == len(plan)  # every request accounted for
    for planned, outcome, seconds in results:
        assert seconds < TIMEOUT_S + 4, (planned, seconds)  # slack for a busy machine (make test runs 2 test processes)
        if planned.kind == "good":
            assert not isinstance(outcome, Exception), (planned, outcome)
            np.testing.assert_allclose(outcome, expected[planned.start:planned.start + planned.batch], rtol=1e-5, atol=1e-6)
        else:
            status_kind, pattern = EXPECTED_ERRORS[planned.kind]
            assert isinstance(outcome, InferenceServerException), (planned, "was answered")
            wanted = HTTP_STATUS[status_kind] if planned.protocol == "http" else GRPC_STATUS[status_kind]
            assert outcome.status() == wanted and re.search(pattern, outcome.message()), (planned, outcome)
    kinds = {k: sum(p.kind == k for p in plan) for k in ("good", *BAD_KINDS)}
    assert kinds["good"] > 80 and all(kinds[k] > 5 for k in BAD_KINDS), kinds
    assert_still_serving(triton_server, expected, images)
    print(f"\nrandom mix (seed 20241129): {len(plan)} requests {kinds}: every good one correct, every bad one its error")
