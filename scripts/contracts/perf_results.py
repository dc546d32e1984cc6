"""reports/perf/<run id>/results.json: what one `perf_sweep run` measured. Written by the campaign
(`perf_sweep.campaign.run_campaign`), read back by `python -m perf_sweep report <folder>` to
re-render report.md and its plots, both through `PerfRunResults`.

Why a typed reader: the document used to be a free dict built in one module and picked apart in
two others, each with its own idea of which keys exist, so a broken or foreign file failed deep in
the renderer with a bare KeyError. `PerfRunResults.from_dict` says once what every run writes,
which sections only some runs write (the A/B block's, the peer section's), and what is wrong with
a broken file (the file, the key and the expected form). The JSON keeps the form it always had:
older run folders still read, and sections this reader does not know are kept and written back.

The peer comparison (`perf_sweep peers`) and the generation benchmark write results.json files
of other documents (other keys, their own renderers); this reader is not theirs.
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from contracts.errors import ServingError
from contracts.layout import write_text_atomically

RESULTS_FILE = "results.json"


class PerfResultsError(ServingError, ValueError):
    """A run folder's results.json is missing or not of the form `perf_sweep run` writes."""


@dataclass(frozen=True)
class PerfRecord:
    """One measured load level of one sweep: everything the report needs, JSON-able."""

    sweep: str
    model: str
    variant: str
    mode: str
    load: float
    batch_size: int
    status: str  # "ok", "unstable" (fixed-count fallback), "failed"
    command: str
    throughput: float = math.nan
    p50_ms: float = math.nan
    p95_ms: float = math.nan
    p99_ms: float = math.nan
    avg_ms: float = math.nan
    server_queue_ms: float = math.nan
    server_compute_ms: float = math.nan
    requests: int = 0
    errors: int = 0
    #: Requests of the measured windows that took >= perf_sweep.results.STALL_MS (see the report's note on stalls).
    stalled: int = 0
    send_rate: float | None = None
    delayed_fraction: float | None = None
    server: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def error_rate(self) -> float:
        total = self.requests + self.errors
        return self.errors / total if total else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "error_rate": self.error_rate}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "PerfRecord":
        """Unknown keys (the derived `error_rate`, keys of other versions) are left out."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


#: The keys every measured level has (the others have defaults: older records lack some of them).
RECORD_KEYS = tuple(f.name for f in fields(PerfRecord) if f.default is MISSING and f.default_factory is MISSING)
#: What every run writes, in the order it is written. Runs before the text models' in-process
#: limits lack `limits` (read as an empty object), so it is not among them.
REQUIRED_KEYS = ("run_id", "command", "host", "records", "knees", "inputs", "skipped", "headlines")
#: Sections only some runs write: the A/B block's (`limit` ... `priority`) and the peer section.
SECTION_KEYS = ("limit", "ab_notes", "candidates", "loadgen", "delay", "priority", "peers")
_KNEE_FORM = 'an object {"text": ..., "knee": ..., "peak": ...}'
_LIMIT_FORM = 'an object {"text": ..., "points": [...], "best": ...}'
_LOADGEN_FORM = 'an object {"experiment", "variant", "load", "streams": [...]}'


@dataclass(frozen=True)
class PerfRunResults:
    """One campaign's results.json, typed. An optional section is None when the run wrote none."""

    run_id: str
    command: str
    host: str
    records: tuple[PerfRecord, ...]
    #: sweep name -> {"text": the knee described, "knee": point or None, "peak": point or None}.
    knees: Mapping[str, Mapping[str, Any]]
    #: model -> how its inputs were generated.
    inputs: Mapping[str, str]
    skipped: tuple[str, ...]
    headlines: tuple[str, ...]
    #: text model -> its in-process limit {"text", "points", "best", "runs", "unit", ...}.
    limits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The A/B model's in-process ONNX Runtime limit {"text", "points", "best"}.
    limit: Mapping[str, Any] | None = None
    ab_notes: tuple[str, ...] | None = None
    #: Batcher candidates {"rows", "plain_c16", "table", "requests_all_closed_loop", "stalled_all_closed_loop"}.
    candidates: Mapping[str, Any] | None = None
    #: The open-loop client's rows {"experiment", "variant", "load", "streams"}.
    loadgen: tuple[Mapping[str, Any], ...] | None = None
    #: The batching delay sweep {"text", "chosen_us"}.
    delay: Mapping[str, Any] | None = None
    #: The priority mix {"text": [lines], "streams": [loadgen rows]}.
    priority: Mapping[str, Any] | None = None
    #: The peer section {"report", "summary", "headlines"}, or {"skipped": line}.
    peers: Mapping[str, Any] | None = None
    #: Top-level keys this reader does not know (another version's sections), written back unchanged.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = RESULTS_FILE) -> "PerfRunResults":
        if not isinstance(data, Mapping):
            raise PerfResultsError(f"{source} is {_kind(data)}; expected a JSON object with keys {list(REQUIRED_KEYS)} "
                                   "(the results.json of a `perf_sweep run` folder).")
        missing = [k for k in REQUIRED_KEYS if k not in data]
        if missing:
            raise PerfResultsError(f"{source} lacks {missing}; every `perf_sweep run` writes {list(REQUIRED_KEYS)} "
                                   "(a peer comparison's or generation benchmark's results.json is another document).")
        typed: dict[str, Any] = dict(
            run_id=_text(data["run_id"], source, "run_id"), command=_text(data["command"], source, "command"),
            host=_text(data["host"], source, "host"), records=_records(data["records"], source),
            knees=_by_name(data["knees"], source, "knees", _has_keys("text"), _KNEE_FORM),
            inputs=_by_name(data["inputs"], source, "inputs", _is_str, "a string"),
            skipped=_strings(data["skipped"], source, "skipped"),
            headlines=_strings(data["headlines"], source, "headlines"),
            limits=_by_name(data.get("limits") or {}, source, "limits", _has_keys("text", "points"), _LIMIT_FORM))
        typed.update({key: _SECTIONS[key](data[key], source, key) for key in SECTION_KEYS if data.get(key) is not None})
        known = {*REQUIRED_KEYS, "limits", *SECTION_KEYS}
        return cls(**typed, extra={k: v for k, v in data.items() if k not in known})

    def as_dict(self) -> dict[str, Any]:
        """The JSON document, of the form results.json has always had (absent sections left out)."""
        document: dict[str, Any] = {
            "run_id": self.run_id, "command": self.command, "host": self.host,
            "records": [r.as_dict() for r in self.records], "knees": _plain(self.knees), "inputs": dict(self.inputs),
            "skipped": list(self.skipped), "headlines": list(self.headlines), "limits": _plain(self.limits)}
        for key in SECTION_KEYS:
            if getattr(self, key) is not None:
                document[key] = _plain(getattr(self, key))
        return {**document, **_plain(self.extra)}


