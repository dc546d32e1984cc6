"""A real tritonserver started the way the launcher starts it: admin APIs locked by a key on HTTP
and gRPC, inference/metadata/statistics/health open, every socket on loopback."""
from __future__ import annotations

import numpy as np
import pytest

from serving.runtime.security import restricted_api_flags
from conftest import http_call, settled_model_stats

pytestmark = pytest.mark.server
MODEL = "digit_classifier"
TIMEOUT_S = 10


@pytest.fixture(scope="module")
def locked_server(tmp_path_factory, admin_key):
    from conftest import start_test_server

    server = start_test_server(tmp_path_factory.mktemp("locked"), (MODEL,), restricted=restricted_api_flags(admin_key))
    yield server
    server.discard()


def model_ready(server) -> bool:
    return http_call(server, "GET", f"/v2/models/{MODEL}/ready")[0] == 200


RESTRICTED_HTTP_CALLS = [
    ("POST", "/v2/repository/index", b"{}"),
    ("POST", f"/v2/repository/models/{MODEL}/unload", b"{}"),
    ("POST", f"/v2/repository/models/{MODEL}/load", b"{}"),
    ("GET", "/v2/systemsharedmemory/status", None),
    ("POST", "/v2/systemsharedmemory/region/r/register", b'{"key": "/k", "offset": 0, "byte_size": 8}'),
    ("GET", "/v2/cudasharedmemory/status", None),
    ("GET", "/v2/logging", None),
    ("POST", "/v2/logging", b'{"log_file": "/tmp/evil.log", "log_verbose_level": 1}'),
    ("GET", "/v2/trace/setting", None),
]


@pytest.mark.parametrize("method,path,body", RESTRICTED_HTTP_CALLS, ids=[c[1] for c in RESTRICTED_HTTP_CALLS])
@pytest.mark.parametrize("sent_key", ["none", "wrong"])
def test_http_admin_apis_refuse_callers_without_the_key(locked_server, method, path, body, sent_key):
    headers = {"admin-key": "x" * 43} if sent_key == "wrong" else {}
    status, answer = http_call(locked_server, method, path, body, headers)
    assert status == 403
    assert answer == {"error": "This API is restricted, expecting header 'admin-key'"}
    assert model_ready(locked_server)  # an unload attempt did nothing


def test_http_unload_and_load_work_with_the_key(locked_server, admin_key):
    status, _ = http_call(locked_server, "POST", f"/v2/repository/models/{MODEL}/unload", b"{}", admin_key.http_headers())
    assert status == 200
    assert not model_ready(locked_server)
    status, _ = http_call(locked_server, "POST", f"/v2/repository/models/{MODEL}/load", b"{}", admin_key.http_headers())
    assert status == 200
    assert model_ready(locked_server)
    status, index = http_call(locked_server, "POST", "/v2/repository/index", b"{}", admin_key.http_headers())
    assert status == 200 and {"name": MODEL, "version": "1", "state": "READY"} in index
    status, settings = http_call(locked_server, "GET", "/v2/logging", None, admin_key.http_headers())
    assert status == 200 and "log_verbose_level" in settings


def test_http_unload_through_tritonclient_is_refused_then_allowed(locked_server, admin_key):
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(locked_server.http_url, network_timeout=TIMEOUT_S)
    try:
        with pytest.raises(InferenceServerException, match="restricted") as info:
            client.unload_model(MODEL)
        assert info.value.status() == "403"
        client.unload_model(MODEL, headers=admin_key.http_headers())
        assert not client.is_model_ready(MODEL)
        client.load_model(MODEL, headers=admin_key.http_headers())
        assert client.is_model_ready(MODEL)
    finally:
        client.close()


def test_grpc_admin_apis_refuse_callers_without_the_key(locked_server, admin_key):
    import grpc
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(locked_server.grpc_url)
    wrong = {"triton-grpc-protocol-admin-key": "x" * 43}
    unprefixed = {"admin-key": admin_key.value}  # the HTTP header name is not accepted over gRPC
    calls = [
        lambda h: client.unload_model(MODEL, headers=h, client_timeout=TIMEOUT_S),
        lambda h: client.load_model(MODEL, headers=h, client_timeout=TIMEOUT_S),
        lambda h: client.get_model_repository_index(headers=h, client_timeout=TIMEOUT_S),
        lambda h: client.get_system_shared_memory_status(headers=h, client_timeout=TIMEOUT_S),
        lambda h: client.get_log_settings(headers=h, client_timeout=TIMEOUT_S),
        lambda h: client.update_log_settings({"log_verbose_level": 1}, headers=h, client_timeout=TIMEOUT_S),
        lambda h: client.get_trace_settings(headers=h, client_timeout=TIMEOUT_S),
    ]
    try:
        for call in calls:
            for headers in (None, wrong, unprefixed):
                with pytest.raises(InferenceServerException, match="restricted, expecting header 'triton-grpc-protocol-admin-key'") as info:
                    call(headers)
                assert info.value.status() == str(grpc.StatusCode.UNAVAILABLE)
        assert client.is_model_ready(MODEL)
    finally:
        client.close()


