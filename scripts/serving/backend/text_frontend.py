"""Text in, token tensors out: the one tokenizer front-end of every served text model.

Used by the `text_tokenizer` Python model (which returns the tensors) and by the
`onnxruntime_cpu` backend when a model is configured with a `tokenizer_file` (the fused
`text_embedder`: TEXT in, embedding out, tokenized and encoded in ONE execution, so a request
pays one batching decision and one backend round trip instead of an ensemble's two).

Rules (as sentence-transformers does for all-MiniLM-L6-v2): texts longer than `max_length`
tokens are truncated, special tokens included; an empty or blank text is [CLS] [SEP]; bytes that
are not UTF-8 are refused naming the row and the byte offset. Each request's rows are right-padded
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

from contracts.token_padding import padded_token_tensors  # noqa: F401 (the backend's padding rule)

if TYPE_CHECKING:
    from tokenizers import Encoding

SUPPORTED_OUTPUTS = ("input_ids", "attention_mask", "token_type_ids")
#: A text longer than one of these (characters) is tokenized from its start up to a space or line
#: break before that length, when that start alone already fills `max_length` (the truncated
#: tokens are then the same: the tokenizer splits words at spaces and normalizes per character).
#: Why: the model reads 128 tokens, but tokenizing all of an 8 MB text took 9 s and 1.2 GB.
PREFIX_CHARS = (16_384, 262_144)
_SPLITS = (" ", "\n", "\t", "\r")
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
        self.pad_id, self.output_names = int(pad_id), tuple(output_names)

    def bounded(self, text: str) -> "tuple[str, Encoding | None]":
        """`text`, or the start of it that gives the same truncated tokens (PREFIX_CHARS), with that
        start's encoding where finding it already made one (so a long text is encoded once)."""
        for limit in PREFIX_CHARS:
            if len(text) <= limit:
                return text, None
            cut = max(text.rfind(split, 0, limit) for split in _SPLITS)
            if cut > 0:
                encoding = self.tokenizer.encode(text[:cut])
                if encoding.overflowing:  # the start alone fills max_length
                    return text[:cut], encoding
        return text, None

    def encodings(self, texts: Sequence[str]) -> list["Encoding"]:
        """The truncated encoding of each text, long ones from their bounded start; the texts not
        encoded by that check go through one `encode_batch` (on this thread, the module docstring
        says why; a lone text costs about what `encode` costs: 34.0-35.0 against 32.9-34.6 us per
        held-out text, docs/measurements/2026-12-05-intel-xeon/tokenizer-threads/encode_one.py)."""
        bounded = [self.bounded(text) for text in texts]
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
        decoded: list[list[str] | str] = []
        for array in text_arrays:
            try:
                decoded.append(decode_texts(array))
            except ValueError as exc:
                decoded.append(str(exc))
        encodings = self.encodings([t for texts in decoded if isinstance(texts, list) for t in texts])
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
