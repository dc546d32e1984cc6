"""Content digests of model files, for deciding whether a file changed without trusting mtimes.

Used on both sides of the build/serving boundary: the build installs an artifact into the model
repository only when its bytes differ (`model_build.pipeline.install_file`), and batch sizing
reuses its memory measurements only while the ONNX file is the same one
(`model_build.sizing.batch_sizing`). It lives in `contracts`, the bottom layer both import.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

#: Read in 1 MiB blocks: ONNX files of hundreds of MB are hashed without loading them whole.
_BLOCK_BYTES = 1 << 20


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of the file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()
