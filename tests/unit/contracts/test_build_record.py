import pytest

from contracts.build_record import BuildRecord, BuildRecordError, read_build_record, write_build_record


def test_written_record_reads_back_typed(tmp_path):
    (tmp_path / "int8.onnx").write_bytes(b"x")
    write_build_record(tmp_path, {"model": "m", "recipe": "r", "fingerprint": "f", "files": ["int8.onnx"], "served_file": "fp32.onnx",
                                  "variants": {"int8_mixed": {"file": "int8.onnx"}, "fp16": {"file": "absent.onnx"}},
                                  "build_seconds": 1.5, "corpus": {"file": "c.json"}})
    record = read_build_record(tmp_path)
    assert (record.model, record.recipe, record.files, record.build_seconds) == ("m", "r", ("int8.onnx",), 1.5)
    assert record.variant_files(tmp_path) == {"int8_mixed": tmp_path / "int8.onnx"}  # only files that exist
    assert record.data["corpus"] == {"file": "c.json"}  # recipe-specific keys stay readable


def test_broken_records_name_the_problem(tmp_path):
    with pytest.raises(BuildRecordError, match="missing: build .* first"):
        read_build_record(tmp_path)
    with pytest.raises(BuildRecordError, match=r"lacks \['fingerprint', 'files'\]"):
        BuildRecord.from_dict({"model": "m", "recipe": "r"})
    with pytest.raises(BuildRecordError):
        write_build_record(tmp_path, {"model": "m"})
    assert not (tmp_path / "build.json").exists()


@pytest.mark.parametrize("document, named", [
    (3, "is a JSON int"),
    ({"model": "m", "recipe": "r", "fingerprint": "f", "files": None}, "`files` = None; expected a list"),
    ({"model": "m", "recipe": "r", "fingerprint": "f", "files": [], "variants": ["int8_mixed"]}, "`variants`"),
    ({"model": "m", "recipe": "r", "fingerprint": "f", "files": [], "variants": {"int8_mixed": "int8.onnx"}}, "`variants`"),
    ({"model": "m", "recipe": "r", "fingerprint": "f", "files": [], "build_seconds": "1.2 s"}, "`build_seconds`"),
])
def test_a_hand_edited_record_is_a_build_record_error_not_a_python_one(tmp_path, document, named):
    """The build takes a BuildRecordError for "not built" and rebuilds; a TypeError ended `make build-engines`."""
    (tmp_path / "build.json").write_text(__import__("json").dumps(document))
    with pytest.raises(BuildRecordError, match=named):
        read_build_record(tmp_path)
