"""What the client refuses or reports before (or instead of) a server's answer: a model the manifest
does not list, text that is not UTF-8, unreadable files, a malformed stream event, a 0-d input, a
numpy priority, a gateway's 429; and the deadline a call's set-up and metadata count against. No
server: these are the client's own decisions (a review of 2026-12-07 found each one)."""
from __future__ import annotations

import json
import logging
import random

import numpy as np
import pytest

from contracts.layout import PROJECT_ROOT
from model_client.client import Protocol, prepare_infer_call, utf8_bytes
from model_client.endpoints import TRITON_DEFAULT_URLS, resolve_url
from model_client.errors import ClientError, ModelNotFoundError, OverloadedError, RequestRejectedError, ServerUnavailableError
from model_client.policies import FallbackPolicy, RetryPolicy
from model_client.resilient import ResilientClient, item_count

LATIN1 = b"caf\xe9".decode("utf-8", "surrogateescape")  # what Python makes of a Latin-1 argument


def _manifest(tmp_path, models=("digit_classifier",)):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"models": {m: {"http": "127.0.0.1:18000", "grpc": "127.0.0.1:18001", "partition": "main"}
                                           for m in models}}))
    return path


def test_a_model_the_manifest_does_not_list_is_not_sent_to_tritons_default_port(tmp_path, monkeypatch):
    from model_client import endpoints

    manifest = _manifest(tmp_path)
    assert resolve_url("digit_classifier", Protocol.GRPC, None, manifest) == "127.0.0.1:18001"
    with pytest.raises(ModelNotFoundError, match=r"model 'digit_clasifier' is not in .*manifest.json, which lists "
                                                 r"\['digit_classifier'\]; expected one of those, or --url HOST:PORT"):
        resolve_url("digit_clasifier", Protocol.HTTP, None, manifest)
    assert resolve_url("anything", Protocol.HTTP, "elsewhere:9000", manifest) == "elsewhere:9000"
    # no manifest at the default place: a server started without `make serve`, at Triton's default ports
    monkeypatch.setattr(endpoints, "DEFAULT_MANIFEST", tmp_path / "run" / "manifest.json")
    assert resolve_url("anything", Protocol.HTTP, None, tmp_path / "run" / "manifest.json") == TRITON_DEFAULT_URLS[Protocol.HTTP]
    with pytest.raises(ClientError, match=r"no manifest at .*none.json; expected the manifest.json that `serving serve"):
        resolve_url("anything", Protocol.HTTP, None, tmp_path / "none.json")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ClientError, match=r"broken.json is not JSON .*\(or give --url HOST:PORT\)"):
        resolve_url("digit_classifier", Protocol.HTTP, None, tmp_path / "broken.json")


def test_the_cli_names_the_manifests_models_at_once_for_a_mistyped_model(tmp_path, capsys):
    from model_client.cli import main

    rc = main(["classify", "--test-samples", "0:4", "--model", "nope", "--manifest", str(_manifest(tmp_path)),
               "--deadline-s", "30"])
    assert rc == 1 and "model 'nope' is not in" in capsys.readouterr().err


def test_text_that_is_not_utf8_is_bad_input_naming_it_on_every_path():
    from model_client.embeddings import text_request_array
    from model_client.generate import GenerationSettings, _grpc_inputs, _http_body

    with pytest.raises(RequestRejectedError, match=r"text 1 is not valid UTF-8 text: character 3 is '\\udce9'"):
        text_request_array(["fine", LATIN1])
    import tritonclient.grpc as grpcclient

    for build in (lambda: _grpc_inputs(grpcclient, LATIN1, GenerationSettings(), True),
                  lambda: _http_body(LATIN1, GenerationSettings(), True),
                  lambda: _http_body("fine", GenerationSettings(chat=True, system_prompt=LATIN1), False)):
        with pytest.raises(RequestRejectedError, match=r"(the prompt|the system prompt) is not valid UTF-8 text"):
            build()
    assert utf8_bytes("caf\u00e9", "x") == "caf\u00e9".encode()


