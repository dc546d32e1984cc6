"""Seeded fuzzing (Hypothesis) of every directly callable model and the ensemble, over HTTP and gRPC.

Each example is a concurrent mix of valid and invalid requests (ids out of range, negative ids,
masks not 0/1, lengths that disagree, empty and oversized tensors, wrong data types, empty HTTP
bodies, non-UTF-8 text, NaN/Inf) sent at once to the session's real tritonserver, so bad requests
share dynamic batches with good ones. Every valid request must get its correct answer (computed in
process with the same ONNX files and tokenizer), every invalid one a 400 / INVALID_ARGUMENT whose
message names the problem, none may be lost, and the server must stay up. The counts are printed.

Rule for empty HTTP bodies (Triton 2.51's raw-binary request, docs/operations.md): a body without
an `Inference-Header-Content-Length` header has a JSON header as long as the body; an EMPTY body
therefore has a 0-byte header, and a 0-byte header means "the whole body is the raw data of the
model's only input". For the one-input text models that is ONE empty text (answered with the
[CLS][SEP] embedding, as a JSON request for "" is); for the digit classifier it is 0 of 256 bytes
(400); a model with several inputs refuses it (400).
"""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.server
VOCAB = 30522
MAX_TOKENS = 128
CLASSIFIERS = ("digit_classifier", "digit_classifier_small")
INVALID = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}


@dataclass(frozen=True)
class Case:
    """One request: what is sent, and what must come back."""

    model: str
    protocol: str
    kind: str  # "valid ..." or the defect's name
    inputs: tuple = ()  # (name, array, wire datatype)
    raw_body: bytes | None = None  # an HTTP body sent as is (empty-body cases)
    pattern: str = ""  # for refusals: a substring the message must hold
    expected: dict = field(default_factory=dict, compare=False)  # output name -> array, for valid cases

    @property
    def valid(self) -> bool:
        return self.kind.startswith("valid")


class Reference:
    """In-process answers from the served files: the classifiers' and the encoder's ONNX graphs
    in ONNX Runtime as the backend opens them, and the served tokenizer.json (truncating at 128
    tokens, as served)."""

    def __init__(self, repository):
        from tokenizers import Tokenizer

        from contracts.onnx_sessions import served_session

        self.sessions = {m: served_session(repository / m / "1" / "model.onnx", 1) for m in (*CLASSIFIERS, "text_encoder")}
        self.tokenizer = Tokenizer.from_file(str(repository / "text_tokenizer" / "1" / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.lock = threading.Lock()

    def classify(self, model, images):
        return {"probabilities": self.sessions[model].run(None, {"image": images})[0]}

    def encode(self, ids, mask):
        return {"embedding": self.sessions["text_encoder"].run(None, {"input_ids": ids, "attention_mask": mask})[0]}

    def tokens(self, texts):
        encodings = [self.tokenizer.encode(t) for t in texts]
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), np.int64)
        mask = np.zeros((len(texts), width), np.int64)
        for row, e in enumerate(encodings):
            ids[row, :len(e.ids)], mask[row, :len(e.ids)] = e.ids, 1
        return ids, mask

    def embed(self, texts):
        rows = []
        for text in texts:
            ids, mask = self.tokens([text])
            rows.append(self.encode(ids, mask)["embedding"][0])
        return {"embedding": np.stack(rows)}


@pytest.fixture(scope="module")
def reference():
    from conftest import REPOSITORY

    return Reference(REPOSITORY)


# --- strategies ----------------------------------------------------------------------------------
protocols = st.sampled_from(["http", "grpc"])
texts = st.text(max_size=120)
token_lists = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=MAX_TOKENS)


@st.composite
def classifier_case(draw, images, ref):
    model, protocol = draw(st.sampled_from(CLASSIFIERS)), draw(protocols)
    picked = images[draw(st.lists(st.integers(0, len(images) - 1), min_size=1, max_size=4))]
    kind = draw(st.sampled_from(["valid", "valid", "NaN/Inf", "wrong dtype", "wrong image size", "batch above max",
                                 "empty body"]))
    if kind == "valid":
        return Case(model, protocol, "valid image", (("image", picked, "FP32"),), expected=ref.classify(model, picked))
    if kind == "NaN/Inf":
        bad = picked.copy()
        bad[draw(st.integers(0, len(bad) - 1)), 0, draw(st.integers(0, 7)), draw(st.integers(0, 7))] = draw(
            st.sampled_from([np.nan, np.inf, -np.inf]))
        return Case(model, protocol, kind, (("image", bad, "FP32"),), pattern="invalid input 'image': ")
    if kind == "wrong dtype":
        return Case(model, protocol, kind, (("image", picked.astype(np.float64), "FP64"),), pattern="data-type is 'FP64'")
    if kind == "wrong image size":
        return Case(model, protocol, kind, (("image", np.zeros((1, 1, 7, 8), np.float32), "FP32"),), pattern="unexpected shape")
    if kind == "batch above max":
        return Case(model, protocol, kind, (("image", np.zeros((65, 1, 8, 8), np.float32), "FP32"),), pattern="batch-size must be <= 64")
    return Case(model, "http", kind, raw_body=b"", pattern="input byte size mismatch")


