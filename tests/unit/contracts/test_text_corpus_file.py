"""text_corpus.json's one reader (contracts.text_corpus): the build, the perf suites and the tests
read the file through it, so a file of another format is refused with the fix, not half read."""
from __future__ import annotations

import json

import pytest

from contracts.text_corpus import TEXT_CORPUS_FILE, TextCorpus, TextCorpusError, load_text_corpus, text_corpus_path


def test_the_corpus_round_trips_at_its_place_in_the_build_folder(tmp_path):
    corpus = TextCorpus(train=("A train sentence is here.",), heldout=("A held-out sentence is here.",), seed=3,
                        heldout_fraction=0.2, sources=("pkg/README.md",))
    path = corpus.save(text_corpus_path(tmp_path / "text_encoder"))
    assert path == tmp_path / "text_encoder" / TEXT_CORPUS_FILE
    assert load_text_corpus(path) == corpus


@pytest.mark.parametrize("content, expected", [
    (json.dumps({"heldout": ["one sentence."]}), "has format None; expected 1. Rebuild it"),
    (json.dumps(["one sentence."]), "has format 'list'; expected 1"),
    ("{not json", "is not JSON"),
])
def test_a_file_of_another_format_says_what_was_found_and_what_is_expected(tmp_path, content, expected):
    path = tmp_path / TEXT_CORPUS_FILE
    path.write_text(content)
    with pytest.raises(TextCorpusError, match=expected):
        load_text_corpus(path)
