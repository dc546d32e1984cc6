"""contracts.rendered_configs: which serving.toml the installed configs were rendered from, and
`serving serve`'s refusal of configs rendered from an older version of the same file."""
from __future__ import annotations

import json

import pytest

from contracts.rendered_configs import (
    RENDERED_FROM_FILE,
    read_rendered_from,
    settings_digest,
    stale_rendered_models,
    write_rendered_from,
)

SETTINGS = """
# realtime first
[priorities.realtime]
level = 1
max_queue_size = 24

[server]
http_port = 8000
"""


def test_the_digest_is_of_the_settings_not_of_comments_layout_or_key_order():
    reordered = "[server]\nhttp_port = 8000\n\n[priorities.realtime]\nmax_queue_size = 24  # changed comment\nlevel = 1\n"
    assert settings_digest(SETTINGS) == settings_digest(reordered)
    assert settings_digest(SETTINGS) != settings_digest(SETTINGS.replace("max_queue_size = 24", "max_queue_size = 20"))
    assert settings_digest("not [ toml") != settings_digest("not [ toml either")  # the build refuses it; still a digest


def _built(tmp_path, models=("a", "b")):
    config = tmp_path / "serving.toml"
    config.write_text(SETTINGS)
    artifacts = tmp_path / "artifacts"
    for model in models:
        write_rendered_from(artifacts / model, config)
    return config, artifacts


def test_configs_rendered_from_this_serving_toml_are_current_until_a_setting_changes(tmp_path):
    config, artifacts = _built(tmp_path)
    record = read_rendered_from(artifacts / "a")
    assert record is not None and record.serving_config == str(config.resolve())
    assert stale_rendered_models(config, ["a", "b"], artifacts) == ()
    config.write_text(SETTINGS.replace("# realtime first", "# a comment only"))
    assert stale_rendered_models(config, ["a", "b"], artifacts) == ()
    config.write_text(SETTINGS.replace("max_queue_size = 24", "max_queue_size = 20"))
    assert stale_rendered_models(config, ["a", "b"], artifacts) == ("a", "b")
    write_rendered_from(artifacts / "b", config)  # b rendered again (`make build-engines --models b`)
    assert stale_rendered_models(config, ["a", "b"], artifacts) == ("a",)


def test_configs_rendered_from_another_file_or_without_a_record_are_not_judged(tmp_path):
    config, artifacts = _built(tmp_path, models=("a",))
    other = tmp_path / "test-ports.toml"  # a test's own serving.toml beside the built repository
    other.write_text(SETTINGS.replace("8000", "18000"))
    assert stale_rendered_models(other, ["a", "never_built"], artifacts) == ()
    (artifacts / "a" / RENDERED_FROM_FILE).write_text(json.dumps({"unexpected": 1}))
    assert read_rendered_from(artifacts / "a") is None
    config.write_text(SETTINGS.replace("max_queue_size = 24", "max_queue_size = 20"))
    assert stale_rendered_models(config, ["a"], artifacts) == ()


def test_the_build_recorded_the_committed_serving_toml_for_every_installed_model(serving_spec):
    """`make build-engines` (which `make test` runs first) leaves every installed config current:
    `serving serve` would otherwise refuse to start them."""
    from conftest import REPOSITORY

    from contracts.layout import ARTIFACTS_DIR, SERVING_CONFIG

    built = [m.name for m in serving_spec.models if (REPOSITORY / m.name / "config.pbtxt").exists()]
    if not built:
        pytest.skip("no model is built yet (run `make build-engines`)")
    records = {name: read_rendered_from(ARTIFACTS_DIR / name) for name in built}
    assert all(r is not None and r.serving_config == str(SERVING_CONFIG.resolve()) for r in records.values()), records
    assert stale_rendered_models(SERVING_CONFIG, built, ARTIFACTS_DIR) == ()
