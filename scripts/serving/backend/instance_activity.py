"""Which instances of a model are computing right now, shared between their stub processes.

Why: a model's instances are separate processes, each with its own ONNX Runtime session, so
their thread counts cannot adapt to each other. Measured on 2 cores (text embedder, 2 instances):
a lone request ran in 14.7 ms with 2 intra-op threads and 26.7 ms with 1, while under load 1
thread per instance served 90 texts/s against 81 with 2 (two 2-thread instances oversubscribe the
cores). So each instance keeps a wide session (one thread per reachable core) and a narrow one
(1 thread), runs the narrow one while another instance of the model is computing, and alone the
faster of the two for the call's size, measured on its own calls (serving/backend/session_choice.py;
on some hosts a short call is faster on one thread). serving/backend's `onnxruntime_cpu` model.py.

The flags are one byte per instance in a small shared file under /dev/shm, written only by its
own instance (no locking needed: a stale read only picks the other session for one batch). The
file is named by model and server pid (contracts.shared_memory.instance_activity_file); the runtime
removes a server's files once it has stopped or been killed.
"""
from __future__ import annotations

import mmap
import os
import re
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

from contracts.shared_memory import SHARED_MEMORY_DIR, instance_activity_file

SLOTS = 64


def instance_index(instance_name: str, groups: Sequence[tuple[str, int]] = ()) -> int:
    """The instance's place among all the model's instances (0, 1, ...): siblings get different
    activity slots and home cores.

    Triton names an instance `<group name>_<index in its group>`, a group `<model>_<group index>`
    unless the config names it. `groups` = the config's instance groups as (name, count), in order:
    served configs have one group per instance (contracts.model_config.render_instance_groups), so
    the index in the group alone would be 0 for every instance. Without groups (or a name that
    matches none), the index in the group."""
    match = re.search(r"_(\d+)$", instance_name)
    if not match:
        return 0
    before = 0
    for name, count in groups:
        if instance_name == f"{name}_{match.group(1)}":
            return (before + int(match.group(1))) % SLOTS
        before += max(int(count), 1)
    return int(match.group(1)) % SLOTS


def _private_shared_flags(path: Path) -> mmap.mmap:
    """SLOTS bytes of `path`, mapped shared, when it is (or is created as) a regular file of this user
    that nobody else may open; OSError otherwise (a symlink, another user's file, a group/other mode)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
            raise PermissionError(f"{path} is not a private file of this user")
        if info.st_size < SLOTS:
            os.ftruncate(fd, SLOTS)
        return mmap.mmap(fd, SLOTS)
    finally:
        os.close(fd)


def _is_tritonserver(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip().startswith("tritonserver")
    except OSError:
        return False


class InstanceActivity:
    """This instance's busy flag and a look at its siblings', in a file shared by the model's
    instances of one server (named by model and server pid)."""

    def __init__(self, model: str, index: int, server_pid: int | None = None,
                 directory: Path = SHARED_MEMORY_DIR):
        self.index = index % SLOTS  # instance_index(): this instance's place among the model's
        server_pid = server_pid or os.getppid()
        self.path = instance_activity_file(model, server_pid, directory)
        if server_pid == 1 and not _is_tritonserver(1):  # the server died while this stub started and init
            # adopted it (in a pod, pid 1 IS the server): nobody would remove a file of "pid 1" (a serve
            # stopped mid-load left serving-<model>-1-activity behind: a review, 2026-12-07)
            self.flags, self.shared = mmap.mmap(-1, SLOTS), False
            return
        # /dev/shm is writable by every local user and the name is predictable (model, server pid): a
        # symlink planted there made the stub truncate and write another file of the server's user
        # (O_NOFOLLOW), and a file someone else created would share these flags with them (owner check).
        # Either way this instance keeps its flags to itself (it then never sees its siblings busy).
        try:
            self.flags, self.shared = _private_shared_flags(self.path), True
        except OSError:
            self.flags, self.shared = mmap.mmap(-1, SLOTS), False
        self.flags[self.index] = 0

    def others_busy(self) -> bool:
        """Asked before every framework call: counted in C (bytes.count), not a Python loop (~3 us)."""
        flags = self.flags[:SLOTS]
        return SLOTS - flags.count(0) - (flags[self.index] != 0) > 0

    @contextmanager
    def computing(self):
        self.flags[self.index] = 1
        try:
            yield
        finally:
            self.flags[self.index] = 0

    def close(self) -> None:
        self.flags[self.index] = 0
        self.flags.close()