def test_the_commands_refuse_what_they_cannot_honour_before_sending_anything(tmp_path, capsys):
    """Each was a traceback, or silently ignored, before a review of 2026-12-07: an infinite deadline,
    a negative queue timeout or vector count, --fallback at a priority that never degrades, and an
    --output folder that does not exist (found only after the inference)."""
    from model_client.cli import main

    manifest = ["--manifest", str(_manifest(tmp_path, ("digit_classifier", "text_embedder")))]
    rc = main(["embed", "--text", "a", "--deadline-s", "inf", *manifest])
    assert rc == 1 and "RetryPolicy.deadline_s = inf: allowed seconds > 0 and <= 86400" in capsys.readouterr().err
    rc = main(["embed", "--text", "a", "--output", str(tmp_path / "missing" / "v.npy"), *manifest])
    assert rc == 1 and "folder" in (err := capsys.readouterr().err) and "does not exist" in err
    rc = main(["classify", "--test-samples", "0", "--fallback", *manifest])
    assert rc == 1 and "--fallback degrades realtime calls only: add --priority 1" in capsys.readouterr().err
    for argv in (["embed", "--text", "a", "--timeout-us", "-5"], ["embed", "--text", "a", "--show-dims", "-1"],
                 ["classify", "--test-samples", "0", "--max-attempts", "0"], ["classify", "--test-samples", "0", "--priority", "-1"]):
        with pytest.raises(SystemExit) as ended:
            main([*argv, *manifest])
        assert ended.value.code == 2 and "expected a whole number" in capsys.readouterr().err, argv


def test_unreadable_image_and_text_files_are_client_errors_naming_the_file(tmp_path):
    from PIL import Image

    from model_client.embed_cli import read_texts
    from model_client.images import image_array_from_png

    with pytest.raises(ClientError, match=r"is a directory; expected a PNG file"):
        image_array_from_png(tmp_path)
    whole = tmp_path / "whole.png"
    Image.fromarray((np.arange(256 * 256) % 251).astype(np.uint8).reshape(256, 256)).save(whole)
    cut = tmp_path / "cut.png"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(ClientError, match=r"cut.png: cannot be read as an image .*expected a whole PNG file"):
        image_array_from_png(cut)
    with pytest.raises(ClientError, match=r"--file .*: cannot read UTF-8 text .*expected a text file"):
        read_texts(None, tmp_path)


def test_a_stream_event_or_answer_that_is_not_json_is_a_client_error_not_a_traceback():
    from model_client.generate import _chunk_from_sse_line, _json_object

    for raw in (b"data: {\"text_output\": \"a\"", b"data: [1, 2]", b"data: \xff\xfe"):
        with pytest.raises(ClientError, match=r"is not the JSON Triton sends .*is a proxy in between rewriting it"):
            _chunk_from_sse_line(raw, "h:1", "m")
    assert _chunk_from_sse_line(b"data: {\"text_output\": \"a\"}", "h:1", "m").text == "a"
    with pytest.raises(ClientError, match=r"not the JSON Triton sends"):
        _json_object(b"<html>502</html>", "h:1", "m")


def test_a_0d_input_and_a_numpy_priority():
    with pytest.raises(RequestRejectedError, match=r"input 'image' of 'm' is a 0-d array \(a scalar\); expected an "
                                                   r"array whose first axis is the batch"):
        item_count({"image": np.array(1.0, np.float32)}, "m")
    import tritonclient.http as httpclient

    from model_client.client import ModelInterface, TensorInfo

    interface = ModelInterface("m", (TensorInfo("x", "FP32", (-1, 1)),), (TensorInfo("y", "FP32", (-1, 1)),))
    call = prepare_infer_call(httpclient, Protocol.HTTP, interface, {"x": np.zeros((1, 1), np.float32)}, priority=np.int64(1))
    assert call.kwargs["priority"] == 1 and type(call.kwargs["priority"]) is int
    with pytest.raises(RequestRejectedError, match=r"priority 1.0 \(a float\): expected 0"):
        prepare_infer_call(httpclient, Protocol.HTTP, interface, {"x": np.zeros((1, 1), np.float32)}, priority=1.0)


def test_a_gateways_429_is_overload_retried_with_backoff_on_infer_and_generate():
    from tritonclient.utils import InferenceServerException

    from model_client.client import classify_triton_error
    from model_client.generate import _classify
    from model_client.policies import is_retryable

    error = classify_triton_error(InferenceServerException(msg="Too Many Requests", status="429"), "h:1", "m")
    assert isinstance(error, OverloadedError) and "HTTP 429" in str(error) and is_retryable(error, RetryPolicy())
    assert isinstance(_classify("Too Many Requests", "429", "h:1", "m"), OverloadedError)
    assert isinstance(_classify("Bad Gateway", "502", "h:1", "m"), ServerUnavailableError)


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class _Connection:
    """Records each call's timeouts; its set-up (importing tritonclient) takes `setup_s`."""

    def __init__(self, clock, setup_s=0.0, answers=None):
        clock.now += setup_s
        self.clock, self.sent, self.answers = clock, [], list(answers or [])

    def infer(self, model, inputs, priority=0, timeout_us=None, client_timeout_s=None):
        self.sent.append((model, timeout_us, client_timeout_s))
        self.clock.now += 0.01
        answer = self.answers.pop(0) if self.answers else "ok"
        if isinstance(answer, Exception):
            raise answer
        return {"y": inputs["x"]}

    def close(self):
        pass


