"""results.json of a `perf_sweep run` folder: typed, written and read back in the form it always had."""
from __future__ import annotations

import copy
import json
import math

import pytest

from contracts.perf_results import (
    RESULTS_FILE, PerfRecord, PerfResultsError, PerfRunResults, read_perf_results, write_perf_results,
)


def level(sweep: str, load: float, throughput: float, **extra) -> dict:
    return PerfRecord(sweep=sweep, model="digit_classifier", variant="fp32", mode="concurrency", load=load, batch_size=1,
                      status="ok", command="perf_analyzer -m digit_classifier", throughput=throughput, p50_ms=1.0,
                      p95_ms=2.0, p99_ms=3.0, requests=1000, server={"avg_batch_size": 2.0}, **extra).as_dict()


#: The form `perf_sweep run` writes today (keys in the order it writes them), shortened.
DOCUMENT = {
    "run_id": "20261201-155416", "command": "python -m perf_sweep run --quick", "host": "box, x86_64, 8 CPUs usable",
    "records": [level("digit_classifier.concurrency", 1, 400.0), level("ab.dynamic.concurrency", 16, 1500.0),
                {**level("digit_classifier.concurrency", 32, math.nan), "status": "failed", "note": "timeout"}],
    "knees": {"digit_classifier.concurrency": {"text": "not reached up to concurrency 16", "knee": None,
                                               "peak": {"load": 16, "throughput": 1500.0, "p99_ms": 21.9}}},
    "inputs": {"digit_classifier": "359 held-out test-split digit images"},
    "skipped": ["partitioned vs shared: no model with digit_classifier's inputs is served in another partition"],
    "headlines": ["Dynamic batching vs none at concurrency 16: 3.14x [target >= 2x]"],
    "limits": {"text_embedder": {"text": "tokenize + encode", "unit": "texts/s", "best": {"batch_size": 16, "throughput": 180.0},
                                 "points": [{"batch_size": 16, "throughput": 180.0, "batch_latency_ms": 88.9}]}},
    "limit": {"text": "digits in ORT", "points": [{"batch_size": 64, "throughput": 23476.0, "batch_latency_ms": 2.7}],
              "best": {"batch_size": 64, "throughput": 23476.0, "batch_latency_ms": 2.7}},
    "ab_notes": ["Temporary server pinned to CPUs 0-3; variants: dynamic, none."],
    "candidates": {"rows": [], "plain_c16": 1000.0, "table": "| a |", "requests_all_closed_loop": 5, "stalled_all_closed_loop": 0},
    "loadgen": [{"experiment": "static vs dynamic", "variant": "static", "load": "20 req/s", "streams": []}],
    "delay": {"text": "chose 2000 us", "chosen_us": 2000},
    "priority": {"text": ["Realtime alone: P99 3 ms."], "streams": []},
    "peers": {"skipped": "peer comparison: SKIPPED: .venv/peers is missing."},
}


def test_a_written_run_reads_back_typed_in_the_same_json(tmp_path):
    path = write_perf_results(tmp_path, PerfRunResults.from_dict(DOCUMENT))
    assert path == tmp_path / RESULTS_FILE
    # Byte for byte what the campaign wrote before the typed writer (json.dumps(indent=1)).
    assert path.read_text() == json.dumps(DOCUMENT, indent=1, default=str)
    results = read_perf_results(tmp_path)
    assert json.dumps(read_perf_results(path).as_dict()) == json.dumps(results.as_dict())  # the file, or its folder
    assert (results.run_id, results.host, results.headlines) == (DOCUMENT["run_id"], DOCUMENT["host"], tuple(DOCUMENT["headlines"]))
    assert isinstance(results.records[0], PerfRecord) and results.records[0].throughput == 400.0
    assert results.records[2].status == "failed" and math.isnan(results.records[2].throughput)
    assert results.limit["best"]["throughput"] == 23476.0 and results.ab_notes == tuple(DOCUMENT["ab_notes"])
    assert results.peers == DOCUMENT["peers"] and results.extra == {}


