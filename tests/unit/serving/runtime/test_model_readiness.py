"""Reading Triton's repository index: which expected models failed to load, and why (one line)."""
from __future__ import annotations

import pytest

from contracts.errors import ServingError
from serving.runtime.model_readiness import failed_models, parse_repository_index, short_reason

INDEX = [
    {"name": "good", "version": "1", "state": "READY"},
    {"name": "corrupt", "version": "1", "state": "UNAVAILABLE",
     "reason": "Internal: InvalidProtobuf: Load model from /r/corrupt/1/model.onnx failed:Protobuf parsing failed.\n\nAt:\n  model.py(51): initialize\n"},
    {"name": "unused", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"},
]


def test_failed_models_name_each_expected_model_without_a_ready_version():
    failed = failed_models(parse_repository_index(INDEX), ["good", "corrupt", "absent"])
    assert set(failed) == {"corrupt", "absent"}
    assert failed["corrupt"] == "version 1 UNAVAILABLE: Internal: InvalidProtobuf: Load model from /r/corrupt/1/model.onnx failed:Protobuf parsing failed."
    assert "not in the model repository" in failed["absent"]


def test_reasons_lose_the_traceback_and_stay_short():
    assert short_reason("a\n b\n\nAt:\n trace") == "a b"
    assert len(short_reason("x" * 5000)) == 400


def test_an_index_that_is_not_a_list_is_an_error():
    with pytest.raises(ServingError, match="expected a JSON list"):
        parse_repository_index({"error": "nope"})


def test_load_failures_are_read_from_the_server_log():
    from serving.runtime.model_readiness import load_failures_from_log

    log = (
        'I1129 10:05:53.1 10601 model_lifecycle.cc:472] "loading: missing:1"\n'
        'E1129 10:05:53.1 10601 model_lifecycle.cc:642] "failed to load \'missing\' version 1: Internal: '
        'TritonModelException: model \'missing\': ONNX file /r/missing/1/model.onnx does not exist; run `make build-engines`.'
        '\\n\\nAt:\\n  /b/onnxruntime_cpu/model.py(44): initialize\\n"\n'
        'I1129 10:05:53.1 10601 model_lifecycle.cc:777] "failed to load \'missing\'"\n'
    )
    assert load_failures_from_log(log) == {
        "missing": "version 1: Internal: TritonModelException: model 'missing': ONNX file /r/missing/1/model.onnx "
                   "does not exist; run `make build-engines`."
    }
