"""deploy/image/Dockerfile against the code it ships: the image cannot be built here (no Docker), so
what it copies and installs is checked against what the served model.py files import.

Why: each pod's Python backend stubs import the project's code from /opt/serving/python and their
third-party modules from /opt/serving/site-packages. When the backend moved to
serving/backend/triton_backends/ and started importing `contracts`, the image kept copying the old
path and only `serving/`, which nothing here noticed.
"""
from __future__ import annotations

import ast
import shutil
import re
import sys
from pathlib import Path

from contracts.layout import PROJECT_ROOT

DOCKERFILE = PROJECT_ROOT / "deploy" / "image" / "Dockerfile"
IMAGE_LOCK = PROJECT_ROOT / "deploy" / "image" / "requirements.lock"
SCRIPTS = PROJECT_ROOT / "scripts"
#: The files Triton's Python backend runs in a pod: the project's backend and each Python model.
SERVED_ENTRY_POINTS = (sorted((SCRIPTS / "serving" / "backend" / "triton_backends").glob("*/model.py"))
                       + sorted((PROJECT_ROOT / "model_repository").glob("*/1/model.py"))
                       # the pods' liveness probe, run by the image's python3
                       + [SCRIPTS / "serving" / "runtime" / "pod_liveness.py"])
#: Standard-library modules this machine's Python has and the image's Python 3.10 has not.
NOT_IN_PYTHON_310 = {"tomllib"}
#: Provided by the Python backend itself, not installed.
BACKEND_PROVIDED = {"triton_python_backend_utils"}
#: The third-party modules the image installs: import name -> distribution name on the index.
DISTRIBUTIONS = {"onnxruntime": "onnxruntime", "onnx": "onnx", "numpy": "numpy", "tokenizers": "tokenizers"}
#: Where the image must differ from the local pins: the base image's Python is 3.10, and the local
#: pin has no wheel for it (`pip download --only-binary=:all: --python-version 3.10 onnxruntime==1.32.0`
#: finds none; 1.23.2 is the newest with one). The Dockerfile says why the served answers stay the same.
IMAGE_PINS = {"onnxruntime": "1.23.2"}


