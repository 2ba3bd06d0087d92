"""``--kernel torch``: the replicated model with its parameters resident on the device.

The host arrays (the run's ``TrainingState.w_in``/``w_out``) stay the run's record:
checkpoints, evaluation and export read them. What crosses between host and device:

* one rank: nothing while training. The divergence guard's probe (the largest |value| of
  the rows a round touched) is computed on the device and read as one number per round;
  :meth:`DeviceStore.host` copies the parameters down only when a checkpoint, an evaluation
  or the export needs them.
* several ranks, ``--exchange mpi`` (the default), ``--sync sparse``: the rows this rank
  touched go down (gathered on the device), the replicated store's
  :class:`~mpidwe.parallel.replicated.Synchronizer` combines the ranks on the host by its one
  rule, and the rows any rank touched go back up. ``dense``/``average`` move the whole
  matrices, as their all-reduce does anyway. In tiers (``--sync-full``, by default from 8
  ranks) a sync combines the rows of its spans (:class:`~mpidwe.parallel.replicated.Tiers`):
  those rows go down (one contiguous copy per matrix: the hot rows at most syncs), the
  host combines them as the replicated store does (encoded rows, error feedback), the
  rows any rank touched go back up, and the rows outside keep their touched flags on the
  device until a sync that combines them.
* several ranks, ``--exchange torch``: nothing. :class:`DeviceExchange` keeps the base copy
  on the device, sends the touched rows (or the whole matrices) device to device over a
  torch.distributed group (parallel/torchdist.py: NCCL on CUDA, gloo on CPU) and applies the same
  rule in torch ops; the host reads a few numbers per sync (the ranks' row counts, the
  guard's probe).

Imports torch; only a run with ``--kernel torch`` builds this store.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np
import torch

from ..kernels import torch_hs, torch_kernel
from ..kernels.args import KernelArgs
from .comm import Comm
from ..core.config import wire_of
from .replicated import (Tiers, fresh_params, planned_synchronizer, read_params, rest_of, save_on_root,
                         write_on_root)
from .rule import MODES, OVERSHOOT
from .store import Store, StoreSetup, SyncStats, Trained, Work, train_pieces


def _largest(values: torch.Tensor) -> float:
    """Largest |value| (inf if any is NaN), read as one number: the divergence guard's probe."""
    if values.numel() == 0:
        return 0.0
    biggest = float(values.abs().amax())
    return biggest if biggest == biggest else float("inf")