def test_an_older_run_folder_still_reads(tmp_path):
    """A run from before the text limits and the A/B block's later sections: no `limits`, records
    without `stalled`, a section this version does not know (kept and written back)."""
    old = {k: copy.deepcopy(DOCUMENT[k]) for k in ("run_id", "command", "host", "records", "knees", "inputs", "skipped",
                                                   "headlines", "limit", "ab_notes", "delay")}
    for record in old["records"]:
        del record["stalled"]
    old["retired_section"] = {"text": "kept"}
    (tmp_path / RESULTS_FILE).write_text(json.dumps(old, indent=1))
    results = read_perf_results(tmp_path)
    assert results.limits == {} and results.priority is None and results.loadgen is None and results.peers is None
    assert results.records[0].stalled == 0 and results.delay["chosen_us"] == 2000
    assert results.extra == {"retired_section": {"text": "kept"}}
    written = json.loads(write_perf_results(tmp_path / "again", results).read_text())
    assert written["retired_section"] == {"text": "kept"} and written["limits"] == {} and "priority" not in written


def test_a_missing_or_unreadable_file_is_named(tmp_path):
    with pytest.raises(PerfResultsError, match=r"results.json is missing: expected a run folder written by `python -m perf_sweep run`"):
        read_perf_results(tmp_path)
    (tmp_path / RESULTS_FILE).write_text("{not json")
    with pytest.raises(PerfResultsError, match=rf"{tmp_path / RESULTS_FILE} is not JSON"):
        read_perf_results(tmp_path)
    (tmp_path / RESULTS_FILE).write_text("[]")
    with pytest.raises(PerfResultsError, match=r"is a list of 0; expected a JSON object with keys \['run_id'"):
        read_perf_results(tmp_path)


def test_a_missing_key_names_the_file_the_key_and_what_every_run_writes(tmp_path):
    broken = {k: v for k, v in DOCUMENT.items() if k not in ("host", "knees")}
    (tmp_path / RESULTS_FILE).write_text(json.dumps(broken))
    with pytest.raises(PerfResultsError) as error:
        read_perf_results(tmp_path)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / RESULTS_FILE} lacks ['host', 'knees']; every `perf_sweep run` writes ['run_id',")
    peers = {"run_id": "peers-1", "command": "python -m perf_sweep peers", "levels": [], "verdicts": [], "headlines": []}
    with pytest.raises(PerfResultsError, match="a peer comparison's or generation benchmark's results.json is another document"):
        PerfRunResults.from_dict(peers)


@pytest.mark.parametrize(("change", "expected"), [
    ({"skipped": "one line"}, r"`skipped` is the string 'one line'; expected a list, each item a string"),
    ({"headlines": ["ok", 3.5]}, r"`headlines\[1\]` is the number 3.5; expected a string"),
    ({"run_id": 20261201}, r"`run_id` is the number 20261201; expected a string"),
    ({"records": [{"sweep": "s", "model": "m"}]}, r"`records\[0\]` is an object with keys \['model', 'sweep'\]; "
                                                 r"expected a measured level: an object with at least \['sweep', 'model', 'variant'"),
    ({"knees": {"m.concurrency": {"knee": None}}}, r"`knees.m.concurrency` is an object with keys \['knee'\]; expected an object \{\"text\""),
    ({"inputs": {"m": None}}, r"`inputs.m` is null; expected a string"),
    ({"limit": {"text": "no points"}}, r"`limit` is an object with keys \['text'\]; expected an object \{\"text\": ..., \"points\""),
    ({"priority": ["a list"]}, r"`priority` is a list of 1; expected an object"),
])
def test_a_wrong_form_names_the_key_and_the_expected_form(change, expected):
    with pytest.raises(PerfResultsError, match=r"^results.json: " + expected):
        PerfRunResults.from_dict({**DOCUMENT, **change})


def test_a_broken_document_is_not_written(tmp_path):
    with pytest.raises(PerfResultsError, match="the results being written lacks"):
        write_perf_results(tmp_path, {"run_id": "r"})
    assert not (tmp_path / RESULTS_FILE).exists()
