"""How ranks combine their local training (docs/sync-modes.md). Only through ``Comm``.

Between two syncs every rank trains its own copy of the parameters from the same starting
point (``base``, the values at the last sync). A sync turns the ranks' changes
``delta_r = W_r - base`` into one new ``base`` that every rank then holds bit for bit:

- ``dense``:   base += sum_r delta_r              (all-reduce of the whole matrices)
- ``sparse``:  the same sum, but only rows some rank touched travel (allgather of row ids
               and values, added in rank order on every rank)
- ``average``: base += sum_r delta_r / n           (model averaging, local SGD), with n = the
               number of ranks that touched the row (``average_rows="touched"``) or all
               ranks (``"all"``, plain averaging, which divides a rare word's update by P)
"""

from __future__ import annotations

import numpy as np

from .comm import Comm

MODES = ("dense", "sparse", "average")


# ---------------------------------------------------------------- the math (no comm)
def local_delta(param: np.ndarray, base: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    if rows is None:
        return param - base
    return param[rows] - base[rows]


def apply_sparse(base: np.ndarray, row_blocks: list[np.ndarray], value_blocks: list[np.ndarray]) -> np.ndarray:
    """Add every rank's (rows, values) to ``base`` in rank order; returns the union of rows.
    Rows are unique within a rank, so plain fancy-index adds are exact and ordered."""
    for rows, values in zip(row_blocks, value_blocks):
        base[rows] += values
    if not row_blocks:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.concatenate(row_blocks))


def average_divisor(counts: np.ndarray, world_size: int, rows: str) -> np.ndarray:
    """Per-row divisor for model averaging: ranks that touched the row, or all ranks."""
    if rows == "all":
        return np.full(counts.shape, float(world_size), dtype=np.float32)
    return np.maximum(counts, 1).astype(np.float32)


# ---------------------------------------------------------------- the driver
class Synchronizer:
    """Keeps ``base`` copies of the parameters and combines ranks at every ``sync``."""

    def __init__(self, comm: Comm, params: list[np.ndarray], *, mode: str = "sparse",
                 allreduce: str = "mpi", average_rows: str = "touched"):
        if mode not in MODES:
            raise ValueError(f"unknown sync mode {mode!r}")
        self.comm, self.mode, self.allreduce, self.average_rows = comm, mode, allreduce, average_rows
        self.base = [p.copy() for p in params] if comm.size > 1 else []
        self.syncs = 0

    def sync(self, params: list[np.ndarray], touched: list[np.ndarray]) -> None:
        """Combine every rank's changes since the last sync into ``params`` (in place) and
        clear the ``touched`` masks. A collective: every rank calls it the same number of times."""
        self.syncs += 1
        if self.comm.size > 1:
            for param, base, mask in zip(params, self.base, touched):
                getattr(self, "_" + self.mode)(param, base, mask)
        for mask in touched:
            mask[:] = 0

    def _dense(self, param, base, mask):
        delta = local_delta(param, base)
        self.comm.allreduce_(delta, self.allreduce)
        base += delta
        param[:] = base

    def _sparse(self, param, base, mask):
        rows = np.flatnonzero(mask).astype(np.int32)
        values = local_delta(param, base, rows)
        all_rows, counts = self.comm.allgatherv(rows)
        all_values, _ = self.comm.allgatherv(values)
        splits = np.cumsum(counts)[:-1]
        union = apply_sparse(base, np.split(all_rows, splits), np.split(all_values, splits))
        param[union] = base[union]

    def _average(self, param, base, mask):
        delta = local_delta(param, base)
        self.comm.allreduce_(delta, self.allreduce)
        counts = mask.astype(np.int32)
        if self.average_rows == "touched":
            self.comm.allreduce_(counts, self.allreduce)
        delta /= average_divisor(counts, self.comm.size, self.average_rows)[:, None]
        base += delta
        param[:] = base

    # -- state for checkpoints: the base equals the parameters right after a sync
    def reset(self, params: list[np.ndarray]) -> None:
        if self.comm.size > 1:
            for base, p in zip(self.base, params):
                base[:] = p
