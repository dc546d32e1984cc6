"""Input generation: seeded digit samples, long-tailed text lengths, perf_analyzer JSON."""
import json

import numpy as np
import pytest

from perf_sweep import inputs as gen
from perf_sweep.errors import SweepPlanError

DOC = """A first paragraph of plain prose that says what this package does, long enough to keep it.

```python
import thing  # a code block is not prose
```

| a table | is | not prose |
|---|---|---|

    indented code is dropped too, even if it is long enough to pass the length filter

Another paragraph with a [link](https://example.com) and `inline code`, still prose, so it is kept in the corpus.

Too short.
"""


def test_paragraphs_from_document_keeps_prose_and_drops_code_tables_and_markup():
    paragraphs = gen.paragraphs_from_document(DOC)
    assert len(paragraphs) == 2
    assert paragraphs[0].startswith("A first paragraph")
    assert "https://" not in paragraphs[1] and "`" not in paragraphs[1]


def test_long_tailed_lengths_have_at_least_5_percent_near_the_max_and_a_short_body():
    lengths = gen.long_tailed_token_lengths(1000, 256, seed=3)
    summary = gen.LengthSummary.of(lengths, 256)
    assert summary.near_max_fraction >= 0.05
    assert summary.p50 < 64  # most requests are short
    assert lengths.min() >= 4 and lengths.max() <= 256


def test_long_tailed_lengths_are_reproducible_from_the_seed():
    a = gen.long_tailed_token_lengths(200, 128, seed=7)
    assert np.array_equal(a, gen.long_tailed_token_lengths(200, 128, seed=7))
    assert not np.array_equal(a, gen.long_tailed_token_lengths(200, 128, seed=8))


def test_long_tailed_lengths_reject_bad_settings():
    with pytest.raises(SweepPlanError):
        gen.long_tailed_token_lengths(0, 128)
    with pytest.raises(SweepPlanError):
        gen.long_tailed_token_lengths(10, 128, tail_fraction=1.5)


def synthetic_paragraphs(n=50):
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    return [" ".join(rng.choice(words, size=int(rng.integers(5, 40)))) for _ in range(n)]


def test_texts_hit_their_target_token_lengths_with_a_word_tokenizer():
    tokenizer = gen.WordTokenizer()
    lengths = gen.long_tailed_token_lengths(300, 128, seed=1)
    texts = gen.texts_with_token_lengths(synthetic_paragraphs(), lengths, tokenizer, seed=1)
    counts = [tokenizer.count(t) for t in texts]
    assert counts == list(lengths)
    assert gen.LengthSummary.of(counts, 128).near_max_fraction >= 0.05
    assert texts == gen.texts_with_token_lengths(synthetic_paragraphs(), lengths, tokenizer, seed=1)


def test_texts_with_the_real_minilm_tokenizer_match_targets():
    tokenizer = gen.minilm_tokenizer()
    paragraphs = gen.corpus_paragraphs([DOC * 3, "Sentence transformers map text to dense vectors. " * 60])
    lengths = [8, 40, 250, 256]
    texts = gen.texts_with_token_lengths(paragraphs, lengths, tokenizer, seed=0)
    assert [tokenizer.count(t) for t in texts] == lengths


def test_string_input_data_uses_the_given_input_name_and_shape_1():
    data = gen.string_input_data(["hello world", "second"], "TEXT")
    assert data == {"data": [{"TEXT": {"content": ["hello world"], "shape": [1]}},
                             {"TEXT": {"content": ["second"], "shape": [1]}}]}
    assert gen.string_input_data(["x"], "query")["data"][0].keys() == {"query"}
    with pytest.raises(SweepPlanError):
        gen.string_input_data(["x"], "")


def test_digit_images_are_seeded_samples_of_the_split_written_as_batch1_requests(tmp_path):
    images = np.arange(20 * 64, dtype=np.float32).reshape(20, 1, 8, 8)
    sample = gen.sample_digit_images(images, count=30, seed=5)
    assert sample.shape == (30, 1, 8, 8)
    assert np.array_equal(sample, gen.sample_digit_images(images, count=30, seed=5))
    # every sampled image is one of the split's images
    assert {int(s[0, 0, 0]) for s in sample} <= {int(i[0, 0, 0]) for i in images}
    path = gen.write_input_data(tmp_path / "d.json", gen.image_input_data(sample[:3], "image"))
    data = json.loads(path.read_text())["data"]
    assert len(data) == 3 and data[0]["image"]["shape"] == [1, 8, 8]
    assert np.allclose(data[1]["image"]["content"], sample[1].ravel())


def test_digit_images_reject_wrong_shape():
    with pytest.raises(SweepPlanError, match=r"\[N, 1, 8, 8\]"):
        gen.sample_digit_images(np.zeros((3, 8, 8), np.float32))