def test_grpc_unload_and_load_work_with_the_key(locked_server, admin_key):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(locked_server.grpc_url)
    try:
        client.unload_model(MODEL, headers=admin_key.grpc_headers(), client_timeout=TIMEOUT_S)
        assert not client.is_model_ready(MODEL)
        client.load_model(MODEL, headers=admin_key.grpc_headers(), client_timeout=TIMEOUT_S)
        assert client.is_model_ready(MODEL)
        index = client.get_model_repository_index(headers=admin_key.grpc_headers(), as_json=True)
        assert any(m["name"] == MODEL and m.get("state") == "READY" for m in index["models"])
        assert client.get_log_settings(headers=admin_key.grpc_headers(), as_json=True)["settings"]
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inference_metadata_statistics_and_health_stay_open(locked_server, protocol, digits_test_split):
    from model_client.client import TritonModelClient

    images, labels = digits_test_split
    with TritonModelClient(locked_server.url(protocol), protocol) as client:
        probabilities = client.infer(MODEL, {"image": images[:16]})["probabilities"]
        assert probabilities.shape == (16, 10) and (probabilities.argmax(1) == labels[:16]).mean() > 0.8
        raw = client._client
        assert raw.is_server_live() and raw.is_server_ready() and raw.is_model_ready(MODEL)
        stats = raw.get_inference_statistics(MODEL, as_json=True) if protocol == "grpc" else raw.get_inference_statistics(MODEL)
        assert stats["model_stats"][0]["name"] == MODEL  # statistics answer over this protocol
        settled = settled_model_stats(locked_server.http_url, MODEL, lambda st: int(st["inference_stats"]["success"]["count"]), 1)
        assert int(settled["inference_stats"]["success"]["count"]) >= 1
        config = raw.get_model_config(MODEL, as_json=True) if protocol == "grpc" else raw.get_model_config(MODEL)
        assert (config.get("config", config))["name"] == MODEL


def test_the_key_is_not_written_to_the_server_log(locked_server, admin_key):
    assert locked_server.log_path.exists()
    assert admin_key.value not in locked_server.log_path.read_text(errors="replace")
    assert admin_key.value not in " ".join(locked_server.process.display_command)


def _proc_address(host_hex: str):
    """/proc/net/tcp* addresses are 32-bit words in host (little-endian) byte order."""
    import ipaddress

    raw = b"".join(bytes.fromhex(host_hex[i:i + 8])[::-1] for i in range(0, len(host_hex), 8))
    address = ipaddress.ip_address(raw)
    return getattr(address, "ipv4_mapped", None) or address


def _listening_addresses(port: int) -> set:
    """Local addresses with a LISTEN socket on `port`, from /proc/net/tcp{,6}."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            address, state = fields[1], fields[3]
            host_hex, port_hex = address.split(":")
            if state == "0A" and int(port_hex, 16) == port:
                found.add(_proc_address(host_hex))
    return found


def test_every_endpoint_listens_on_loopback_only(locked_server):
    ports = [int(u.rsplit(":", 1)[1].split("/")[0]) for u in (locked_server.http_url, locked_server.grpc_url, locked_server.metrics_url)]
    for port in ports:
        addresses = _listening_addresses(port)
        assert addresses and all(a.is_loopback for a in addresses), f"port {port} listens on {addresses}"


def test_non_loopback_host_in_configuration_is_refused_unless_explicit():
    from contracts.errors import ConfigError
    from contracts.serving_spec import ServerEndpoints

    with pytest.raises(ConfigError, match=r"`server.host` = '0.0.0.0' is not a loopback address"):
        ServerEndpoints(host="0.0.0.0")
    assert ServerEndpoints(host="0.0.0.0", allow_non_loopback=True).host == "0.0.0.0"


def test_infer_still_correct_after_refused_admin_calls(locked_server, digits_test_split):
    """The refusals above changed nothing: answers equal in-process ONNX Runtime."""
    from conftest import in_process_probabilities
    from model_client.client import TritonModelClient

    images, _ = digits_test_split
    expected = in_process_probabilities(MODEL, images[:8])
    with TritonModelClient(locked_server.http_url, "http") as client:
        np.testing.assert_allclose(client.infer(MODEL, {"image": images[:8]})["probabilities"], expected, rtol=1e-5, atol=1e-6)
