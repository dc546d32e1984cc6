"""The peer suite's text workloads (`--texts`): the named sources and a file of the user's own texts."""
import argparse
import json

import pytest

from perf_sweep import inputs as gen
from perf_sweep.errors import SweepPlanError
from perf_sweep.peers.cli import add_peers_parser, options_from_args
from perf_sweep.peers.references import TextSource, _texts_of, read_text_file

from contracts.text_corpus import TextCorpus, text_corpus_path


def test_a_json_file_gives_its_strings_and_a_text_file_its_non_blank_lines(tmp_path):
    (tmp_path / "queries.json").write_text(json.dumps(["first query", "  ", "second query"]))
    (tmp_path / "queries.txt").write_text("first query\n\n  \nsecond query\n")
    assert read_text_file(tmp_path / "queries.json") == ["first query", "second query"]
    assert read_text_file(tmp_path / "queries.txt") == ["first query", "second query"]


@pytest.mark.parametrize("name, content, expected", [
    ("missing.txt", None, "no such file; expected one of heldout, paragraphs, long_tailed"),
    ("broken.json", "[\"a\",", "is not valid JSON"),
    ("object.json", json.dumps({"texts": ["a"]}), "must hold a JSON list of strings, got dict"),
    ("mixed.json", json.dumps(["a", 3]), "with non-string items"),
    ("blank.txt", "\n \n", "holds no non-blank text"),
])
def test_a_bad_file_says_what_was_wrong_and_what_is_expected(tmp_path, name, content, expected):
    if content is not None:
        (tmp_path / name).write_text(content)
    with pytest.raises(SweepPlanError, match=expected):
        read_text_file(tmp_path / name)


def test_heldout_reads_the_build_corpus_and_says_so(tmp_path):
    TextCorpus(train=("A train sentence.",), heldout=("one sentence.", "another sentence."), seed=0,
               heldout_fraction=0.2).save(text_corpus_path(tmp_path / "text_encoder"))
    texts, where = _texts_of(TextSource.HELDOUT.value, tmp_path, seed=0, count=None, max_length=128)
    assert texts == ["one sentence.", "another sentence."] and "`heldout`" in where
    with pytest.raises(SweepPlanError, match="make build-engines"):
        _texts_of(TextSource.HELDOUT.value, tmp_path / "elsewhere", seed=0, count=None, max_length=128)
    # read through the corpus' one reader: a file without its `format` is refused, not half read
    text_corpus_path(tmp_path / "text_encoder").write_text(json.dumps({"heldout": ["one sentence."]}))
    with pytest.raises(SweepPlanError, match="expected 1. Rebuild it"):
        _texts_of(TextSource.HELDOUT.value, tmp_path, seed=0, count=None, max_length=128)


def test_paragraphs_are_cut_at_the_served_truncation_so_every_target_computes_the_same_tokens(tmp_path):
    tokenizer = gen.minilm_tokenizer()
    texts, where = _texts_of(TextSource.PARAGRAPHS.value, tmp_path, seed=0, count=None, max_length=32)
    assert len(texts) > 50 and "cut at the served 32-token truncation" in where
    lengths = [tokenizer.count(t) for t in texts]
    assert max(lengths) <= 33 and sum(n >= 30 for n in lengths) > len(texts) // 4  # re-tokenizing a cut word: +1


def test_long_tailed_texts_are_make_perfs_texts(tmp_path):
    texts, where = _texts_of(TextSource.LONG_TAILED.value, tmp_path, seed=3, count=40, max_length=128)
    expected, _ = gen.long_tailed_texts(40, 128, gen.minilm_tokenizer(), seed=3)
    assert texts == expected and "as `make perf` sends" in where


def test_the_command_line_names_the_source_and_defaults_to_heldout(tmp_path):
    parser = argparse.ArgumentParser()
    add_peers_parser(parser.add_subparsers(dest="command"))
    assert options_from_args(parser.parse_args(["peers"])).texts == "heldout"
    own = tmp_path / "mine.txt"
    assert options_from_args(parser.parse_args(["peers", "--texts", str(own)])).texts == str(own)
