"""Text in, token tensors out: the one tokenizer front-end of every served text model.

Used by the `text_tokenizer` Python model (which returns the tensors) and by the
`onnxruntime_cpu` backend when a model is configured with a `tokenizer_file` (the fused
`text_embedder`: TEXT in, embedding out, tokenized and encoded in ONE execution, so a request
pays one batching decision and one backend round trip instead of an ensemble's two).

Rules (as sentence-transformers does for all-MiniLM-L6-v2): texts longer than `max_length`
tokens are truncated, special tokens included; an empty or blank text is [CLS] [SEP]; bytes that
are not UTF-8 are refused naming the row and the byte offset. A long text is tokenized from a start
that already fills `max_length` (PREFIX_CHARS); one over the last start that none fills (white space,
a giant word) is refused, alone, so that no request holds up its batch for seconds. Each request's rows are right-padded
with the pad id to that request's longest row (the backend pads or buckets across requests).
All texts of a dynamic batch are tokenized in one `encode_batch` call, on the calling thread:
the front-end sets `TOKENIZERS_PARALLELISM=false` in its process unless the environment already
says otherwise (TOKENIZER_PARALLELISM_ENV). Why: the stub is one of several instances sharing the
cores, and the tokenizer's Rust thread pool woke a thread on the other core for a handful of
short texts, where a sibling instance was computing. Measured on a 2-core Intel Xeon (2026-12-05,
docs/measurements/2026-12-05-intel-xeon/tokenizer-threads/): 47-70 us of CPU per held-out text on
the pool against 35-39 on one thread for batches of 2-16; in `serving serve`, three alternating
starts each, the rest of `execute` fell from 1.42-1.49 to 0.95-1.00 ms per execution at c=16 and
texts/s rose 3.5% (c=4: 2%).
Pure apart from loading the tokenizer file and that variable; numpy and `tokenizers` only (it runs
in the stub).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from contracts.token_padding import (  # noqa: F401 (padded_token_tensors: the backend's padding rule)
    ATTENTION_MASK_INPUT, INPUT_IDS_INPUT, TOKEN_TYPES_INPUT, padded_token_tensors,
)

if TYPE_CHECKING:
    from tokenizers import Encoding

SUPPORTED_OUTPUTS = (INPUT_IDS_INPUT, ATTENTION_MASK_INPUT, TOKEN_TYPES_INPUT)
#: A text longer than the first of these (characters) is tokenized from a start that already fills
#: `max_length` with whole words (`TextFrontEnd.bounded` says why the truncated tokens are then the
#: same): its first PREFIX_CHARS[0] characters, else the start found by reading on in windows of that
#: many characters, up to the last of these; a longer text no start of which fills is refused
#: (`TextTooLong`). Why: the model reads 128 tokens, but tokenizing all of an 8 MB text took 9 s and
#: 1.2 GB, and 1M characters of CJK (no space to cut at) 2.9 s, with the whole batch waiting.
PREFIX_CHARS = (16_384, 262_144)
#: Starts found by reading on that are tokenized whole and checked, at most: only pieces cut out of
#: giant words can make the windows count tokens that a start does not hold.
MAX_START_CHECKS = 2
#: Tokens the windows may read once the checks are spent: a text of up to PREFIX_CHARS[-1] characters
#: holding fewer is tokenized whole (as cheap as a start), one holding more is refused.
READ_TOKENS_LIMIT = 16_384


#: Characters one request's rows may read past their first PREFIX_CHARS[0] when those do not fill
#: `max_length` (white space, giant words): windows, checked starts and texts then encoded whole, each
#: counted as read. Eight texts' worth of PREFIX_CHARS[-1]: 32 rows whose words start in their second
#: window (1.57M characters, 1.5-1.6 s in-process on the Zen 5 host), or about four rows read to their end
#: and encoded whole. Why a bound per request: 32 rows of 262,144 Hangul syllables (one giant word each,
#: 24.7 KB gzipped) were each read to the end twice, 10.6-12.2 s here, and two senders dropped the embedder
#: from ~700 answers/s to 8 with realtime requests timing out (a review, 2026-12-07).
REQUEST_READ_CHARS = 8 * PREFIX_CHARS[-1]


class TextTooLong(ValueError):
    """A text longer than PREFIX_CHARS[-1] whose start holds too few whole words to fill max_length, or
    one more such text than a request may have read (REQUEST_READ_CHARS)."""


class ReadBudget:
    """What is left of one request's REQUEST_READ_CHARS as its rows are bounded."""

    def __init__(self, chars: int = REQUEST_READ_CHARS):
        self.left = chars

    def spend(self, chars: int) -> None:
        if chars > self.left:
            raise TextTooLong(
                f"rows whose first {PREFIX_CHARS[0]:,} characters do not fill the model's tokens (mostly white space, "
                f"or words too long to split) are read on, at most {REQUEST_READ_CHARS:,} characters of them per "
                f"request, and the request's rows up to this one had read {REQUEST_READ_CHARS - self.left:,}: send "
                f"such rows in separate requests, or with their words nearer their start")
        self.left -= chars


