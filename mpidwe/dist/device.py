"""The torch kernel's parameters, resident on the device for the whole run.

The host arrays (``TrainingState.w_in``/``w_out``) stay the run's record: checkpoints,
evaluation and export read them. What crosses between host and device:

* one rank: nothing while training. The divergence guard's probe (the largest |value| of
  the rows a round touched) is computed on the device and read as one number per round;
  ``to_host`` copies the parameters down only when a checkpoint, an evaluation or the
  export needs them.
* several ranks, ``--sync sparse``: the rows this rank touched go down (gathered on the
  device), the :class:`sync.Synchronizer` combines the ranks on the host by its one rule,
  and the rows any rank touched go back up. ``dense``/``average`` move the whole matrices,
  as their all-reduce does anyway.

Imports torch; only train.py's ``Backend`` uses it, and only for ``--kernel torch``.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from ..kernels import torch_kernel


class DeviceParams:
    """``w_in``, ``w_out`` and their touched masks on ``device``, copied from the host once."""

    def __init__(self, device: str, w_in: np.ndarray, w_out: np.ndarray):
        self.device = torch.device(device)
        self.host = (w_in, w_out)
        self.params = tuple(torch.from_numpy(a).to(self.device, copy=True) for a in self.host)
        self.touched = tuple(torch.zeros(len(a), dtype=torch.uint8, device=self.device) for a in self.host)
        self.host_current = True          # the host arrays equal the device's
        self._tables = None               # (keep, table, DeviceTables): uploaded once

    def tables(self, keep: np.ndarray, table: np.ndarray) -> torch_kernel.DeviceTables:
        if self._tables is None or self._tables[0] is not keep or self._tables[1] is not table:
            self._tables = (keep, table, torch_kernel.DeviceTables(keep, table, self.device))
        return self._tables[2]

    def train(self, tokens, starts, rng_state, args):
        self.host_current = False
        w_in, w_out = self.params
        if args.hs is not None:      # hierarchical softmax has its own torch module
            from ..kernels.torch_hs import train_block as train_hs

            return train_hs(w_in, w_out, tokens, starts, rng_state, *self.touched, args)
        args = dataclasses.replace(args, tables=self.tables(args.keep_prob, args.neg_table))
        return torch_kernel.train_block(w_in, w_out, tokens, starts, rng_state, *self.touched, args)

    def to_host(self) -> None:
        """Copy the parameters into the host arrays (before a checkpoint, evaluation, export)."""
        if self.host_current:
            return
        for dev, host in zip(self.params, self.host):
            host[:] = dev.cpu().numpy()
        self.host_current = True

    def sync(self, syncer) -> float:
        """The round's sync (a collective when there are several ranks); clears the touched
        masks and returns the largest |value| of the rows that changed (inf for NaN)."""
        if syncer.comm.size == 1:
            return self._probe(syncer)
        masks = [t.cpu().numpy() for t in self.touched]
        sparse = syncer.mode == "sparse"
        for dev, host, mask in zip(self.params, self.host, masks):
            if sparse:     # only the rows this rank changed travel down
                rows = np.flatnonzero(mask)
                host[rows] = dev[torch.from_numpy(rows).to(self.device)].cpu().numpy()
            else:
                host[:] = dev.cpu().numpy()
        biggest = syncer.sync(list(self.host), masks)
        for dev, host, rows in zip(self.params, self.host, syncer.changed_rows):
            index = torch.from_numpy(rows.astype(np.int64)).to(self.device)
            dev.index_copy_(0, index, torch.from_numpy(host[rows]).to(self.device))
        for t in self.touched:
            t.zero_()
        self.host_current = True
        return biggest

    def _probe(self, syncer) -> float:
        """One rank: the guard's probe on the device, read as one number."""
        t = time.perf_counter()
        peaks = [torch.where(mask > 0, dev.abs().amax(1), 0.0).amax() for dev, mask in zip(self.params, self.touched)]
        biggest = float(torch.stack(peaks).amax())
        for mask in self.touched:
            mask.zero_()
        syncer.stats.syncs += 1
        syncer.stats.seconds += time.perf_counter() - t
        return biggest if biggest == biggest else float("inf")
