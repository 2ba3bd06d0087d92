"""The sharded parameter store's arithmetic: who owns which row, and a block's working set.

Pure functions of ints and arrays (rank and world size are ints; no Comm, no files), used
by mpidwe/parallel/sharded.py, which does the communication (docs/lab/sync-modes.md, "Sharded store").

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
    for docs/lab/scaling.md and docs/lab/sync-modes.md). Per-pair negatives draw ``negative`` per
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


# ---------------------------------------------------------------- memory
# What a sharded rank holds besides its rows and the round's working set (measured on the
# 1.5M-word synthetic corpus, docs/lab/benchmarks.md, "Sharded store at its defaults": 720 MB
# before the first round at 4 ranks, of which 291 MB were its own rows): the interpreter,
# numpy, numba's compiled kernels, h5py and MPI, and per vocabulary word its string, counts,
# keep probability, negative table, the planner's two marks and two slot tables.
RUNTIME_BYTES = 256 << 20
VOCAB_BYTES_PER_WORD = 120

# A round's peak, in rows of one matrix (4 d bytes) per working-set row (parallel/sharded.py):
# a token row's trained input row and base (2); every row's trained output row and base,
# and during the push the changes, the changes received and the owner's scratch (5), plus
# the pull's answer and receive buffers, which never exceed these. Fitted to the measured
# peak (2.1 GB for 615k rows): these give 1.46 GB of working set against 1.39 measured.
# --pipeline holds the next round's rows too (1 each) and its pull's buffers (1 more per row).
TOKEN_ROW_UNITS = 3
SET_ROW_UNITS = 5.5
PIPELINE_UNITS = 2

MiB = 1 << 20
DEFAULT_HEADROOM = 500_000_000   # the default budget: half of one replica's two matrices plus this (500 MB)


def fixed_bytes(vocab_size: int, dim: int, world_size: int) -> int:
    """Bytes a sharded rank holds outside the working set: the most own rows of any rank
    (both matrices), the vocabulary's arrays and the runtime."""
    return owned_count(vocab_size, 0, world_size) * 8 * dim + VOCAB_BYTES_PER_WORD * vocab_size + RUNTIME_BYTES


def round_bytes(n_in: float, size: float, dim: int, pipelined: bool = False) -> float:
    """Peak bytes of a round whose working set has ``n_in`` token rows of ``size`` rows."""
    extra = PIPELINE_UNITS if pipelined else 0
    return 4.0 * dim * ((TOKEN_ROW_UNITS + extra) * n_in + (SET_ROW_UNITS + extra) * size)


def default_budget(vocab_size: int, dim: int, world_size: int, node_share: int = 0) -> int:
    """``--memory-budget 0``: half of one replica's two matrices (4 V d bytes) plus 500 MB;
    at 1 and 2 ranks, whose own rows alone are 8 V d / P >= 4 V d, what a rank holds outside
    a round plus 250 MB of working set where that is more. Capped at ``node_share`` (the
    node's memory over its ranks; 0: no cap)."""
    budget = max(4 * vocab_size * dim + DEFAULT_HEADROOM,
                 fixed_bytes(vocab_size, dim, world_size) + DEFAULT_HEADROOM // 2)
    return int(min(budget, node_share) if node_share > 0 else budget)


@dataclass(frozen=True)
class RoundMemory:
    """A sharded round's expected peak bytes as a function of its words per rank, from the
    corpus's counts and the draws the kernel makes (:func:`expected_working_set`)."""

    counts: np.ndarray
    keep_prob: np.ndarray
    dim: int
    window: int
    negative: int
    shared_negatives: bool       # one draw of negatives per kept centre (also CBOW's)
    pipelined: bool = False

    def peak(self, words: int) -> float:
        t, w = expected_working_set(words, self.counts, self.keep_prob, self.window, self.negative,
                                    self.shared_negatives)
        return round_bytes(t, w, self.dim, self.pipelined)

    def words_within(self, room: float, interval: int, least: int) -> int:
        """The most words per rank per round, at most ``interval``, whose round peaks within
        ``room`` bytes: ``interval`` itself where it fits (or where even a working set of
        the whole vocabulary would), ``least - 1`` where a round of ``least`` words does not
        (the caller says what to do then)."""
        v = len(self.counts)
        if round_bytes(v, v, self.dim, self.pipelined) <= room or self.peak(interval) <= room:
            return interval
        lo, hi = least - 1, interval        # lo fits or is least - 1; hi does not fit
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.peak(mid) <= room else (lo, mid)
        return lo
