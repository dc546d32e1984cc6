"""The decoder step in plain numpy, from the exported graph's own weights: the speed baseline.

Why: the engine's heavy compute runs in ONNX Runtime; this is what it would cost without it (same
math as model_build.llm.graph.DecoderStep, numpy matmuls on the same FP32 weights), and a second, independent
check of the exported graph's logits. Decode steps only (one new token per row).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


class NumpyDecoderStep:
    def __init__(self, onnx_path: Path, facts: dict) -> None:
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(onnx_path))
        self.w = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
        self.layers, self.heads, self.kv_heads = facts["layers"], facts["heads"], facts["kv_heads"]
        self.head_dim = facts["hidden"] // self.heads
        self.eps, self.theta = facts["rms_norm_eps"], facts["rope_theta"]
        self.inv_freq = (1.0 / (self.theta ** (np.arange(0, self.head_dim, 2, dtype=np.int64).astype(np.float32) / self.head_dim))).astype(np.float32)
        self.t = {name: np.ascontiguousarray(value.T) for name, value in self.w.items() if value.ndim == 2 and "embed" not in name}

    def _norm(self, x, weight):
        return weight * (x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps))

    def _rope(self, x, positions):
        freqs = positions.astype(np.float32)[:, None] * self.inv_freq[None]
        emb = np.concatenate([freqs, freqs], -1)
        cos, sin = np.cos(emb)[:, None], np.sin(emb)[:, None]
        half = x.shape[-1] // 2
        return x * cos + np.concatenate([-x[..., half:], x[..., :half]], -1) * sin

    def decode(self, tokens, positions, past_key, past_value, past_length):
        """tokens/positions [B]; past_* [L, B, H, P, D]; returns logits [B, V]."""
        batch, past = len(tokens), past_key.shape[3]
        embed = self.w["model.embed_tokens.weight"]
        h = embed[tokens]
        groups, d = self.heads // self.kv_heads, self.head_dim
        mask = np.where(np.arange(past)[None] < np.asarray(past_length)[:, None], 0.0, -np.inf).astype(np.float32)
        for i in range(self.layers):
            p = f"model.layers.{i}."
            x = self._norm(h, self.w[p + "input_layernorm.weight"])
            q = self._rope((x @ self.t[p + "self_attn.q_proj.weight"]).reshape(batch, self.heads, d), positions)
            k = self._rope((x @ self.t[p + "self_attn.k_proj.weight"]).reshape(batch, self.kv_heads, d), positions)
            v = (x @ self.t[p + "self_attn.v_proj.weight"]).reshape(batch, self.kv_heads, d)
            qg = q.reshape(batch, self.kv_heads, groups, d) * d ** -0.5
            s_past = np.einsum("bhgd,bhpd->bhgp", qg, past_key[i]) + mask[:, None, None]
            s_new = np.einsum("bhgd,bhd->bhg", qg, k)[..., None]
            s = np.concatenate([s_past, s_new], -1)
            e = np.exp(s - s.max(-1, keepdims=True))
            pr = e / e.sum(-1, keepdims=True)
            out = np.einsum("bhgp,bhpd->bhgd", pr[..., :past], past_value[i]) + pr[..., past:] * v[:, :, None]
            h = h + out.reshape(batch, self.heads * d) @ self.t[p + "self_attn.o_proj.weight"]
            x = self._norm(h, self.w[p + "post_attention_layernorm.weight"])
            gate = x @ self.t[p + "mlp.gate_proj.weight"]
            h = h + ((gate / (1 + np.exp(-gate))) * (x @ self.t[p + "mlp.up_proj.weight"])) @ self.t[p + "mlp.down_proj.weight"]
        return self._norm(h, self.w["model.norm.weight"]) @ embed.T
