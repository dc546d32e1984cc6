"""Request bodies in each target's JSON, and answer checks that keep a fast but wrong peer from winning."""
import json

import numpy as np
import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.codec import Api, AnswerCheck, Workload, digit_bodies, read_kserve_output, text_bodies
from perf_sweep.peers.plan import ModelKind


def kserve_answer(name, values):
    return json.dumps({"model_name": "m", "outputs": [{"name": name, "datatype": "FP32", "shape": [1, len(values)],
                                                       "data": list(values)}]}).encode()


def openai_answer(values):
    return json.dumps({"object": "list", "data": [{"object": "embedding", "embedding": list(values), "index": 0}]}).encode()


def test_digit_bodies_are_one_kserve_v2_image_per_request():
    images = np.arange(2 * 64, dtype=np.float32).reshape(2, 1, 8, 8) / 7
    bodies = digit_bodies(images)
    request = json.loads(bodies[1])
    assert request == {"inputs": [{"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32",
                                   "data": [round(float(v), 6) for v in images[1].ravel()]}]}
    with pytest.raises(SweepPlanError, match=r"\[N, 1, 8, 8\]"):
        digit_bodies(np.zeros((2, 8, 8), np.float32))


def test_text_bodies_speak_kserve_v2_bytes_or_the_openai_embeddings_api():
    assert json.loads(text_bodies(["héllo"], Api.KSERVE_V2)[0]) == {
        "inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["héllo"]}]}
    assert json.loads(text_bodies(["hi"], Api.OPENAI_EMBEDDINGS, model_id="mini")[0]) == {"model": "mini", "input": ["hi"]}
    with pytest.raises(SweepPlanError, match="model_id"):
        text_bodies(["hi"], Api.OPENAI_EMBEDDINGS)


def test_a_digit_answer_must_agree_with_the_in_process_argmax():
    check = AnswerCheck(ModelKind.DIGITS, Api.KSERVE_V2, "probabilities", 10, expected_argmax=(3, 7))
    right = [0.0] * 10
    right[3] = 1.0
    assert check(0, kserve_answer("probabilities", right)) == (None, 1.0)
    error, score = check(1, kserve_answer("probabilities", right))  # item 1 should be a 7
    assert "argmax 3" in error and "says 7" in error and score == 0.0
    assert check(2, kserve_answer("probabilities", right)) == (None, 1.0)  # item indices wrap around the sample


@pytest.mark.parametrize("payload, match", [
    (b"not json", "not a KServe v2 response"),
    (kserve_answer("other", [0.0] * 10), "output `probabilities`"),
    (kserve_answer("probabilities", [0.0] * 9), r"expected \[1, 10\]"),
    (kserve_answer("probabilities", [float("nan")] * 10), "NaN"),
    # each of these used to raise out of the checker and lose every record of the level
    (kserve_answer("probabilities", ["x"] * 10), "malformed answer"),
    (b'{"outputs": ["probabilities"]}', "not a KServe v2 response|malformed answer"),
    (json.dumps({"outputs": [{"name": "probabilities", "shape": 10, "data": [0.0] * 10}]}).encode(), "malformed answer"),
])
def test_malformed_digit_answers_are_errors_with_a_reason(payload, match):
    check = AnswerCheck(ModelKind.DIGITS, Api.KSERVE_V2, "probabilities", 10, expected_argmax=(0,))
    error, _ = check(0, payload)
    assert error is not None and __import__("re").search(match, error)


def test_a_text_answer_must_point_where_the_reference_embedding_points():
    reference = np.eye(3, 4)
    check = AnswerCheck(ModelKind.TEXT, Api.OPENAI_EMBEDDINGS, "embedding", 4, reference=reference, min_cosine=0.9)
    error, score = check(1, openai_answer([0.0, 2.0, 0.1, 0.0]))  # scale does not matter, direction does
    assert error is None and score == pytest.approx(0.9988, abs=1e-3)
    error, score = check(1, openai_answer([1.0, 0.0, 0.0, 0.0]))
    assert "cosine 0.000" in error and score == 0.0
    error, _ = check(0, openai_answer([1.0, 0.0]))
    assert "4 floats" in error


def test_kserve_output_reading_checks_the_batch_of_one_shape():
    assert read_kserve_output(kserve_answer("embedding", [1.0, 2.0]), "embedding", 2).tolist() == [1.0, 2.0]


def test_answer_checks_need_their_references():
    with pytest.raises(SweepPlanError, match="expected_argmax"):
        AnswerCheck(ModelKind.DIGITS, Api.KSERVE_V2, "probabilities", 10)
    with pytest.raises(SweepPlanError, match=r"\[N, 384\]"):
        AnswerCheck(ModelKind.TEXT, Api.KSERVE_V2, "embedding", 384, reference=np.zeros((2, 8)))


def test_a_workload_pairs_each_body_with_its_reference_answer():
    check = AnswerCheck(ModelKind.DIGITS, Api.KSERVE_V2, "probabilities", 10, expected_argmax=(1, 2))
    with pytest.raises(SweepPlanError, match="same item"):
        Workload("t", ModelKind.DIGITS, "http://127.0.0.1:1/x", (b"{}",), check)
    with pytest.raises(SweepPlanError, match="http://"):
        Workload("t", ModelKind.DIGITS, "127.0.0.1:1/x", (b"{}", b"{}"), check)
