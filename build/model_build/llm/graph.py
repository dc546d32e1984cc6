"""The decoder step graph: one ONNX Runtime call runs a prefill chunk or a decode step.

Why one graph for both: a prefill chunk is a decode step with more new tokens, so one exported
graph (dynamic batch, new-token and past axes) serves chunked prefill and batched decode, and the
KV cache stays OUTSIDE the graph, in the serving runtime's own paged store
(scripts/serving/generation/kv_store.py): the runtime gathers each sequence's blocks into the dense
`past_key`/`past_value` inputs and writes the returned `new_key`/`new_value` back into blocks.

Inputs (B sequences, T new tokens each, P past positions, L layers, H KV heads, D head size):
  input_ids [B, T] int64, position_ids [B, T] int64,
  past_key / past_value [L, B, H, P, D] float32 (rows padded past their own length),
  past_length [B] int64 (valid past positions per row), last_index [B] int64 (which new token's
  logits to return: the last real one; rows may be right-padded in T).
Outputs: logits [B, V] float32, new_key / new_value [L, B, H, T, D] float32 (post-RoPE keys).

The module mirrors transformers' LlamaForCausalLM (RMSNorm, rotary embedding computed from the
position ids in float32 as transformers does, grouped-query attention, SwiGLU MLP, tied LM head)
and takes its weights from the transformers model loaded from the GGUF file, so the reference
comparison in `model_build.llm.validate` checks the export and the cache handling, not two weight loaders.
"""
from __future__ import annotations

import warnings
from pathlib import Path

from serving.generation.engine import GRAPH_INPUTS, GRAPH_OUTPUTS  # the names the server feeds and reads


def _rms_norm(x, weight, eps: float):
    import torch

    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def _rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _attention_bias(past_length, batch: int, new: int, past: int):
    """[B, 1, 1, T, P+T] additive mask: valid past positions and causal new positions get 0."""
    import torch

    past_ok = torch.arange(past)[None, :] < past_length[:, None]  # [B, P]
    causal = torch.tril(torch.ones(new, new, dtype=torch.bool))  # [T, T]
    allowed = torch.cat((past_ok[:, None, :].expand(batch, new, past), causal[None].expand(batch, new, new)), dim=-1)
    return torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None, None]


def _grouped_query_attention(q, k, v, past_key, past_value, bias, kv_heads: int, groups: int, scale: float):
    """Grouped-query attention without copying K/V per query head: the G query heads of one KV head
    are stacked along the token axis ([B, H, G*T, D]), and the past and the new keys are scored
    separately, so the (large) past is never concatenated. Returns [B, T, H*D]."""
    import torch

    batch, heads, new, head_dim = q.shape
    past = past_key.shape[2]
    qg = q.reshape(batch, kv_heads, groups * new, head_dim) * scale
    s_past = torch.matmul(qg, past_key.transpose(2, 3)).view(batch, kv_heads, groups, new, past)
    s_new = torch.matmul(qg, k.transpose(2, 3)).view(batch, kv_heads, groups, new, new)
    probs = torch.softmax(torch.cat((s_past, s_new), dim=-1) + bias, dim=-1)
    p_past = probs[..., :past].reshape(batch, kv_heads, groups * new, past)
    p_new = probs[..., past:].reshape(batch, kv_heads, groups * new, new)
    out = torch.matmul(p_past, past_value) + torch.matmul(p_new, v)
    return out.view(batch, heads, new, head_dim).transpose(1, 2).reshape(batch, new, heads * head_dim)


def decoder_step_module(hf_model):
    """A torch module computing one decoder step with explicit past K/V, sharing `hf_model`'s weights."""
    import torch
    from torch import nn

    config = hf_model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    eps = config.rms_norm_eps
    groups, scale = heads // kv_heads, head_dim ** -0.5
    theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta", getattr(config, "rope_theta", 10000.0))
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))

    class DecoderStep(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = hf_model.model
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, input_ids, position_ids, past_key, past_value, past_length, last_index):
            batch, new = input_ids.shape
            hidden = self.model.embed_tokens(input_ids)
            freqs = position_ids.float()[:, :, None] * self.inv_freq[None, None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos()[:, None], emb.sin()[:, None]  # [B, 1, T, D]
            bias = _attention_bias(past_length, batch, new, past_key.shape[3])
            new_keys, new_values = [], []
            for index, layer in enumerate(self.model.layers):
                attn = layer.self_attn
                x = _rms_norm(hidden, layer.input_layernorm.weight, eps)
                q = attn.q_proj(x).view(batch, new, heads, head_dim).transpose(1, 2)
                k = attn.k_proj(x).view(batch, new, kv_heads, head_dim).transpose(1, 2)
                v = attn.v_proj(x).view(batch, new, kv_heads, head_dim).transpose(1, 2)
                q = q * cos + _rotate_half(q) * sin
                k = k * cos + _rotate_half(k) * sin
                new_keys.append(k)
                new_values.append(v)
                out = _grouped_query_attention(q, k, v, past_key[index], past_value[index], bias, kv_heads, groups, scale)
                hidden = hidden + attn.o_proj(out)
                mlp = layer.mlp
                x = _rms_norm(hidden, layer.post_attention_layernorm.weight, eps)
                hidden = hidden + mlp.down_proj(nn.functional.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
            hidden = _rms_norm(hidden, self.model.norm.weight, eps)
            last = hidden[torch.arange(batch), last_index]  # [B, hidden]
            logits = torch.matmul(last, self.model.embed_tokens.weight.t())
            return logits, torch.stack(new_keys), torch.stack(new_values)

    return DecoderStep().eval()


def onnx_from_decoder_step(module, out_path: Path, layers: int, kv_heads: int, head_dim: int) -> Path:
    """Export with dynamic batch/new/past axes (TorchScript exporter, opset 17)."""
    import torch

    batch, new, past = 2, 3, 4
    example = (
        torch.zeros(batch, new, dtype=torch.int64), torch.arange(new).repeat(batch, 1) + past,
        torch.zeros(layers, batch, kv_heads, past, head_dim), torch.zeros(layers, batch, kv_heads, past, head_dim),
        torch.full((batch,), past, dtype=torch.int64), torch.full((batch,), new - 1, dtype=torch.int64),
    )
    axes = {
        "input_ids": {0: "batch", 1: "new"}, "position_ids": {0: "batch", 1: "new"},
        "past_key": {1: "batch", 3: "past"}, "past_value": {1: "batch", 3: "past"},
        "past_length": {0: "batch"}, "last_index": {0: "batch"},
        "logits": {0: "batch"}, "new_key": {1: "batch", 3: "new"}, "new_value": {1: "batch", 3: "new"},
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), warnings.catch_warnings():
        # The exporter warns that `hidden[arange, last_index]` is wrong for negative indices; last_index is
        # in [0, new) by the graph's contract (the engine sets it), and validate.py compares the result.
        warnings.filterwarnings("ignore", message="Exporting aten::index operator of advanced indexing")
        torch.onnx.export(module, example, str(out_path), input_names=list(GRAPH_INPUTS), output_names=list(GRAPH_OUTPUTS),
                          dynamic_axes=axes, opset_version=17, dynamo=False, do_constant_folding=False)
    return out_path
