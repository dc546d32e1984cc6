"""The variables a partition's tritonserver gets from its plan (contracts.partition_plan writes them,
the backends in its stubs read them), with their one reader each.

A module of its own, importing nothing: the backend stubs import it, and they run on the pods'
Python 3.10, where contracts.partition_plan (serving.toml, tomllib) does not import.
"""
from __future__ import annotations

import os
from typing import Iterable, Mapping

#: ONNX Runtime intra-op threads per model instance (contracts.partition_plan.PlannedPartition.intra_op_threads).
INTRA_OP_THREADS_ENV = "SERVING_INTRA_OP_THREADS"
#: The partition a server belongs to (logs, metrics labels).
PARTITION_ENV = "SERVING_PARTITION"
#: "model=offset,...": where each model's instances start taking turns for a home core among the
#: partition's cores (serving/backend/thread_placement.py), so that the first instance of every model
#: does not get the same core (on 16 cores, six busy 1-thread sessions shared cores 0 and 1 while 14
#: idled: a review, 2026-12-08). Offset = the instances of the partition's models declared before it.
HOME_CORE_OFFSETS_ENV = "SERVING_HOME_CORE_OFFSETS"


def home_core_offsets_value(instances_per_model: Iterable[tuple[str, int]]) -> str:
    """The variable's value for the partition's (model, instance count) pairs, in declaration order."""
    entries, offset = [], 0
    for model, instances in instances_per_model:
        entries.append(f"{model}={offset}")
        offset += instances
    return ",".join(entries)


def home_core_offset(model: str, environ: Mapping[str, str] = os.environ) -> int:
    """`model`'s offset from the variable (0 when it is unset, names another set of models, or is
    malformed: the turns then start at the first core, as before the variable existed)."""
    for entry in environ.get(HOME_CORE_OFFSETS_ENV, "").split(","):
        name, _, offset = entry.partition("=")
        if name == model and offset.isdigit():
            return int(offset)
    return 0


def intra_op_threads(environ: Mapping[str, str] = os.environ) -> int:
    """The partition's threads per instance; 0 when unset or not a count (ONNX Runtime's default then)."""
    value = environ.get(INTRA_OP_THREADS_ENV, "").strip()
    return int(value) if value.isdigit() else 0