#: The `tokenizers` variable that turns its Rust thread pool off ("false") or on ("true"); the
#: front-end sets "false" when it is unset (module docstring), a value already set is kept.
TOKENIZER_PARALLELISM_ENV = "TOKENIZERS_PARALLELISM"


def decode_texts(array: np.ndarray) -> list[str]:
    """Row texts of one request's [rows, 1] TEXT tensor; raises ValueError naming a bad row (or none:
    Triton 2.51 passes a request of shape [0, 1] through, and a request without rows must be refused
    alone, not fail its batch)."""
    if array.size == 0:
        raise ValueError(f"TEXT has no rows (shape {list(array.shape)}): expected at least one text, shape [rows >= 1, 1].")
    texts = []
    for row, item in enumerate(array.reshape(-1)):
        if isinstance(item, str):
            texts.append(item)
            continue
        try:
            texts.append(bytes(item).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(
                f"TEXT row {row} is not valid UTF-8 ({exc.reason} at byte {exc.start}); send text encoded as UTF-8."
            ) from None
    return texts


@dataclass(frozen=True)
class TokenizedRequests:
    """Per request of a batch: its token tensors, or the message of why it was refused."""

    tensors: tuple[dict[str, np.ndarray] | None, ...]
    problems: tuple[str | None, ...]


class TextFrontEnd:
    """A loaded tokenizer that turns each request's TEXT tensor into the encoder's inputs."""

    def __init__(self, tokenizer_file: str, max_length: int, pad_id: int, output_names: Sequence[str]):
        from tokenizers import Tokenizer

        unknown = [n for n in output_names if n not in SUPPORTED_OUTPUTS]
        if unknown:
            raise ValueError(f"token tensors {unknown} cannot be produced; supported: {list(SUPPORTED_OUTPUTS)}.")
        if max_length < 1:
            raise ValueError(f"max_length = {max_length}: expected a positive token count.")
        os.environ.setdefault(TOKENIZER_PARALLELISM_ENV, "false")  # before the first encode_batch
        self.tokenizer = Tokenizer.from_file(tokenizer_file)
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.no_padding()
        self.pad_id, self.output_names, self.max_length = int(pad_id), tuple(output_names), max_length
        #: A cut may split an added token ("[MASK]" -> "[MA"), which then reads as other words:
        #: kept tokens must end at least this many characters before the cut.
        self.cut_margin = max((len(t.content) for t in self.tokenizer.get_added_tokens_decoder().values()), default=0)

    def bounded(self, text: str, budget: ReadBudget | None = None) -> "tuple[str, Encoding | None]":
        """`text`, or the start of it that gives the same truncated tokens (PREFIX_CHARS), with that
        start's encoding where finding it already made one (so a long text is encoded once).

        A start's encoding is the text's when it overflows `max_length`, no kept token comes from the
        start's last word and every kept token ends `cut_margin` characters before the cut. Why that
        suffices: the tokenizer normalizes character by character, splits words at white space and
        punctuation (each CJK character a word of its own) and tokenizes word by word, so a cut can
        only change the last word, or an added token it splits. It used to cut at a space only, so a
        text without one (CJK, "a,a,a,...") was tokenized whole. Raises TextTooLong for a text longer
        than the last start that no start bounds (white space, words too long to split).

        A first start that does not fill (white space or giant words first) is followed by windows of
        PREFIX_CHARS[0] characters, each tokenized alone, so every character is read once, until
        the windows read hold 2 x max_length tokens; only then is that start tokenized whole and checked
        (at most MAX_START_CHECKS times). Why: the next start used to be the last one, tokenized whole:
        16,385 spaces and then 245,759 CJK characters took 0.5 s a row (32 such rows in one request held
        its batch 16 s, two such requests left both instances busy and every other request of the
        model timed out), where the windows stop reading after the first 256 tokens. What is read past
        the first start (windows, checked starts, a text then encoded whole) is charged to `budget`
        (the request's ReadBudget) before it is read."""
        step, last = PREFIX_CHARS[0], PREFIX_CHARS[-1]
        if len(text) <= step:
            return text, None
        encoding = self.tokenizer.encode(text[:step])
        if self._fills_with_whole_words(encoding, step):
            return text[:step], encoding
        spend = budget.spend if budget is not None else (lambda chars: None)
        end, limit, counted, since_check, checks = step, min(len(text), last), 0, 0, 0
        while end < limit:
            start, end = end, min(end + step, limit)
            spend(end - start)
            window = self.tokenizer.encode(text[start:end], add_special_tokens=False)
            tokens = len(window.ids) + sum(len(part.ids) for part in window.overflowing)
            counted, since_check = counted + tokens, since_check + tokens
            if checks < MAX_START_CHECKS and (since_check >= 2 * self.max_length or end == limit):
                if end == len(text):  # all of it read: nothing to cut (few tokens before its last window)
                    spend(len(text))  # encoded whole with the batch
                    return text, None
                spend(end)
                encoding = self.tokenizer.encode(text[:end])
                if self._fills_with_whole_words(encoding, end):
                    return text[:end], encoding
                checks, since_check = checks + 1, 0
            elif counted > READ_TOKENS_LIMIT:  # no checked start filled: tokenizing all of it costs what this avoids
                break
        if end == len(text):  # read to its end without a start that fills, and few tokens in all
            spend(len(text))  # encoded whole with the batch
            return text, None
        advice = (f"send at most {last:,} characters of such text" if len(text) > last else
                  f"send such text with its words nearer its start (the first {step:,} characters)")
        raise TextTooLong(
            f"a text of {len(text):,} characters whose first {end:,} do not fill the model's "
            f"{self.max_length} tokens (mostly white space, or words too long to split): tokenizing all of it "
            f"would hold up the requests batched with it; {advice}.")

    def _bounded_row(self, row: int, text: str, budget: ReadBudget) -> "tuple[str, Encoding | None]":
        try:
            return self.bounded(text, budget)
        except TextTooLong as exc:  # refused alone: its batch mates are tokenized
            raise ValueError(f"TEXT row {row}: {exc}") from None

    def _fills_with_whole_words(self, encoding: "Encoding", cut: int) -> bool:
        if not encoding.overflowing:
            return False
        kept = [(word, offsets[1]) for word, offsets in zip(encoding.word_ids, encoding.offsets) if word is not None]
        last_word = max((w for part in encoding.overflowing for w in part.word_ids if w is not None), default=None)
        return (bool(kept) and last_word is not None and max(w for w, _ in kept) < last_word
                and max(end for _, end in kept) <= cut - self.cut_margin)

    def encodings(self, texts: Sequence[str]) -> list["Encoding"]:
        """The truncated encoding of each text, long ones from their bounded start; the texts not
        encoded by that check go through one `encode_batch` (on this thread, the module docstring
        says why; a lone text costs about what `encode` costs: 34.0-35.0 against 32.9-34.6 us per
        held-out text, docs/measurements/2026-12-05-intel-xeon/tokenizer-threads/encode_one.py)."""
        return self._encoded([self.bounded(text) for text in texts])

    def _encoded(self, bounded: Sequence["tuple[str, Encoding | None]"]) -> list["Encoding"]:
        pending = [i for i, (_, encoding) in enumerate(bounded) if encoding is None]
        starts = [bounded[i][0] for i in pending]
        fresh = self.tokenizer.encode_batch_fast(starts) if starts else []
        encodings = [encoding for _, encoding in bounded]
        for i, encoding in zip(pending, fresh):
            encodings[i] = encoding
        return encodings

    def tokenize(self, text_arrays: Sequence[np.ndarray], one_width: bool = False) -> TokenizedRequests:
        """Each request's token tensors, padded to its own longest row; with `one_width`, every
        request's to the batch's longest, as views of one array per tensor (the fused backend pads
        across requests anyway, and one numpy call per tensor for the batch is cheaper than one per
        request: serving/backend/batch_execution.py says why that counts)."""
        decoded: list[list[tuple[str, Encoding | None]] | str] = []  # per request: its bounded rows, or its problem
        for array in text_arrays:
            try:
                budget = ReadBudget()
                decoded.append([self._bounded_row(row, text, budget) for row, text in enumerate(decode_texts(array))])
            except ValueError as exc:
                decoded.append(str(exc))
        encodings = self._encoded([pair for rows in decoded if isinstance(rows, list) for pair in rows])
        batch = padded_token_tensors(encodings, self.pad_id, self.output_names) if one_width and encodings else None
        tensors, problems, start = [], [], 0
        for texts in decoded:
            if isinstance(texts, str):
                tensors.append(None)
                problems.append(texts)
                continue
            end = start + len(texts)
            tensors.append({name: rows[start:end] for name, rows in batch.items()} if batch is not None
                           else padded_token_tensors(encodings[start:end], self.pad_id, self.output_names))
            problems.append(None)
            start = end
        return TokenizedRequests(tuple(tensors), tuple(problems))
