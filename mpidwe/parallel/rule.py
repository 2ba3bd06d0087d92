"""The scaled-mean rule: how the ranks' changes become one set of parameters (docs/lab/sync-modes.md).

Pure math (numbers and arrays in, arrays out; no Comm): the stores in this package move the
rows (parallel/replicated.py, parallel/sharded.py, parallel/device.py) and apply this rule to them.

Between two syncs every rank trains its own copy of the parameters from the same starting
point (``base``, the values at the last sync). A sync turns the ranks' changes
``delta_r = W_r - base`` into one new ``base`` that every rank then holds bit for bit.

Summing the changes is wrong for the rows many ranks touch: each rank's change was computed
from the same stale ``base``, so a row that P ranks trained moves P steps' worth at once and
SGNS diverges from P = 4 on (docs/lab/sync-modes.md has the measurements). mpidwe therefore uses
one rule, the *scaled mean*:

- every rank trains at ``s x lr`` with ``s = min(P, max_local_lr / lr)`` (linear scaling,
  capped where local SGNS stays stable), and in runs of at least LONG_RUN_WORDS words per
  rank at most ``max(4, ceil(P / 2))`` and at most LONG_RUN_MAX_LOCAL_LR / lr (:func:`lr_scale`);
- a row touched by ``n`` ranks moves by ``sum_r delta_r / max(s, n / 2)``.

A row only one rank touched therefore moves by exactly one ``lr``-sized step per example,
as in one process, whatever P is. Up to ``s`` ranks (8 with the defaults) every row is
divided by P: a row every rank touched (the frequent words) becomes the mean of the ranks'
values, as in model averaging. Beyond, a row may move up to twice the mean, as the sum of
two ranks' changes does (safe: the old summing rule kept quality at 2 ranks); dividing by
n instead starves the rows many ranks touch. ``--sync`` chooses what travels:

- ``auto``:    (the default) per sync and matrix, ``sparse`` or ``dense``, whichever walks
               fewer rows (:func:`dense_pays`); the same rows, so the same model
- ``sparse``:  only rows some rank touched (allgather of row ids and values)
- ``dense``:   the whole matrices (all-reduce of the deltas, plus the touch counts)
- ``average``: the whole matrices, classic model averaging: every row divided by P (``s = P``,
               refused where ``P x lr`` exceeds ``max_local_lr``)
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..core.errors import ConfigError
from .wire import NOT_FINITE_BITS, bits_value, decode, largest_bits, row_levels_int4, scaled_rows

MODES = ("auto", "dense", "sparse", "average")


# ---------------------------------------------------------------- the rule (no comm)
# A run's scale is at most max(4, ceil(P / 2)) once every rank trains this many words in the
# whole run: at 5 to 15 ranks, 8 x --lr costs 1.6-3 analogy points over three enwiki epochs
# (2M words per rank and epoch at 8 ranks) that 4 x keeps, while runs of 750,000 words per
# rank and fewer (the demo corpora) learn their planted analogies better at 8 x
# (docs/lab/sync-modes.md, "The local rate over several epochs").
LONG_RUN_WORDS = 1_000_000
# ... and in such runs no rank trains above this local rate (s x --lr): at 16 ranks 8 x
# --lr (0.2) diverged in the second epoch of a 4-epoch enwiki run on both seeds tried (the
# loss rising from the end of the first), where 6 x (0.15) trained on; one rank at 0.2
# diverged in its first round (docs/lab/sync-modes.md, "The local rate over several epochs").
LONG_RUN_MAX_LOCAL_LR = 0.15


def lr_scale(mode: str, world_size: int, lr: float, max_local_lr: float, words_per_rank: float = 0.0) -> int:
    """The factor ``s`` every rank multiplies the learning rate by: ``min(P, max_local_lr /
    lr)``, and in a run of at least LONG_RUN_WORDS words per rank at most ``max(4, ceil(P /
    2))`` (so from 5 to 15 ranks it trains at a lower rate, and a row every rank touched still
    moves one process's step: divided by max(s, P / 2)) and at most LONG_RUN_MAX_LOCAL_LR /
    lr (6 at the default --lr, from 13 ranks on; at least 1). ``average`` divides every row by P,
    so it needs ``s = P`` and is refused where that would train above ``max_local_lr``
    (local SGNS diverges there: docs/lab/sync-modes.md)."""
    if mode not in MODES:
        raise ConfigError(f"unknown sync mode {mode!r}")
    if world_size == 1:
        return 1

    def within(rate: float) -> int:          # the largest s with s x lr <= rate, at least 1
        return max(1, int(math.floor(rate / lr * (1 + 1e-9))))

    cap = within(max_local_lr)
    if mode == "average":
        if world_size > cap:
            raise ConfigError(
                f"--sync average trains every rank at P x --lr = {world_size} x {lr:g} = {world_size * lr:g}, "
                f"above --max-local-lr {max_local_lr:g} where SGNS diverges; use --sync auto (the default), "
                f"sparse or dense, which scale by at most {cap} and keep the rows many ranks touch near "
                f"their mean, "
                f"or run at most {cap} ranks")
        return world_size
    if words_per_rank >= LONG_RUN_WORDS:
        cap = min(cap, max(4, math.ceil(world_size / OVERSHOOT)), within(LONG_RUN_MAX_LOCAL_LR))
    return min(world_size, cap)


# How far beyond the ranks' mean a row may move when more than s ranks touched it.
OVERSHOOT = 2


def row_divisors(counts: np.ndarray, scale: int, world_size: int, mode: str) -> np.ndarray:
    """What each row's summed change is divided by (``counts``: ranks that touched it)."""
    if mode == "average":
        return np.full(counts.shape, float(world_size), dtype=np.float32)
    return np.maximum(counts / OVERSHOOT, scale).astype(np.float32)


def dense_pays(counts, rows: int, dense_row_bytes: int = 0, sparse_row_bytes: int = 0) -> bool:
    """``auto``: whether a sync of ``rows`` rows, of which rank r touched ``counts[r]``,
    travels dense. The sparse allgather pads every rank's block to the longest, so every
    rank receives, and its gather and apply walk (in scattered order), P x longest rows; the
    dense all-reduce walks ``rows`` in order and sends about 2 (P - 1) / P x ``rows``.
    Dense is chosen once P x longest >= ``rows``: from there it walks fewer rows, and sends
    at most twice the bytes (docs/lab/sync-modes.md has the measurements behind the threshold:
    enwiki at 2 to 16 ranks, where the ranks touch 1.5 to 2.7 x V rows per sync and dense
    is faster everywhere; a 1.5M-word synthetic vocabulary at 4 ranks, where the input
    matrix stays sparse and the output matrix goes dense).

    By bytes too (the bytes per row each way given, in tiers: there the network bounds the
    run): dense also where it sends no more, 2 (P - 1) / P x ``rows`` x ``dense_row_bytes``
    against (P - 1) x longest x ``sparse_row_bytes``; an encoded row (int4: d / 2 + 4 bytes)
    is far smaller than a sparse one (4 d + 4), so dense wins from a few touched rows on."""
    counts = np.asarray(counts)
    p, longest = len(counts), int(counts.max(initial=0))
    if rows <= 0:
        return False
    return p * longest >= rows or 0 < 2 * rows * dense_row_bytes <= p * longest * sparse_row_bytes


# ---------------------------------------------------------------- array work (numba)
@njit(cache=True, nogil=True)
def _gather_delta(param, base, rows, out):
    """out[i] = param[rows[i]] - base[rows[i]]."""
    for i in range(rows.shape[0]):
        r = rows[i]
        for k in range(param.shape[1]):
            out[i, k] = param[r, k] - base[r, k]


@njit(inline="always")
def _store(base, param, row, k, v, biggest):
    """base[row, k] = param[row, k] = v; returns the running max |v| (inf once NaN is seen)."""
    base[row, k] = v
    param[row, k] = v
    a = abs(v)
    if a != a:
        return np.inf
    return a if a > biggest else biggest


@njit(cache=True, nogil=True)
def _apply_rows(base, param, rows, values, counts, scale, senders, lo, hi):
    """Add every rank's changed rows to ``base`` (rank r sent ``rows[r, :counts[r]]`` and
    ``values[r, :counts[r]]``; blocks are padded to the longest), each divided by
    max(scale, ranks that sent it / OVERSHOOT), and copy the new rows into ``param``. Every rank
    adds the same terms in the same order, so all end bit-identical. ``senders`` is an int32
    [V] scratch that is all zero on entry and on return. Only rows in [lo, hi) are handled,
    so that threads may share the work by row ranges (each row's sum keeps its rank order).
    Returns the largest |value| written (inf for NaN), for the divergence guard."""
    dim = base.shape[1]
    # the local values of the rows are no longer needed (their changes were sent): param
    # holds each row's sum of changes, in rank order, until it gets the new value
    for r in range(rows.shape[0]):
        for i in range(counts[r]):
            row = rows[r, i]
            if row < lo or row >= hi:
                continue
            if senders[row] == 0:
                for k in range(dim):
                    param[row, k] = values[r, i, k]
            else:
                for k in range(dim):
                    param[row, k] += values[r, i, k]
            senders[row] += 1
    biggest = 0.0
    for r in range(rows.shape[0]):
        for i in range(counts[r]):
            row = rows[r, i]
            if row < lo or row >= hi or senders[row] == 0:   # not ours, or written already
                continue
            div = np.float32(max(scale, senders[row] / OVERSHOOT))
            senders[row] = 0
            for k in range(dim):
                biggest = _store(base, param, row, k, base[row, k] + param[row, k] / div, biggest)
    return biggest


@njit(cache=True, nogil=True)
def _apply_dense(base, param, delta, divisors, counts):
    """base += delta / divisors for rows some rank touched; param = base there. Returns the
    largest |value| written (inf if any is NaN or infinite), as _store finds it, but on each
    row's float32 bits after the row (wire.largest_bits; the row loops then vectorise)."""
    top = np.uint32(0)
    for row in range(base.shape[0]):
        if counts[row] != 0:
            top = _apply_row(base[row], param[row], delta[row], np.float32(1.0), divisors[row], top)
    return _top_value(top)


@njit(cache=True, nogil=True)
def _apply_row(b, p, values, scale, div, top):
    """One row: b += values x scale / div, p = b (values x 1.0 is values, bit for bit);
    returns max(top, the row's largest |value| as float32 bits)."""
    for k in range(b.shape[0]):
        v = b[k] + values[k] * scale / div
        b[k] = v
        p[k] = v
    return largest_bits(p.view(np.uint32), top)


@njit(cache=True, nogil=True)
def _top_value(top):
    """The float a largest_bits maximum stands for: inf for a NaN or an infinity."""
    if top >= NOT_FINITE_BITS:
        return np.inf
    return float(bits_value(top, np.empty(1, np.uint32)))


@njit(cache=True, nogil=True)
def _apply_coded(q, scales, packed, base, param, divisors, counts):
    """_apply_dense with the summed changes still encoded (int8, or int4 when ``packed``):
    each row's values are decoded and applied in one pass, the same float32 operations as
    decoding into a zeroed array first (a decoded value is never -0.0: a zero scale has
    only zero levels), without the array."""
    n, d = base.shape
    levels = np.empty(d, np.float32)
    top = np.uint32(0)
    for row in range(n):
        if counts[row] == 0:
            continue
        if packed:
            row_levels_int4(q[row], levels)
        else:
            for k in range(d):
                levels[k] = np.float32(q[row, k])
        top = _apply_row(base[row], param[row], levels, scales[row], divisors[row], top)
    return _top_value(top)


def apply_encoded(data: np.ndarray, wire: str, base, param, divisors, counts) -> float:
    """:func:`_apply_dense` of the summed changes as an encoded all-reduce hands them over
    (``data``: uint8 rows, parallel/wire.py): int8 and int4 decoded row by row as applied, other
    wires decoded first."""
    if wire not in ("int8", "int4"):
        return _apply_dense(base, param, decode(data, wire, base.shape[1]), divisors, counts)
    q, scales = scaled_rows(np.ascontiguousarray(data, dtype=np.uint8), wire)
    return _apply_coded(q, scales, wire == "int4", base, param, divisors, counts)


@njit(cache=True, nogil=True)
def _max_abs_rows(param, mask):
    """Largest |value| in the rows ``mask`` flags (inf for NaN): the serial guard's probe."""
    biggest = 0.0
    for row in range(param.shape[0]):
        if mask[row] == 0:
            continue
        for k in range(param.shape[1]):
            a = abs(param[row, k])
            if a != a:
                return np.inf
            if a > biggest:
                biggest = a
    return biggest


# ---------------------------------------------------------------- the owners' side (sharded store)
@njit(cache=True, nogil=True)
def apply_pushed(own, local_rows, values, seg_counts, scale, assign, scratch):
    """The owner's side of the sparse sync (sync._apply_rows, restricted to its rows): rank r
    sent ``seg_counts[r]`` consecutive (row, change) entries, in rank order. Each row's
    changes are summed in rank order and ``own[row] += sum / max(scale, n / OVERSHOOT)``
    with n the ranks that sent it, the same float32 operations in the same order as the
    replicated store, so both give bit-identical rows. ``assign`` (a world of one): the
    values are the trained rows themselves and are copied. ``scratch`` is (pos, acc,
    counts, order): ``pos`` an int32 [len(own)] of -1 (restored on return); ``acc``,
    ``counts`` and ``order`` with room for every entry. Returns the largest |value|
    written (inf once NaN is seen)."""
    pos, acc, counts, order = scratch
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
