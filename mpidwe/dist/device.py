"""``--kernel torch``: the replicated model with its parameters resident on the device.

The host arrays (the run's ``TrainingState.w_in``/``w_out``) stay the run's record:
checkpoints, evaluation and export read them. What crosses between host and device:

* one rank: nothing while training. The divergence guard's probe (the largest |value| of
  the rows a round touched) is computed on the device and read as one number per round;
  :meth:`DeviceStore.host` copies the parameters down only when a checkpoint, an evaluation
  or the export needs them.
* several ranks, ``--sync sparse``: the rows this rank touched go down (gathered on the
  device), the replicated store's :class:`~mpidwe.dist.replicated.Synchronizer` combines the
  ranks on the host by its one rule, and the rows any rank touched go back up.
  ``dense``/``average`` move the whole matrices, as their all-reduce does anyway.

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
from .replicated import Synchronizer, fresh_params, read_params, save_on_root, write_on_root
from .store import Store, StoreSetup, Trained, Work, train_pieces


class DeviceStore(Store):
    """``w_in``, ``w_out`` and their touched masks on ``device``, copied from the host once;
    the same model as :class:`~mpidwe.dist.replicated.ReplicatedStore`, trained by the torch
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
        self.syncer = Synchronizer(comm, list(self.host_params), mode=cfg.sync, scale=setup.scale,
                                   allreduce=cfg.allreduce)
        self.stats = self.syncer.stats

    def tables(self, keep: np.ndarray, table: np.ndarray) -> torch_kernel.DeviceTables:
        if self._tables is None or self._tables[0] is not keep or self._tables[1] is not table:
            self._tables = (keep, table, torch_kernel.DeviceTables(keep, table, self.device))
        return self._tables[2]

    def train(self, work: Work, ahead: Work | None, rng: np.ndarray, args: KernelArgs, on_piece=None) -> Trained:
        self.host_current = False
        if args.hs is not None:      # hierarchical softmax has its own torch module
            kernel = torch_hs.train_block
        else:
            kernel = torch_kernel.train_block
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
        masks and returns the largest |value| of the rows that changed (inf for NaN)."""
        syncer = self.syncer
        if syncer.comm.size == 1:
            return self._probe()
        masks = [t.cpu().numpy() for t in self.touched]
        sparse = syncer.mode == "sparse"
        for dev, host, mask in zip(self.params, self.host_params, masks):
            if sparse:     # only the rows this rank changed travel down
                rows = np.flatnonzero(mask)
                host[rows] = dev[torch.from_numpy(rows).to(self.device)].cpu().numpy()
            else:
                host[:] = dev.cpu().numpy()
        biggest = syncer.sync(list(self.host_params), masks)
        for dev, host, rows in zip(self.params, self.host_params, syncer.changed_rows):
            index = torch.from_numpy(rows.astype(np.int64)).to(self.device)
            dev.index_copy_(0, index, torch.from_numpy(host[rows]).to(self.device))
        for t in self.touched:
            t.zero_()
        self.host_current = True
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

    def rows(self, ids: np.ndarray | None) -> np.ndarray | None:
        self.host()
        if not self.comm.is_root:
            return None
        return self.host_params[0] if ids is None else self.host_params[0][ids]

    def save(self, directory: str, ck, keep: int) -> str | None:
        self.host()
        return save_on_root(self.comm, directory, ck, keep)

    def write_vectors(self, path: str, words: list[str], vectors_of: Callable) -> str | None:
        self.host()
        return write_on_root(self.comm, path, words, lambda: vectors_of(self.host_params[0]))
