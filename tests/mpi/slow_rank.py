"""``python tests/mpi/slow_rank.py FACTOR TRAIN_ARGS...``: python -m mpidwe.train on a rank
that computes FACTOR times slower than it could: after each piece its kernel trained (the
replicated store's step), it sleeps (FACTOR - 1) x the piece's time. Launched for some ranks of an MPMD job
(``mpiexec -n 1 python slow_rank.py 3 ... : -n 2 python -m mpidwe.train ...``), it makes a
rank slow relative to its own speed, whatever else runs on the machine (a shared core is
not: other load lands on every core)."""

import sys
import time

from mpidwe import train
from mpidwe.parallel.replicated import ReplicatedStore

factor = float(sys.argv[1])
original = ReplicatedStore._step


def slow(self, *args, **kwargs):
    t = time.perf_counter()
    out = original(self, *args, **kwargs)
    time.sleep((factor - 1) * (time.perf_counter() - t))
    return out


ReplicatedStore._step = slow
sys.exit(train.main(sys.argv[2:]))
