"""The sharded parameter store's arithmetic: who owns which row, and a block's working set.

Pure functions of ints and arrays (rank and world size are ints; no Comm, no files), used
by mpidwe/sharded.py, which does the communication (docs/sync-modes.md, "Sharded store").

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
from numba import njit

from .sync import OVERSHOOT


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


def working_set_bound(tokens: int, kept: float, window: int, negative: int, model: str,
                      shared_negatives: bool, vocab_size: int) -> int:
    """An upper bound on W for a block of ``tokens`` raw words of which a fraction ``kept``
    survives subsampling: every distinct token plus every noise draw, at most V. Skip-gram
    draws ``negative`` per (centre, context) pair, at most 2 x window pairs per kept centre
    (E[pairs] = window + 1 for word2vec's shrunk window); CBOW and shared negatives draw
    ``negative`` per centre."""
    centres = kept * tokens
    draws = centres * negative * (2 * window if model == "skipgram" and not shared_negatives else 1)
    return int(min(vocab_size, tokens + draws))


def expected_working_set(block_tokens: int, counts: np.ndarray, keep_prob: np.ndarray, window: int,
                         negative: int, model: str = "skipgram", shared_negatives: bool = False) -> float:
    """E[W] for a block of ``block_tokens`` words drawn from the unigram distribution: a
    word is in the set unless neither a token nor a noise draw hit it,
    sum_w 1 - (1 - p_w)^tokens x (1 - q_w)^draws (p: unigram, q: unigram^0.75)."""
    counts = np.asarray(counts, dtype=np.float64)
    p = counts / counts.sum()
    q = counts ** 0.75
    q /= q.sum()
    kept = float((p * keep_prob).sum())
    pairs = window + 1 if model == "skipgram" and not shared_negatives else 1
    draws = block_tokens * kept * negative * pairs
    miss = np.exp(block_tokens * np.log1p(-np.minimum(p, 1 - 1e-12))
                  + draws * np.log1p(-np.minimum(q, 1 - 1e-12)))
    return float((1.0 - miss).sum())


# ---------------------------------------------------------------- the owners' rule
@njit(cache=True, nogil=True)
def apply_pushed(own, local_rows, values, seg_counts, scale, assign, pos, acc, counts, order):
    """The owner's side of the sparse sync (sync._apply_rows, restricted to its rows): rank r
    sent ``seg_counts[r]`` consecutive (row, change) entries, in rank order. Each row's
    changes are summed in rank order and ``own[row] += sum / max(scale, n / OVERSHOOT)``
    with n the ranks that sent it, the same float32 operations in the same order as the
    replicated store, so both give bit-identical rows. ``assign`` (a world of one): the
    values are the trained rows themselves and are copied. ``pos`` is an int32 [len(own)]
    scratch of -1 (restored on return); ``acc``, ``counts`` and ``order`` have room for
    every entry. Returns the largest |value| written (inf once NaN is seen)."""
    dim = own.shape[1]
    n_rows = 0
    e = 0
    for r in range(seg_counts.shape[0]):
        for _ in range(seg_counts[r]):
            row = local_rows[e]
            u = pos[row]
            if u < 0:
                u = n_rows
                pos[row] = u
                order[u] = row
                counts[u] = 0
                for k in range(dim):
                    acc[u, k] = values[e, k]
                n_rows += 1
            else:
                for k in range(dim):
                    acc[u, k] += values[e, k]
            counts[u] += 1
            e += 1
    biggest = 0.0
    for u in range(n_rows):
        row = order[u]
        pos[row] = -1
        div = np.float32(max(scale, counts[u] / OVERSHOOT))
        for k in range(dim):
            v = acc[u, k] if assign else own[row, k] + acc[u, k] / div
            own[row, k] = v
            a = abs(v)
            if a != a:
                biggest = np.inf
            elif a > biggest:
                biggest = a
    return biggest
