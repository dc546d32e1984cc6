"""Four held-out texts through execute_batch without a model, cold, and plain-Python alternatives of
assign_buckets (kept in contracts.sequence_buckets) and real_lengths (not kept) (cold_setup.py)."""
from bisect import bisect_left

import numpy as np
from cold_setup import Served, as_requests, heldout_texts

from contracts.sequence_buckets import assign_buckets, check_bucket_boundaries, real_lengths, run_in_length_buckets
from serving.backend.batch_execution import concat_padded, execute_batch

served = Served(threads=1)
fe, layout, names = served.frontend, served.layout, served.names
arrays = as_requests(heldout_texts(4))
tok = fe.tokenize(arrays, one_width=True).tensors
print([t["input_ids"].shape for t in tok])
feeds1 = fe.tokenize(arrays[:1]).tensors[0]
fake = lambda f: [np.zeros((next(iter(f.values())).shape[0], 384), np.float32)]  # noqa: E731 (no model)
batch = {n: concat_padded([t[n] for t in tok]) for n in names}
lengths = real_lengths(batch["attention_mask"])
print("lengths", lengths, "groups", assign_buckets(lengths, layout.buckets))


def assign_py(lengths, boundaries):
    edges = check_bucket_boundaries(boundaries)
    groups = {}
    for row, length in enumerate(lengths.tolist() if isinstance(lengths, np.ndarray) else lengths):
        groups.setdefault(min(bisect_left(edges, length), len(edges) - 1), []).append(row)
    return [np.array(groups[b]) for b in sorted(groups)]


def real_py(mask):
    out = []
    for row in mask.tolist():
        n = len(row)
        while n and not row[n - 1]:
            n -= 1
        out.append(n or 1)
    return np.array(out, dtype=np.int64)


big = np.ones((16, 60), np.int64)
big[::2, 30:] = 0
for label, step in [
    ("execute_batch 4", lambda: execute_batch(fake, layout, tok)),
    ("concat x3", lambda: {n: concat_padded([t[n] for t in tok]) for n in names}),
    ("real_lengths", lambda: real_lengths(batch["attention_mask"])),
    ("assign_buckets", lambda: assign_buckets(lengths, layout.buckets)),
    ("run_in_length_buckets", lambda: run_in_length_buckets(fake, batch, "attention_mask", layout.buckets)),
    ("assign_py", lambda: assign_py(lengths, layout.buckets)),
    ("check_bucket_boundaries", lambda: check_bucket_boundaries(layout.buckets)),
    ("real_py", lambda: real_py(batch["attention_mask"])),
    ("real_lengths 16x60", lambda: real_lengths(big)),
    ("real_py 16x60", lambda: real_py(big)),
]:
    served.cold(label, step, feeds1, calls=800)