def test_a_first_calls_set_up_counts_against_its_deadline_and_queue_timeout():
    clock, made = _Clock(), []

    def factory(url, protocol, timeout):
        made.append(_Connection(clock, setup_s=0.3))
        return made[-1]

    client = ResilientClient("http", url="h:1", retry=RetryPolicy(deadline_s=1.0), clock=clock, sleep=clock.sleep,
                             client_factory=factory, rng=random.Random(0))
    client.infer("m", {"x": np.zeros((1, 1), np.float32)})
    (_, timeout_us, client_timeout_s), = made[0].sent
    assert client_timeout_s == pytest.approx(0.7) and timeout_us <= 700_000


def test_an_earlier_step_of_the_same_call_shares_its_deadline(tmp_path):
    clock = _Clock()
    connection = _Connection(clock)
    client = ResilientClient("http", url="h:1", retry=RetryPolicy(deadline_s=1.0), clock=clock, sleep=clock.sleep,
                             client_factory=lambda *a: connection, rng=random.Random(0))
    started = client.now()
    clock.now += 0.9  # the metadata took 0.9 s of the call's 1 s
    client.infer("m", {"x": np.zeros((1, 1), np.float32)}, started_s=started)
    (_, _, client_timeout_s), = connection.sent
    assert client_timeout_s == pytest.approx(0.1)


def test_an_unreachable_primary_with_a_fallback_says_the_fallback_is_asked(caplog):
    clock = _Clock()
    connection = _Connection(clock, answers=[ServerUnavailableError("server at h:1 is not reachable.")])
    client = ResilientClient("http", url="h:1", retry=RetryPolicy(deadline_s=2.0), clock=clock, sleep=clock.sleep,
                             fallback=FallbackPolicy.of({"big": "small"}), client_factory=lambda *a: connection,
                             rng=random.Random(0))
    with caplog.at_level(logging.WARNING, logger="model_client"):
        outcome = client.infer("big", {"x": np.zeros((1, 1), np.float32)}, priority=1)
    assert outcome.degraded
    assert "Asking the fallback 'small' now; should it fail too, retrying until the call's deadline" in caplog.text


@pytest.mark.parametrize("retry, expected", [
    (RetryPolicy(max_attempts=1, deadline_s=2.0), "Asking the fallback 'small' now (no retries: max_attempts = 1)."),
    (RetryPolicy(deadline_s=2.0, retry_unreachable=False), None),
])
def test_the_unreachable_warning_says_only_what_the_policy_will_do(caplog, retry, expected):
    clock = _Clock()
    connection = _Connection(clock, answers=[ServerUnavailableError("server at h:1 is not reachable.")])
    client = ResilientClient("http", url="h:1", retry=retry, clock=clock, sleep=clock.sleep,
                             fallback=FallbackPolicy.of({"big": "small"}), client_factory=lambda *a: connection,
                             rng=random.Random(0))
    with caplog.at_level(logging.WARNING, logger="model_client"):
        try:
            client.infer("big", {"x": np.zeros((1, 1), np.float32)}, priority=1)
        except ServerUnavailableError:
            pass
    if expected is None:
        assert "not reachable" not in caplog.text and "retrying" not in caplog.text
    else:
        assert expected in caplog.text and "retrying" not in caplog.text


def test_a_digit_drawn_only_in_the_alpha_channel_reads_as_the_same_digit_on_white(tmp_path):
    """Converting to grayscale dropped the alpha: a transparent PNG whose pixels are all black and whose
    ink is its opacity read as a blank image (a review, 2026-12-07: classified like all zeros)."""
    from PIL import Image

    from model_client.images import image_array_from_png

    example = PROJECT_ROOT / "clients" / "model_client" / "examples" / "digit-7.png"
    ink = np.asarray(Image.open(example).convert("L"))
    rgba = np.zeros(ink.shape + (4,), np.uint8)
    rgba[..., 3] = 255 - ink  # opaque where the ink is dark, transparent where the paper is
    Image.fromarray(rgba, "RGBA").save(tmp_path / "alpha.png")
    opaque, transparent = image_array_from_png(example), image_array_from_png(tmp_path / "alpha.png")
    np.testing.assert_allclose(transparent, opaque, atol=1.5 / 255)
    assert transparent.max() > 0.5  # not blank