class DeviceExchange:
    """``--exchange torch``: :class:`~mpidwe.parallel.replicated.Synchronizer`'s rule on the
    device. The same float32 operations in the same order, so the same model:

    * ``sparse``: each rank's touched rows and their changes from ``base`` are gathered
      (padded to the longest, as the MPI path does); a row's changes are summed in rank
      order, starting from -0.0 (the float identity, so ``-0.0 + v0`` is ``v0`` bit for bit,
      as the numba rule's copy is), divided by ``max(scale, n / 2)`` and added to ``base``:
      bit-identical to the MPI exchange. One ``index_add_`` per rank, whose rows are unique,
      so no two updates of a row race (CUDA's atomics would sum in any order).
    * ``dense``/``average``: one all-reduce of the changes and one of the touch counts; the
      backend's ring sums in its own order, so the model is the MPI exchange's bit for bit at
      2 ranks (two terms commute) and to float32 rounding beyond, where MPI's own order is
      the library's too.
    """

    def __init__(self, group, params, mode: str, scale: int):
        if mode not in MODES:
            raise ValueError(f"unknown sync mode {mode!r}")
        self.group, self.mode, self.scale = group, mode, int(scale)
        self.base = [p.clone() for p in params]
        self.stats = SyncStats()

    def sync(self, params, touched) -> float:
        """Combine every rank's changes since the last sync into ``params`` (in place) and
        clear the ``touched`` masks; a collective. The largest |value| that changed."""
        t, c, b = time.perf_counter(), self.group.stats.seconds, self.group.stats.bytes_sent
        k = self.group.stats.steps
        step = self._sparse if self.mode == "sparse" else self._dense
        biggest = 0.0
        for param, base, mask in zip(params, self.base, touched):
            biggest = max(biggest, step(param, base, mask))
            mask.zero_()
        s = self.stats
        s.syncs += 1
        s.seconds += time.perf_counter() - t
        s.comm_seconds += self.group.stats.seconds - c
        s.bytes_sent += self.group.stats.bytes_sent - b
        s.steps += self.group.stats.steps - k
        return biggest

    def _sparse(self, param, base, mask) -> float:
        rows = torch.nonzero(mask).view(-1)
        counts = self.group.allgather(torch.tensor([rows.numel()], dtype=torch.int64, device=param.device))
        counts = counts.view(-1).tolist()          # P numbers: the only host read before the probe
        longest = max(counts)
        if longest == 0:                           # (every rank knows: none sends anything)
            return 0.0
        send_rows = torch.zeros(longest, dtype=torch.int32, device=param.device)
        send_rows[:len(rows)] = rows
        send_values = torch.zeros((longest, param.shape[1]), dtype=param.dtype, device=param.device)
        torch.sub(param[rows], base[rows], out=send_values[:len(rows)])
        all_rows = self.group.allgather(send_rows).long()
        all_values = self.group.allgather(send_values)
        sent = [all_rows[r, :n] for r, n in enumerate(counts)]
        changed, slot = torch.unique(torch.cat(sent), sorted=True, return_inverse=True)
        sums = torch.full((len(changed), param.shape[1]), -0.0, dtype=param.dtype, device=param.device)
        for r, part in enumerate(torch.split(slot, counts)):
            sums.index_add_(0, part, all_values[r, :counts[r]])       # rank order, no row twice
        senders = torch.bincount(slot, minlength=len(changed))
        divisor = torch.clamp(senders.to(param.dtype) / OVERSHOOT, min=float(self.scale))
        new = base[changed] + sums / divisor[:, None]
        base[changed] = new
        param[changed] = new
        return _largest(new)

    def _dense(self, param, base, mask) -> float:
        delta = param - base
        self.group.allreduce_(delta)
        counts = self.group.allreduce_(mask.to(torch.int32))
        if self.mode == "average":
            divisor = torch.full(counts.shape, float(self.group.size), dtype=param.dtype, device=param.device)
        else:
            divisor = torch.clamp(counts.to(param.dtype) / OVERSHOOT, min=float(self.scale))
        hit = (counts > 0)[:, None]
        torch.where(hit, base + delta / divisor[:, None], base, out=base)
        torch.where(hit, base, param, out=param)          # (no rank changed the other rows)
        return _largest(torch.where(hit, base, 0.0))


