"""requirements/constraints.txt pins the whole installed set, transitive dependencies included.

Why a test: the constraints file is a `pip freeze`, and pip freeze leaves out pip, setuptools,
wheel and distribute. torch declares `setuptools`, so a fresh `make setup` installed whatever
setuptools the index had that day, and the text encoder's calibration and held-out corpus is the
documentation installed in site-packages (build/model_build/data/text_corpus.py): setuptools'
METADATA and the 13 packages it vendors are part of it.
"""
from __future__ import annotations

import re
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from contracts.layout import PROJECT_ROOT

REQUIREMENTS = PROJECT_ROOT / "requirements"


def pinned(path) -> dict[str, str]:
    """name -> version of every `name==version` line (comments and options left out)."""
    pins = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)", line.split("#")[0].strip())
        if match:
            pins[canonicalize_name(match[1])] = match[3]
    return pins


def test_every_dependency_of_a_pinned_distribution_is_pinned_too():
    pins = pinned(REQUIREMENTS / "constraints.txt")
    #: installed with --no-deps (Makefile `setup`): their declared dependencies are never installed
    no_deps = set(pinned(REQUIREMENTS / "no_deps.txt"))
    unpinned = {}
    for name in sorted(set(pins) - no_deps):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:  # k8s tools live in .venv/k8s-tools, not site-packages
            continue
        for text in dist.requires or ():
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            if canonicalize_name(requirement.name) not in pins:
                unpinned.setdefault(canonicalize_name(requirement.name), []).append(name)
    assert not unpinned, f"required but not pinned in requirements/constraints.txt (required by): {unpinned}"
