"""The build's skip rule: a model is rebuilt when its own recipe's code changes, not another's."""
from __future__ import annotations

import dataclasses

from model_build import pipeline, sources
from model_build.recipes.registry import RECIPES
from contracts.serving_spec import load_serving_spec
from conftest import PROJECT_ROOT


def names(paths) -> set[str]:
    """model_build's files below its folder; the other packages' as `<package>/...` (as the digest names them)."""
    return {sources._relative_name(p) for p in paths}


def test_recipe_sources_follow_imports_including_lazy_ones():
    digits, text = names(pipeline.recipe_sources(RECIPES["digit_cnn"])), names(pipeline.recipe_sources(RECIPES["minilm_encoder"]))
    assert {"recipes/digits.py", "data/digits.py", "int8/variant.py", "int8/quantize.py", "pipeline.py"} <= digits
    # recipes/text.py imports recipes/text_int8.py inside a function: still part of the encoder's sources.
    assert {"recipes/text.py", "recipes/text_int8.py", "data/text_corpus.py", "int8/variant.py"} <= text
    assert not digits & {"recipes/text.py", "recipes/text_int8.py", "data/text_corpus.py"}
    assert not text & {"recipes/digits.py", "data/digits.py"}
    assert "cli.py" not in digits | text and "reports/benchmark.py" not in digits | text
    # installing is not building: the text serving installs do not change the encoder's fingerprint
    assert "recipes/text_serving.py" not in text


def test_the_build_fingerprint_follows_the_serving_runtime_and_contracts_it_runs():
    """The LLM's build converts and validates with `serving.generation` (its chat template, engine,
    scheduler): only model_build was followed, so an edited chat template left the LLM "up to date"
    with a report claiming 22/22 identical prompts for a runtime that had changed (a review,
    2026-12-07). The INT8 build chooses its scheme with `contracts.onnx_sessions`' fusions."""
    llm = names(pipeline.recipe_sources(RECIPES["smollm2_gguf"]))
    assert {"serving/generation/chat.py", "serving/generation/engine.py", "recipes/llm.py", "llm/validate.py"} <= llm
    digits = names(pipeline.recipe_sources(RECIPES["digit_cnn"]))
    assert "contracts/onnx_sessions.py" in digits and not any(n.startswith("serving/generation/") for n in digits)
    # the text front-ends reach the registry by name only (for the encoder check): the digit CNN's and
    # the LLM's code are not theirs, so editing them does not mark the text models rebuilt
    for front_end in ("text_tokenizer", "text_pipeline"):
        own = names(pipeline.recipe_sources(RECIPES[front_end]))
        assert not own & {"recipes/digits.py", "recipes/llm.py"} and not any(n.startswith("serving/generation/") for n in own)


