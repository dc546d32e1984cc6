"""sha256_file: the digest the build (install_file) and batch sizing (cache key) both rely on."""
from __future__ import annotations

import hashlib

from contracts.file_digest import sha256_file


def test_digest_of_a_file_read_in_blocks_equals_the_digest_of_its_bytes(tmp_path):
    data = bytes(range(256)) * 5000  # 1.28 MB: more than one 1 MiB block
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    path.write_bytes(data[:-1] + b"\x00")  # one byte changed at the end, in the second block
    assert sha256_file(path) != hashlib.sha256(data).hexdigest()


def test_empty_file_has_the_empty_digest(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert sha256_file(path) == hashlib.sha256(b"").hexdigest()
