"""The offline text corpus: markup to sentences, deduplication, and the stable train/held-out split."""
from __future__ import annotations

import pytest

from contracts.text_corpus import TextCorpus, TextCorpusError, load_text_corpus
from model_build.errors import BuildError
from model_build.data.text_corpus import (
    SourceDocument,
    assemble_text_corpus,
    deduplicate,
    installed_documents,
    is_prose_sentence,
    markup_to_prose,
    sentences_from_documents,
    split_sentences,
    split_train_heldout,
)

README = """# Project title

[![badge](https://img.shields.io/x.svg)](https://example.com)

This library makes **fast** inference easy. See the [docs](https://example.com/docs) for details.

```python
import thing
thing.run()
```

| column | value |
|--------|-------|
| a      | 1     |

- It supports `numpy` arrays out of the box.
- Short.

    indented_code_block = True

Installation
============

Run the installer, e.g. with pip, and restart your shell.
"""


def test_markup_becomes_prose_without_code_tables_links_or_headers():
    prose = " ".join(markup_to_prose(README))
    assert "This library makes fast inference easy." in prose
    assert "See the docs for details." in prose
    assert "It supports numpy arrays out of the box." in prose
    for junk in ("import thing", "column", "indented_code_block", "https://", "Project title", "====", "**", "`"):
        assert junk not in prose


def test_sentences_split_at_sentence_ends_but_not_at_abbreviations():
    text = "Use a tokenizer, e.g. the fast one. It is quick! Is it? Version 2.0 works."
    assert split_sentences(text) == ["Use a tokenizer, e.g. the fast one.", "It is quick!", "Is it?", "Version 2.0 works."]


@pytest.mark.parametrize("sentence, keep", [
    ("This library makes fast inference easy.", True),
    ("Too short.", False),
    ("lowercase start is not a sentence here.", False),
    ("No sentence end at all here", False),
    ("Call foo.bar() with {x: 1} to configure it.", False),
    ("Changed 1.2.3 -> 1.2.4 (#123, #456, #789).", False),
])
def test_prose_filter(sentence, keep):
    assert is_prose_sentence(sentence) is keep


def test_deduplicate_ignores_case_and_spacing_and_keeps_first():
    assert deduplicate(["Same  text here.", "same text HERE.", "Other text."]) == ["Same  text here.", "Other text."]


SENTENCES = [f"Sentence number {i} describes a documented feature of a package." for i in range(400)]


def test_split_is_deterministic_disjoint_and_near_the_fraction():
    a = split_train_heldout(SENTENCES, 0.25, seed=3)
    b = split_train_heldout(list(reversed(SENTENCES)), 0.25, seed=3)
    assert a == b  # input order does not matter
    assert not set(a.train) & set(a.heldout)
    assert set(a.train) | set(a.heldout) == set(SENTENCES)
    assert 0.15 < len(a.heldout) / len(SENTENCES) < 0.35
    other_seed = split_train_heldout(SENTENCES, 0.25, seed=4)
    assert set(other_seed.heldout) != set(a.heldout)


def test_adding_documents_never_moves_a_sentence_between_sides():
    base = split_train_heldout(SENTENCES[:300], 0.25, seed=0)
    grown = split_train_heldout(SENTENCES, 0.25, seed=0)
    assert set(base.train) <= set(grown.train)
    assert set(base.heldout) <= set(grown.heldout)


def test_caps_take_a_prefix_of_the_seeded_order():
    full = split_train_heldout(SENTENCES, 0.25, seed=0)
    capped = split_train_heldout(SENTENCES, 0.25, seed=0, max_train=10, max_heldout=5)
    assert capped.train == full.train[:10] and capped.heldout == full.heldout[:5]


def test_corpus_validation_names_the_problem():
    with pytest.raises(TextCorpusError, match="too small"):
        TextCorpus(train=(), heldout=("A held-out sentence is here.",), seed=0, heldout_fraction=0.2)
    with pytest.raises(TextCorpusError, match="both train and held-out"):
        TextCorpus(train=("Same sentence in both.",), heldout=("same sentence in both.",), seed=0, heldout_fraction=0.2)
    with pytest.raises(BuildError, match="heldout_fraction"):
        split_train_heldout(SENTENCES, 1.0, seed=0)


def test_corpus_round_trips_through_its_file(tmp_path):
    corpus = assemble_text_corpus([SourceDocument("pkg/README.md", README + " ".join(SENTENCES))], heldout_fraction=0.3)
    path = corpus.save(tmp_path / "corpus.json")
    assert load_text_corpus(path) == corpus
    with pytest.raises(TextCorpusError, match="make build-engines"):
        load_text_corpus(tmp_path / "missing.json")


def test_installed_documents_reads_metadata_bodies_and_docs_but_not_licences(tmp_path):
    dist = tmp_path / "demo-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\n\nThe demo package explains itself in prose.\n")
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "guide.rst").write_text("The guide tells a story about configuration files.\n")
    (tmp_path / "demo" / "LICENSE.md").write_text("Permission is hereby granted to everybody forever.\n")
    (tmp_path / "demo" / "code.py").write_text("'''Docstrings are not read from code files here.'''\n")
    documents = installed_documents(tmp_path)
    assert [d.name for d in documents] == ["demo-1.0.dist-info/METADATA", "demo/guide.rst"]
    assert sentences_from_documents(documents) == [
        "The demo package explains itself in prose.", "The guide tells a story about configuration files.",
    ]
