"""Where a tritonserver's model instances share state in Linux shared memory (/dev/shm).

Why not in `contracts.layout`: the backend stubs import these names, and in a Kubernetes pod they
run from /serving/python (deploy/image/Dockerfile), with no checkout around them; `contracts.layout`
knows the checkout and refuses to import outside one (its moved-file guard). Nothing here depends
on where the project lives.
"""
from __future__ import annotations

import re
from pathlib import Path

#: Linux shared memory (tmpfs): where backend stubs keep what the instances of a server share.
SHARED_MEMORY_DIR = Path("/dev/shm")
#: Where Triton's shared-memory regions (the Python backend's IPC, one per stub) are named.
TRITON_REGION_PREFIX = f"{SHARED_MEMORY_DIR}/triton_"


def instance_activity_file(model: str, server_pid: int, directory: Path = SHARED_MEMORY_DIR) -> Path:
    """The busy flags of one model's instances in one tritonserver (serving.backend.instance_activity),
    named by the server's pid so that the runtime can remove the files of a server that is gone."""
    return Path(directory) / f"serving-{re.sub(r'[^A-Za-z0-9_]', '_', model)}-{server_pid}-activity"


def remove_server_shared_files(server_pid: int, directory: Path = SHARED_MEMORY_DIR) -> list[Path]:
    """Remove the activity files a stopped or killed server's models left in shared memory (a
    server restarted for months must not leave one per start). Returns what was removed."""
    removed = sorted(Path(directory).glob(f"serving-*-{int(server_pid)}-activity"))
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def triton_shm_regions(pid: int) -> tuple[str, ...]:
    """The /dev/shm/triton_* files (the Python backend's IPC regions, one per stub) a live
    tritonserver has mapped, from /proc/<pid>/maps: read while it runs, since one that is killed or
    crashes leaves them behind (1 MiB each and more) for whoever stops it to remove."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ()
    return regions_in_maps(maps)


def regions_in_maps(maps: str) -> tuple[str, ...]:
    """The /dev/shm/triton_* paths of a /proc/<pid>/maps text, but those already unlinked."""
    regions = set()
    for line in maps.splitlines():
        fields = line.split(None, 5)  # address perms offset dev inode [path]
        path = fields[5] if len(fields) == 6 else ""
        # " (deleted)": unlinked already, still mapped (seen while a server exits); not a name to remove
        if path.startswith(TRITON_REGION_PREFIX) and not path.endswith(" (deleted)"):
            regions.add(path)
    return tuple(sorted(regions))


def with_mapped_regions(known: "tuple[str, ...]", pid: int) -> tuple[str, ...]:
    """`known` and the regions a live server maps now. Why both: a model reload maps new regions after
    ready (Triton unlinks the replaced ones itself), and a server killed while hung no longer lists
    the regions it mapped once its maps are gone."""
    return tuple(sorted({*known, *triton_shm_regions(pid)}))


def remove_triton_shm_regions(regions: "tuple[str, ...] | list[str]") -> None:
    """Remove regions `triton_shm_regions` listed for a server that is gone (missing ones are fine:
    a server that exits cleanly removes its own)."""
    for region in regions:
        if not str(region).startswith(TRITON_REGION_PREFIX):
            continue  # only Triton's regions, whatever a caller passed
        try:
            Path(region).unlink(missing_ok=True)
        except OSError:  # best effort: a stop must not fail on what it tidies (a read-only mount, ...)
            continue


def remove_server_leftovers(server_pid: int, regions: "tuple[str, ...] | list[str]") -> None:
    """Remove what a server that is gone left in /dev/shm: the IPC regions noted while it mapped them
    (a SIGKILLed server leaves them, 1 MiB and more each) and its models' activity files."""
    remove_triton_shm_regions(regions)
    remove_server_shared_files(server_pid)
