"""Compressed HTTP answers: `[server] http_gzip_level` reaches a real tritonserver through the
preloaded serving/runtime/native/gzip_level.c. Triton compresses whenever a request sends
`Accept-Encoding: gzip` (as requests, aiohttp and httpx do by default); at the served level 0 the
answer is still gzip, the same JSON once decompressed, but stored rather than compressed (the CPU
of compressing is what docs/performance.md measured), while Triton's own level shrinks it."""
from __future__ import annotations

import gzip
import http.client
import json

import numpy as np
import pytest

from conftest import start_test_server

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
    server = start_test_server(tmp_path_factory.mktemp("gzip-level"), (MODEL,),
                               http_gzip_level=serving_spec.server.http_gzip_level)
    yield server
    server.process.stop()


def test_the_served_gzip_level_answers_gzip_framed_uncompressed_json_and_tritons_own_level_compresses(
        served_level_server, triton_server, digits_test_split, serving_spec):
    assert serving_spec.server.http_gzip_level == 0, "this test describes the served level 0"
    images, _ = digits_test_split
    image = images[:1].astype(np.float32)
    body = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": list(image.shape),
                                   "data": image.ravel().tolist()}]}).encode()
    sizes = {}
    for name, server in (("level 0", served_level_server), ("triton's own", triton_server)):
        plain_encoding, plain = post(server.http_url, body, accept_gzip=False)
        encoding, compressed = post(server.http_url, body, accept_gzip=True)
        assert plain_encoding is None and encoding == "gzip", (name, plain_encoding, encoding)
        assert json.loads(gzip.decompress(compressed)) == json.loads(plain), name  # the same answer
        sizes[name] = (len(compressed), len(plain))
    stored, plain = sizes["level 0"]
    assert stored > plain, f"level 0 stores the JSON (gzip header and trailer around it): {sizes}"
    shrunk, plain = sizes["triton's own"]
    assert shrunk < plain, f"Triton's own level compresses: {sizes}"
