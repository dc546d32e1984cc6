"""run/supervisor.json's typed reader and writer: what the supervisor writes reads back equal; a
broken file is named with the expected form; an older or newer writer's extra keys are tolerated."""
from __future__ import annotations

import json

import pytest

from contracts.supervisor_state import (
    PartitionStatus, StubSummary, SupervisorState, SupervisorStateError, read_supervisor_state, write_supervisor_state,
)


def _state() -> SupervisorState:
    stubs = {"enc": StubSummary(expected=2, pids=(41, 42), reloads=1, attempts=1, last_reason="lost a backend stub (pid 40)")}
    return SupervisorState(supervisor_pid=7, status="degraded", mechanism="cpu_sets", updated_at=1.5, partitions={
        "main": PartitionStatus(pid=11, state="crash_loop", restarts=6, last_exit="killed by SIGSEGV", crash_loop=True,
                                crash_loops=1, restarts_in_window=5, restart_budget=5, window_s=600.0, next_attempt_in_s=287.4,
                                models_ready={"enc": True, "bad": False}, stubs=stubs, cpus_now=(0, 1)),
        "fallback": PartitionStatus(pid=12, state="ready")})


def test_what_is_written_reads_back_equal(tmp_path):
    path = write_supervisor_state(_state(), tmp_path / "supervisor.json")
    assert read_supervisor_state(path) == _state()
    assert json.loads(path.read_text())["partitions"]["main"]["stubs"]["enc"]["pids"] == [41, 42]
    assert read_supervisor_state(path).partitions["main"].failed_models == ["bad"]
    assert not (tmp_path / "supervisor.tmp").exists()


def test_no_file_yet_is_none_not_an_error(tmp_path):
    assert read_supervisor_state(tmp_path / "supervisor.json") is None


def test_unknown_keys_are_ignored_and_missing_ones_take_their_defaults():
    state = SupervisorState.from_dict({"supervisor_pid": 3, "status": "ready", "added_later": 1,
                                       "partitions": {"p": {"pid": 5, "state": "ready", "new_key": True}}})
    assert state.partitions["p"] == PartitionStatus(pid=5, state="ready") and state.running


@pytest.mark.parametrize("document, named", [
    ([], "integer `supervisor_pid`"),
    ({"status": "ready"}, "integer `supervisor_pid`"),
    ({"supervisor_pid": 1, "partitions": {"p": "ready"}}, "partition 'p' is not a partition entry"),
    # keys of another type (a hand edit): named, not a raw AttributeError / TypeError out of `make status`
    ({"supervisor_pid": 1, "partitions": ["p"]}, r"AttributeError: .*expected the objects the supervisor writes"),
    ({"supervisor_pid": 1, "partitions": {"p": {"stubs": {"m": None}}}}, "expected the objects the supervisor writes"),
    ({"supervisor_pid": 1, "partitions": {"p": {"cpus_now": 3}}}, r"TypeError: .*expected the objects the supervisor writes"),
    ({"supervisor_pid": 1, "partitions": {"p": {"models_ready": [1]}}}, "expected the objects the supervisor writes"),
])
def test_a_broken_file_is_named_with_the_expected_form(tmp_path, document, named):
    path = tmp_path / "supervisor.json"
    path.write_text(json.dumps(document))
    with pytest.raises(SupervisorStateError, match=named) as caught:
        read_supervisor_state(path)
    assert str(path) in str(caught.value)
