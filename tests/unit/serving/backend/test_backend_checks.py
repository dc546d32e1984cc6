"""Input checks the onnxruntime_cpu backend runs before ONNX Runtime (NaN/Inf are rejected)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from serving.backend.checks import non_finite_error


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_finite_floats_pass(dtype):
    assert non_finite_error("image", np.zeros((2, 1, 8, 8), dtype)) is None


def test_nan_and_inf_are_counted_and_named():
    image = np.zeros((1, 1, 8, 8), np.float32)
    image[0, 0, 0, :3] = np.nan
    image[0, 0, 1, 0] = np.inf
    image[0, 0, 1, 1] = -np.inf
    message = non_finite_error("image", image)
    assert message == ("invalid input 'image': 3 NaN and 2 Inf values out of 64; expected finite numbers "
                       "(this request was rejected, not computed).")


@pytest.mark.parametrize("array", [np.array([1, 2], np.int64), np.array([b"\xff", b""], object), np.zeros((0, 4), np.float32)])
def test_non_float_and_empty_inputs_are_not_checked(array):
    assert non_finite_error("x", array) is None


def test_an_answer_holding_nan_or_inf_is_an_error_naming_the_output():
    from serving.backend.checks import non_finite_answer_error

    fine = [("probabilities", np.array([[0.1, 0.9]], np.float32)), ("label", np.array([[1]], np.int64))]
    assert non_finite_answer_error(fine) is None
    overflowed = [("probabilities", np.array([[np.nan, np.nan, 0.5]], np.float32))]
    message = non_finite_answer_error(overflowed)
    assert message.startswith("invalid input: this request's inputs are finite but the model's output 'probabilities'")
    assert "holds 2 NaN/Inf values out of 3" in message


def test_a_batch_of_finite_answers_is_checked_at_once_and_an_overflow_is_found_per_request():
    """One reduction per output for the whole batch (each numpy call is dear right after a framework
    call); a NaN/Inf still reaches only the request whose answer holds it."""
    from serving.backend.checks import non_finite_answer_error, non_finite_answer_errors

    names = ["probabilities", "label"]
    rows = np.array([[0.1, 0.9], [0.5, 0.5], [0.3, 0.7]], np.float32)
    answers = [[rows[i:i + 1], np.array([[i]], np.int64)] for i in range(3)]
    assert non_finite_answer_errors(names, answers + [RuntimeError("failed alone")]) == {}
    assert non_finite_answer_errors(names, []) == {}
    overflowed = rows.copy()
    overflowed[1, 0] = np.inf
    answers = [[overflowed[i:i + 1], np.array([[i]], np.int64)] for i in range(3)]
    errors = non_finite_answer_errors(names, [RuntimeError("failed alone")] + answers)
    assert errors == {2: non_finite_answer_error(zip(names, answers[1]))} and "'probabilities'" in errors[2]
    assert non_finite_answer_errors(names, answers[1:2]) == {0: errors[2]}  # a lone answer: checked directly


def test_one_width_pads_every_request_to_the_batch_longest_as_views_of_one_array(tmp_path):
    """The fused backend pads across requests anyway: one array per tensor for the batch, and each
    request's tensors are its rows of it; refused requests stay refused."""
    from serving.backend.text_frontend import TextFrontEnd

    frontend = TextFrontEnd(_word_tokenizer_file(tmp_path), max_length=8, pad_id=1,
                            output_names=["input_ids", "attention_mask", "token_type_ids"])
    requests = [np.array([[b"hello"], [b"hello world world"]], dtype=object), np.zeros((0, 1), dtype=object),
                np.array([[b"world hello"]], dtype=object), np.array([[b"\xff"]], dtype=object)]
    own, wide = frontend.tokenize(requests), frontend.tokenize(requests, one_width=True)
    assert wide.problems == own.problems and wide.problems[1] and wide.problems[3] and wide.tensors[1] is None
    np.testing.assert_array_equal(wide.tensors[0]["input_ids"], [[2, 1, 1], [2, 3, 3]])
    np.testing.assert_array_equal(wide.tensors[2]["input_ids"], [[3, 2, 1]])
    np.testing.assert_array_equal(own.tensors[2]["input_ids"], [[3, 2]])  # its own longest row without one_width
    np.testing.assert_array_equal(wide.tensors[2]["attention_mask"], [[1, 1, 0]])
    np.testing.assert_array_equal(wide.tensors[2]["token_type_ids"], [[0, 0, 0]])
    assert wide.tensors[0]["input_ids"].base is wide.tensors[2]["input_ids"].base is not None


