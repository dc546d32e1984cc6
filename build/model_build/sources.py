"""Which of the project's source files a piece of the build runs, and one digest of them.

The build fingerprint (model_build.pipeline) and the caches inside a build (the INT8 sensitivity
scores and CPU-scheme choice, model_build.int8.variant) key on the code that produced them, so an
edit to the quantizer invalidates both, and an edit elsewhere neither. Found from the imports
themselves (lazy ones included), never listed by hand. Followed through every project package the
build uses, not only model_build: the LLM's build converts and validates with the serving runtime
(`serving.generation`: its chat template, engine and scheduler), and the INT8 build chooses its
scheme with `contracts.onnx_sessions`' fusions; until 2026-12-07 only model_build was followed, and
an edited chat template left the LLM "up to date" with a report claiming 22/22 identical prompts
for a runtime that had changed (a review).
"""
from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from contracts.layout import SOURCE_DIRS

PACKAGE_DIR = Path(__file__).parent
#: The project's other packages and their folders, from contracts.layout's SOURCE_DIRS (the build imports
#: `serving` and `contracts`; an import of another is followed alike).
OTHER_PACKAGE_DIRS = {package.name: package for folder in SOURCE_DIRS if folder.is_dir() for package in sorted(folder.iterdir())
                      if (package / "__init__.py").is_file() and package.resolve() != PACKAGE_DIR.resolve()}


def _package_dir(top: str) -> Path | None:
    return PACKAGE_DIR if top == "model_build" else OTHER_PACKAGE_DIRS.get(top)


def module_path(module: str, package_dir: Path | None = None) -> Path | None:
    """The source file of a project module (`model_build.int8.qdq` -> build/model_build/int8/qdq.py,
    `serving.generation.chat` -> scripts/serving/generation/chat.py), or None (not the project's).
    `package_dir`: the folder of the module's top package in place of its own (tests)."""
    top, *parts = module.split(".")
    package_dir = _package_dir(top) if package_dir is None else package_dir
    if package_dir is None or not parts:
        return None
    for candidate in (package_dir.joinpath(*parts).with_suffix(".py"), package_dir.joinpath(*parts, "__init__.py")):
        if candidate.exists():
            return candidate
    return None


def _project_module(name: str) -> bool:
    return _package_dir(name.split(".")[0]) is not None


def _imported_project_modules(source: Path) -> set[str]:
    """Dotted names of the project modules `source` imports, anywhere in it (lazy imports included):
    `import model_build.x.y`, `from serving.x import y` (module or name) and `from contracts import x`."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if _project_module(a.name)}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _project_module(node.module):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # `from package import module`
    return {name for name in found if module_path(name) is not None}


def module_sources(module: str) -> tuple[Path, ...]:
    """The source files of project module `module` and of every project module it imports,
    transitively."""
    pending = {module}
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_path(name)
        if path is not None:
            pending |= _imported_project_modules(path) - seen
    return tuple(sorted({module_path(name) for name in seen} - {None}))


def add_sources(digest, sources) -> None:
    """Feed each source's path (below model_build's folder, or `<package>/...` for the others) and bytes
    into `digest`, in the order of those names: ordered by absolute path, the digest depended on where
    the checkout lives (build/ sorts before scripts/, a copy under /tmp after it when the checkout is
    under /root), and CI's clone failed a test that passed in /work (2026-12-07)."""
    for source in sorted(sources, key=_relative_name):
        digest.update(_relative_name(source).encode())
        digest.update(source.read_bytes())


def _relative_name(source: Path) -> str:
    if source.is_relative_to(PACKAGE_DIR):
        return source.relative_to(PACKAGE_DIR).as_posix()
    package, folder = next((p, d) for p, d in OTHER_PACKAGE_DIRS.items() if source.is_relative_to(d))
    return f"{package}/{source.relative_to(folder).as_posix()}"


def code_digest(module: str) -> str:
    """sha256 of `module_sources(module)`: what a cache of that code's results must key on."""
    digest = hashlib.sha256()
    add_sources(digest, module_sources(module))
    return digest.hexdigest()
