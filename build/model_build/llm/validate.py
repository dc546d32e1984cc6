"""Check the served LLM against transformers' reference, calibrate INT8 KV, time ORT vs numpy.

* Reference: transformers' LlamaForCausalLM loaded from the same GGUF (dequantized to FP32), greedy
  with its own KV cache, EOS not special (so every prompt runs the full length). All prompts run as
  one left-padded batch (attention mask, explicit position ids): a decode step of this 135M model
  reads all ~0.5 GB of FP32 weights whatever the batch, so 22 prompts one at a time cost 22x the
  weight traffic (~80 s of the build on 2 cores). One prompt (the shortest: the most padding) is
  also run on its own, and the batched reference must match it (`check_batched_reference`).
* Served path: the serving runtime itself (`GenerationEngine`: scheduler with continuous batching,
  chunked prefill and prefix sharing, the paged KV store, the exported graph in ONNX Runtime),
  all prompts submitted at once, so the check covers batching and shared blocks too.
* INT8 KV: the same run with the INT8 store (a scale per head and token), compared with the FP32 store.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from model_build.errors import BuildError
from contracts.onnx_sessions import CUDA_PROVIDER
from serving.generation.engine import DecoderGraph, GenerationEngine
from serving.generation.kv_store import KvStore
from serving.generation.requests import GenerationRequest, SamplingParams
from serving.generation.scheduler import Scheduler, SchedulerConfig
from serving.generation.sizing import KvLayout


def reference_greedy_one_at_a_time(hf_model, prompt: Sequence[int], new_tokens: int) -> tuple[list[int], np.ndarray]:
    """(tokens, logits [new_tokens, V]) of one prompt on its own: no padding, no batch mates."""
    import torch

    generated, rows = [], []
    with torch.inference_mode():
        out = hf_model(torch.tensor([list(prompt)]), use_cache=True, logits_to_keep=1)
        for step in range(new_tokens):
            logits = out.logits[0, -1]
            rows.append(logits.numpy().copy())
            generated.append(int(torch.argmax(logits)))
            if step + 1 < new_tokens:  # the last token's logits are never used
                out = hf_model(torch.tensor([[generated[-1]]]), cache=out.cache, use_cache=True)
    return generated, np.stack(rows)


def reference_greedy(hf_model, prompts: Sequence[Sequence[int]], new_tokens: int,
                     pad_token_id: int = 0) -> tuple[list[list[int]], list[np.ndarray]]:
    """(tokens, logits [new_tokens, V]) per prompt from transformers, greedy without EOS stops, all
    prompts in one batch: left-padded, padding masked out, positions counted from each prompt's
    first real token (so every row computes what it computes alone, up to float rounding)."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.int64)
    mask = torch.zeros((len(prompts), width), dtype=torch.int64)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = torch.tensor(list(prompt))
        mask[row, width - len(prompt):] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    steps_tokens, steps_logits = [], []
    with torch.inference_mode():
        out = hf_model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        last = positions[:, -1:]
        for step in range(new_tokens):
            logits = out.logits[:, -1]
            steps_logits.append(logits.numpy().copy())
            token = torch.argmax(logits, dim=-1, keepdim=True)
            steps_tokens.append(token[:, 0].numpy().copy())
            if step + 1 < new_tokens:
                mask, last = torch.cat((mask, torch.ones_like(token)), dim=1), last + 1
                out = hf_model(input_ids=token, attention_mask=mask, position_ids=last, cache=out.cache, use_cache=True)
    tokens, logits = np.stack(steps_tokens, 1), np.stack(steps_logits, 1)
    return [[int(t) for t in row] for row in tokens], [logits[row] for row in range(len(prompts))]