class DeviceStore(Store):
    """``w_in``, ``w_out`` and their touched masks on ``device``, copied from the host once;
    the same model as :class:`~mpidwe.parallel.replicated.ReplicatedStore`, trained by the torch
    kernels."""

    fresh_params = staticmethod(fresh_params)
    read_params = staticmethod(read_params)

    def __init__(self, comm: Comm, w_in: np.ndarray, w_out: np.ndarray, setup: StoreSetup):
        cfg = setup.cfg
        self.comm = comm
        self.device = torch.device(setup.device)
        self.host_params = (w_in, w_out)
        self.params = tuple(torch.from_numpy(a).to(self.device, copy=True) for a in self.host_params)
        self.touched = tuple(torch.zeros(len(a), dtype=torch.uint8, device=self.device) for a in self.host_params)
        self.host_current = True          # the host arrays equal the device's
        self._tables = None               # (keep, table, DeviceTables): uploaded once
        self.syncer = self.exchange = self.tiers = None
        self.pending = False      # in tiers: some rank may hold changes no sync has combined yet
        self._rest = None         # per matrix, the rows [a, b) outside the last sync's span (None: all)
        # the host syncs' copies between device and host: bytes each way and their seconds
        # (the upload waits for the device, so the seconds are the copies', not the launches')
        self.copied = {"device_down_bytes": 0, "device_up_bytes": 0, "device_copy_seconds": 0.0}
        t = setup.tiers           # as the plan resolved them (config.tiers_of): --exchange mpi only
        # --sync auto stays sparse outside tiers: the host staging copies down only the rows
        # this rank touched, which a dense sync would not read (not measured on a GPU:
        # docs/lab/sync-modes.md); in tiers it chooses by bytes, as the replicated store does
        mode = "sparse" if cfg.sync == "auto" and not t else cfg.sync
        if cfg.exchange == "torch" and comm.size > 1:      # device to device: no host copy of the base
            from .torchdist import TorchGroup

            self.exchange = DeviceExchange(TorchGroup.over(comm, setup.device), self.params, mode, setup.scale)
            self.stats = self.exchange.stats
        else:
            wire = wire_of(cfg, comm.size, True) if t else "fp32" if cfg.wire == "auto" else cfg.wire
            self.syncer = planned_synchronizer(comm, list(self.host_params), setup, mode, wire)
            self.stats = self.syncer.stats
            self.tiers = Tiers.planned(setup, [len(w_in), len(w_out)])

    def tables(self, keep: np.ndarray, table: np.ndarray) -> torch_kernel.DeviceTables:
        if self._tables is None or self._tables[0] is not keep or self._tables[1] is not table:
            self._tables = (keep, table, torch_kernel.DeviceTables(keep, table, self.device))
        return self._tables[2]

    @staticmethod
    def _fused_kernel():
        from ..kernels import triton_kernel       # imports triton: only runs that train with it
        return triton_kernel.train_block

    def train(self, work: Work, ahead: Work | None, rng: np.ndarray, args: KernelArgs, on_piece=None) -> Trained:
        self.host_current = False
        self._rest = None          # rows trained since the last sync may wait anywhere
        if args.hs is not None:      # hierarchical softmax has its own torch module
            kernel = torch_hs.train_block
        else:                        # --kernel triton: the same store, layout and tables, one fused launch per batch
            kernel = self._fused_kernel() if args.fused else torch_kernel.train_block
            args = dataclasses.replace(args, tables=self.tables(args.keep_prob, args.neg_table))

        def step(tokens, starts, a):
            return kernel(*self.params, tokens, starts, rng, *self.touched, a)

        return train_pieces(step, work.pieces, args, on_piece)

    def host(self) -> None:
        """Copy the parameters into the host arrays (before a checkpoint, evaluation, export)."""
        if self.host_current:
            return
        for dev, host in zip(self.params, self.host_params):
            host[:] = dev.cpu().numpy()
        self.host_current = True

    def sync(self, rnd: int) -> float:
        """The round's sync (a collective when there are several ranks); clears the touched
        flags of the rows it combines (in tiers: its spans) and returns the largest |value| of
        the rows that changed (inf for NaN)."""
        if self.comm.size == 1:
            return self._probe()
        if self.exchange is not None:      # the parameters stay on the device; the host's are stale
            return self.exchange.sync(self.params, self.touched)
        spans = None if self.tiers is None else self.tiers.spans(rnd + 1)
        self.pending = spans is not None
        self._rest = rest_of(spans, [len(p) for p in self.params])
        return self._combine(spans)

    def flush(self) -> None:
        """In tiers: combine every change still waiting (the rows outside the last sync's
        spans), so that every rank holds the same rows (before an evaluation, a checkpoint or
        the export)."""
        if self.pending:
            self._combine(self._rest)
            self.pending = False

    def _combine(self, spans: list[tuple[int, int]] | None) -> float:
        """The host's sync of the rows [a, b) of ``spans`` (None: every row): they come down
        from the device (only the rows this rank touched, for a sparse sync of every row),
        the Synchronizer combines them, and the rows any rank touched go back up; the
        touched flags of those rows are cleared, the others kept."""
        syncer, copied, start = self.syncer, self.copied, time.perf_counter()
        masks = [flags.cpu().numpy() for flags in self.touched]
        down, up = sum(m.nbytes for m in masks), 0
        spans = [(0, len(p)) for p in self.host_params] if spans is None else spans
        every = all(b - a == len(p) for p, (a, b) in zip(self.host_params, spans))
        for dev, host, mask, (lo, hi) in zip(self.params, self.host_params, masks, spans):
            if syncer.mode == "sparse" and every:     # only the rows this rank changed travel down
                rows = np.flatnonzero(mask)           # (their int64 ids up first)
                host[rows] = dev[torch.from_numpy(rows).to(self.device)].cpu().numpy()
                down += len(rows) * host.shape[1] * host.itemsize
                up += rows.nbytes
            else:
                host[lo:hi] = dev[lo:hi].cpu().numpy()
                down += host[lo:hi].nbytes
        copied["device_copy_seconds"] += time.perf_counter() - start
        biggest = syncer.sync(list(self.host_params), masks, spans)
        start = time.perf_counter()
        for dev, host, rows in zip(self.params, self.host_params, syncer.changed_rows):
            index = torch.from_numpy(rows.astype(np.int64)).to(self.device)
            dev.index_copy_(0, index, torch.from_numpy(host[rows]).to(self.device))
            up += index.numel() * (8 + host.shape[1] * host.itemsize)
        for flags, (lo, hi) in zip(self.touched, spans):
            flags[lo:hi].zero_()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        copied["device_copy_seconds"] += time.perf_counter() - start
        copied["device_down_bytes"] += down
        copied["device_up_bytes"] += up
        # rows outside the spans may hold this rank's changes the host has not seen
        self.host_current = every
        return biggest

    def _probe(self) -> float:
        """One rank: the guard's probe on the device, read as one number."""
        t = time.perf_counter()
        peaks = [torch.where(mask > 0, dev.abs().amax(1), 0.0).amax() for dev, mask in zip(self.params, self.touched)]
        biggest = float(torch.stack(peaks).amax())
        for mask in self.touched:
            mask.zero_()
        self.stats.syncs += 1
        self.stats.seconds += time.perf_counter() - t
        return biggest if biggest == biggest else float("inf")

    def extra_comm_bytes(self) -> int:
        return 0 if self.exchange is None else self.exchange.group.stats.bytes_sent

    def report(self) -> dict:
        """Per rank, the host syncs' copies so far (none at one rank or with ``--exchange
        torch``): bytes down (touched flags and rows) and up (rows and their int64 ids, and
        the ids of the rows a sparse download fetches), and their seconds, the upload's wait
        for the device included."""
        if self.syncer is None:
            return {}
        return {**self.copied, "device_copy_seconds": round(self.copied["device_copy_seconds"], 4)}

    def settings(self) -> dict:
        return {} if self.exchange is None else {"exchange": f"torch.distributed ({self.exchange.group.backend})"}

    def close(self) -> None:
        if self.exchange is not None:
            self.exchange.group.close()

    def rows(self, ids: np.ndarray | None) -> np.ndarray | None:
        self.flush()
        self.host()
        if not self.comm.is_root:
            return None
        return self.host_params[0] if ids is None else self.host_params[0][ids]

    def save(self, directory: str, ck, keep: int) -> str | None:
        self.flush()
        if self.syncer is not None:
            self.syncer.drop_feedback()      # a run resumed from this checkpoint starts without residuals
        self.host()
        return save_on_root(self.comm, directory, ck, keep)

    def write_vectors(self, path: str, words: list[str], vectors_of: Callable) -> str | None:
        self.flush()
        self.host()
        return write_on_root(self.comm, path, words, lambda: vectors_of(self.host_params[0]))
