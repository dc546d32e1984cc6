"""Sentence embeddings from the served text embedder: plain text in, vectors and their norms out.

`text_embedder` tokenizes on the server (tokenizer and encoder in one model), so a client sends UTF-8 strings (input
`TEXT`, shape [N, 1], BYTES) over HTTP or gRPC and gets `embedding` FP32 [N, 384] back. Names come
from the server's model metadata, not from this file. The model L2-normalises inside its graph,
so every norm is 1 within float32 rounding; the norms are returned so callers can check that.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from model_client.client import TritonModelClient, utf8_bytes
from model_client.errors import RequestRejectedError

if TYPE_CHECKING:
    from model_client.resilient import ResilientClient

DEFAULT_TEXT_MODEL = "text_embedder"


@dataclass(frozen=True)
class Embeddings:
    """One vector per text, in the order the texts were given."""

    texts: tuple[str, ...]
    vectors: np.ndarray

    def __post_init__(self) -> None:
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.texts):
            raise RequestRejectedError(
                f"expected one embedding per text ({len(self.texts)}), got shape {list(self.vectors.shape)}."
            )

    @property
    def norms(self) -> np.ndarray:
        return np.linalg.norm(self.vectors.astype(np.float64), axis=1)

    def cosine(self, i: int, j: int) -> float:
        a, b = self.vectors[i].astype(np.float64), self.vectors[j].astype(np.float64)
        return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))


def text_request_array(texts: Sequence[str]) -> np.ndarray:
    """[N, 1] object array of UTF-8 bytes: Triton's BYTES tensor for a TYPE_STRING dims [1] input."""
    if isinstance(texts, str):
        raise RequestRejectedError("texts must be a sequence of strings, not one string: wrap it in a list.")
    if not len(texts):
        raise RequestRejectedError("nothing to embed: give at least one text.")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise RequestRejectedError(f"texts {bad[:5]} are not str; send text (it is encoded as UTF-8).")
    return np.array([[utf8_bytes(t, f"text {i}")] for i, t in enumerate(texts)], dtype=object)


def _text_interface(interface, model: str) -> tuple[str, str]:
    """(the text input's name, the embedding output's name) of the model's metadata."""
    text_inputs = [t for t in interface.inputs if t.datatype == "BYTES"]
    if len(interface.inputs) != 1 or not text_inputs:
        raise RequestRejectedError(
            f"model {model!r} takes {[(t.name, t.datatype) for t in interface.inputs]}; expected one BYTES text input."
        )
    return text_inputs[0].name, interface.outputs[0].name


def embed_resilient(client: "ResilientClient", texts: Sequence[str], model: str = DEFAULT_TEXT_MODEL,
                    priority: int = 0, timeout_us: int | None = None) -> Embeddings:
    """Embed `texts` through a `ResilientClient`: its retries, deadline (the metadata included) and
    per-priority request sizes (its `limits`), as `classify` calls. What the embed command uses; it
    went through a bare client with neither retries nor deadline (a review, 2026-12-07)."""
    batch = text_request_array(texts)
    started = client.now()
    input_name, output_name = _text_interface(client.interface(model, priority), model)
    outcome = client.infer(model, {input_name: batch}, priority=priority, timeout_us=timeout_us, started_s=started)
    return Embeddings(tuple(texts), np.asarray(outcome.outputs[output_name]).astype(np.float32, copy=False))


def embed(
    client: TritonModelClient,
    texts: Sequence[str],
    model: str = DEFAULT_TEXT_MODEL,
    request_ranges: Sequence[tuple[int, int]] | None = None,
    **infer_kwargs,
) -> Embeddings:
    """Embed `texts` with the served text model over one bare connection: no retries (see
    `embed_resilient`).

    `request_ranges` splits the texts into requests ([start, stop) ranges, e.g. from
    `PriorityLimits.plan_requests`); None sends them in one request. `infer_kwargs` go to
    `TritonModelClient.infer` (priority, timeout_us, ...).
    """
    batch = text_request_array(texts)
    input_name, output_name = _text_interface(client.interface(model), model)
    ranges = list(request_ranges or [(0, len(texts))])
    if sorted(ranges) != ranges or ranges[0][0] != 0 or ranges[-1][1] != len(texts) or any(
        a[1] != b[0] for a, b in zip(ranges, ranges[1:])
    ):
        raise RequestRejectedError(f"request_ranges {ranges} must cover 0..{len(texts)} in order without gaps.")
    parts = [
        client.infer(model, {input_name: batch[start:stop]}, output_names=[output_name], **infer_kwargs)[output_name]
        for start, stop in ranges
    ]
    return Embeddings(tuple(texts), np.concatenate(parts).astype(np.float32, copy=False))
