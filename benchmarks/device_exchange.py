"""What the device store's exchange moves between ranks and between device and host.

    mpiexec -n 2 python benchmarks/device_exchange.py CORPUS --exchange mpi|torch [--device cpu]
        [--dim 100] [--sync-every 10000] [--epochs 1] [--batch-size 1024] [--out DIR]

Trains CORPUS with ``--kernel torch`` through ``mpidwe.train.run`` on every rank (the real
round loop) with ``DeviceStore.sync`` wrapped: it counts the rows ``--exchange mpi`` copies
between device and host (each rank's touched rows down, the rows any rank changed back up;
4 x dim bytes each) and times every sync. Rank 0 prints one JSON line: trained words, syncs,
per rank the bytes between ranks (``sync_bytes``), the bytes staged through host numpy, the
sync's communication and array seconds, and the median sync after the first (the first
loads the numba rule); and the parameters' digest, equal for both exchanges (--sync sparse).
docs/lab/benchmarks.md, "Between devices", has the figures and what they do and do not show.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time

import numpy as np
import torch

from mpidwe.core.config import TrainConfig, parse_command
from mpidwe.parallel.comm import Comm
from mpidwe.parallel.device import DeviceStore
from mpidwe.train import run


class Counted:
    """``DeviceStore.sync`` wrapped: staged bytes and each sync's seconds on this rank."""

    def __init__(self):
        self.staged, self.seconds = 0, []
        self.real = DeviceStore.sync

    def __call__(self, store: DeviceStore, rnd: int) -> float:
        t = time.perf_counter()
        staging = store.exchange is None and store.comm.size > 1
        down = sum(int(m.sum()) for m in store.touched) if staging else 0
        biggest = self.real(store, rnd)
        if staging:
            up = sum(len(rows) for rows in store.syncer.changed_rows)
            self.staged += (down + up) * store.params[0].shape[1] * 4
        self.seconds.append(time.perf_counter() - t)
        return biggest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("--exchange", choices=["mpi", "torch"], required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dim", default="100")
    ap.add_argument("--sync-every", default="10000")
    ap.add_argument("--epochs", default="1")
    ap.add_argument("--batch-size", default="1024")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(1)
    comm = Comm.world()
    out = a.out or comm.bcast(tempfile.mkdtemp(prefix="exchange-") if comm.is_root else None)
    counted = Counted()
    DeviceStore.sync = lambda store, rnd: counted(store, rnd)
    cfg = parse_command(TrainConfig, [
        "--corpus", a.corpus, "--out", os.path.join(out, a.exchange), "--dim", a.dim, "--sync-every", a.sync_every,
        "--epochs", a.epochs, "--threads", "1", "--no-progress", "--kernel", "torch", "--device", a.device,
        "--exchange", a.exchange, "--force", "--no-export", "--batch-size", a.batch_size], prog="bench",
        description="")
    res = run(cfg, comm, log=None)
    staged = comm.gather(counted.staged)
    median_ms = comm.gather(round(float(np.median(counted.seconds[1:] or [0.0])) * 1e3, 2))
    if comm.is_root:
        last = res.metrics[-1]
        print(json.dumps(dict(
            exchange=a.exchange, ranks=comm.size, words=last["words"], syncs=last["syncs"],
            sync_bytes=last["sync_bytes"], staged_bytes=staged, sync_comm_s=last["sync_comm_seconds"],
            sync_array_s=last["sync_array_seconds"], median_sync_ms_after_first=median_ms,
            digest=hashlib.sha256(res.w_in.tobytes() + res.w_out.tobytes()).hexdigest()[:16])))


if __name__ == "__main__":
    main()
