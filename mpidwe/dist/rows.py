"""The sharded parameter store's arithmetic: who owns which row, and a block's working set.

Pure functions of ints and arrays (rank and world size are ints; no Comm, no files), used
by mpidwe/dist/sharded.py, which does the communication (docs/sync-modes.md, "Sharded store").

Ownership is strided: global row ``w`` lives on rank ``w % P`` at local index ``w // P``.
Word ids are ranked by frequency (the corpus sorts its vocabulary), so striding deals the
hot rows out like cards: rank r owns the r-th, (r+P)-th, ... most frequent words. A row
travels once per block whatever its count, so an owner's traffic is the number of its rows
in the working sets, and that is within 1% of 1/P for a Zipf vocabulary (tests/test_store.py;
by token occurrences no owner exceeds the mean by as much as the top word's count alone).
A hash would balance a vocabulary in arbitrary order too, but ids here are ranks already,
and striding keeps a rank's rows, and its checkpoint part, a plain ``[r::P]`` slice.

A working set maps the rows a block touches to dense slots: the block's distinct tokens
first (slots [0, T): both matrices), then the rows only noise words reach (slots [T, W):
output matrix only), each group in increasing id order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


# ---------------------------------------------------------------- ownership
def owner_of(ids: np.ndarray, world_size: int) -> np.ndarray:
    return np.asarray(ids) % world_size


def local_index(ids: np.ndarray, world_size: int) -> np.ndarray:
    return np.asarray(ids) // world_size


def owned_count(vocab_size: int, rank: int, world_size: int) -> int:
    """Rows rank ``rank`` owns: ids rank, rank + P, ... below ``vocab_size``."""
    return max(0, (vocab_size - rank + world_size - 1) // world_size)


def owned_ids(vocab_size: int, rank: int, world_size: int) -> np.ndarray:
    return np.arange(rank, vocab_size, world_size, dtype=np.int64)


def owned_in_range(lo: int, hi: int, rank: int, world_size: int) -> tuple[int, int]:
    """Local indices [a, b) of the owned rows whose global ids lie in [lo, hi)."""
    first = lo + (rank - lo) % world_size           # smallest owned id >= lo
    a = (first - rank) // world_size
    b = owned_count(hi, rank, world_size)
    return a, max(a, b)


def group_by_owner(ids: np.ndarray, world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, counts): ``ids[order]`` lists the ids owner by owner (rank order, each owner's
    ids in their given order) and ``counts[r]`` how many go to rank r."""
    owners = owner_of(ids, world_size)
    order = np.argsort(owners, kind="stable")
    counts = np.bincount(owners, minlength=world_size).astype(np.int64)
    return order, counts


# ---------------------------------------------------------------- working set
@dataclass
class WorkingSet:
    """The rows of one block: ``ids[:n_in]`` its tokens (both matrices), ``ids[n_in:]`` the
    rows only noise words reach (output matrix). ``slots`` is the global -> slot map the
    kernel uses for negatives (valid only at ``ids``)."""

    ids: np.ndarray        # int64 [W], global ids, slot order
    n_in: int              # T: slots [0, T) hold token rows
    slots: np.ndarray      # int32 [V]

    @property
    def size(self) -> int:
        return len(self.ids)


def working_set(mark_in: np.ndarray, mark_out: np.ndarray, slots: np.ndarray) -> WorkingSet:
    """Build the working set from the planner's marks (kernels/plan.py) and clear the marks.
    ``slots`` is the caller's int32 [V] scratch, filled at the set's ids only."""
    token_ids = np.flatnonzero(mark_in)
    mark_out[token_ids] = 0
    neg_ids = np.flatnonzero(mark_out)
    mark_in[token_ids] = 0
    mark_out[neg_ids] = 0
    ids = np.concatenate((token_ids, neg_ids)).astype(np.int64)
    slots[ids] = np.arange(len(ids), dtype=np.int32)
    return WorkingSet(ids, len(token_ids), slots)


# ---------------------------------------------------------------- sizing
def expected_working_set(block_tokens: int, counts: np.ndarray, keep_prob: np.ndarray, window: int,
                         negative: int, shared_negatives: bool = False) -> tuple[float, float]:
    """(E[T], E[W]) for a round of ``block_tokens`` skip-gram words drawn from the unigram
    distribution p (q: unigram^0.75): T the distinct tokens, sum_w 1 - (1 - p_w)^tokens,
    and W the working set, which holds a word unless neither a token nor a noise draw hit
    it, sum_w 1 - (1 - p_w)^tokens x (1 - q_w)^draws (benchmarks/working_set.py prints it
    for docs/scaling.md and docs/sync-modes.md). Per-pair negatives draw ``negative`` per
    (centre, context) pair, E[pairs] = window + 1; shared negatives per kept centre."""
    counts = np.asarray(counts, dtype=np.float64)
    p = counts / counts.sum()
    q = counts ** 0.75
    q /= q.sum()
    kept = float((p * keep_prob).sum())
    draws = block_tokens * kept * negative * (1 if shared_negatives else window + 1)
    token_miss = block_tokens * np.log1p(-np.minimum(p, 1 - 1e-12))
    noise_miss = draws * np.log1p(-np.minimum(q, 1 - 1e-12))
    return float((1.0 - np.exp(token_miss)).sum()), float((1.0 - np.exp(token_miss + noise_miss)).sum())
