"""Run under mpiexec -n P: collectives of mpidwe.comm against MPI's own."""

import sys

import numpy as np
from mpi4py import MPI

from mpidwe.comm import Comm

comm = Comm.world()
assert comm.size == MPI.COMM_WORLD.Get_size() > 1, "run me under mpiexec -n >= 2"
rng = np.random.default_rng(100 + comm.rank)

# ring all-reduce equals MPI_Allreduce: exactly for integers, to rounding for floats,
# and the ring result is bit-identical on every rank
for n in (0, 1, 2, 7, 1000, 12345):
    ints = rng.integers(-1000, 1000, size=n).astype(np.int64)
    a, b = ints.copy(), ints.copy()
    comm.ring_allreduce_(a, chunk_bytes=64)
    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)
    assert np.array_equal(a, b), (n, a[:5], b[:5])
    floats = rng.standard_normal((n, 3)).astype(np.float32)
    a, b = floats.copy(), floats.copy()
    comm.ring_allreduce_(a, chunk_bytes=100)
    comm.allreduce_(b)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    everyone = comm.allgather(a.tobytes())
    assert all(x == everyone[0] for x in everyone), "ring result differs between ranks"

# allgatherv concatenates in rank order
mine = np.full((comm.rank + 1, 2), comm.rank, dtype=np.float32)
out, rows = comm.allgatherv(mine)
assert rows == [r + 1 for r in range(comm.size)]
assert np.array_equal(out[:, 0], np.repeat(np.arange(comm.size), np.arange(1, comm.size + 1)))
assert comm.stats.bytes_sent > 0 and comm.stats.calls > 0

# agree: an error on one rank is raised on all
from mpidwe.errors import InputError, MpidweError

def maybe_fail():
    if comm.rank == comm.size - 1:
        raise InputError("only the last rank fails")
    return comm.rank

try:
    comm.agree(maybe_fail)
    raise AssertionError("agree did not raise")
except MpidweError as e:
    assert "last rank" in str(e) and e.agreed

# node-local rank: all ranks are on this machine
assert comm.node_size == comm.size and comm.node_rank == comm.rank
if comm.is_root:
    print("comm ok", comm.size)
sys.exit(0)
