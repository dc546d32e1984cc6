"""The served files, read from the repository's configs: the ensemble layout and a fused text model alike."""
from pathlib import Path

import pytest

from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.served_files import ServedFiles, served_files


def param(key, value):
    return f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'


def write(repo: Path, model: str, config: str, files=()):
    (repo / model / "1").mkdir(parents=True, exist_ok=True)
    (repo / model / "config.pbtxt").write_text(f'name: "{model}"\n{config}\n')
    for name in files:
        (repo / model / "1" / name).write_text("x")


def digits(repo):
    write(repo, "digit_classifier", 'backend: "onnxruntime_cpu"\n' + param("onnx_file", "model.onnx"), ["model.onnx"])


def test_an_ensemble_serves_its_tokenizer_steps_tokenizer_and_its_encoder_steps_onnx(tmp_path):
    digits(tmp_path)
    write(tmp_path, "text_embedder", 'platform: "ensemble"\nensemble_scheduling { step { model_name: "tok" model_version: -1 } '
                                     'step { model_name: "enc" model_version: -1 } }')
    write(tmp_path, "tok", 'backend: "python"\ninput [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
          + param("max_length", "96") + "\n" + param("tokenizer_file", "tokenizer.json"), ["tokenizer.json"])
    write(tmp_path, "enc", 'backend: "onnxruntime_cpu"\ninput [ { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] } ]\n'
          + param("onnx_file", "int8.onnx") + "\n" + param("sequence_buckets", "16,32,96"), ["int8.onnx"])
    files = served_files(tmp_path)
    assert files.served_buckets == (16, 32, 96)  # the in-process limit also tries the served buckets
    assert files.text_onnx == tmp_path / "enc/1/int8.onnx" and files.tokenizer_json == tmp_path / "tok/1/tokenizer.json"
    assert files.max_length == 96 and files.text_layout == "ensemble tok -> enc"
    assert files.digits_onnx == tmp_path / "digit_classifier/1/model.onnx"


def test_a_fused_text_model_serves_its_own_files_from_its_highest_version(tmp_path):
    digits(tmp_path)
    write(tmp_path, "text_embedder", 'backend: "onnxruntime_cpu"\n' + param("onnx_file", "model.onnx") + "\n"
          + param("tokenizer_file", "tokenizer.json") + "\n" + param("max_length", "128"), ["model.onnx", "tokenizer.json"])
    (tmp_path / "text_embedder" / "2").mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        (tmp_path / "text_embedder" / "2" / name).write_text("y")
    files = ServedFiles.from_repository(tmp_path)
    assert files.text_onnx == tmp_path / "text_embedder/2/model.onnx" and files.max_length == 128
    assert files.served_buckets == ()
    assert "one model `text_embedder`" in files.describe(tmp_path) and "`digit_classifier/1/model.onnx`" in files.describe(tmp_path)


def test_missing_configs_and_files_name_what_to_build(tmp_path):
    with pytest.raises(SweepPlanError, match="make build-engines"):
        served_files(tmp_path)
    digits(tmp_path)
    write(tmp_path, "text_embedder", 'backend: "onnxruntime_cpu"\n' + param("onnx_file", "model.onnx"), ["model.onnx"])
    with pytest.raises(SweepPlanError, match="tokenizer.json"):
        served_files(tmp_path)
    write(tmp_path, "text_embedder", 'backend: "onnxruntime_cpu"\n' + param("onnx_file", "model.onnx") + "\n"
          + param("tokenizer_file", "tokenizer.json"), ["model.onnx", "tokenizer.json"])
    with pytest.raises(SweepPlanError, match="no `max_length` parameter"):  # no silent default length
        served_files(tmp_path)
    (tmp_path / "text_embedder" / "config.pbtxt").write_text("not { a config")
    with pytest.raises(SweepPlanError, match="not a Triton model config"):
        served_files(tmp_path)


def test_the_repositorys_own_served_files_resolve_when_built():
    from conftest import REPOSITORY as repo
    if not (repo / "text_embedder" / "config.pbtxt").exists():
        pytest.skip("the models are not built here (make build-engines)")
    files = served_files(repo)
    assert files.text_onnx.is_file() and files.tokenizer_json.is_file() and files.max_length == 128
