"""Compressed HTTP answers: `[server] http_gzip_level` reaches a real tritonserver through the
preloaded serving/runtime/native/gzip_level.c. Triton compresses whenever a request sends
`Accept-Encoding: gzip` (as requests, aiohttp and httpx do by default). Served ("off"), the answer
is the plain JSON without a Content-Encoding even then (the CPU of compressing and decompressing is
what docs/performance.md measured); at level 0 it is gzip, the same JSON once decompressed, but
stored rather than compressed; Triton's own level shrinks it."""
from __future__ import annotations

import gzip
import http.client
import json

import numpy as np
import pytest

from conftest import start_test_server
from contracts.serving_spec import GZIP_OFF

pytestmark = pytest.mark.server
MODEL = "digit_classifier"


def post(http_url: str, body: bytes, accept_gzip: bool) -> tuple[str | None, bytes]:
    """(Content-Encoding, raw body) of one KServe v2 JSON inference."""
    headers = {"Content-Type": "application/json", **({"Accept-Encoding": "gzip"} if accept_gzip else {})}
    connection = http.client.HTTPConnection(http_url, timeout=30)
    try:
        connection.request("POST", f"/v2/models/{MODEL}/infer", body, headers)
        response = connection.getresponse()
        raw = response.read()
        assert response.status == 200, raw[:300]
        return response.getheader("Content-Encoding"), raw
    finally:
        connection.close()


@pytest.fixture(scope="module")
def served_level_server(tmp_path_factory, serving_spec):
    server = start_test_server(tmp_path_factory.mktemp("gzip-served"), (MODEL,),
                               http_gzip_level=serving_spec.server.http_gzip_level)
    yield server
    server.discard()


@pytest.fixture(scope="module")
def level_0_server(tmp_path_factory):
    server = start_test_server(tmp_path_factory.mktemp("gzip-level-0"), (MODEL,), http_gzip_level=0)
    yield server
    server.discard()


def digit_body(digits_test_split) -> bytes:
    images, _ = digits_test_split
    image = images[:1].astype(np.float32)
    return json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": list(image.shape),
                                   "data": image.ravel().tolist()}]}).encode()


def test_the_served_setting_answers_plain_json_to_a_client_that_accepts_gzip(served_level_server, digits_test_split,
                                                                             serving_spec):
    assert serving_spec.server.http_gzip_level == GZIP_OFF, "this test describes the served setting, off"
    body = digit_body(digits_test_split)
    plain_encoding, plain = post(served_level_server.http_url, body, accept_gzip=False)
    encoding, answer = post(served_level_server.http_url, body, accept_gzip=True)
    assert plain_encoding is None and encoding is None, (plain_encoding, encoding)
    assert json.loads(answer) == json.loads(plain) and len(answer) == len(plain)


def test_level_0_answers_gzip_framed_uncompressed_json_and_tritons_own_level_compresses(
        level_0_server, triton_server, digits_test_split):
    body = digit_body(digits_test_split)
    sizes = {}
    for name, server in (("level 0", level_0_server), ("triton's own", triton_server)):
        plain_encoding, plain = post(server.http_url, body, accept_gzip=False)
        encoding, compressed = post(server.http_url, body, accept_gzip=True)
        assert plain_encoding is None and encoding == "gzip", (name, plain_encoding, encoding)
        assert json.loads(gzip.decompress(compressed)) == json.loads(plain), name  # the same answer
        sizes[name] = (len(compressed), len(plain))
    stored, plain = sizes["level 0"]
    assert stored > plain, f"level 0 stores the JSON (gzip header and trailer around it): {sizes}"
    shrunk, plain = sizes["triton's own"]
    assert shrunk < plain, f"Triton's own level compresses: {sizes}"
