"""The build's skip rule: a model is rebuilt when its own recipe's code changes, not another's."""
from __future__ import annotations

import dataclasses

from model_build import pipeline
from model_build.recipes import RECIPES
from serving.spec import load_serving_spec
from conftest import PROJECT_ROOT


def names(paths) -> set[str]:
    return {p.name for p in paths}


def test_recipe_sources_follow_imports_including_lazy_ones():
    digits, text = names(pipeline.recipe_sources(RECIPES["digit_cnn"])), names(pipeline.recipe_sources(RECIPES["minilm_encoder"]))
    assert {"recipe_digits.py", "digits.py", "int8_variant.py", "quantize.py", "pipeline.py"} <= digits
    # recipe_text imports recipe_text_int8 inside a function: still part of the encoder's sources.
    assert {"recipe_text.py", "recipe_text_int8.py", "text_corpus.py", "int8_variant.py"} <= text
    assert not digits & {"recipe_text.py", "recipe_text_int8.py", "text_corpus.py"}
    assert not text & {"recipe_digits.py", "digits.py"}
    assert "cli.py" not in digits | text and "benchmark.py" not in digits | text


def test_fingerprint_changes_with_own_sources_and_settings_only(tmp_path, monkeypatch):
    spec = load_serving_spec(PROJECT_ROOT / "model_repository" / "serving.toml")
    digit_model = spec.model("digit_classifier")
    digit_recipe, text_recipe = RECIPES["digit_cnn"], RECIPES["minilm_encoder"]
    before = pipeline.build_fingerprint(digit_recipe, digit_model)
    assert before == pipeline.build_fingerprint(digit_recipe, digit_model)  # deterministic

    # Copy the package, then edit a text-only module in the copy: the digit fingerprint is unchanged.
    copy = tmp_path / "model_build"
    copy.mkdir()
    for source in pipeline.PACKAGE_DIR.glob("*.py"):
        (copy / source.name).write_bytes(source.read_bytes())
    monkeypatch.setattr(pipeline, "PACKAGE_DIR", copy)
    assert pipeline.build_fingerprint(digit_recipe, digit_model) == before
    text_before = pipeline.build_fingerprint(text_recipe, spec.model("text_encoder"))
    (copy / "text_corpus.py").write_text((copy / "text_corpus.py").read_text() + "\n# edited\n")
    assert pipeline.build_fingerprint(digit_recipe, digit_model) == before
    assert pipeline.build_fingerprint(text_recipe, spec.model("text_encoder")) != text_before
    (copy / "quantize.py").write_text((copy / "quantize.py").read_text() + "\n# edited\n")
    assert pipeline.build_fingerprint(digit_recipe, digit_model) != before

    monkeypatch.setattr(pipeline, "PACKAGE_DIR", pipeline.Path(pipeline.__file__).parent)
    other_options = dataclasses.replace(digit_model, options={**digit_model.options, "epochs": 999})
    assert pipeline.build_fingerprint(digit_recipe, other_options) != before
