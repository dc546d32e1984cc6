"""The text embedder (TEXT -> embedding: the onnxruntime_cpu backend's text front-end and the
encoder in one model) served by a real tritonserver, over HTTP and gRPC.

Reference: the same texts through the same tokenizer.json and ONNX file in ONNX Runtime,
in-process. Tolerance: max abs diff <= 1e-5 per component (the embeddings are unit vectors; the
server pads and buckets differently from the in-process batches, which moves float32 rounding only).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from model_client.client import TritonModelClient
from model_client.embeddings import embed
from model_client.errors import RequestRejectedError
from conftest import settled_model_stats

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]
MODEL, ENCODER = "text_embedder", "text_encoder"
ATOL = 1e-5


@pytest.fixture(scope="module")
def reference():
    """Embed texts in-process with the served files (tokenizer.json + model.onnx)."""
    from conftest import REPOSITORY
    from model_build.onnx_export.export import onnxruntime_session
    from model_build.recipes.text import embed_texts_onnxruntime, load_text_tokenizer

    tokenizer = load_text_tokenizer(REPOSITORY / "text_tokenizer" / "1" / "tokenizer.json")
    session = onnxruntime_session(REPOSITORY / ENCODER / "1" / "model.onnx")
    return lambda texts: embed_texts_onnxruntime(session, tokenizer, texts)


@pytest.fixture(scope="module")
def heldout_texts():
    from conftest import ARTIFACTS
    from contracts.text_corpus import TextCorpusError, load_text_corpus, text_corpus_path

    try:
        return list(load_text_corpus(text_corpus_path(ARTIFACTS / ENCODER)).heldout)
    except TextCorpusError as exc:  # missing ("run `make build-engines` first") or of another format
        pytest.fail(str(exc))


def test_interface_is_plain_text_in_and_the_encoders_output_out(client):
    interface = client.interface(MODEL)
    assert [(t.name, t.datatype, t.shape) for t in interface.inputs] == [("TEXT", "BYTES", (-1, 1))]
    assert [(t.name, t.datatype, t.shape) for t in interface.outputs] == [("embedding", "FP32", (-1, 384))]


def test_mixed_length_batch_equals_in_process_onnxruntime(client, reference, heldout_texts):
    by_length = sorted(heldout_texts, key=len)
    texts = [by_length[0], by_length[1], by_length[len(by_length) // 2], by_length[-2], by_length[-1],
             " ".join(by_length[-12:]),  # longer than 128 tokens: truncated the same way on both sides
             "Short one.", by_length[len(by_length) // 3]]
    result = embed(client, texts, model=MODEL)
    np.testing.assert_allclose(result.vectors, reference(texts), atol=ATOL, rtol=0)
    np.testing.assert_allclose(result.norms, 1.0, atol=1e-5)
    assert result.cosine(0, 5) < 0.99  # different texts, different vectors


def test_empty_and_non_ascii_texts_have_defined_embeddings(client, reference):
    """Defined behaviour: "" (and whitespace) embeds as [CLS] [SEP], as sentence-transformers does;
    non-ASCII text is ordinary input for the uncased WordPiece tokenizer."""
    texts = ["", "   ", "Grüße aus München, déjà vu.", "日本語のテキスト 🙂", "Ελληνικά και русский текст."]
    result = embed(client, texts, model=MODEL)
    np.testing.assert_allclose(result.vectors, reference(texts), atol=ATOL, rtol=0)
    np.testing.assert_allclose(result.vectors[0], result.vectors[1], atol=ATOL)  # whitespace-only == empty
    assert result.cosine(2, 3) < 0.99


def test_bytes_that_are_not_utf8_get_a_clear_error_and_the_server_keeps_serving(client, reference):
    with pytest.raises(RequestRejectedError, match=r"TEXT row 1 is not valid UTF-8 \(invalid start byte at byte 2\)"):
        client.infer(MODEL, {"TEXT": np.array([[b"fine"], [b"ab\xff\xfe"]], dtype=object)})
    np.testing.assert_allclose(embed(client, ["Still serving."], model=MODEL).vectors, reference(["Still serving."]), atol=ATOL)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_without_rows_is_refused_alone_while_concurrent_texts_get_their_answers(triton_server, reference, protocol):
    """A [0, 1] TEXT request: Triton 2.51 refuses some forms itself ("got 0" string elements); one
    that reaches the backend used to raise out of its execute ("pad_rows needs at least one row"),
    and Triton would fail every request of that batch with it. Either way it must fail alone."""
    import importlib

    from tritonclient.utils import InferenceServerException

    module = importlib.import_module(f"tritonclient.{protocol}")
    texts = [f"Sentence number {i} about serving." for i in range(12)]
    expected = reference(texts)

    def one(i):
        client = module.InferenceServerClient(triton_server.url(protocol))
        rows = np.array([[texts[i].encode()]] if i >= 0 else np.zeros((0, 1)), dtype=object)
        tensor = module.InferInput("TEXT", list(rows.shape), "BYTES")
        tensor.set_data_from_numpy(rows)
        try:
            return i, client.infer(MODEL, [tensor]).as_numpy("embedding")
        except InferenceServerException as exc:
            return i, exc
        finally:
            client.close()

    for _ in range(3):
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, [-1, *range(6), -1, *range(6, 12), -1]))
        for i, outcome in results:
            if i < 0:
                assert isinstance(outcome, InferenceServerException), outcome
                assert outcome.status() in ("400", "StatusCode.INVALID_ARGUMENT"), (outcome.status(), outcome.message())
                assert ("TEXT has no rows" in outcome.message() or "got 0" in outcome.message()
                        or "no rows in its first (batch) dimension" in outcome.message()), outcome.message()
            else:
                np.testing.assert_allclose(outcome[0], expected[i], atol=ATOL, rtol=0)


def _embedder_counts(http_url: str) -> tuple[int, int]:
    import tritonclient.http as http

    with http.InferenceServerClient(http_url) as c:
        stats = c.get_inference_statistics(MODEL)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def test_concurrent_texts_of_different_lengths_share_batches_and_get_their_own_answers(triton_server, reference, heldout_texts):
    """Single-text requests of many lengths at once: the dynamic batcher merges them (fewer
    executions than requests; one batching decision per request, tokenizer and encoder in one
    execution); bucketing inside each batch must still hand every request its own embedding."""
    import threading

    texts = sorted(heldout_texts, key=len)[::len(heldout_texts) // 24][:24]
    expected = reference(texts)
    # Connected and with the model's metadata before the burst, then released together: a fresh
    # connection and a metadata fetch per request spread the arrivals so far apart that the two
    # instances kept up and every request ran alone (a CI run on a quiet host).
    senders = 12
    start = threading.Barrier(senders)
    before = _embedder_counts(triton_server.http_url)

    def one(k):
        with TritonModelClient(triton_server.http_url, "http") as client:  # made in its own thread (HTTP clients are per thread)
            client.interface(MODEL)
            start.wait(timeout=60)
            return [(i, embed(client, [texts[i]], model=MODEL).vectors[0]) for i in range(k, len(texts), senders)]

    with ThreadPoolExecutor(senders) as pool:
        results = [pair for part in pool.map(one, range(senders)) for pair in part]
    for i, vector in results:
        np.testing.assert_allclose(vector, expected[i], atol=ATOL, rtol=0)
    settled = settled_model_stats(triton_server.http_url, MODEL, lambda st: int(st["inference_count"]), before[0] + len(texts))
    inferences, executions = int(settled["inference_count"]) - before[0], int(settled["execution_count"]) - before[1]
    assert inferences == len(texts)
    assert executions < inferences, "every request ran alone: dynamic batching is not in effect"
    log = triton_server.log_path.read_text(errors="replace")
    assert f"model '{MODEL}': sequence-length bucketing on, boundaries [16, 24, 32, 48, 64, 96, 128]" in log
    assert f"model '{MODEL}': text front-end feeding ['input_ids', 'attention_mask']" in log


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_embed_command_prints_vectors_and_norms(protocol, triton_server, capsys):
    from model_client.cli import main

    rc = main(["embed", "--protocol", protocol, "--url", triton_server.url(protocol),
               "--text", "Plain text in.", "--text", "A unit vector out."])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("norm 1.000000  dim 384") == 2
    assert f"[{protocol}] {MODEL}" in out and "cosine to [0]: [1]" in out


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_embed_command_goes_through_the_resilient_client_in_requests_of_the_levels_size(protocol, triton_server,
                                                                                       capsys, tmp_path):
    """The command used a bare client: no retries, no deadline (a review, 2026-12-07: 30 s against a
    server that never answered). Now `embed_resilient`: texts at the batch level go in requests of
    that level's size, and the saved vectors are the library's own."""
    from conftest import SERVING_CONFIG
    from model_client.cli import main
    from model_client.policies import PriorityLimits

    def requests_answered(stats):
        return int(stats["inference_stats"]["success"]["count"])

    limits = PriorityLimits.from_serving_config(SERVING_CONFIG)
    texts = [f"Text number {i} of a few, sent in requests of the batch level's size." for i in range(10)]
    expected_requests = len(limits.plan_requests(len(texts), limits.lowest_level, (MODEL,)))
    assert expected_requests > 1
    before = settled_model_stats(triton_server.http_url, MODEL, requests_answered, 0)
    rc = main(["embed", "--protocol", protocol, "--url", triton_server.url(protocol), "--priority", str(limits.lowest_level),
               "--deadline-s", "30", "--output", str(tmp_path / "v.npy"), *[a for t in texts for a in ("--text", t)]])
    assert rc == 0 and f"wrote {len(texts)} x 384 float32 vectors" in capsys.readouterr().out
    settled = settled_model_stats(triton_server.http_url, MODEL, lambda st: int(st["inference_count"]),
                                  int(before["inference_count"]) + len(texts))
    assert requests_answered(settled) - requests_answered(before) == expected_requests
    with TritonModelClient(triton_server.url(protocol), protocol) as client:
        expected = embed(client, texts).vectors
    np.testing.assert_allclose(np.load(tmp_path / "v.npy"), expected, atol=ATOL, rtol=0)
