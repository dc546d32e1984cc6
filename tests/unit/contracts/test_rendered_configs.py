"""contracts.rendered_configs: which serving.toml the installed configs were rendered from, and
`serving serve`'s refusal of configs rendered from an older version of the same file."""
from __future__ import annotations

import json

import pytest

from contracts.rendered_configs import (
    RENDERED_FROM_FILE,
    ConfigCheck,
    check_rendered_configs,
    config_name,
    read_rendered_from,
    settings_digest,
    write_rendered_from,
)

SETTINGS = """
# realtime first
[priorities.realtime]
level = 1
max_queue_size = 24

[server]
http_port = 8000
max_input_bytes = 1048576
"""


def test_the_digest_is_of_what_rendering_reads_not_of_comments_layout_key_order_or_ports():
    reordered = ("[server]\nmax_input_bytes = 1048576\nhttp_port = 18000  # another port\n\n"
                 "[priorities.realtime]\nmax_queue_size = 24  # changed comment\nlevel = 1\n")
    assert settings_digest(SETTINGS) == settings_digest(reordered)
    assert settings_digest(SETTINGS) != settings_digest(SETTINGS.replace("max_queue_size = 24", "max_queue_size = 20"))
    assert settings_digest(SETTINGS) != settings_digest(SETTINGS.replace("1048576", "2097152"))  # checked per config
    assert settings_digest("not [ toml") != settings_digest("not [ toml either")  # the build refuses it; still a digest


def _built(tmp_path, models=("a", "b")):
    config = tmp_path / "serving.toml"
    config.write_text(SETTINGS)
    artifacts = tmp_path / "artifacts"
    for model in models:
        write_rendered_from(artifacts / model, config, settings_digest(config.read_text()))
    return config, artifacts


def test_configs_rendered_from_this_serving_toml_are_current_until_a_rendered_setting_changes(tmp_path):
    config, artifacts = _built(tmp_path)
    record = read_rendered_from(artifacts / "a")
    assert record is not None and record.serving_config == config_name(config)
    assert check_rendered_configs(config, ["a", "b"], artifacts) == ConfigCheck()
    config.write_text(SETTINGS.replace("# realtime first", "# a comment only").replace("8000", "18000"))
    assert check_rendered_configs(config, ["a", "b"], artifacts) == ConfigCheck()
    config.write_text(SETTINGS.replace("max_queue_size = 24", "max_queue_size = 20"))
    assert check_rendered_configs(config, ["a", "b"], artifacts).stale == ("a", "b")
    write_rendered_from(artifacts / "b", config, settings_digest(config.read_text()))  # b rendered again
    assert check_rendered_configs(config, ["a", "b"], artifacts).stale == ("a",)


def test_a_build_records_the_settings_it_parsed_not_an_edit_made_while_it_ran(tmp_path):
    config = tmp_path / "serving.toml"
    config.write_text(SETTINGS)
    parsed = settings_digest(config.read_text())  # as the build does at its start
    config.write_text(SETTINGS.replace("max_queue_size = 24", "max_queue_size = 20"))  # edited during the build
    write_rendered_from(tmp_path / "artifacts" / "a", config, parsed)
    assert check_rendered_configs(config, ["a"], tmp_path / "artifacts").stale == ("a",)


def test_configs_rendered_from_another_file_with_other_settings_are_reported_and_none_without_a_record(tmp_path):
    config, artifacts = _built(tmp_path, models=("a",))
    same_settings = tmp_path / "test-ports.toml"  # a test's own serving.toml beside the built repository
    same_settings.write_text(SETTINGS.replace("8000", "18000"))
    assert check_rendered_configs(same_settings, ["a", "never_built"], artifacts) == ConfigCheck()
    other = tmp_path / "other.toml"
    other.write_text(SETTINGS.replace("max_queue_size = 24", "max_queue_size = 20"))
    assert check_rendered_configs(other, ["a"], artifacts) == ConfigCheck((), (("a", config_name(config)),))
    (artifacts / "a" / RENDERED_FROM_FILE).write_text(json.dumps({"unexpected": 1}))
    assert read_rendered_from(artifacts / "a") is None
    assert check_rendered_configs(other, ["a"], artifacts) == ConfigCheck()


def test_a_serving_toml_inside_the_checkout_is_named_relative_to_it():
    from contracts.layout import PROJECT_ROOT, SERVING_CONFIG

    assert config_name(SERVING_CONFIG) == "model_repository/serving.toml"
    assert config_name(PROJECT_ROOT.parent / "elsewhere.toml") == str((PROJECT_ROOT.parent / "elsewhere.toml").resolve())


@pytest.mark.built
def test_the_build_recorded_the_committed_serving_toml_for_every_installed_model(serving_spec):
    """`make build-engines` (which `make test` runs first) leaves every installed config current:
    `serving serve` would otherwise refuse to start them."""
    from conftest import REPOSITORY

    from contracts.layout import ARTIFACTS_DIR, SERVING_CONFIG

    built = [m.name for m in serving_spec.models if (REPOSITORY / m.name / "config.pbtxt").exists()]
    if not built:
        pytest.skip("no model is built yet (run `make build-engines`)")
    records = {name: read_rendered_from(ARTIFACTS_DIR / name) for name in built}
    assert all(r is not None and r.serving_config == "model_repository/serving.toml" for r in records.values()), records
    assert check_rendered_configs(SERVING_CONFIG, built, ARTIFACTS_DIR) == ConfigCheck()


def test_the_build_parses_and_digests_one_read_of_serving_toml(monkeypatch):
    """The build and size-batches parsed the file, then read it again for the digest: an edit between the
    two reads recorded settings that were never rendered."""
    from pathlib import Path

    from contracts.errors import ConfigError
    from contracts.layout import SERVING_CONFIG
    from contracts.rendered_configs import load_serving_spec_and_digest
    from contracts.serving_spec import load_serving_spec

    reads = []
    read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: reads.append(self) or read_text(self, *a, **k))
    spec, digest = load_serving_spec_and_digest(SERVING_CONFIG)
    assert reads == [SERVING_CONFIG]
    assert spec == load_serving_spec(SERVING_CONFIG) and digest == settings_digest(SERVING_CONFIG.read_text())
    with pytest.raises(ConfigError, match="serving configuration .*missing.toml does not exist"):
        load_serving_spec_and_digest(SERVING_CONFIG.parent / "missing.toml")
