"""Generative serving: the pure runtime behind the `smollm2_chat` Triton model.

Planning is pure and unit-tested (tests/unit/serving/generation/test_generation_*.py): `kv_blocks` (fixed-size KV
blocks, reference counts, per-sequence block tables), `prefix_cache` (reference-counted sharing of
full blocks of a common prefix), `scheduler` (continuous batching, chunked prefill, priorities,
bounded wait queue, finish reasons), `sizing` (number of blocks from the partition's memory, the
70% rule), `sampling` and `requests` (validated request parameters), `detokenize` (streaming text).
Running touches numpy and ONNX Runtime only: `kv_store` (the block pool, FP32 or INT8 with per-head
scales) and `engine` (prefill/decode steps through the exported decoder-step graph, and the loop
that ties scheduler, store and graph together). Nothing here imports Triton.
"""
