"""Run under mpiexec -n P: collectives of mpidwe.dist.comm against MPI's own."""

import sys

import numpy as np
from mpi4py import MPI

from mpidwe.dist.comm import Comm, ring_plan
from mpidwe.core.errors import EXIT_DIVERGED, ConfigError, InputError, MpidweError

comm = Comm.world()
assert comm.size == MPI.COMM_WORLD.Get_size() > 1, "run me under mpiexec -n >= 2"
P = comm.size
rng = np.random.default_rng(100 + comm.rank)


def ring_sizes(chunk_bytes: int, itemsize: int) -> list[int]:
    """Sizes that leave segments of unequal length and put segment ends on, just before and
    just after chunk boundaries: where neighbours once disagreed on their chunk counts."""
    step = max(1, chunk_bytes // itemsize)
    sizes = set(range(0, 41))
    if step <= 64:  # arrays of P * step * k items stay small
        sizes |= {P * step * k + d for k in (1, 2, 3) for d in (-1, 0, 1)}
    if step >= 8:  # few chunks: fast enough on an oversubscribed node
        sizes |= {1000, 12345}
    return sorted(sizes)


def expected_sent(n: int, itemsize: int) -> int:
    # a rank sends every segment but its right neighbour's in the reduce-scatter and every
    # segment but the one two to its right in the allgather
    bounds, _ = ring_plan(n, P, 1)
    seg = np.diff(bounds)
    return itemsize * (2 * n - int(seg[(comm.rank + 1) % P]) - int(seg[(comm.rank + 2) % P]))


def check_ints(n: int, chunk_bytes: int) -> None:
    ints = rng.integers(-1000, 1000, size=n).astype(np.int64)
    a, b = ints.copy(), ints.copy()
    before = comm.stats.bytes_sent
    comm.ring_allreduce_(a, chunk_bytes=chunk_bytes)
    assert comm.stats.bytes_sent - before == expected_sent(n, 8), (n, chunk_bytes)
    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)
    assert np.array_equal(a, b), (n, chunk_bytes, a[:5], b[:5])


def check_floats(n: int, chunk_bytes: int, cols: int) -> None:
    floats = rng.standard_normal((n, cols)).astype(np.float32)
    a, b = floats.copy(), floats.copy()
    comm.ring_allreduce_(a, chunk_bytes=chunk_bytes)
    comm.allreduce_(b)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    everyone = comm.allgather(a.tobytes())
    assert all(x == everyone[0] for x in everyone), ("ring result differs between ranks", n, chunk_bytes)


# ring all-reduce equals MPI_Allreduce: exactly for integers, to rounding for floats,
# and the ring result is bit-identical on every rank
for chunk_bytes in (1, 8, 16, 24, 100, 4 << 20):
    for n in ring_sizes(chunk_bytes, 8):
        check_ints(n, chunk_bytes)
    for n in ring_sizes(chunk_bytes, 4):
        check_floats(n, chunk_bytes, 1)
    for n in (0, 7, 1000):
        check_floats(n, chunk_bytes, 3)

# allgather_array stacks equally shaped blocks in rank order
stacked = comm.allgather_array(np.full((3, 2), comm.rank, dtype=np.float32))
assert stacked.shape == (comm.size, 3, 2) and stacked[:, 0, 0].tolist() == list(range(comm.size))

assert comm.stats.bytes_sent > 0 and comm.stats.calls > 0


# agree: an error on one rank is raised on all
def maybe_fail():
    if comm.rank == comm.size - 1:
        raise InputError("only the last rank fails")
    return comm.rank


try:
    comm.agree(maybe_fail)
    raise AssertionError("agree did not raise")
except MpidweError as e:
    assert "last rank" in str(e) and e.agreed

# on_root: fn runs on rank 0 only, its result reaches every rank (or rank 0 only with
# broadcast=False), and its user error is raised on every rank with its exit code
calls = []


def on_rank0(x, *, plus):
    calls.append(comm.rank)
    return {"rank": comm.rank, "value": x + plus}


assert comm.on_root(on_rank0, 40, plus=2) == {"rank": 0, "value": 42}
assert calls == ([0] if comm.is_root else [])
kept = comm.on_root(on_rank0, 1, plus=1, broadcast=False)
assert kept == ({"rank": 0, "value": 2} if comm.is_root else None)


def root_fails():
    err = ConfigError("rank 0 says no")
    err.exit_code = EXIT_DIVERGED
    raise err


try:
    comm.on_root(root_fails)
    raise AssertionError("on_root did not raise")
except MpidweError as e:
    assert "rank 0 says no" in str(e) and e.agreed and e.exit_code == EXIT_DIVERGED
assert comm.on_root(lambda: "still in step") == "still in step"

# dup: a second communicator whose collectives run in another thread while this thread's
# run on the first (the sharded store's prefetch); barrier_sleeping waits for every rank
import threading  # noqa: E402
import time  # noqa: E402

assert comm.thread_multiple
second = comm.dup()
got = {}


def in_thread():
    time.sleep(0.05 * comm.rank)          # arrive at different times: the barrier must hold
    second.barrier_sleeping()
    rows, counts = second.alltoallv(np.full((P, 2), comm.rank, dtype=np.int64), np.ones(P, dtype=np.int64))
    got["rows"] = rows


thread = threading.Thread(target=in_thread)
thread.start()
main_side = comm.allgather(comm.rank * 10)          # meanwhile, on the first communicator
thread.join()
assert main_side == [r * 10 for r in range(P)]
assert got["rows"][:, 0].tolist() == list(range(P)) and second.stats.calls == 2 and second.stats.seconds > 0
# no rank left the barrier before the last one (which slept 0.05 (P - 1) s) entered it
assert second.stats.seconds >= 0.05 * (P - 1 - comm.rank) - 0.01, second.stats.seconds

# node-local rank: all ranks are on this machine
assert comm.node_size == comm.size and comm.node_rank == comm.rank
if comm.is_root:
    print("comm ok", comm.size)
sys.exit(0)
