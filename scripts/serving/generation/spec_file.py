"""generation.json: what the build learnt of a generation model that its server needs (the model's
facts, stop tokens, system prompt and KV sizing). Written by the build (model_build.recipes.llm) into
the model's version folder; read by the served model (model_repository/smollm2_chat/1/model.py) and
the generation benchmark (perf_sweep.generate_bench), all through `GenerationSpec`.

Why a typed reader: three places read the file raw and each derived the KV layout from its facts
itself (`hidden // heads` four times).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from serving.generation.errors import GenerationError
from serving.generation.sizing import KvLayout

#: The file's name in the model's version folder (the served config's `spec_file` parameter names it too).
SPEC_FILE = "generation.json"
#: The model facts the KV layout is derived from.
LAYOUT_FACTS = ("layers", "kv_heads", "hidden", "heads")


def kv_layout_of(facts: Mapping[str, Any], block_size: int, dtype: str = "fp32") -> KvLayout:
    """The KV cache's layout from a model's facts: head size = hidden size / attention heads."""
    missing = [key for key in LAYOUT_FACTS if not isinstance(facts.get(key), int)]
    if missing:
        raise GenerationError(f"the model's facts lack integer {missing}: expected {list(LAYOUT_FACTS)} (the build records them).")
    return KvLayout(facts["layers"], facts["kv_heads"], facts["hidden"] // facts["heads"], int(block_size), dtype)


@dataclass(frozen=True)
class GenerationSpec:
    facts: Mapping[str, Any]
    eos_token_ids: tuple[int, ...]
    system_prompt: str
    #: How its KV blocks were sized (serving.generation.sizing.plan_kv_blocks), for the build report.
    kv_sizing: Mapping[str, Any] = field(default_factory=dict)

    def kv_layout(self, block_size: int, dtype: str = "fp32") -> KvLayout:
        return kv_layout_of(self.facts, block_size, dtype)

    def to_json(self) -> str:
        return json.dumps({"facts": dict(self.facts), "eos_token_ids": list(self.eos_token_ids),
                           "system_prompt": self.system_prompt, "kv_sizing": dict(self.kv_sizing)}, indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any, source: str = SPEC_FILE) -> "GenerationSpec":
        if not isinstance(data, Mapping) or not isinstance(data.get("facts"), Mapping):
            raise GenerationError(f"{source} holds no `facts` object: expected the file `make build-engines` writes.")
        eos = data.get("eos_token_ids")
        if not isinstance(eos, list) or not eos or not all(isinstance(t, int) and not isinstance(t, bool) for t in eos):
            raise GenerationError(f"{source}: `eos_token_ids` = {eos!r}; expected a non-empty list of token ids.")
        if not isinstance(data.get("system_prompt"), str):
            raise GenerationError(f"{source}: `system_prompt` is {data.get('system_prompt')!r}; expected a string.")
        kv_layout_of(data["facts"], 1)  # the facts the server derives its cache from
        return cls(data["facts"], tuple(eos), data["system_prompt"], data.get("kv_sizing") or {})

    @classmethod
    def read(cls, path: "str | os.PathLike[str]") -> "GenerationSpec":
        try:
            with open(path) as f:
                text = f.read()
        except OSError as exc:
            raise GenerationError(f"cannot read {path} ({exc.strerror or exc}): run `make build-engines`.") from None
        try:
            return cls.from_dict(json.loads(text), str(path))
        except json.JSONDecodeError as exc:
            raise GenerationError(f"{path} is not JSON ({exc}): run `make build-engines` again.") from None