def check_batched_reference(hf_model, prompts: Sequence[Sequence[int]], tokens, logits, new_tokens: int,
                            tolerance: float) -> dict[str, Any]:
    """The batched reference against the same model run on one prompt alone (the shortest prompt,
    the one with the most padding): identical tokens and logits within `tolerance`, else the
    batching (mask, positions) changed what the reference computes and the build fails."""
    row = min(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    alone_tokens, alone_logits = reference_greedy_one_at_a_time(hf_model, prompts[row], new_tokens)
    result = {"prompt_index": row, "padding_tokens": max(len(p) for p in prompts) - len(prompts[row]),
              **compare_runs([alone_tokens], [alone_logits], [tokens[row]], [logits[row]]), "tolerance": tolerance}
    if result["identical"] != 1 or result["max_abs_logit_diff"] > tolerance:
        raise BuildError(f"the batched transformers reference differs from the one-prompt run: {result}")
    return result


class _RecordingEngine(GenerationEngine):
    """The served engine, keeping every sampled row of logits (for the tolerance check)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.logits: dict[str, list[np.ndarray]] = {}

    def _sample(self, sequence, logits):
        self.logits.setdefault(sequence.request_id, []).append(np.asarray(logits, dtype=np.float32).copy())
        return super()._sample(sequence, logits)


def served_greedy(graph: DecoderGraph, layout: KvLayout, prompts: Sequence[Sequence[int]], new_tokens: int,
                  max_context: int, max_running: int = 8,
                  chunk: int = 32) -> tuple[list[list[int]], list[np.ndarray], dict[str, Any]]:
    blocks = 2 * max_running * -(-max_context // layout.block_size)
    scheduler = Scheduler(SchedulerConfig(num_blocks=blocks, block_size=layout.block_size, max_running=max_running,
                                          max_context=max_context, prefill_chunk_tokens=chunk, eos_token_ids=()))
    engine = _RecordingEngine(graph, scheduler, KvStore(layout, blocks))
    sequences = [engine.submit(GenerationRequest(f"p{i}", tuple(p), SamplingParams(max_tokens=new_tokens), priority=2))
                 for i, p in enumerate(prompts)]
    started = time.perf_counter()
    steps = engine.run_until_idle()
    seconds = time.perf_counter() - started
    stats = {"steps": len(steps), "seconds": round(seconds, 2), "prefix_hit_rate": round(scheduler.prefix_cache.stats.hit_rate, 4),
             "mean_decode_batch": round(float(np.mean([s.decode_batch for s in steps if s.decode_batch] or [0])), 2),
             "blocks_in_use_after": scheduler.allocator.num_used}
    return [s.generated for s in sequences], [np.stack(engine.logits[s.request_id]) for s in sequences], stats


def compare_runs(reference_tokens, reference_logits, tokens, logits) -> dict[str, Any]:
    """Identical prompts, matching prefix lengths, and logit differences while the tokens agree."""
    identical, prefixes, diffs = 0, [], []
    for ref_t, ref_l, got_t, got_l in zip(reference_tokens, reference_logits, tokens, logits):
        match = next((i for i, (a, b) in enumerate(zip(ref_t, got_t)) if a != b), min(len(ref_t), len(got_t)))
        identical += got_t == ref_t
        prefixes.append(match)
        upto = min(match + 1, len(ref_l), len(got_l))  # the diverging step's logits are comparable too
        diffs.append(float(np.abs(ref_l[:upto] - got_l[:upto]).max()))
    return {"prompts": len(reference_tokens), "identical": identical, "min_matching_prefix": min(prefixes),
            "mean_matching_prefix": round(float(np.mean(prefixes)), 2), "max_abs_logit_diff": max(diffs),
            "mean_max_abs_logit_diff": round(float(np.mean(diffs)), 6)}


def time_ort_vs_numpy(graph: DecoderGraph, numpy_step, layout: KvLayout, batches=(1, 8), past: int = 128, repeats: int = 7) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    rows = []
    for batch in batches:
        keys = rng.standard_normal((layout.layers, batch, layout.kv_heads, past, layout.head_dim)).astype(np.float32)
        values = rng.standard_normal(keys.shape).astype(np.float32)
        tokens = rng.integers(0, 49152, batch)
        lengths = np.full(batch, past, np.int64)

        def ort_call():
            return graph.run(tokens[:, None].astype(np.int64), lengths[:, None], keys, values, lengths, np.zeros(batch, np.int64))[0]

        def numpy_call():
            return numpy_step.decode(tokens, lengths, keys, values, lengths)

        # Interleaved (ORT, numpy, ORT, numpy, ...) and the median of each: the host's load drifts
        # during the build, and both sides should see the same drift.
        samples: dict[str, list[float]] = {"onnxruntime": [], "numpy": []}
        outputs = {"onnxruntime": ort_call(), "numpy": numpy_call()}
        for _ in range(repeats):
            for name, call in (("onnxruntime", ort_call), ("numpy", numpy_call)):
                started = time.perf_counter()
                call()
                samples[name].append((time.perf_counter() - started) * 1000)
        timings = {name: (float(np.median(values)), outputs[name]) for name, values in samples.items()}
        rows.append({"batch": batch, "past": past, "onnxruntime_ms": round(timings["onnxruntime"][0], 1),
                     "numpy_ms": round(timings["numpy"][0], 1),
                     "speedup": round(timings["numpy"][0] / timings["onnxruntime"][0], 2),
                     "max_abs_logit_diff": float(np.abs(timings["onnxruntime"][1] - timings["numpy"][1]).max())})
    return rows


def probe_engine_memory(onnx_path: Path, layout: KvLayout, batch: int, past: int, threads: int = 0) -> int:
    command = [sys.executable, "-m", "serving.generation.memory_probe", "--onnx", str(onnx_path), "--batch", str(batch),
               "--past", str(past), "--layers", str(layout.layers), "--kv-heads", str(layout.kv_heads),
               "--head-dim", str(layout.head_dim), "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"engine memory probe failed: {done.stderr.strip()[-400:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_growth_bytes"])


def detect_cuda_provider() -> str:
    """'' when onnxruntime's CUDA provider can run here, else why not (one line for the report)."""
    import onnxruntime as ort

    if CUDA_PROVIDER not in ort.get_available_providers():
        return (f"onnxruntime {ort.__version__} here has no CUDAExecutionProvider (install onnxruntime-gpu on a GPU host); "
                "the same decoder_step.onnx runs there with provider CUDAExecutionProvider")
    return ""
