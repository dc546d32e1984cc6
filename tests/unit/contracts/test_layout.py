"""The run's and the build's paths, and the shared-memory files a server's models leave behind."""
from __future__ import annotations

from pathlib import Path

from contracts.layout import RunLayout
from contracts.shared_memory import instance_activity_file, remove_server_shared_files
from model_build.pipeline import BuildPaths


def test_the_run_layout_reads_as_a_table_of_paths_below_the_run_folder(tmp_path):
    layout = RunLayout(tmp_path / "run")
    assert layout.supervisor_state == tmp_path / "run" / "supervisor.json"
    assert layout.supervisor_log == tmp_path / "run" / "logs" / "supervisor.log"
    assert layout.partition_log("main") == tmp_path / "run" / "logs" / "tritonserver-main.log"
    assert BuildPaths(tmp_path).reports == tmp_path / "reports" / "build"


def test_a_gone_servers_activity_files_are_removed_and_no_other_servers(tmp_path):
    mine = [instance_activity_file(m, 123, tmp_path) for m in ("text-embedder", "digit_classifier")]
    other = instance_activity_file("text-embedder", 1123, tmp_path)
    for path in (*mine, other):
        path.write_bytes(b"\0" * 64)
    assert mine[0].name == "serving-text_embedder-123-activity"
    assert remove_server_shared_files(123, tmp_path) == sorted(mine)
    assert [p.name for p in Path(tmp_path).iterdir()] == [other.name]


def test_no_function_of_the_source_folders_is_over_60_lines():
    """Issue 11's rule (tests aside): a longer function is one to split into its named steps."""
    import ast

    from contracts.layout import SOURCE_DIRS

    too_long = []
    for folder in SOURCE_DIRS:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                    too_long.append(f"{path.relative_to(folder.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not too_long, "functions over 60 lines: " + "; ".join(too_long)


def test_a_model_file_is_hard_linked_or_copied_across_file_systems(tmp_path, monkeypatch):
    """gpu_check linked the served ONNX file into a repository under /tmp: on a tmpfs /tmp the link
    failed (EXDEV) and the whole check ended in a traceback."""
    import errno
    import os

    from contracts.layout import place_model_file

    source = tmp_path / "model.onnx"
    source.write_bytes(b"onnx bytes")
    place_model_file(source, tmp_path / "linked.onnx")
    assert os.stat(tmp_path / "linked.onnx").st_ino == os.stat(source).st_ino

    def cross_device(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    place_model_file(source, tmp_path / "copied.onnx")
    assert (tmp_path / "copied.onnx").read_bytes() == b"onnx bytes"


def test_the_regions_a_server_maps_are_read_whole_and_unlinked_ones_left_out():
    """While a server exits its maps list regions it unlinked as "<path> (deleted)": the last word,
    "(deleted)", was taken for a region name and a stop on a read-only root failed on it (CI, 2026-12-07)."""
    from contracts.shared_memory import regions_in_maps, remove_triton_shm_regions

    maps = ("7f00-7f10 rw-s 00000000 00:1a 12 /dev/shm/triton_python_backend_shm_region_a\n"
            "7f10-7f20 rw-s 00000000 00:1a 13 /dev/shm/triton_python_backend_shm_region_b (deleted)\n"
            "7f20-7f30 r-xp 00000000 08:01 14 /usr/lib/libc.so.6\n"
            "7f30-7f40 rw-p 00000000 00:00 0 \n")
    assert regions_in_maps(maps) == ("/dev/shm/triton_python_backend_shm_region_a",)
    remove_triton_shm_regions(["(deleted)", "/etc/hostname"])  # not Triton's: left alone, no error
