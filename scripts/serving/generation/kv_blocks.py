"""Fixed-size KV blocks: who owns which block, and which blocks hold a sequence's tokens.

The KV cache is a pool of `num_blocks` blocks of `block_size` token positions each (the tensors
live in `kv_store`; this module only does the bookkeeping, so it is pure and tested on its own).
A sequence's tokens are addressed through its `BlockTable`: token i lives in block
`table.blocks[i // block_size]` at offset `i % block_size`, so a sequence grows one block at a
time instead of reserving its whole context up front (the PagedAttention idea).

Blocks are reference counted because full blocks of a common prefix are shared between sequences
(`prefix_cache`). A block whose count drops to zero is *free* unless the prefix cache still indexes
it: then it is *evictable* — kept with its contents for a later hit, and handed out (least recently
released first) only when no free block is left.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

from serving.generation.errors import GenerationError, OutOfKvBlocks


def blocks_for_tokens(tokens: int, block_size: int) -> int:
    """Blocks needed to hold `tokens` positions (ceil division)."""
    if tokens < 0 or block_size < 1:
        raise GenerationError(f"blocks_for_tokens({tokens}, {block_size}): expected tokens >= 0 and block_size >= 1.")
    return -(-tokens // block_size)


class BlockAllocator:
    """Free list, reference counts and the evictable (cached, unreferenced) blocks, LRU ordered."""

    def __init__(self, num_blocks: int) -> None:
        if num_blocks < 1:
            raise GenerationError(f"`num_blocks` = {num_blocks}: the KV cache needs at least one block.")
        self.num_blocks = num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self._refs = [0] * num_blocks
        self._evictable: OrderedDict[int, None] = OrderedDict()
        #: Called with a block id when an evictable block is reused: the prefix cache forgets it.
        self.on_evict: Callable[[int], None] = lambda block: None
        #: Blocks the prefix cache indexes (their contents are worth keeping at refcount 0).
        self._cached: set[int] = set()

    @property
    def num_free(self) -> int:
        """Blocks available to `allocate` (free plus evictable)."""
        return len(self._free) + len(self._evictable)

    @property
    def num_used(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.num_blocks - self.num_free

    def refcount(self, block: int) -> int:
        return self._refs[block]

    def allocate(self) -> int:
        """A block with refcount 1; a free one first, else the least recently released cached one."""
        if self._free:
            block = self._free.popleft()
        elif self._evictable:
            block, _ = self._evictable.popitem(last=False)
            self._cached.discard(block)
            self.on_evict(block)
        else:
            raise OutOfKvBlocks(f"all {self.num_blocks} KV blocks are referenced by running sequences.")
        self._refs[block] = 1
        return block

    def retain(self, block: int) -> None:
        """One more reference (a sequence sharing a cached prefix block)."""
        if self._refs[block] == 0:
            if block not in self._evictable:
                raise GenerationError(f"block {block} is free: only a used or cached block can be shared.")
            del self._evictable[block]
        self._refs[block] += 1

    def release(self, block: int) -> None:
        if self._refs[block] <= 0:
            raise GenerationError(f"block {block} released more often than it was allocated or retained.")
        self._refs[block] -= 1
        if self._refs[block] == 0:
            if block in self._cached:
                self._evictable[block] = None
            else:
                self._free.append(block)

    def mark_cached(self, block: int) -> None:
        """The prefix cache indexes `block`: keep its contents when its last reference goes."""
        self._cached.add(block)

    def is_evictable(self, block: int) -> bool:
        return block in self._evictable


@dataclass
class BlockTable:
    """One sequence's blocks, in token order, and how many positions hold computed KV."""

    block_size: int
    blocks: list[int] = field(default_factory=list)
    #: Positions whose K/V are written (prefix-cache hits count as written).
    num_tokens: int = 0

    @property
    def capacity(self) -> int:
        return len(self.blocks) * self.block_size

    def blocks_needed(self, new_tokens: int) -> int:
        """Extra blocks to allocate before `new_tokens` more positions can be written."""
        return max(0, blocks_for_tokens(self.num_tokens + new_tokens, self.block_size) - len(self.blocks))

    def grow(self, allocator: BlockAllocator, new_tokens: int) -> None:
        """Allocate the blocks `new_tokens` more positions need (all or nothing)."""
        needed = self.blocks_needed(new_tokens)
        if needed > allocator.num_free:
            raise OutOfKvBlocks(f"{needed} KV blocks needed, {allocator.num_free} free.")
        self.blocks.extend(allocator.allocate() for _ in range(needed))

    def slot(self, position: int) -> tuple[int, int]:
        """(block id, offset) of a token position."""
        if not 0 <= position < self.capacity:
            raise GenerationError(f"position {position} is outside the table's {self.capacity} allocated positions.")
        return self.blocks[position // self.block_size], position % self.block_size

    def release_all(self, allocator: BlockAllocator) -> None:
        for block in self.blocks:
            allocator.release(block)
        self.blocks.clear()
        self.num_tokens = 0