@st.composite
def encoder_case(draw, ref):
    protocol = draw(protocols)
    ids = np.array([draw(token_lists)], np.int64)
    padding = draw(st.integers(0, 4))
    mask = np.concatenate([np.ones_like(ids), np.zeros((1, padding), np.int64)], axis=1)
    ids = np.concatenate([ids, np.zeros((1, padding), np.int64)], axis=1)
    kind = draw(st.sampled_from(["valid", "valid", "valid", "id out of range", "negative id", "mask not 0/1", "all-zero mask",
                                 "lengths disagree", "too many tokens", "empty sequence", "wrong dtype", "empty body"]))
    column = draw(st.integers(0, ids.shape[1] - padding - 1))

    def case(kind, ids, mask, pattern, ids_type="INT64"):
        return Case("text_encoder", protocol, kind, (("input_ids", ids, ids_type), ("attention_mask", mask, "INT64")), pattern=pattern)

    if kind == "valid":
        return Case("text_encoder", protocol, "valid ids", (("input_ids", ids, "INT64"), ("attention_mask", mask, "INT64")),
                    expected=ref.encode(ids, mask))
    if kind in ("id out of range", "negative id"):
        bad = ids.copy()
        bad[0, column] = draw(st.integers(VOCAB, 2**40)) if kind == "id out of range" else draw(st.integers(-2**40, -1))
        return case(kind, bad, mask, "invalid input 'input_ids': ")
    if kind == "mask not 0/1":
        bad = mask.copy()
        bad[0, column] = draw(st.sampled_from([2, 7, -1, 255]))
        return case(kind, ids, bad, "values are neither 0 nor 1")
    if kind == "all-zero mask":
        return case(kind, ids, np.zeros_like(mask), "has no 1")
    if kind == "lengths disagree":
        return case(kind, ids, np.ones((1, ids.shape[1] + draw(st.integers(1, 5))), np.int64), "disagree in shape")
    if kind == "too many tokens":
        long = np.full((1, MAX_TOKENS + draw(st.integers(1, 400))), 2000, np.int64)
        return case(kind, long, np.ones_like(long), f"expected at most {MAX_TOKENS}")
    if kind == "empty sequence":
        return case(kind, np.zeros((1, 0), np.int64), np.zeros((1, 0), np.int64), "empty variable axis")
    if kind == "wrong dtype":
        return case(kind, ids.astype(np.int32), mask, "data-type is 'INT32'", ids_type="INT32")
    return Case("text_encoder", "http", kind, raw_body=b"", pattern="Raw request must only have 1 input")


@st.composite
def text_case(draw, ref):
    model, protocol = draw(st.sampled_from(["text_tokenizer", "text_embedder"])), draw(protocols)
    rows = draw(st.lists(texts, min_size=1, max_size=3))
    kind = draw(st.sampled_from(["valid", "valid", "valid", "non-UTF-8", "wrong dtype", "batch above max", "empty body"]))
    array = np.array([[t.encode()] for t in rows], dtype=object)

    def expected(texts_):
        if model == "text_embedder":
            return ref.embed(texts_)
        ids, mask = ref.tokens(texts_)
        return {"input_ids": ids, "attention_mask": mask}

    if kind == "valid":
        return Case(model, protocol, "valid text", (("TEXT", array, "BYTES"),), expected=expected(rows))
    if kind == "non-UTF-8":
        bad = array.copy()
        row = draw(st.integers(0, len(rows) - 1))
        bad[row, 0] = bad[row, 0] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xe2\x82", b"\x80abc"]))
        return Case(model, protocol, kind, (("TEXT", bad, "BYTES"),), pattern=f"TEXT row {row} is not valid UTF-8")
    if kind == "wrong dtype":
        return Case(model, protocol, kind, (("TEXT", np.zeros((1, 1), np.float32), "FP32"),), pattern="data-type is 'FP32'")
    if kind == "batch above max":
        return Case(model, protocol, kind, (("TEXT", np.array([[b"x"]] * 65, dtype=object), "BYTES"),), pattern="batch-size must be <=")
    # the documented raw-binary rule: an empty body is one empty text
    return Case(model, "http", "valid empty body", raw_body=b"", expected=expected([""]))