def _is_type_checking_block(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` / `if typing.TYPE_CHECKING:`: imported for annotations only, never at run time."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _run_time_nodes(tree: ast.AST):
    """Every node of `tree` except those under an `if TYPE_CHECKING:` block (its `else:` runs)."""
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        if _is_type_checking_block(node):
            pending += node.orelse
        else:
            pending += ast.iter_child_nodes(node)


def imports_of(path: Path) -> set[str]:
    """Dotted module names `path` imports when it runs (absolute imports, at any depth of the file,
    not those under `if TYPE_CHECKING:`); for `from a.b import c` both `a.b` and `a.b.c`, since `c`
    may be a module."""
    names = set()
    for node in _run_time_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def project_module_file(name: str) -> Path | None:
    base = SCRIPTS.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def served_imports() -> list[tuple[str, list[Path]]]:
    """Every import the served code makes, following the project's own imports transitively: (the
    imported name, the project files it resolves to: itself or its parent module, and its top package)."""
    found, seen = [], set()
    pending = list(SERVED_ENTRY_POINTS)
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in imports_of(path):
            files = [f for f in (project_module_file(name), project_module_file(name.rsplit(".", 1)[0]),
                                 project_module_file(name.split(".")[0])) if f is not None]
            found.append((name, files))
            pending += files
    return found


def served_closure() -> tuple[set[str], set[str]]:
    """(project top-level packages, third-party top-level modules) the served code needs."""
    project, third_party = set(), set()
    for name, files in served_imports():
        top = name.split(".")[0]
        if files:
            project.add(top)
        elif top not in sys.stdlib_module_names and top not in BACKEND_PROVIDED and top != "__future__":
            third_party.add(top)
    return project, third_party


def dockerfile_copies() -> dict[str, str]:
    """COPY destination -> source."""
    return {dest: src for src, dest in re.findall(r"^COPY\s+(?:--chown=\S+\s+)?(\S+)\s+(\S+)\s*$", DOCKERFILE.read_text(),
                                                  re.MULTILINE)}


def test_every_copied_path_exists_and_the_backend_file_it_installs_is_the_served_one():
    copies = dockerfile_copies()
    for dest, src in copies.items():
        assert (PROJECT_ROOT / src).exists(), f"the Dockerfile copies {src}, which is not in the repository"
    installed = re.findall(r"cp\s+(/opt/serving/python/\S+\.py)\s", DOCKERFILE.read_text())
    assert installed, "the Dockerfile installs no backend model.py"
    for image_path in installed:
        dest, src = next((d, s) for d, s in copies.items() if image_path.startswith(d))
        assert (PROJECT_ROOT / src / image_path[len(dest):]).is_file(), f"{image_path} would not exist in the image"


def test_every_project_package_the_served_code_imports_is_copied_onto_the_pods_python_path():
    project, _ = served_closure()
    assert {"serving", "contracts"} <= project  # the closure follows the imports at all
    copied = {dest.rstrip("/").rsplit("/", 1)[1] for dest in dockerfile_copies() if dest.startswith("/opt/serving/python/")}
    assert project <= copied, f"the pods' stubs import {sorted(project - copied)}, which the image does not copy"


def test_the_served_code_imports_nothing_the_images_python_310_lacks():
    """contracts.serving_spec reads TOML with tomllib (3.11): a served module or the liveness probe that
    reached it would fail to import in the pods."""
    lacking = {name for name, _ in served_imports() if name.split(".")[0] in NOT_IN_PYTHON_310}
    assert not lacking, f"the served code imports {sorted(lacking)}, which the image's Python 3.10 lacks"


def test_every_third_party_module_the_served_code_imports_is_installed_at_the_local_servers_pin():
    _, third_party = served_closure()
    unknown = third_party - set(DISTRIBUTIONS)
    assert not unknown, f"the served code imports {sorted(unknown)}: add it to the Dockerfile and to DISTRIBUTIONS"
    installed = image_lock()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (PROJECT_ROOT / "requirements" / "serve.txt").read_text(), re.MULTILINE))
    for module in third_party:
        name = DISTRIBUTIONS[module]
        assert name in installed, f"the served code imports {module}, which the image does not install"
        expected = IMAGE_PINS.get(name, pins[name])
        assert installed[name] == expected, f"{name}: the image installs {installed[name]}, expected {expected} (local pin {pins[name]})"


def image_lock() -> dict[str, str]:
    """{distribution: version} of the image's requirements.lock."""
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", IMAGE_LOCK.read_text(), re.MULTILINE))


def test_the_image_installs_every_package_from_the_hashed_lock_only():
    """Four packages were pinned and their ~20 dependencies resolved at each build (protobuf 7 where
    the local server tests 4.25.9): now every one is at the lock's version and wheel hash."""
    lines = [line for line in IMAGE_LOCK.read_text().splitlines() if line and not line.startswith("#")]
    assert lines and all(re.fullmatch(r"[A-Za-z0-9_.-]+==\S+ --hash=sha256:[0-9a-f]{64}", line) for line in lines), lines
    install = re.search(r"RUN python3 -m pip install (.*)", DOCKERFILE.read_text().replace("\\\n", " ")).group(1)
    assert "--require-hashes" in install and "--no-deps" in install and "-r /tmp/image-requirements.lock" in install, install
    assert not re.search(r"\b[A-Za-z0-9_.-]+==[0-9]", install), "a version typed in the Dockerfile beside the lock"
    local = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", (PROJECT_ROOT / "requirements" / "constraints.txt").read_text(), re.MULTILINE))
    assert image_lock()["protobuf"] == local["protobuf"]  # what onnx parses with, as in the tests here


def test_every_source_the_dockerfile_copies_is_sent_by_its_dockerignore():
    """The ignore file sends nothing but its `!` exceptions: a COPY of anything else fails the build
    (scripts/contracts/ was copied but not sent)."""
    ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore, "the ignore file no longer starts from nothing: update this test"
    sent = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    copied = re.findall(r"^COPY\s+(?:--chown=\S+\s+)?(?!--from)(\S+)\s+\S+\s*$", DOCKERFILE.read_text(), re.MULTILINE)
    assert copied
    for source in copied:
        assert any(source.rstrip("/") == s or source.startswith(s + "/") for s in sent), \
            f"the Dockerfile copies {source}, which Dockerfile.dockerignore does not send"


def test_the_image_owns_its_files_for_the_pods_user_without_writing_them_twice():
    """`chown -R /opt/serving` in a last layer wrote every copied file again (~800 MB of models twice in
    the image): each COPY owns its files for uid 1000 instead, and the RUN layers chown what they make."""
    text = DOCKERFILE.read_text()
    copies = re.findall(r"^COPY\s+(.*)$", text, re.MULTILINE)
    assert [c for c in copies if "/opt/serving/" in c and not c.startswith("--chown=1000:1000 ")] == []
    assert "chown -R 1000:1000 /opt/serving\n" not in text and "chown -R 1000:1000 /opt/serving/site-packages" in text


def test_the_init_containers_copy_every_folder_the_image_puts_under_its_root():
    """The init script copies the image's shared folders by name, and the models one by one: a folder the
    Dockerfile adds under /opt/serving must be one of them, or the pods would run without it."""
    from k8s_deploy.workload import IMAGE_ROOT, IMAGE_SHARED

    text = DOCKERFILE.read_text()
    made = set(re.findall(rf"{IMAGE_ROOT}/([\w.-]+)", text))
    assert made == {*IMAGE_SHARED, "models"}, made


def test_the_image_builds_the_helpers_where_the_pods_preload_them():
    """The build stage runs the project's own build (`python -m serving.runtime.native`, the flags
    `make setup` uses) into /opt/serving/lib, the final stage copies that folder, and the init
    container copies /opt/serving to the pods' SERVING_ROOT, where LD_PRELOAD looks."""
    from k8s_deploy.workload import NATIVE_LIBRARY_DIR, SERVING_ROOT

    text = DOCKERFILE.read_text()
    built = re.findall(r"python3 -m serving\.runtime\.native (\S+)", text)
    assert built == ["/opt/serving/lib"]
    assert re.search(r"^COPY (?:--chown=\S+ )?--from=\S+ /opt/serving/lib/ /opt/serving/lib/$", text, re.MULTILINE)
    assert "/opt/serving/" + str(NATIVE_LIBRARY_DIR.relative_to(SERVING_ROOT)) == built[0]


def test_the_served_project_modules_import_where_the_image_puts_them(tmp_path):
    """In a pod the stubs import `serving` and `contracts` from /serving/python, a folder with no
    Makefile above it: a module of the served code that insists on a checkout (contracts.layout's
    moved-file guard) fails every onnxruntime_cpu model's load there. Each project module the
    served code imports is imported from a copy laid out as the Dockerfile copies it."""
    import os
    import subprocess

    python_dir = tmp_path / "serving" / "python"
    copies = dockerfile_copies()
    for dest, src in copies.items():
        if dest.startswith("/opt/serving/python/"):
            shutil.copytree(PROJECT_ROOT / src, python_dir / dest[len("/opt/serving/python/"):].rstrip("/"),
                            ignore=shutil.ignore_patterns("__pycache__"))
    modules = {candidate for name, _ in served_imports() for candidate in (name, name.rsplit(".", 1)[0])
               if project_module_file(candidate) is not None}
    assert "serving.backend.instance_activity" in modules  # the closure follows the imports at all
    code = ("import importlib, sys\n"
            f"for name in {sorted(modules)!r}:\n"
            "    module = importlib.import_module(name)\n"
            f"    assert module.__file__.startswith({str(python_dir)!r}), (name, module.__file__)\n")
    env = {**os.environ, "PYTHONPATH": str(python_dir)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_image_is_built_on_the_server_image_the_pods_run():
    """Typed in two FROM lines and in k8s_deploy.workload: the stub's Python and the backends' symlinks
    must be the server container's own."""
    from k8s_deploy.workload import TRITON_IMAGE

    bases = re.findall(r"^FROM\s+(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    assert bases and set(bases) == {TRITON_IMAGE}, bases


def test_the_import_walk_skips_type_only_imports_and_keeps_the_rest(tmp_path):
    """The liveness probe calls model_readiness, whose AdminKey is a type only: followed, it would
    reach tomllib; an import that does run must still be seen, also in a TYPE_CHECKING `else:`."""
    source = tmp_path / "m.py"
    source.write_text("import json\nfrom typing import TYPE_CHECKING\nimport typing\n"
                      "if TYPE_CHECKING:\n    import tomllib\nelse:\n    import csv\n"
                      "if typing.TYPE_CHECKING:\n    from serving.runtime.security import AdminKey\n"
                      "def f():\n    import zlib\n")
    assert imports_of(source) == {"json", "typing", "typing.TYPE_CHECKING", "csv", "zlib"}
