"""Which model_build source files a piece of the build runs, and one digest of them.

The build fingerprint (model_build.pipeline) and the caches inside a build (the INT8 sensitivity
scores and CPU-scheme choice, model_build.int8.variant) key on the code that produced them, so an
edit to the quantizer invalidates both, and an edit elsewhere neither. Found from the imports
themselves (lazy ones included), never listed by hand.
"""
from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE_DIR = Path(__file__).parent


def module_path(module: str, package_dir: Path | None = None) -> Path | None:
    """The source file of a model_build module (`model_build.int8.qdq` -> int8/qdq.py), or None."""
    package_dir = PACKAGE_DIR if package_dir is None else package_dir
    parts = module.split(".")[1:]
    if not parts:
        return None
    for candidate in (package_dir.joinpath(*parts).with_suffix(".py"), package_dir.joinpath(*parts, "__init__.py")):
        if candidate.exists():
            return candidate
    return None


def _imported_model_build_modules(source: Path) -> set[str]:
    """Dotted names of the model_build modules `source` imports, anywhere in it (lazy imports
    included): `import model_build.x.y`, `from model_build.x import y` (module or name) and
    `from model_build import x`."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text(), filename=str(source))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("model_build.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "model_build" or node.module.startswith("model_build.")):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # `from package import module`
    return {name for name in found if module_path(name) is not None}


def module_sources(module: str) -> tuple[Path, ...]:
    """The source files of model_build module `module` and of every model_build module it imports,
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
            pending |= _imported_model_build_modules(path) - seen
    return tuple(sorted({module_path(name) for name in seen} - {None}))


def add_sources(digest, sources) -> None:
    """Feed each source's path (below the package) and bytes into `digest`."""
    for source in sources:
        digest.update(source.relative_to(PACKAGE_DIR).as_posix().encode())
        digest.update(source.read_bytes())


def code_digest(module: str) -> str:
    """sha256 of `module_sources(module)`: what a cache of that code's results must key on."""
    digest = hashlib.sha256()
    add_sources(digest, module_sources(module))
    return digest.hexdigest()
