"""``--store replicated`` (the default, numba kernel): both matrices on every rank.

Between two syncs every rank trains its own copy of the whole model on its shard; a sync
combines the ranks' changes by the scaled-mean rule (dist/rule.py) so that every rank holds
the same parameters, bit for bit, again. ``--sync`` chooses what travels (:class:`Synchronizer`):
the rows some rank touched (``sparse``: an allgather of their ids and changes) or the whole
matrices (``dense`` and ``average``: an all-reduce of the changes and the touch counts).
Rank 0 writes the checkpoints and the vectors from its copy.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from ..core.config import TrainConfig
from ..core.errors import InputError
from ..io import checkpoint
from ..io.fsutil import reason
from ..io.vectors import write_word2vec
from ..kernels.args import KernelArgs
from .comm import Comm
from .rule import MODES, _apply_dense, _apply_rows, _gather_delta, _max_abs_rows, row_divisors
from .store import Store, StoreSetup, SyncStats, Trained, Work, train_pieces


# ------------------------------------------------------------------ the parameters a run starts from
def init_params(vocab_size: int, dim: int, seed: int, input_rows: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """word2vec initialisation: input uniform in [-0.5/dim, 0.5/dim), output zeros. The same
    seed gives the same matrices on every rank, so no broadcast is needed. ``input_rows``:
    rows of the input matrix when it holds more than the words (--subwords: n-gram buckets)."""
    rng = np.random.default_rng(seed)
    rows = vocab_size if input_rows is None else input_rows
    w_in = ((rng.random((rows, dim), dtype=np.float32) - 0.5) / dim).astype(np.float32)
    return np.ascontiguousarray(w_in), np.zeros((vocab_size, dim), dtype=np.float32)


def input_rows(cfg: TrainConfig, vocab_size: int) -> int:
    """Rows of the input matrix: the words, then (--subwords) the n-gram buckets."""
    return vocab_size + (cfg.buckets if cfg.subwords else 0)


def fresh_params(cfg: TrainConfig, comm: Comm, vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
    return init_params(vocab_size, cfg.dim, cfg.seed, input_rows(cfg, vocab_size))


def read_params(found, where: dict, comm: Comm, cfg: TrainConfig, vocab_size: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Rank 0 read the whole checkpoint (``found``); every rank receives its matrices."""
    w_in = found.w_in if comm.is_root else np.empty((input_rows(cfg, vocab_size), cfg.dim), np.float32)
    w_out = found.w_out if comm.is_root else np.empty((vocab_size, cfg.dim), np.float32)
    comm.bcast_array_(w_in)
    comm.bcast_array_(w_out)
    return w_in, w_out


def save_on_root(comm: Comm, directory: str, ck, keep: int) -> str | None:
    """Rank 0 writes the whole checkpoint; every rank learns its path (or the error)."""
    return comm.on_root(checkpoint.save, directory, ck, keep=keep)


def write_on_root(comm: Comm, path: str, words: list[str], vectors) -> str | None:
    """Rank 0 writes ``vectors()`` as word2vec text; why it failed, or None."""
    if not comm.is_root:
        return None
    try:
        write_word2vec(path, words, vectors(), binary=False)
    except (OSError, InputError) as e:
        return reason(e) if isinstance(e, OSError) else str(e)
    return None


# ------------------------------------------------------------------ the combining
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


# ------------------------------------------------------------------ the store
class ReplicatedStore(Store):
    """Both matrices on every rank, trained in place by the numba kernel and combined by
    :class:`Synchronizer`."""

    fresh_params = staticmethod(fresh_params)
    read_params = staticmethod(read_params)

    def __init__(self, comm: Comm, w_in: np.ndarray, w_out: np.ndarray, setup: StoreSetup):
        from ..kernels import cpu

        cfg = setup.cfg
        self.comm, self.params = comm, (w_in, w_out)
        # --subwords: the input matrix has a row per n-gram bucket after the words
        self.touched = (np.zeros(len(w_in), dtype=np.uint8), np.zeros(len(w_out), dtype=np.uint8))
        self.syncer = Synchronizer(comm, [w_in, w_out], mode=cfg.sync, scale=setup.scale, allreduce=cfg.allreduce)
        self.stats = self.syncer.stats
        self._kernel = cpu.train_block

    def _step(self, tokens, starts, args):
        return self._kernel(*self.params, tokens, starts, self._rng, *self.touched, args)

    def train(self, work: Work, ahead: Work | None, rng: np.ndarray, args: KernelArgs, on_piece=None) -> Trained:
        self._rng = rng
        return train_pieces(self._step, work.pieces, args, on_piece)

    def sync(self) -> float:
        return self.syncer.sync(list(self.params), list(self.touched))

    def rows(self, ids: np.ndarray | None) -> np.ndarray | None:
        if not self.comm.is_root:
            return None
        return self.params[0] if ids is None else self.params[0][ids]

    def save(self, directory: str, ck, keep: int) -> str | None:
        return save_on_root(self.comm, directory, ck, keep)

    def write_vectors(self, path: str, words: list[str], vectors_of: Callable) -> str | None:
        return write_on_root(self.comm, path, words, lambda: vectors_of(self.params[0]))
