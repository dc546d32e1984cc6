"""Writing the chosen max_queue_delay back into serving.toml, preserving everything else."""
import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.writeback import set_model_queue_delay
from contracts.errors import ConfigError

TOML = """# comment kept
[batching]
max_queue_delay_microseconds = 10000

[priorities.batch]
level = 1
max_queue_size = 8
default_timeout_microseconds = 1000

[models.digits]
recipe = "digit_cnn"  # trailing comment kept

[models.other]
recipe = "digit_cnn"
max_queue_delay_microseconds = 7
"""


def test_inserts_the_key_into_the_right_model_table_only():
    text = set_model_queue_delay(TOML, "digits", 2000)
    assert "# comment kept" in text and "# trailing comment kept" in text
    digits_table = text.split("[models.digits]")[1].split("[models.other]")[0]
    assert "max_queue_delay_microseconds = 2000" in digits_table
    assert text.count("max_queue_delay_microseconds = 7") == 1
    assert text.count("max_queue_delay_microseconds = 10000") == 1


def test_replaces_an_existing_value():
    text = set_model_queue_delay(TOML, "other", 5000)
    assert "= 7" not in text and text.rstrip().endswith("max_queue_delay_microseconds = 5000  # chosen by perf_sweep's delay-window sweep")


def test_rejects_unknown_model_and_bad_values():
    with pytest.raises(SweepPlanError, match=r"\[models.nope\]"):
        set_model_queue_delay(TOML, "nope", 1)
    with pytest.raises(SweepPlanError, match="between 0 and 1000000"):
        set_model_queue_delay(TOML, "digits", 2_000_000)
    with pytest.raises(ConfigError):
        set_model_queue_delay(TOML.replace('recipe = "digit_cnn"  #', 'recipe = "Bad Name"  #'), "digits", 1)


def test_a_write_back_cut_short_leaves_the_old_serving_toml(tmp_path, monkeypatch):
    """serving.toml was rewritten in place: a write that failed midway left half a file behind."""
    from pathlib import Path

    from perf_sweep.writeback import write_queue_delay

    config = tmp_path / "serving.toml"
    config.write_text(TOML)

    def half_then_fail(self, text, *args, **kwargs):
        with open(self, "w") as out:
            out.write(text[: len(text) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_fail)
    with pytest.raises(OSError):
        write_queue_delay(config, "digits", 2000)
    assert config.read_text() == TOML


def test_the_key_goes_above_the_comment_block_of_the_next_table_not_under_it():
    toml = TOML.replace("[models.other]", "# the other model: a comment about it\n[models.other]")
    text = set_model_queue_delay(toml, "digits", 2000)
    assert ('recipe = "digit_cnn"  # trailing comment kept\nmax_queue_delay_microseconds = 2000'
            in text), text
    assert "\n\n# the other model: a comment about it\n[models.other]" in text
