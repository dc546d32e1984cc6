import json
from pathlib import Path

import pytest

from contracts.manifest import Manifest, ManifestError, PartitionEntry, read_manifest, write_manifest

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


def served_plan_manifest() -> dict:
    """run/manifest.json's partitions and models as the launcher writes them for serving.toml on 2 cores."""
    from contracts.layout import SERVING_CONFIG
    from contracts.partition_plan import plan_partitions
    from contracts.serving_spec import load_serving_spec

    plan = plan_partitions(load_serving_spec(SERVING_CONFIG), cpu_count=2, gpu_present=False)
    return {"mechanism": plan.mechanism.value, "partitions": plan.to_dict()["partitions"],
            "models": {m: {**p.endpoints, "partition": p.name} for p in plan.partitions for m in p.models}}


def test_an_elastic_partition_runs_on_every_core_it_may_borrow():
    main = Manifest.from_dict(served_plan_manifest()).partition_of("text_embedder")
    assert main.cpus == (0,) and main.runs_on == (0, 1)
    assert Manifest.from_dict(DOCUMENT).partition_of("m").runs_on == (0, 1)  # older manifests: the home cores


def test_every_key_the_launcher_writes_for_a_partition_is_a_field_of_the_typed_reader():
    """`serving serve` printed compute_share, memory_mb and MPS from the raw dict: the reader had no field for them."""
    import dataclasses
    from contracts.layout import RunLayout
    from contracts.partition_plan import plan_partitions
    from contracts.serving_spec import load_serving_spec
    from contracts.layout import SERVING_CONFIG
    from serving.runtime.launcher import build_manifest

    plan = plan_partitions(load_serving_spec(SERVING_CONFIG), cpu_count=16, gpu_present=True)
    written = build_manifest(plan, RunLayout(Path("/tmp/run")), {})
    fields = {f.name for f in dataclasses.fields(PartitionEntry)}
    for name, entry in written["partitions"].items():
        assert set(entry) - {"mechanism"} <= fields, set(entry) - fields  # the plan's mechanism is the manifest's own
        read = Manifest.from_dict(written).partitions[name]
        assert (read.compute_share, read.memory_mb, dict(read.mps), read.log) == (
            entry["compute_share"], entry["memory_mb"], entry["mps"], entry["log"])


@pytest.mark.parametrize("document, named", [
    ({"partitions": {"main": {"mps": "50%"}}}, "`mps` is '50%'; expected an object"),
    ({"models": ["digit_classifier"]}, "`models` is"),
    ({"models": {"m": {"http": None}}}, r"model 'm' lacks \['http'\]"),
    ({"partitions": {"main": None}}, "partition 'main' is None"),
    ({"partitions": {"main": {"cpus": "0-1"}}}, "`cpus` is '0-1'; expected a list of core numbers"),
    ({"partitions": {"main": {"restarts": "2"}}}, "`restarts` is '2'; expected an integer"),
    ({"supervisor": "http://127.0.0.1:8090/metrics"}, "`supervisor` is"),
])
def test_a_hand_edited_manifest_is_a_manifest_error_not_a_python_one(document, named):
    with pytest.raises(ManifestError, match=named):
        Manifest.from_dict(document)
