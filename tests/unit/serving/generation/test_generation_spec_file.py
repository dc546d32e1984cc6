"""generation.json's one reader: the served model and the benchmark derive the KV layout from it alone."""
from __future__ import annotations

import json

import pytest

from serving.generation.errors import GenerationError
from serving.generation.spec_file import GenerationSpec, kv_layout_of

FACTS = {"layers": 30, "kv_heads": 3, "hidden": 576, "heads": 9, "eos_token_id": 2, "system_prompt": "Be brief."}


def test_the_written_spec_reads_back_and_gives_the_kv_layout_of_its_facts(tmp_path):
    written = GenerationSpec(FACTS, (2,), "Be brief.", {"num_blocks": 600})
    path = tmp_path / "generation.json"
    path.write_text(written.to_json())
    read = GenerationSpec.read(path)
    assert read == GenerationSpec(FACTS, (2,), "Be brief.", {"num_blocks": 600})
    layout = read.kv_layout(16, "int8")
    assert (layout.layers, layout.kv_heads, layout.head_dim, layout.block_size, layout.dtype.value) == (30, 3, 64, 16, "int8")


@pytest.mark.parametrize("document, named", [
    ({}, "holds no `facts` object"),
    ({"facts": FACTS, "eos_token_ids": [], "system_prompt": ""}, "`eos_token_ids` = \\[\\]"),
    ({"facts": FACTS, "eos_token_ids": [2], "system_prompt": None}, "`system_prompt` is None"),
    ({"facts": {**FACTS, "heads": "9"}, "eos_token_ids": [2], "system_prompt": ""}, r"lack integer \['heads'\]"),
])
def test_a_broken_spec_names_what_is_wrong(tmp_path, document, named):
    path = tmp_path / "generation.json"
    path.write_text(json.dumps(document))
    with pytest.raises(GenerationError, match=named):
        GenerationSpec.read(path)


def test_a_missing_spec_says_how_to_make_it(tmp_path):
    with pytest.raises(GenerationError, match="run `make build-engines`"):
        GenerationSpec.read(tmp_path / "generation.json")
    with pytest.raises(GenerationError, match=r"lack integer \['layers'"):
        kv_layout_of({}, 16)
