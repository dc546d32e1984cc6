import json

import pytest

from contracts.manifest import Manifest, ManifestError, read_manifest, write_manifest

DOCUMENT = {
    "mechanism": "cpu_sets",
    "partitions": {"main": {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001", "metrics": "http://127.0.0.1:8002/metrics",
                            "pid": 42, "state": "running", "restarts": 1, "cpus": [0, 1], "intra_op_threads": 2, "models": ["m"]}},
    "models": {"m": {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001", "metrics": "http://127.0.0.1:8002/metrics", "partition": "main"}},
    "supervisor": {"metrics": "http://127.0.0.1:8090/metrics"},
}


def test_written_manifest_reads_back_typed(tmp_path):
    path = write_manifest(DOCUMENT, tmp_path / "manifest.json")
    manifest = read_manifest(path)
    assert manifest.model("m").url("grpc") == "127.0.0.1:8001" and manifest.model("m").url("http") == "127.0.0.1:8000"
    part = manifest.partition_of("m")
    assert (part.name, part.pid, part.cpus, part.intra_op_threads, part.models) == ("main", 42, (0, 1), 2, ("m",))
    assert manifest.supervisor_metrics == "http://127.0.0.1:8090/metrics" and manifest.mechanism == "cpu_sets"


def test_broken_manifests_are_explained(tmp_path):
    with pytest.raises(ManifestError, match="make serve"):
        read_manifest(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ManifestError, match="not JSON"):
        read_manifest(tmp_path / "bad.json")
    with pytest.raises(ManifestError, match=r"model 'm' lacks \['http'\]"):
        Manifest.from_dict({"models": {"m": {"grpc": "x"}}})
    with pytest.raises(ManifestError, match="served models: \\['m'\\]"):
        Manifest.from_dict(DOCUMENT).model("other")
    with pytest.raises(ManifestError):
        write_manifest({"models": {"m": {}}}, tmp_path / "never.json")
    assert not (tmp_path / "never.json").exists()
    assert json.loads(json.dumps(DOCUMENT)) == DOCUMENT
