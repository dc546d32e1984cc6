"""Request bodies and answer checks: the same items, in each target's own JSON, checked alike.

Every target gets one item per request as JSON over HTTP. Triton-based targets (this project,
PyTriton) and the minimal server speak KServe v2 JSON (`/v2/models/<model>/infer`); infinity-emb
speaks the OpenAI embeddings API (`/embeddings`). Bodies are encoded once, before any level runs,
so encoding costs the load generator nothing while it measures.

Every answer is parsed and checked for shape, and its values against an in-process reference of
the same ONNX file: a digit answer's argmax must equal the reference's, a text answer's cosine to
the reference embedding must reach `min_cosine` (infinity-emb runs the FP32 PyTorch weights and
this project the INT8-mixed encoder, hence a tolerance, not equality). A fast but wrong target
therefore gains nothing: a wrong answer counts as an error, not as throughput. Pure.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Sequence

import numpy as np

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.plan import ModelKind


class Api(Enum):
    KSERVE_V2 = "kserve_v2_json"
    OPENAI_EMBEDDINGS = "openai_embeddings"


def _dumps(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


def kserve_body(input_name: str, datatype: str, shape: Sequence[int], data: Sequence[Any]) -> bytes:
    """One KServe v2 JSON inference request with one input tensor."""
    return _dumps({"inputs": [{"name": input_name, "shape": list(shape), "datatype": datatype, "data": list(data)}]})


def digit_bodies(images: np.ndarray, input_name: str = "image") -> tuple[bytes, ...]:
    """One request per image: FP32 [1, 1, 8, 8] (a batch of one), values rounded to 6 digits."""
    if images.ndim != 4 or images.shape[1:] != (1, 8, 8):
        raise SweepPlanError(f"digit images must have shape [N, 1, 8, 8], got {list(images.shape)}.")
    return tuple(kserve_body(input_name, "FP32", [1, 1, 8, 8], [round(float(v), 6) for v in image.ravel()])
                 for image in images)


def text_bodies(texts: Sequence[str], api: Api, input_name: str = "TEXT", model_id: str = "") -> tuple[bytes, ...]:
    """One request per text: KServe v2 BYTES [1, 1], or an OpenAI embeddings request for `model_id`."""
    if not texts:
        raise SweepPlanError("no texts to send.")
    if api is Api.OPENAI_EMBEDDINGS:
        if not model_id:
            raise SweepPlanError("an OpenAI embeddings request needs the served `model_id`.")
        return tuple(_dumps({"model": model_id, "input": [t]}) for t in texts)
    return tuple(kserve_body(input_name, "BYTES", [1, 1], [t]) for t in texts)


class AnswerError(ValueError):
    """An answer that is not what the request asked for (its text goes into the record)."""


def read_kserve_output(payload: bytes, output_name: str, width: int) -> np.ndarray:
    """The `output_name` tensor of a KServe v2 JSON response, which must be [1, width]."""
    try:
        outputs = json.loads(payload)["outputs"]
        tensor = next(o for o in outputs if o.get("name") == output_name)
    except (ValueError, KeyError, TypeError, StopIteration):
        raise AnswerError(f"not a KServe v2 response with output `{output_name}`: {payload[:120]!r}") from None
    data = tensor.get("data")
    if list(tensor.get("shape") or []) != [1, width] or not isinstance(data, list) or len(data) != width:
        raise AnswerError(f"output `{output_name}` has shape {tensor.get('shape')} and {len(data or [])} values; "
                          f"expected [1, {width}].")
    return np.asarray(data, dtype=np.float64)


def read_openai_embedding(payload: bytes, width: int) -> np.ndarray:
    """The one embedding of an OpenAI embeddings response, which must have `width` floats."""
    try:
        data = json.loads(payload)["data"]
        vector = data[0]["embedding"]
    except (ValueError, KeyError, TypeError, IndexError):
        raise AnswerError(f"not an OpenAI embeddings response: {payload[:120]!r}") from None
    if len(data) != 1 or not isinstance(vector, list) or len(vector) != width:
        raise AnswerError(f"expected 1 embedding of {width} floats, got {len(data)} of {len(vector) if isinstance(vector, list) else '?'}.")
    return np.asarray(vector, dtype=np.float64)


@dataclass(frozen=True)
class AnswerCheck:
    """Checks item `index`'s answer. Digits: `expected_argmax[index]`; text: cosine to
    `reference[index]` >= `min_cosine`. Calling it returns (error or None, score): the score is
    the cosine for text, 1.0 or 0.0 (argmax agrees or not) for digits."""

    model: ModelKind
    api: Api
    output_name: str
    width: int
    expected_argmax: tuple[int, ...] = ()
    reference: np.ndarray | None = field(default=None, compare=False, repr=False)
    min_cosine: float = 0.9

    def __post_init__(self) -> None:
        if self.model is ModelKind.DIGITS and not self.expected_argmax:
            raise SweepPlanError("a digit answer check needs the reference `expected_argmax` of every item.")
        if self.model is ModelKind.TEXT and (self.reference is None or self.reference.shape[1:] != (self.width,)):
            raise SweepPlanError(f"a text answer check needs reference embeddings [N, {self.width}].")
        if not 0 < self.min_cosine <= 1:
            raise SweepPlanError(f"`min_cosine` = {self.min_cosine} must lie in (0, 1].")

    @property
    def items(self) -> int:
        return len(self.expected_argmax) if self.model is ModelKind.DIGITS else len(self.reference)

    def _vector(self, payload: bytes) -> np.ndarray:
        if self.api is Api.OPENAI_EMBEDDINGS:
            return read_openai_embedding(payload, self.width)
        return read_kserve_output(payload, self.output_name, self.width)

    def __call__(self, index: int, payload: bytes) -> tuple[str | None, float]:
        try:
            vector = self._vector(payload)
        except AnswerError as exc:
            return str(exc), math.nan
        except Exception as exc:  # noqa: BLE001 - any other malformed answer (strings for numbers, a bare
            # number for an object): counted as a wrong answer, never an exception that loses the level
            return f"malformed answer ({type(exc).__name__}: {exc}): {payload[:120]!r}", math.nan
        if not np.all(np.isfinite(vector)):
            return "the answer holds NaN or infinite values.", math.nan
        i = index % self.items
        if self.model is ModelKind.DIGITS:
            got, want = int(np.argmax(vector)), self.expected_argmax[i]
            return (None, 1.0) if got == want else (f"argmax {got}, the in-process reference says {want}.", 0.0)
        ref = self.reference[i]
        norm = float(np.linalg.norm(vector) * np.linalg.norm(ref))
        cosine = float(vector @ ref / norm) if norm > 0 else 0.0
        if cosine < self.min_cosine:
            return f"cosine {cosine:.3f} to the in-process reference, below {self.min_cosine}.", cosine
        return None, cosine


@dataclass(frozen=True)
class Workload:
    """One model's requests to one target: where to POST, item i's body (`bodies[i % n]`), the check."""

    target: str
    model: ModelKind
    url: str
    bodies: tuple[bytes, ...] = field(repr=False)
    check: AnswerCheck = field(repr=False)

    def __post_init__(self) -> None:
        if not self.url.startswith("http://"):
            raise SweepPlanError(f"`url` = {self.url!r} must be an http:// URL.")
        if len(self.bodies) != self.check.items:
            raise SweepPlanError(f"{len(self.bodies)} request bodies but {self.check.items} reference answers: "
                                 "item i's body and answer must describe the same item.")
