"""One batch, few framework calls, and no request failing another: real ONNX Runtime sessions on
tiny real graphs (tests/tiny_onnx_models.py)."""
from __future__ import annotations

import numpy as np
import pytest

from contracts.token_padding import concat_padded
from serving.backend.batch_execution import (BatchLayout, NotBatchAxisError, execute_batch,
                                             run_isolating_failures)
from tiny_onnx_models import dense_model, masked_embedding_model, reference_embedding


def session(ids_through_mul=False):
    import onnxruntime as ort

    return ort.InferenceSession(masked_embedding_model(ids_through_mul).SerializeToString(), providers=["CPUExecutionProvider"])


def text_request(ids):
    ids = np.asarray([ids], np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


LAYOUT = BatchLayout(("input_ids", "attention_mask"), pad_value=0, length_input="attention_mask")


def test_isolation_finds_every_failing_item_and_answers_the_rest():
    calls = []

    def run_group(indices):
        calls.append(list(indices))
        if {3, 6} & set(indices):
            raise RuntimeError(f"bad among {list(indices)}")
        return [i * 10 for i in indices]

    results = run_isolating_failures(run_group, range(8))
    assert {i: r for i, r in results.items() if not isinstance(r, Exception)} == {0: 0, 1: 10, 2: 20, 4: 40, 5: 50, 7: 70}
    assert str(results[3]) == "bad among [3]" and str(results[6]) == "bad among [6]"
    assert calls[0] == list(range(8)) and len(calls) <= 1 + 2 * 2 * 3  # at most 2 log2(n) per bad item


def test_a_good_batch_is_one_framework_call_and_rows_come_back_in_order():
    sess = session()
    requests = [text_request([1, 2, 3]), text_request([4]), text_request([5, 6])]
    answers, stats = execute_batch(lambda feeds: sess.run(None, feeds), LAYOUT, requests)
    for request, answer in zip(requests, answers):
        np.testing.assert_allclose(answer[0], reference_embedding(request["input_ids"], request["attention_mask"]), rtol=1e-6)
    assert stats.framework_calls == 1 and stats.requests == 3 and stats.rows == 3 and stats.failed_requests == 0
    assert (stats.real_tokens, stats.computed_tokens) == (6, 9) and stats.padding_efficiency == pytest.approx(6 / 9)


def test_a_request_that_makes_the_framework_fail_fails_alone_and_the_others_get_their_solo_answers():
    sess = session(ids_through_mul=True)  # ids >= 5 index past the table after doubling: ORT fails
    run = lambda feeds: sess.run(None, feeds)  # noqa: E731
    requests = [text_request([1, 2]), text_request([3]), text_request([1, 7]), text_request([4, 4, 4]), text_request([0])]
    answers, stats = execute_batch(run, LAYOUT, requests)
    assert isinstance(answers[2], Exception) and "out of data bounds" in str(answers[2])
    for i in (0, 1, 3, 4):
        solo, _ = execute_batch(run, LAYOUT, [requests[i]])
        np.testing.assert_array_equal(answers[i][0], solo[0][0])
    assert stats.failed_requests == 1 and stats.framework_calls > 1


def test_bucketed_batches_are_put_back_in_request_order():
    sess = session()
    layout = BatchLayout(("input_ids", "attention_mask"), 0, buckets=(2, 4), length_input="attention_mask")
    requests = [text_request([1, 2, 3, 4]), text_request([5]), text_request([6, 7, 8])]
    answers, stats = execute_batch(lambda feeds: sess.run(None, feeds), layout, requests)
    for request, answer in zip(requests, answers):
        np.testing.assert_allclose(answer[0], reference_embedding(request["input_ids"], request["attention_mask"]), rtol=1e-6)
    assert stats.framework_calls == 2 and stats.computed_tokens == 1 + 2 * 4


def test_concat_pads_the_variable_axis_with_the_pad_value():
    out = concat_padded([np.array([[1, 2, 3]]), np.array([[4]])], pad_value=9)
    np.testing.assert_array_equal(out, [[1, 2, 3], [4, 9, 9]])


def test_concat_of_equal_shapes_is_a_plain_concatenation_and_every_axis_is_padded_otherwise():
    same = [np.arange(6).reshape(2, 3), np.arange(3).reshape(1, 3)]
    np.testing.assert_array_equal(concat_padded(same, pad_value=9), np.concatenate(same))
    mixed = [np.ones((1, 2, 3), np.float32), np.full((2, 1, 4), 2, np.float32)]
    out = concat_padded(mixed, pad_value=-1)
    assert out.shape == (3, 2, 4) and out.dtype == np.float32
    np.testing.assert_array_equal(out[0], [[1, 1, 1, -1], [1, 1, 1, -1]])
    np.testing.assert_array_equal(out[1:], [[[2, 2, 2, 2], [-1, -1, -1, -1]]] * 2)


def test_bucketing_needs_its_length_input():
    with pytest.raises(ValueError, match="length_input"):
        BatchLayout(("ids",), buckets=(8,), length_input="mask")


def test_masks_and_token_types_are_padded_with_zero_across_requests_whatever_the_pad_id():
    """Padding between requests used the token [PAD] id for every input: with a [PAD] id of 1
    (RoBERTa-style tokenizers) each shorter request's mask was padded with 1, so it attended to
    its padding (0.28 from its answer alone on the served encoder)."""
    seen = []

    def run(feeds):
        seen.append({name: array.copy() for name, array in feeds.items()})
        return [feeds["input_ids"][:, :1].astype(np.float32)]

    layout = BatchLayout(("input_ids", "attention_mask", "token_type_ids"), pad_value=1, length_input="attention_mask")
    short, long = ([4, 5], [6, 7, 8, 9])
    requests = [{"input_ids": np.asarray([ids], np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
                 "token_type_ids": np.zeros((1, len(ids)), np.int64)} for ids in (short, long)]
    execute_batch(run, layout, requests)
    (feeds,) = seen
    np.testing.assert_array_equal(feeds["input_ids"][0], [4, 5, 1, 1])       # ids: the [PAD] id
    np.testing.assert_array_equal(feeds["attention_mask"][0], [1, 1, 0, 0])  # mask: 0
    np.testing.assert_array_equal(feeds["token_type_ids"][0], [0, 0, 0, 0])  # token types: 0


def test_an_output_whose_first_axis_is_not_the_batch_is_never_split_into_other_requests_answers():
    """A graph that flattens [B, 3] to [B*3, 1]: split by rows, request 0 got request 1's values (a
    review, 2026-12-07). Now every request gets the error naming the output; no answer is handed out."""
    import onnxruntime as ort

    sess = ort.InferenceSession(dense_model(kind="flat_rows").SerializeToString(), providers=["CPUExecutionProvider"])
    layout = BatchLayout(("features",), pad_value=0)
    requests = [{"features": np.full((1, 3), float(i), np.float32)} for i in range(4)]
    answers, stats = execute_batch(lambda feeds: sess.run(None, feeds), layout, requests)
    assert all(isinstance(a, NotBatchAxisError) for a in answers), answers
    assert "output #0 has shape [3, 1] for 1 input row(s): its first axis is not the batch" in str(answers[0])
    assert stats.failed_requests == 4
