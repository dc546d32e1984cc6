"""Block allocator, block tables and prefix sharing (serving.generation.kv_blocks / prefix_cache)."""
from __future__ import annotations

import pytest

from serving.generation.errors import GenerationError, OutOfKvBlocks
from serving.generation.kv_blocks import BlockAllocator, BlockTable, blocks_for_tokens
from serving.generation.prefix_cache import PrefixCache, chain_keys


def test_blocks_for_tokens_rounds_up():
    assert [blocks_for_tokens(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_allocate_until_empty_then_raise_out_of_kv_blocks():
    allocator = BlockAllocator(2)
    assert {allocator.allocate(), allocator.allocate()} == {0, 1}
    with pytest.raises(OutOfKvBlocks, match="all 2 KV blocks"):
        allocator.allocate()


def test_release_returns_a_block_to_the_free_list_only_at_refcount_zero():
    allocator = BlockAllocator(1)
    block = allocator.allocate()
    allocator.mark_cached(block)
    allocator.release(block)
    allocator.retain(block)  # a prefix hit on the evictable block
    allocator.retain(block)
    assert allocator.refcount(block) == 2 and allocator.num_used == 1
    allocator.release(block)
    allocator.release(block)
    assert allocator.num_used == 0 and allocator.is_evictable(block)


def test_release_more_than_allocated_is_an_error():
    allocator = BlockAllocator(1)
    block = allocator.allocate()
    allocator.release(block)
    with pytest.raises(GenerationError, match="released more often"):
        allocator.release(block)


def test_retain_of_a_free_uncached_block_is_an_error():
    allocator = BlockAllocator(2)
    with pytest.raises(GenerationError, match="is free"):
        allocator.retain(0)


def test_block_table_grows_one_block_at_a_time_and_maps_positions():
    allocator, table = BlockAllocator(8), BlockTable(block_size=4)
    table.grow(allocator, 5)
    assert len(table.blocks) == 2
    table.num_tokens = 5
    assert table.blocks_needed(3) == 0 and table.blocks_needed(4) == 1
    assert table.slot(4) == (table.blocks[1], 0)
    table.release_all(allocator)
    assert allocator.num_used == 0 and table.blocks == []


def test_block_table_grow_is_all_or_nothing():
    allocator, table = BlockAllocator(2), BlockTable(block_size=4)
    with pytest.raises(OutOfKvBlocks):
        table.grow(allocator, 12)
    assert table.blocks == [] and allocator.num_free == 2


def test_chain_keys_depend_on_every_earlier_token():
    a = chain_keys([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = chain_keys([9, 2, 3, 4, 5, 6, 7, 8], 4)
    assert len(a) == 2 and a[0] != b[0] and a[1] != b[1]  # same second block, different prefix
    assert chain_keys([1, 2, 3], 4) == []


def test_chain_keys_are_digests_not_pythons_hash():
    """hash() of a tuple of ints is the same in every process and can be collided on purpose; a
    cache hit never compares tokens, so a key must be collision-resistant (BLAKE2b, 128 bits)."""
    import hashlib
    import struct

    first = hashlib.blake2b(struct.pack("<4q", 1, 2, 3, 4), digest_size=16).digest()
    second = hashlib.blake2b(first + struct.pack("<4q", 5, 6, 7, 8), digest_size=16).digest()
    assert chain_keys([1, 2, 3, 4, 5, 6, 7, 8], 4) == [first, second]


def _cached_prompt(cache, allocator, prompt):
    table = BlockTable(cache.block_size)
    table.grow(allocator, len(prompt))
    cache.insert(prompt, table.blocks, len(prompt))
    return table


def test_prefix_cache_shares_full_blocks_of_a_common_prefix_and_counts_hits():
    allocator = BlockAllocator(16)
    cache = PrefixCache(allocator, block_size=4)
    system = list(range(100, 108))  # two full blocks
    first = _cached_prompt(cache, allocator, system + [1, 2, 3])
    shared = cache.match(system + [7, 8])
    assert shared == first.blocks[:2]
    assert allocator.refcount(shared[0]) == 2
    assert cache.stats.lookups == 0  # counted when the request is admitted, not at each (re)match
    cache.count_admitted(len(system) + 2, len(shared))
    assert cache.stats.hit_tokens == 8 and cache.stats.looked_up_tokens == 10


def test_prefix_cache_never_covers_the_last_prompt_token():
    allocator = BlockAllocator(8)
    cache = PrefixCache(allocator, block_size=4)
    prompt = list(range(8))
    _cached_prompt(cache, allocator, prompt)
    assert len(cache.match(prompt)) == 1  # the 2nd block holds the last token: computed again


def test_unreferenced_cached_blocks_are_evicted_lru_and_forgotten():
    allocator = BlockAllocator(2)
    cache = PrefixCache(allocator, block_size=2)
    table = _cached_prompt(cache, allocator, [1, 2, 3, 4])
    table.release_all(allocator)
    assert allocator.num_free == 2 and len(cache) == 2
    allocator.allocate()  # evicts the least recently released cached block
    assert len(cache) == 1
    assert cache.match([1, 2, 3, 4, 5]) == []  # first block evicted: the chain is broken


def test_disabled_prefix_cache_never_hits():
    allocator = BlockAllocator(8)
    cache = PrefixCache(allocator, block_size=2, enabled=False)
    _cached_prompt(cache, allocator, [1, 2, 3, 4])
    assert cache.match([1, 2, 3, 4, 5]) == [] and cache.stats.hit_rate == 0.0