def _kind(value: Any) -> str:
    """What a JSON value is, in the words of an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, Mapping):
        return f"an object with keys {sorted(map(str, value))[:8]}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    return type(value).__name__


def _expect(ok: bool, value: Any, source: str, key: str, expected: str) -> None:
    if not ok:
        raise PerfResultsError(f"{source}: `{key}` is {_kind(value)}; expected {expected}.")


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _has_keys(*keys: str) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, Mapping) and all(k in value for k in keys)


def _text(value: Any, source: str, key: str) -> str:
    _expect(isinstance(value, str), value, source, key, "a string")
    return value


def _items(value: Any, source: str, key: str, item_ok: Callable[[Any], bool], item_form: str) -> tuple:
    _expect(isinstance(value, (list, tuple)), value, source, key, f"a list, each item {item_form}")
    for i, item in enumerate(value):
        _expect(item_ok(item), item, source, f"{key}[{i}]", item_form)
    return tuple(value)


def _strings(value: Any, source: str, key: str) -> tuple[str, ...]:
    return _items(value, source, key, _is_str, "a string")


def _by_name(value: Any, source: str, key: str, item_ok: Callable[[Any], bool], item_form: str) -> dict[str, Any]:
    _expect(isinstance(value, Mapping), value, source, key, f"an object: name -> {item_form}")
    for name, item in value.items():
        _expect(item_ok(item), item, source, f"{key}.{name}", item_form)
    return dict(value)


def _records(value: Any, source: str) -> tuple[PerfRecord, ...]:
    form = f"a measured level: an object with at least {list(RECORD_KEYS)}"
    return tuple(PerfRecord.from_dict(r) for r in _items(value, source, "records", _has_keys(*RECORD_KEYS), form))


def _section(value: Any, source: str, key: str) -> dict[str, Any]:
    _expect(isinstance(value, Mapping), value, source, key, "an object (this section's own keys)")
    return dict(value)


def _limit(value: Any, source: str, key: str) -> dict[str, Any]:
    _expect(_has_keys("text", "points")(value), value, source, key, _LIMIT_FORM)
    return dict(value)


def _loadgen(value: Any, source: str, key: str) -> tuple[Mapping[str, Any], ...]:
    return _items(value, source, key, _has_keys("streams"), _LOADGEN_FORM)


#: How each optional section is checked (and stored: objects as dicts, lists as tuples).
_SECTIONS: Mapping[str, Callable[[Any, str, str], Any]] = {
    "limit": _limit, "ab_notes": _strings, "candidates": _section, "loadgen": _loadgen,
    "delay": _section, "priority": _section, "peers": _section,
}


def _plain(value: Any) -> Any:
    """Plain dicts and lists all the way down: json.dumps(default=str) would write any other
    Mapping as its repr, silently."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def as_perf_results(results: "PerfRunResults | Mapping[str, Any]", source: str = RESULTS_FILE) -> PerfRunResults:
    """A `PerfRunResults` from either a parsed document or a `PerfRunResults` (the renderer takes both)."""
    return results if isinstance(results, PerfRunResults) else PerfRunResults.from_dict(results, source)


def perf_results_path(folder_or_path: Path) -> Path:
    """results.json of a run folder; a path to the file itself is taken as it is."""
    path = Path(folder_or_path)
    return path / RESULTS_FILE if path.is_dir() else path


def read_perf_results(folder_or_path: Path) -> PerfRunResults:
    path = perf_results_path(folder_or_path)
    try:
        return PerfRunResults.from_dict(json.loads(path.read_text()), str(path))
    except FileNotFoundError:
        raise PerfResultsError(f"{path} is missing: expected a run folder written by `python -m perf_sweep run` "
                               "(reports/perf/<run id>/, holding results.json).") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PerfResultsError(f"{path} is not JSON ({exc}); expected the results.json `perf_sweep run` writes.") from None


def write_perf_results(folder: Path, results: "PerfRunResults | Mapping[str, Any]") -> Path:
    """Write folder/results.json atomically (a re-render never reads half a file). A plain
    document is checked by the reader first, so what is written always reads back."""
    document = as_perf_results(results, "the results being written").as_dict()
    return write_text_atomically(Path(folder) / RESULTS_FILE, json.dumps(document, indent=1, default=str))