# --- sending and judging ---------------------------------------------------------------------------
def send(server, case: Case):
    """(outputs dict, None) or (None, (status, message)); raises for anything that is not an answer."""
    from tritonclient.utils import InferenceServerException

    if case.raw_body is not None:
        return send_raw(server, case)
    module = __import__(f"tritonclient.{case.protocol}", fromlist=["InferInput"])
    client = module.InferenceServerClient(server.url(case.protocol), **({"network_timeout": 30} if case.protocol == "http" else {}))
    try:
        inputs = []
        for name, array, datatype in case.inputs:
            tensor = module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        outputs = [module.InferRequestedOutput(name) for name in case.expected] if case.expected else None
        kwargs = {"client_timeout": 30} if case.protocol == "grpc" else {}
        result = client.infer(case.model, inputs, outputs=outputs, **kwargs)
        return {name: result.as_numpy(name) for name in case.expected}, None
    except InferenceServerException as exc:
        return None, (str(exc.status()), exc.message() or "")
    finally:
        client.close()


def send_raw(server, case: Case):
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/{case.model}/infer", data=case.raw_body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        return None, (str(exc.code), json.loads(exc.read()).get("error", ""))
    header_length = int(response.headers.get("Inference-Header-Content-Length", len(body)))
    header, data = json.loads(body[:header_length]), body[header_length:]
    outputs, offset = {}, 0
    for output in header["outputs"]:
        size = output["parameters"]["binary_data_size"]
        dtype = {"FP32": np.float32, "INT64": np.int64}[output["datatype"]]
        outputs[output["name"]] = np.frombuffer(data[offset:offset + size], dtype).reshape(output["shape"])
        offset += size
    return outputs, None


def judge(case: Case, outputs, refusal) -> str:
    """'correct', 'refused' (as it must be), or what went wrong."""
    if case.valid:
        if refusal is not None:
            return f"valid request refused: {refusal}"
        for name, expected in case.expected.items():
            got = outputs[name]
            same = np.array_equal(got, expected) if expected.dtype.kind in "iu" else (
                got.shape == expected.shape and np.allclose(got, expected, rtol=1e-4, atol=2e-5))
            if not same:
                return f"WRONG {name}: max diff {np.max(np.abs(got.astype(float) - expected.astype(float))) if got.shape == expected.shape else got.shape}"
        return "correct"
    if refusal is None:
        return "invalid request answered"
    status, message = refusal
    if status != INVALID[case.protocol]:
        return f"refused with {status} instead of {INVALID[case.protocol]}: {message[:160]}"
    if case.pattern not in message:
        return f"message does not name the problem ({case.pattern!r}): {message[:200]}"
    return "refused"


def test_concurrent_mixes_of_valid_and_invalid_requests_answer_every_valid_one_and_refuse_every_invalid_one(
        triton_server, reference, digits_test_split):
    images = digits_test_split[0]
    counts: Counter = Counter()
    problems: list = []
    any_case = st.one_of(classifier_case(images, reference), encoder_case(reference), text_case(reference))

    @seed(20261201)
    @settings(max_examples=25, deadline=None, derandomize=True, database=None, print_blob=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(cases=st.lists(any_case, min_size=12, max_size=24))
    def mixed_batch(cases):
        barrier = threading.Barrier(len(cases))

        def one(case):
            barrier.wait(timeout=30)
            try:
                return judge(case, *send(triton_server, case))
            except Exception as exc:  # noqa: BLE001 - no answer at all: lost
                return f"LOST: {type(exc).__name__}: {exc}"

        with ThreadPoolExecutor(len(cases)) as pool:
            verdicts = list(pool.map(one, cases))
        for case, verdict in zip(cases, verdicts):
            counts["sent"] += 1
            counts["valid" if case.valid else "invalid"] += 1
            key = verdict if verdict in ("correct", "refused") else ("lost" if verdict.startswith("LOST") else "wrong")
            counts[key] += 1
            counts[f"{case.protocol} {case.model}"] += 1
            if key not in ("correct", "refused"):
                problems.append((case.model, case.protocol, case.kind, verdict))
        assert triton_server.process.process.poll() is None, "tritonserver died"
        assert not problems, problems[:5]

    mixed_batch()
    print(f"\nfuzz: sent {counts['sent']} ({counts['valid']} valid, {counts['invalid']} invalid): answered correctly "
          f"{counts['correct']}, refused with a named problem {counts['refused']}, wrong {counts['wrong']}, lost {counts['lost']}; "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if " " in k))
    assert counts["lost"] == 0 and counts["wrong"] == 0
    assert counts["correct"] == counts["valid"] and counts["refused"] == counts["invalid"]
    assert triton_server.process.process.poll() is None