def _word_tokenizer_file(tmp_path, bert_rules: bool = False) -> str:
    """A four-word WordLevel tokenizer saved as tokenizer.json ([PAD] = 1): split at white space, or
    with BERT's normalizer and pre-tokenizer (lower case, punctuation) and the added token [MASK] when
    `bert_rules`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "[PAD]": 1, "hello": 2, "world": 3}, unk_token="[UNK]"))
    if bert_rules:
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.add_special_tokens(["[MASK]"])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    return str(tmp_path / "tokenizer.json")


def test_a_text_request_without_rows_is_refused_alone_and_its_batch_mates_are_tokenized(tmp_path):
    """Triton 2.51 passes a [0, 1] TEXT request to the backend; it used to raise out of `execute`
    ("pad_rows needs at least one row"), and Triton failed every request of that batch with it."""
    from serving.backend.text_frontend import TextFrontEnd

    frontend = TextFrontEnd(_word_tokenizer_file(tmp_path), max_length=8, pad_id=1, output_names=["input_ids", "attention_mask"])
    good = np.array([[b"hello world"]], dtype=object)
    result = frontend.tokenize([good, np.zeros((0, 1), dtype=object), good])
    assert result.problems[0] is None and result.problems[2] is None
    assert result.problems[1] == "TEXT has no rows (shape [0, 1]): expected at least one text, shape [rows >= 1, 1]."
    np.testing.assert_array_equal(result.tensors[2]["input_ids"], [[2, 3]])


def test_a_long_text_is_tokenized_from_its_start_with_the_same_truncated_tokens(tmp_path):
    """An 8 MB text took 9 s and 1.2 GB to tokenize in full for the 128 tokens the model reads."""
    from serving.backend.text_frontend import PREFIX_CHARS, TextFrontEnd

    frontend = TextFrontEnd(_word_tokenizer_file(tmp_path, bert_rules=True), max_length=8, pad_id=1, output_names=["input_ids", "attention_mask"])
    cut = PREFIX_CHARS[0]
    cases = {
        "words": "Hello world, " * 40_000,                                # 520 KB: the start is enough
        "no space": "hello,world." * 20_000,                             # cut anywhere, not only at a space
        "spaces first": " " * (cut + 10) + "hello world " * 9,           # the start has no token: a longer start
    }
    for name, text in cases.items():
        full = frontend.tokenizer.encode(text).ids
        start, encoding = frontend.bounded(text)
        assert frontend.tokenizer.encode(start).ids == full, name
        assert (len(start) <= cut) == (name in ("words", "no space")), (name, len(start))
        # the check's own encoding is handed on (a long text is encoded once), and only when it holds
        assert (encoding is not None) == (name in ("words", "no space")) and (encoding is None or encoding.ids == full), name
        assert [e.ids for e in frontend.encodings(["hello", text, "world"])] == [
            frontend.tokenizer.encode("hello").ids, full, frontend.tokenizer.encode("world").ids], name
    result = frontend.tokenize([np.array([[cases["words"].encode()]], dtype=object)])
    np.testing.assert_array_equal(result.tensors[0]["input_ids"], [frontend.tokenizer.encode(cases["words"]).ids])
    # A cut through "[MASK]" leaves "[m", two other words ("[" and "m"); with 2 tokens kept the start
    # keeps "hello" "[" and overflows into "m", so the last-word rule alone would take it ([2, 0]
    # where the text gives [2, 4]): kept tokens must also end `cut_margin` characters before the cut.
    short = TextFrontEnd(_word_tokenizer_file(tmp_path, bert_rules=True), max_length=2, pad_id=1, output_names=["input_ids"])
    text = " " * (cut - 8) + "hello [MASK] world"
    assert short.bounded(text) == (text, None) and short.encodings([text])[0].ids == [2, 4]


def test_a_text_no_start_of_which_fills_the_model_is_refused_alone(tmp_path):
    """Beyond the last start, tokenizing the whole text is what held up its batch (10M spaces then a
    word: 7.3 s); such a text is refused with its row named, and its batch mates are answered."""
    from serving.backend.text_frontend import PREFIX_CHARS, TextFrontEnd, TextTooLong

    frontend = TextFrontEnd(_word_tokenizer_file(tmp_path, bert_rules=True), max_length=8, pad_id=1, output_names=["input_ids"])
    one_long_word = "x" * (PREFIX_CHARS[-1] + 10) + " hello"
    with pytest.raises(TextTooLong, match=r"a text of 262,160 characters whose first 262,144 do not fill the model's 8 tokens"):
        frontend.bounded(one_long_word)
    good = np.array([[b"hello world"]], dtype=object)
    result = frontend.tokenize([good, np.array([[b"hello"], [one_long_word.encode()]], dtype=object), good])
    assert result.problems[0] is None and result.problems[2] is None
    assert result.problems[1].startswith("TEXT row 1: a text of 262,160 characters")
    np.testing.assert_array_equal(result.tensors[2]["input_ids"], [[2, 3]])


def test_a_request_reads_a_bounded_amount_of_unfilled_rows_and_one_past_it_is_refused_alone(tmp_path):
    """32 rows of 262,144 Hangul syllables (one giant word each, 24.7 KB gzipped) held an instance 10 s:
    each row is read to its end, twice (a review, 2026-12-07). What a request's rows read past their first
    start is bounded (REQUEST_READ_CHARS: four such rows); the row that would read past it refuses that
    request, naming the row and why, before it is read; the other requests are answered."""
    from serving.backend.text_frontend import PREFIX_CHARS, REQUEST_READ_CHARS, TextFrontEnd

    frontend = TextFrontEnd(_word_tokenizer_file(tmp_path, bert_rules=True), max_length=8, pad_id=1, output_names=["input_ids"])
    giant = ("x" * (PREFIX_CHARS[-1] - 6) + " hello").encode()  # fills nothing until its last word
    read_per_row = (PREFIX_CHARS[-1] - PREFIX_CHARS[0]) + PREFIX_CHARS[-1]  # its windows, then encoded whole
    assert 4 * read_per_row <= REQUEST_READ_CHARS < 5 * read_per_row
    good = np.array([[b"hello world"]], dtype=object)
    result = frontend.tokenize([good, np.array([[giant]] * 4, dtype=object), np.array([[giant]] * 5 + [[b"hello"]], dtype=object), good])
    assert result.problems[0] is None and result.problems[1] is None and result.problems[3] is None
    assert result.problems[2].startswith(f"TEXT row 4: rows whose first {PREFIX_CHARS[0]:,} characters do not fill"), result.problems[2]
    assert f"at most {REQUEST_READ_CHARS:,} characters of them per request" in result.problems[2]
    np.testing.assert_array_equal(result.tensors[3]["input_ids"], [[2, 3]])


@pytest.mark.built
def test_the_served_tokenizer_cuts_cjk_and_punctuation_texts_without_tokenizing_them_whole():
    """No space to cut at: 1M characters of CJK took 2.9 s to tokenize whole, the batch waiting."""
    import time

    from contracts.layout import MODEL_REPOSITORY
    from serving.backend.text_frontend import TextFrontEnd

    path = MODEL_REPOSITORY / "text_embedder" / "1" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} is built by `make build-engines`")
    frontend = TextFrontEnd(str(path), max_length=128, pad_id=0, output_names=["input_ids"])
    for text in ("中文字符" * 6_000, "a,b;" * 6_000, "日本語のテキスト。[MASK]" * 1_500, "é" * 200 + "中" * 30_000):
        start, encoding = frontend.bounded(text)
        assert encoding is not None and len(start) < len(text)
        assert encoding.ids == frontend.tokenizer.encode(text).ids
    started = time.perf_counter()
    assert frontend.bounded("中" * 1_000_000)[1] is not None
    assert time.perf_counter() - started < 0.5


class _CountingTokenizer:
    """The front-end's tokenizer, counting the tokens its `encode` calls produced (kept and overflowing):
    what tokenizing costs, read without a clock."""

    def __init__(self, tokenizer):
        self.tokenizer, self.tokens = tokenizer, 0

    def encode(self, *args, **kwargs):
        encoding = self.tokenizer.encode(*args, **kwargs)
        self.tokens += len(encoding.ids) + sum(len(part.ids) for part in encoding.overflowing)
        return encoding


@pytest.mark.built
def test_a_long_text_whose_words_start_late_is_not_tokenized_whole_up_to_the_last_start():
    """16,385 spaces and then CJK up to 262,144 characters: the first start holds no token, and the next
    one (the last) used to be tokenized whole, 245,759 tokens and 0.5-1 s a row: one request of 32 such
    rows held its batch 16 s, and two left every other text_embedder request to time out (503). Read on
    in windows instead, it costs about one window of tokens, with the same truncated tokens; a start
    that the windows overcount (pieces of giant words cut at their edges) does not change the answer."""
    from contracts.layout import MODEL_REPOSITORY
    from serving.backend.text_frontend import PREFIX_CHARS, TextFrontEnd

    path = MODEL_REPOSITORY / "text_embedder" / "1" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} is built by `make build-engines`")
    frontend = TextFrontEnd(str(path), max_length=128, pad_id=0, output_names=["input_ids"])
    step, last = PREFIX_CHARS
    giant_words_at_edges = list(" " * last)
    for edge in range(step, last, step):
        giant_words_at_edges[edge - 100:edge + 100] = "q" * 200  # one [UNK] whole, ~200 tokens as two pieces
    cases = {
        "words after the first start": " " * (step + 1) + "中" * (last - step - 1),
        "... and one character more": " " * (step + 1) + "中" * (last - step),
        "words only in the last window": " " * (last - step) + "中" * step,
        "giant words at the window edges": "".join(giant_words_at_edges),
    }
    for name, text in cases.items():
        counting = frontend.tokenizer = _CountingTokenizer(frontend.tokenizer)
        start, encoding = frontend.bounded(text)
        frontend.tokenizer = counting.tokenizer
        assert counting.tokens < 3 * step, (name, counting.tokens)  # was 245,759 for the first two
        assert (encoding.ids if encoding is not None else frontend.tokenizer.encode(start).ids) \
            == frontend.tokenizer.encode(text).ids, name


def _threads_after_a_batch(tmp_path, environment: dict[str, str]) -> tuple[int, int, str]:
    """(threads before, threads after tokenizing a 256-text batch, TOKENIZERS_PARALLELISM then) in a
    fresh process: the Rust pool's threads start at its first parallel use, so this sees whether
    `encode_batch` ran on the pool."""
    import json
    import subprocess
    import sys

    probe = f"""
