"""Reference-counted sharing of full KV blocks of a common prompt prefix.

Why: every chat request starts with the same system prompt; its K/V are the same for every request
(causal attention: a position's K/V depend only on the tokens up to it), so the blocks holding it
are computed once and shared. Only FULL blocks are shared: a full block is immutable, so no
sequence ever writes into a block another one reads.

A block is found by the chain key of its tokens and of every token before it:
key_i = BLAKE2b(key_{i-1}, tokens of block i). Equal keys mean equal prefixes, so equal K/V: the
digest is what makes that safe. Python's hash() of a tuple of ints is the same in every process
(PYTHONHASHSEED does not touch ints) and 64 bits wide, so a prompt whose key collides with another
user's prefix could be made offline, and a hit never compares tokens: that request would have been
computed on someone else's K/V (the class of vLLM's GHSA-rm76-4mrf-v9r8, fixed there with SHA-256). A hit
retains the block (the allocator's reference count); the cache itself holds no reference, so an
unreferenced cached block is evictable and the allocator reuses it under pressure (and tells the
cache through `on_evict`).

The last prompt token is never taken from the cache: its logits are needed to sample the first
output token, so at least one prompt token is always computed.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Sequence

from serving.generation.kv_blocks import BlockAllocator

#: Bytes of a chain key (BLAKE2b digest size): 128 bits, collision-resistant.
KEY_BYTES = 16


def chain_keys(tokens: Sequence[int], block_size: int) -> list[bytes]:
    """Chain keys of the full blocks of `tokens` (one per full block): each a digest of the previous
    key and the block's token ids (module docstring)."""
    keys, parent = [], b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = struct.pack(f"<{block_size}q", *(int(t) for t in tokens[start:start + block_size]))
        parent = hashlib.blake2b(parent + block, digest_size=KEY_BYTES).digest()
        keys.append(parent)
    return keys


@dataclass
class PrefixCacheStats:
    """Counted in prompt tokens, so the hit rate is the share of prompt work not recomputed."""

    lookups: int = 0
    looked_up_tokens: int = 0
    hit_tokens: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.looked_up_tokens if self.looked_up_tokens else 0.0


class PrefixCache:
    def __init__(self, allocator: BlockAllocator, block_size: int, enabled: bool = True) -> None:
        self.allocator = allocator
        self.block_size = block_size
        self.enabled = enabled
        self._by_key: dict[bytes, int] = {}
        self._key_of: dict[int, bytes] = {}
        self.stats = PrefixCacheStats()
        allocator.on_evict = self._forget

    def __len__(self) -> int:
        return len(self._by_key)

    def _forget(self, block: int) -> None:
        key = self._key_of.pop(block, None)
        if key is not None:
            self._by_key.pop(key, None)

    def match(self, prompt: Sequence[int]) -> list[int]:
        """Retain and return the cached blocks of the longest cached prefix of `prompt` (full
        blocks only, never covering the last prompt token). Not counted in `stats`: a request that
        must wait for blocks is matched again at every step (`count_admitted` counts it once)."""
        if not self.enabled:
            return []
        usable = prompt[:max(0, len(prompt) - 1)]
        blocks = []
        for key in chain_keys(usable, self.block_size):
            block = self._by_key.get(key)
            if block is None:
                break
            self.allocator.retain(block)
            blocks.append(block)
        return blocks

    def count_admitted(self, prompt_tokens: int, shared_blocks: int) -> None:
        """Count one admitted request's lookup: its prompt tokens, and those its shared blocks cover."""
        self.stats.lookups += 1
        self.stats.looked_up_tokens += prompt_tokens
        self.stats.hit_tokens += shared_blocks * self.block_size

    def insert(self, prompt: Sequence[int], blocks: Sequence[int], computed_tokens: int) -> int:
        """Index the full blocks of `prompt` whose K/V are computed; returns how many are new."""
        if not self.enabled:
            return 0
        added = 0
        full = min(computed_tokens, len(prompt)) // self.block_size
        for index, key in enumerate(chain_keys(prompt[:full * self.block_size], self.block_size)):
            if key in self._by_key or blocks[index] in self._key_of:
                continue
            self._by_key[key] = blocks[index]
            self._key_of[blocks[index]] = key
            self.allocator.mark_cached(blocks[index])
            added += 1
        return added
