"""How ranks combine their local training (docs/sync-modes.md). Only through ``Comm``.

Between two syncs every rank trains its own copy of the parameters from the same starting
point (``base``, the values at the last sync). A sync turns the ranks' changes
``delta_r = W_r - base`` into one new ``base`` that every rank then holds bit for bit.

Summing the changes is wrong for the rows many ranks touch: each rank's change was computed
from the same stale ``base``, so a row that P ranks trained moves P steps' worth at once and
SGNS diverges from P = 4 on (docs/sync-modes.md has the measurements). mpidwe therefore uses
one rule, the *scaled mean*:

- every rank trains at ``s x lr`` with ``s = min(P, max_local_lr / lr)`` (linear scaling,
  capped where local SGNS stays stable);
- a row touched by ``n`` ranks moves by ``sum_r delta_r / max(s, n / 2)``.

A row only one rank touched therefore moves by exactly one ``lr``-sized step per example,
as in one process, whatever P is. Up to ``s`` ranks (8 with the defaults) every row is
divided by P: a row every rank touched (the frequent words) becomes the mean of the ranks'
values, as in model averaging. Beyond, a row may move up to twice the mean, as the sum of
two ranks' changes does (safe: the old summing rule kept quality at 2 ranks); dividing by
n instead starves the rows many ranks touch. ``--sync`` chooses what travels:

- ``sparse``:  only rows some rank touched (allgather of row ids and values)
- ``dense``:   the whole matrices (all-reduce of the deltas, plus the touch counts)
- ``average``: the whole matrices, classic model averaging: every row divided by P (``s = P``,
               refused where ``P x lr`` exceeds ``max_local_lr``)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from .comm import Comm
from ..core.errors import ConfigError

MODES = ("dense", "sparse", "average")


# ---------------------------------------------------------------- the rule (no comm)
def lr_scale(mode: str, world_size: int, lr: float, max_local_lr: float) -> int:
    """The factor ``s`` every rank multiplies the learning rate by. ``average`` divides every
    row by P, so it needs ``s = P`` and is refused where that would train above
    ``max_local_lr`` (local SGNS diverges there: docs/sync-modes.md)."""
    if mode not in MODES:
        raise ConfigError(f"unknown sync mode {mode!r}")
    if world_size == 1:
        return 1
    cap = max(1, int(math.floor(max_local_lr / lr * (1 + 1e-9))))
    if mode == "average":
        if world_size > cap:
            raise ConfigError(
                f"--sync average trains every rank at P x --lr = {world_size} x {lr:g} = {world_size * lr:g}, "
                f"above --max-local-lr {max_local_lr:g} where SGNS diverges; use --sync sparse (the default) "
                f"or --sync dense, which scale by at most {cap} and keep the rows many ranks touch near "
                f"their mean, "
                f"or run at most {cap} ranks")
        return world_size
    return min(world_size, cap)


# How far beyond the ranks' mean a row may move when more than s ranks touched it.
OVERSHOOT = 2


def row_divisors(counts: np.ndarray, scale: int, world_size: int, mode: str) -> np.ndarray:
    """What each row's summed change is divided by (``counts``: ranks that touched it)."""
    if mode == "average":
        return np.full(counts.shape, float(world_size), dtype=np.float32)
    return np.maximum(counts / OVERSHOOT, scale).astype(np.float32)


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
def _apply_rows(base, param, rows, values, counts, scale, senders):
    """Add every rank's changed rows to ``base`` (rank r sent ``rows[r, :counts[r]]`` and
    ``values[r, :counts[r]]``; blocks are padded to the longest), each divided by
    max(scale, ranks that sent it / OVERSHOOT), and copy the new rows into ``param``. Every rank
    adds the same terms in the same order, so all end bit-identical. ``senders`` is an int32
    [V] scratch that is all zero on entry and on return. Returns the largest |value|
    written (inf for NaN), for the divergence guard."""
    dim = base.shape[1]
    # the local values of the rows are no longer needed (their changes were sent): param
    # holds each row's sum of changes, in rank order, until it gets the new value
    for r in range(rows.shape[0]):
        for i in range(counts[r]):
            row = rows[r, i]
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
            if senders[row] == 0:       # written already (another rank sent it too)
                continue
            div = np.float32(max(scale, senders[row] / OVERSHOOT))
            senders[row] = 0
            for k in range(dim):
                biggest = _store(base, param, row, k, base[row, k] + param[row, k] / div, biggest)
    return biggest