def test_fingerprint_changes_with_own_sources_and_settings_only(tmp_path, monkeypatch):
    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    digit_model = spec.model("digit_classifier")
    digit_recipe, text_recipe = RECIPES["digit_cnn"], RECIPES["minilm_encoder"]
    before = pipeline.build_fingerprint(digit_recipe, digit_model)
    assert before == pipeline.build_fingerprint(digit_recipe, digit_model)  # deterministic

    # Copy the package, then edit a text-only module in the copy: the digit fingerprint is unchanged.
    copy = tmp_path / "model_build"
    for source in sources.PACKAGE_DIR.rglob("*.py"):
        target = copy / source.relative_to(sources.PACKAGE_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    monkeypatch.setattr(sources, "PACKAGE_DIR", copy)
    assert pipeline.build_fingerprint(digit_recipe, digit_model) == before
    text_before = pipeline.build_fingerprint(text_recipe, spec.model("text_encoder"))
    (copy / "data" / "text_corpus.py").write_text((copy / "data" / "text_corpus.py").read_text() + "\n# edited\n")
    assert pipeline.build_fingerprint(digit_recipe, digit_model) == before
    assert pipeline.build_fingerprint(text_recipe, spec.model("text_encoder")) != text_before
    int8_code = sources.code_digest("model_build.int8.variant")
    (copy / "int8" / "quantize.py").write_text((copy / "int8" / "quantize.py").read_text() + "\n# edited\n")
    assert pipeline.build_fingerprint(digit_recipe, digit_model) != before
    # the caches inside the INT8 step (sensitivity scores, CPU scheme) key on this digest: an edit to
    # the quantizer used to leave them valid, so a rebuild ranked layers on the old code's scores
    assert sources.code_digest("model_build.int8.variant") != int8_code

    monkeypatch.setattr(sources, "PACKAGE_DIR", pipeline.Path(sources.__file__).parent)
    other_options = dataclasses.replace(digit_model, options={**digit_model.options, "epochs": 999})
    assert pipeline.build_fingerprint(digit_recipe, other_options) != before


def test_a_rebuild_killed_midway_leaves_no_record_so_the_next_run_builds_again(tmp_path):
    """The build writes over its files in place and wrote the record at the end: killed midway, the
    old record named half-written files, and the next run installed them as current."""
    import pytest

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    model, paths = spec.model("digit_classifier"), pipeline.BuildPaths(tmp_path)

    def complete(model, workdir):
        (workdir / "model.onnx").write_bytes(b"x" * 1000)
        return {"files": ["model.onnx"]}

    def killed(model, workdir):
        (workdir / "model.onnx").write_bytes(b"x" * 100)  # half of it, then the process dies
        raise KeyboardInterrupt

    recipe = pipeline.Recipe("toy", complete, lambda *a: [])
    assert pipeline.build_model(recipe, model, paths)[1]
    with pytest.raises(KeyboardInterrupt):
        pipeline.build_model(dataclasses.replace(recipe, build=killed), model, paths, force=True)
    record, rebuilt = pipeline.build_model(recipe, model, paths)
    assert rebuilt and (paths.workdir(model.name) / "model.onnx").stat().st_size == 1000


def test_a_cache_file_cut_short_is_started_afresh_with_its_name_said(tmp_path, capsys):
    from model_build.int8.sensitivity import SensitivityCache

    path = tmp_path / "sensitivity.json"
    path.write_text('{"key": {"layer": [0.1, ')
    assert SensitivityCache(path).get("key", "layer") is None
    assert f"{path} is not a readable cache" in capsys.readouterr().out


def test_a_misspelled_digit_option_is_refused_naming_the_allowed_ones():
    import pytest

    from model_build.errors import BuildError
    from model_build.recipes.digits import check_digit_options

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    model = spec.model("digit_classifier")
    check_digit_options(model)  # the served options pass
    with pytest.raises(BuildError, match=r"unknown keys \['calibration_sise'\]; allowed: \[.*'calibration_size'"):
        check_digit_options(dataclasses.replace(model, options={**model.options, "calibration_sise": 64}))


def test_the_build_line_names_the_encoders_variant_for_a_model_that_follows_it():
    """The fused text_embedder serves text_encoder's INT8-mixed graph; its line said "served variant fp32"
    (its own unused `variant` field's default)."""
    from contracts.serving_spec import load_serving_spec
    from contracts.layout import PROJECT_ROOT
    from model_build.cli import served_variant

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    encoder = spec.model("text_encoder").variant.value
    assert served_variant(spec.model("text_embedder"), spec) == f"follows text_encoder (served variant {encoder})"
    assert served_variant(spec.model("digit_classifier"), spec) == f"served variant {spec.model('digit_classifier').variant.value}"


def test_a_cache_hit_needs_the_bytes_the_build_wrote_not_just_the_file_names(tmp_path):
    """Another model's fp32.onnx copied over this one's was taken as built: installed and reported at
    this model's accuracy (a review, 2026-12-06). The record keeps each file's digest."""
    import os

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    model, paths = spec.model("digit_classifier"), pipeline.BuildPaths(tmp_path)
    builds = []

    def build(model, workdir):
        builds.append(1)
        (workdir / "model.onnx").write_bytes(b"the built model")
        return {"files": ["model.onnx"]}

    recipe = pipeline.Recipe("toy", build, lambda *a: [])
    assert pipeline.build_model(recipe, model, paths)[1]
    assert not pipeline.build_model(recipe, model, paths)[1]  # unchanged: a hit, without hashing (same size and mtime)
    built = paths.workdir(model.name) / "model.onnx"
    os.utime(built, ns=(1, 1))  # touched, same bytes: still a hit
    assert not pipeline.build_model(recipe, model, paths)[1]
    built.write_bytes(b"another model!!")  # same size, other bytes
    record, rebuilt = pipeline.build_model(recipe, model, paths)
    assert rebuilt and built.read_bytes() == b"the built model" and len(builds) == 2


def test_a_build_of_an_unknown_model_is_refused_and_a_partial_build_keeps_the_report_whole(tmp_path, capsys):
    """`build --models no_such_model` exited 0 and wrote an empty report; `--models a` dropped every
    other model from it (a review, 2026-12-06)."""
    import json

    import re

    from model_build import cli

    assert cli.main(["build", "--models", "no_such_model"]) != 0
    assert re.search(r"--models \['no_such_model'\]: not in .*; expected some of \['digit_classifier'", capsys.readouterr().err)
    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    paths = pipeline.BuildPaths(tmp_path)
    for name in ("digit_classifier", "text_encoder"):
        paths.workdir(name).mkdir(parents=True)
        (paths.workdir(name) / "build.json").write_text(json.dumps(
            {"model": name, "recipe": "toy", "fingerprint": "f", "files": [], "variants": {}}))
    kept = cli.kept_records(spec, {"digit_classifier"}, paths)
    assert [r["model"] for r in kept] == ["text_encoder"]


import pytest  # noqa: E402


@pytest.mark.parametrize("option, value, message", [
    ("width", "abc", r"options.width` = 'abc': expected an integer >= 1"),
    ("width", 4.7, r"options.width` = 4.7: expected an integer >= 1"),
    ("width", 0, r"options.width` = 0: expected an integer >= 1"),
    ("seed", -1, r"options.seed` = -1: expected an integer >= 0"),
    ("epochs", "40", r"options.epochs` = '40': expected an integer >= 1"),
    ("also_build", "int8_mixed", r"options.also_build` = 'int8_mixed': expected a list"),
    ("calibration_seed", "x", r"models.digit_classifier: `options.calibration_seed` = 'x': expected an integer >= 0"),
    ("calibration_size", 0, r"models.digit_classifier: `options.calibration_size` = 0: expected an integer >= 1"),
])
def test_digit_options_are_checked_naming_the_field_before_the_served_record_is_touched(tmp_path, option, value, message):
    """They ended in tracebacks (ValueError, TypeError, a torch RuntimeError) or were coerced (4.7 built
    width 4), after the build had already removed the served model's record (a review, 2026-12-06)."""
    from model_build.errors import BuildError
    from model_build.recipes.registry import recipe_for

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    model = dataclasses.replace(spec.model("digit_classifier"), options={**spec.model("digit_classifier").options, option: value})
    paths = pipeline.BuildPaths(tmp_path)
    paths.workdir(model.name).mkdir(parents=True)
    record = paths.workdir(model.name) / "build.json"
    record.write_text("{}")
    with pytest.raises(BuildError, match=message):
        pipeline.build_model(recipe_for("digit_cnn"), model, paths, force=True)
    assert record.read_text() == "{}"  # untouched


def test_an_int8_builds_fingerprint_follows_the_cpu_feature_that_sets_its_weight_range(monkeypatch):
    """7-bit weights where the build host lacks VNNI: the same serving.toml built on another CPU is
    another served graph, which the cache took for current (a review, 2026-12-06)."""
    from model_build.int8 import quantize

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    int8, fp32 = spec.model("text_encoder"), spec.model("digit_classifier_small")
    assert pipeline.builds_int8(int8) and not pipeline.builds_int8(fp32)
    prints = {}
    for lacks_vnni in (True, False):
        monkeypatch.setattr(quantize, "cpu_lacks_vnni", lambda: lacks_vnni)
        prints[lacks_vnni] = {m.name: pipeline.build_fingerprint(RECIPES[m.recipe], m) for m in (int8, fp32)}
    assert prints[True][int8.name] != prints[False][int8.name]
    assert prints[True][fp32.name] == prints[False][fp32.name]  # an FP32-only model is the same graph anywhere


def test_the_report_has_a_row_for_every_served_model_with_its_installed_batch_size(tmp_path):
    """The fused text embedder (what clients call) and the tokenizer had no row, having no variants of
    their own, and no served max_batch_size was shown (a review, 2026-12-06)."""
    from contracts.model_config import parse_config, write_model_config
    from model_build.reports.build_report import render_build_report_markdown, served_rows

    (tmp_path / "text_embedder" / "1").mkdir(parents=True)
    (tmp_path / "text_embedder" / "1" / "model.onnx").write_bytes(b"graph")
    write_model_config(tmp_path / "text_embedder", parse_config(
        'name: "text_embedder"\nbackend: "onnxruntime_cpu"\nmax_batch_size: 32\ninstance_group { count: 1 }\ninstance_group { count: 1 }'))
    rows = served_rows(tmp_path, [("text_embedder", "follows text_encoder"), ("not_installed", "x")])
    assert rows == [{"model": "text_embedder", "served": "follows text_encoder", "backend": "onnxruntime_cpu",
                     "max_batch_size": 32, "instances": 2, "file": "model.onnx", "sha256": rows[0]["sha256"]}]
    text = render_build_report_markdown({"generated_at": "t", "machine": "m", "models": [], "served": rows})
    assert "| text_embedder | follows text_encoder | onnxruntime_cpu | 32 | 2 | model.onnx |" in text


def test_the_encoders_fingerprint_follows_the_installed_documentation_its_corpus_is_made_of(tmp_path, monkeypatch):
    """Its calibration and validation texts come from the installed packages' documentation; a package
    installed or upgraded (or an editable install's README) changed them under the same fingerprint.
    The digit models read no corpus: theirs is unchanged."""
    from model_build.data import text_corpus
    from model_build.recipes import text

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    encoder, digits = spec.model("text_encoder"), spec.model("digit_classifier")
    docs = [text_corpus.SourceDocument("a.dist-info/METADATA", "A package that does one thing well.")]
    monkeypatch.setattr(text, "installed_documents", lambda: list(docs))

    def fingerprint(model):  # the digest is read once per process (what is installed does not change in a build)
        text.installed_documents_digest.cache_clear()
        return pipeline.build_fingerprint(RECIPES[model.recipe], model)

    before = {m.name: fingerprint(m) for m in (encoder, digits)}
    assert fingerprint(encoder) == before[encoder.name]  # deterministic
    docs.append(text_corpus.SourceDocument("b/README.md", "Another package, installed later."))
    assert fingerprint(encoder) != before[encoder.name]
    assert fingerprint(digits) == before[digits.name]
    docs[1] = text_corpus.SourceDocument("b/README.md", "Another package, upgraded.")
    changed = fingerprint(encoder)
    docs[1] = text_corpus.SourceDocument("b/README.md", "Another package, installed later.")
    assert changed != fingerprint(encoder)
    text.installed_documents_digest.cache_clear()  # no stand-in digest left for later tests


@pytest.mark.parametrize("model_name, option, value, message", [
    ("text_encoder", "max_length", "128", r"`models.text_encoder.options.max_length` = '128': expected a whole number"),
    ("text_encoder", "heldout_fraction", "0.2", r"`models.text_encoder.options.heldout_fraction` = '0.2': expected a number"),
    ("text_encoder", "max_lenght", 128, r"`models.text_encoder.options` has unknown keys \['max_lenght'\]"),
    ("smollm2_chat", "max_contxt", 1024, r"`models.smollm2_chat.options` has unknown keys \['max_contxt'\]"),
    ("smollm2_chat", "block_size", "16", r"`models.smollm2_chat.options.block_size` = '16': expected a whole number >= 1"),
    ("smollm2_chat", "max_running", 0, r"`models.smollm2_chat.options.max_running` = 0: expected a whole number >= 1"),
    ("text_embedder", "encodr", "text_encoder", r"`models.text_embedder.options` has unknown keys \['encodr'\]"),
    ("text_tokenizer", "encoder", 5, r"`models.text_tokenizer.options.encoder` must name the served model it uses"),
])
def test_every_recipes_options_are_checked_before_the_served_record_is_touched(tmp_path, model_name, option, value, message):
    """Only the digit recipe had a check: the others' options were read inside their builds, after the
    good build's record was removed (an LLM typo cost a rebuild from scratch once fixed; the encoder's
    `max_length = "128"` a 43-line traceback and a 61-s rebuild: a review, 2026-12-07). `make
    build-engines` now runs every wanted model's check before building any (model_build.cli)."""
    from model_build.errors import BuildError
    from model_build.recipes.registry import recipe_for

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    model = spec.model(model_name)
    model = dataclasses.replace(model, options={**model.options, option: value})
    paths = pipeline.BuildPaths(tmp_path)
    paths.workdir(model.name).mkdir(parents=True)
    record = paths.workdir(model.name) / "build.json"
    record.write_text("{}")
    recipe = recipe_for(model.recipe)
    assert recipe.check is not None
    with pytest.raises(BuildError, match=message):
        pipeline.build_model(recipe, model, paths, force=True)
    assert record.read_text() == "{}"  # untouched


def test_an_encoder_name_that_is_no_served_model_names_the_field():
    from model_build.errors import BuildError
    from model_build.recipes.text_serving import _encoder_build

    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    model = dataclasses.replace(spec.model("text_embedder"), options={"encoder": "text_encodr"})
    with pytest.raises(BuildError, match=r"`models.text_embedder.options.encoder` = 'text_encodr': expected the name of a "
                                         r"served model with recipe 'minilm_encoder' \(no model named 'text_encodr'"):
        _encoder_build(model, spec, PROJECT_ROOT / "artifacts", PROJECT_ROOT / "model_repository")


def test_the_source_digest_does_not_depend_on_the_order_or_place_of_the_files():
    """The digest was fed in absolute-path order: a checkout under /root sorted build/ before
    scripts/ but a copy of model_build under /tmp after it, and CI's clone failed the fingerprint
    test that passed under /work (2026-12-07). Fed by package-relative name, the order given and
    the folder the checkout lives in do not matter."""
    import hashlib

    files = pipeline.recipe_sources(RECIPES["smollm2_gguf"])
    assert any(sources.PACKAGE_DIR in f.parents for f in files) and any(
        f.is_relative_to(sources.OTHER_PACKAGE_DIRS["serving"]) for f in files)
    forward, backward = hashlib.sha256(), hashlib.sha256()
    sources.add_sources(forward, files)
    sources.add_sources(backward, tuple(reversed(files)))
    assert forward.hexdigest() == backward.hexdigest()