import json, os
import numpy as np
from serving.backend.text_frontend import TextFrontEnd
frontend = TextFrontEnd({_word_tokenizer_file(tmp_path)!r}, max_length=8, pad_id=1, output_names=["input_ids"])
before = len(os.listdir("/proc/self/task"))
frontend.tokenize([np.array([[b"hello world " * 4]] * 256, dtype=object)])
print(json.dumps([before, len(os.listdir("/proc/self/task")), os.environ.get("TOKENIZERS_PARALLELISM")]))
"""
    env = {k: v for k, v in os.environ.items() if k != "TOKENIZERS_PARALLELISM"} | environment
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    return tuple(json.loads(out.splitlines()[-1]))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="counts the process's threads in /proc on a machine with 2 or more cores")
def test_the_text_front_end_tokenizes_a_batch_on_the_calling_thread_unless_told_otherwise(tmp_path):
    """The stub shares the cores with sibling instances: the tokenizer's Rust pool woke a thread on
    the other core for a few short texts (docs/performance.md, "Run 25"). A value the environment already has wins."""
    before, after, setting = _threads_after_a_batch(tmp_path, {})
    assert setting == "false" and after == before, (before, after)
    before, after, setting = _threads_after_a_batch(tmp_path, {"TOKENIZERS_PARALLELISM": "true"})
    assert setting == "true" and after > before, "with the pool asked for, encode_batch starts its threads"