@njit(cache=True, nogil=True)
def _apply_dense(base, param, delta, divisors, counts):
    """base += delta / divisors for rows some rank touched; param = base there."""
    biggest = 0.0
    for row in range(base.shape[0]):
        if counts[row] == 0:
            continue
        div = divisors[row]
        for k in range(base.shape[1]):
            biggest = _store(base, param, row, k, base[row, k] + delta[row, k] / div, biggest)
    return biggest


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


# ---------------------------------------------------------------- the driver
@dataclass
class SyncStats:
    """Accumulated over the run on one rank: how many syncs, and their seconds split into
    communication (inside Comm) and the sync's own array work."""

    syncs: int = 0
    seconds: float = 0.0
    comm_seconds: float = 0.0
    bytes_sent: int = 0

    @property
    def array_seconds(self) -> float:
        return max(0.0, self.seconds - self.comm_seconds)


class Synchronizer:
    """Keeps ``base`` copies of the parameters and combines ranks at every ``sync``."""

    def __init__(self, comm: Comm, params: list[np.ndarray], *, mode: str = "sparse", scale: int = 1,
                 allreduce: str = "mpi"):
        if mode not in MODES:
            raise ValueError(f"unknown sync mode {mode!r}")
        self.comm, self.mode, self.scale, self.allreduce = comm, mode, int(scale), allreduce
        self.base = [p.copy() for p in params] if comm.size > 1 else []
        self._senders = np.zeros(max(len(p) for p in params), dtype=np.int32) if comm.size > 1 else None
        self.stats = SyncStats()
        # per parameter, the rows the last sync changed (some rank touched them): what a
        # caller holding a copy of the parameters elsewhere (mpidwe.dist.device) must refresh
        self.changed_rows: list[np.ndarray] = []

    def sync(self, params: list[np.ndarray], touched: list[np.ndarray]) -> float:
        """Combine every rank's changes since the last sync into ``params`` (in place) and
        clear the ``touched`` masks. A collective: every rank calls it the same number of
        times. Returns the largest |value| of the rows that changed (inf if any is NaN)."""
        t, c, b = time.perf_counter(), self.comm.stats.seconds, self.comm.stats.bytes_sent
        biggest = 0.0
        self.changed_rows = []
        for i, (param, mask) in enumerate(zip(params, touched)):
            if self.comm.size > 1:
                step = self._sparse if self.mode == "sparse" else self._dense
                biggest = max(biggest, step(param, self.base[i], mask))
            else:
                biggest = max(biggest, _max_abs_rows(param, mask))
            mask[:] = 0
        s = self.stats
        s.syncs += 1
        s.seconds += time.perf_counter() - t
        s.comm_seconds += self.comm.stats.seconds - c
        s.bytes_sent += self.comm.stats.bytes_sent - b
        return float(biggest)

    def _sparse(self, param, base, mask) -> float:
        rows = np.flatnonzero(mask).astype(np.int32)
        counts = self.comm.allgather_array(np.array([len(rows)], dtype=np.int64))[:, 0].copy()
        longest = int(counts.max())
        send_rows = np.zeros(longest, dtype=np.int32)
        send_rows[:len(rows)] = rows
        send_values = np.empty((longest, param.shape[1]), dtype=param.dtype)
        send_values[len(rows):] = 0                 # padding: never read, but sent
        _gather_delta(param, base, rows, send_values)
        all_rows = self.comm.allgather_array(send_rows)
        all_values = self.comm.allgather_array(send_values)
        self.changed_rows.append(np.unique(np.concatenate([all_rows[r, :counts[r]] for r in range(len(counts))])))
        return _apply_rows(base, param, all_rows, all_values, counts, self.scale, self._senders)

    def _dense(self, param, base, mask) -> float:
        delta = np.subtract(param, base)
        self.comm.allreduce_(delta, self.allreduce)
        counts = mask.astype(np.int32)
        self.comm.allreduce_(counts, self.allreduce)
        divisors = row_divisors(counts, self.scale, self.comm.size, self.mode)
        self.changed_rows.append(np.flatnonzero(counts))
        return _apply_dense(base, param, delta, divisors, counts)
