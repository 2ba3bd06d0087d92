"""Run under mpiexec -n P: train with this process's data segment capped.

usage: capped_train.py BUDGET_BYTES [train flags...]

Imports everything training needs and starts MPI first, then measures the data segment
(VmData: the heap and private writable mappings, what RLIMIT_DATA limits; MPI's shared
memory and file mappings are not in it) and caps it at that baseline plus BUDGET_BYTES.
An allocation past the cap fails (numpy raises MemoryError), so a rank that tried to hold a
matrix larger than the budget ends the job with a non-zero exit. Prints, per rank, the
baseline and the data segment at the end ('rank R baseline B end E')."""

import resource
import sys

import h5py  # noqa: F401  (imported before the baseline is taken, as training imports it)
import numba  # noqa: F401

from mpidwe.parallel import sharded
from mpidwe import train  # noqa: F401
from mpidwe.core.config import TrainConfig, parse_command
from mpidwe.parallel.comm import Comm, run_main


def vm_data() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData in /proc/self/status")


budget, *argv = sys.argv[1:]
comm = Comm.world()
base = vm_data()
resource.setrlimit(resource.RLIMIT_DATA, (base + int(budget), resource.RLIM_INFINITY))


def body(args, c):
    cfg = parse_command(TrainConfig, args, prog="capped_train", description="")
    train.run(cfg, comm, log=None)
    print(f"rank {comm.rank} baseline {base} end {vm_data()}", flush=True)
    return 0


sys.exit(run_main("capped_train", body, argv))
