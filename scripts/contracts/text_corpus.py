"""artifacts/<text encoder>/text_corpus.json: the text embedder's sentences, split into `train`
(calibration only) and `heldout` (evaluation only). Written by the build
(model_build.data.text_corpus assembles it), read by the build's calibration and validation, the
padding report, the peer suite's references and the integration tests, all through
`load_text_corpus`: the file's name and `format` are checked in one place, so a reader of an old
or foreign file is told to rebuild instead of reading keys that are not there.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from contracts.errors import ServingError

#: The corpus file's name in the text encoder's build folder (artifacts/<model>/).
TEXT_CORPUS_FILE = "text_corpus.json"
#: The version of the file's layout; a file of another version must be rebuilt.
CORPUS_FORMAT = 1


class TextCorpusError(ServingError, ValueError):
    """text_corpus.json is missing, of another format, or its splits are unusable."""


def normalized_key(sentence: str) -> str:
    """What counts as a duplicate: the same words, ignoring case and spacing."""
    return " ".join(sentence.casefold().split())


@dataclass(frozen=True)
class TextCorpus:
    """Sentences split into `train` (calibration only) and `heldout` (evaluation only).

    Each side is in seeded hash order, so any prefix is a random sample of that side.
    """

    train: tuple[str, ...]
    heldout: tuple[str, ...]
    seed: int
    heldout_fraction: float
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.train or not self.heldout:
            raise TextCorpusError(
                f"text corpus too small: {len(self.train)} train and {len(self.heldout)} held-out sentences; "
                "expected at least one of each (are package docs installed? `make setup`)."
            )
        overlap = {normalized_key(s) for s in self.train} & {normalized_key(s) for s in self.heldout}
        if overlap:
            raise TextCorpusError(f"text corpus: {len(overlap)} sentences are in both train and held-out, "
                                  f"e.g. {sorted(overlap)[0]!r}.")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise TextCorpusError(f"text corpus: `heldout_fraction` = {self.heldout_fraction} must lie strictly between 0 and 1.")

    def to_json(self) -> dict:
        return {
            "format": CORPUS_FORMAT, "seed": self.seed, "heldout_fraction": self.heldout_fraction,
            "sources": list(self.sources), "train": list(self.train), "heldout": list(self.heldout),
        }

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=0, ensure_ascii=False))
        return path


def text_corpus_path(workdir: Path) -> Path:
    """The corpus in a text encoder's build folder (artifacts/<model>/)."""
    return Path(workdir) / TEXT_CORPUS_FILE


def load_text_corpus(path: Path) -> TextCorpus:
    """The corpus at `path`, its `format` checked (TextCorpusError names the fix otherwise)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise TextCorpusError(f"text corpus {path} does not exist: run `make build-engines` first.") from None
    except json.JSONDecodeError as exc:
        raise TextCorpusError(f"text corpus {path} is not JSON ({exc}); expected a corpus object: rebuild it "
                              "(`make build-engines FORCE=1`).") from None
    if not isinstance(data, dict) or data.get("format") != CORPUS_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise TextCorpusError(f"text corpus {path} has format {found!r}; expected {CORPUS_FORMAT}. Rebuild it.")
    return TextCorpus(
        train=tuple(data["train"]), heldout=tuple(data["heldout"]), seed=int(data["seed"]),
        heldout_fraction=float(data["heldout_fraction"]), sources=tuple(data.get("sources", ())),
    )
