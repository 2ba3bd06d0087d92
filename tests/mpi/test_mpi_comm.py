"""The collectives of mpidwe.parallel.comm against MPI's own, on jobs of 1 to 5 ranks.

Each test runs on ``Comm.world()`` and on ``COMM_SELF`` inside a job (a world of one among
other ranks: a collective that reached past its communicator would hang or count them). The
rank counts 4 and 5 put segment ends of the ring where neighbours once disagreed on their
chunk counts and hung; a hang now ends in the test's time limit, not in a stuck CI."""

import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from mpidwe.parallel.comm import Comm, latency_steps, ring_plan
from mpidwe.core.errors import EXIT_DIVERGED, ConfigError, InputError, MpidweError

CHUNK_BYTES = (1, 8, 16, 24, 100, 4 << 20)
# COMM_WORLD on 1 to 5 ranks, and COMM_SELF inside a job of 3: each launch of a job costs
# seconds, and a world of one on every rank count would repeat the same check
JOBS = [pytest.param("world", marks=pytest.mark.parallel(n), id=f"world-nprocs={n}") for n in (1, 2, 3, 4, 5)] + \
       [pytest.param("self", marks=pytest.mark.parallel(3), id="self-nprocs=3")]
on_every_job = pytest.mark.parametrize("mpi_comm", JOBS, indirect=True)


@pytest.fixture
def mpi_comm(request):
    return MPI.COMM_WORLD if request.param == "world" else MPI.COMM_SELF


@pytest.fixture
def comm(mpi_comm, monkeypatch):
    """The Comm under test, over ``mpi_comm``."""
    if mpi_comm is MPI.COMM_SELF:
        return Comm(MPI.COMM_SELF)
    monkeypatch.setenv("MPIDWE_FORCE_MPI", "1")      # a world of one is MPI's too, not Comm.serial()
    c = Comm.world()
    assert (c.rank, c.size) == (mpi_comm.Get_rank(), mpi_comm.Get_size())
    return c


def everyone_equal(comm: Comm, data: bytes) -> bool:
    return len(set(comm.allgather(data))) == 1


def ring_sizes(p: int, chunk_bytes: int, itemsize: int) -> list[int]:
    """Sizes that leave segments of unequal length and put segment ends on, just before and
    just after chunk boundaries: where neighbours once disagreed on their chunk counts."""
    step = max(1, chunk_bytes // itemsize)
    sizes = set(range(0, 41))
    if step <= 64:  # arrays of P * step * k items stay small
        sizes |= {p * step * k + d for k in (1, 2, 3) for d in (-1, 0, 1)}
    if step >= 8:  # few chunks: fast enough on an oversubscribed node
        sizes |= {1000, 12345}
    return sorted(sizes)


def expected_sent(comm: Comm, n: int, itemsize: int) -> int:
    # a rank sends every segment but its right neighbour's in the reduce-scatter and every
    # segment but the one two to its right in the allgather
    p = comm.size
    seg = np.diff(ring_plan(n, p, 1)[0])
    return itemsize * (2 * n - int(seg[(comm.rank + 1) % p]) - int(seg[(comm.rank + 2) % p]))


@pytest.mark.timeout(180)    # thousands of Sendrecv on 5 ranks sharing 2 cores
@on_every_job
def test_ring_allreduce_of_integers_is_mpi_allreduce_and_sends_the_planned_bytes(comm, mpi_comm):
    rng = np.random.default_rng(100 + comm.rank)
    for chunk_bytes in CHUNK_BYTES:
        for n in ring_sizes(comm.size, chunk_bytes, 8):
            ints = rng.integers(-1000, 1000, size=n).astype(np.int64)
            got = ints.copy()
            before = comm.stats.bytes_sent
            comm.ring_allreduce_(got, chunk_bytes=chunk_bytes)
            sent, planned = comm.stats.bytes_sent - before, expected_sent(comm, n, 8)
            assert sent == planned, f"{n} items in chunks of {chunk_bytes} B: sent {sent} B, the ring plan says {planned}"
            mpi_comm.Allreduce(MPI.IN_PLACE, ints, op=MPI.SUM)
            assert np.array_equal(got, ints), f"{n} items in chunks of {chunk_bytes} B: the sums differ"


@pytest.mark.timeout(180)    # thousands of Sendrecv on 5 ranks sharing 2 cores
@on_every_job
def test_ring_allreduce_of_floats_matches_allreduce_and_is_the_same_bits_on_every_rank(comm, mpi_comm):
    rng = np.random.default_rng(200 + comm.rank)
    for chunk_bytes in CHUNK_BYTES:
        shapes = [(n, 1) for n in ring_sizes(comm.size, chunk_bytes, 4)] + [(n, 3) for n in (0, 7, 1000)]
        for shape in shapes:
            floats = rng.standard_normal(shape).astype(np.float32)
            ring, library = floats.copy(), floats.copy()
            comm.ring_allreduce_(ring, chunk_bytes=chunk_bytes)
            mpi_comm.Allreduce(MPI.IN_PLACE, library, op=MPI.SUM)
            np.testing.assert_allclose(ring, library, rtol=1e-5, atol=1e-5, err_msg=f"{shape} {chunk_bytes}")
            assert everyone_equal(comm, ring.tobytes()), ("ring result differs between ranks", shape, chunk_bytes)


@on_every_job
def test_allgather_array_stacks_equal_blocks_in_rank_order(comm):
    stacked = comm.allgather_array(np.full((3, 2), comm.rank, dtype=np.float32))
    assert stacked.shape == (comm.size, 3, 2)
    assert np.array_equal(stacked, np.broadcast_to(np.arange(comm.size, dtype=np.float32)[:, None, None],
                                                   (comm.size, 3, 2)))
    assert comm.stats.bytes_sent == (comm.size - 1) * 3 * 2 * 4 and comm.stats.calls == 1


@on_every_job
def test_gatherv_rows_stacks_uneven_blocks_in_rank_order_on_the_root(comm):
    counts = [r % 3 for r in range(comm.size)]        # rank 0 and every third send none
    got = comm.gatherv_rows(np.full((counts[comm.rank], 2), comm.rank, dtype=np.float32), counts)
    if comm.is_root:
        assert np.array_equal(got, np.repeat(np.arange(comm.size), counts)[:, None] * np.ones((1, 2), np.float32))
        assert comm.stats.bytes_sent == 0
    else:
        assert got is None and comm.stats.bytes_sent == counts[comm.rank] * 2 * 4
    assert comm.stats.steps == (comm.size - 1).bit_length()


@on_every_job
def test_every_collective_counts_its_latency_steps(comm):
    """The steps the cluster model charges (benchmarks/scaling_perword.py) are the sum of
    each collective's rounds, counted where it is made."""
    p = comm.size
    comm.allgather_array(np.zeros(4, dtype=np.int64))                          # 32 P bytes: doubling
    comm.allreduce_(np.zeros(4096, dtype=np.uint8))                            # beyond 2 KB
    comm.alltoallv(np.zeros((p, 2), dtype=np.float32), np.ones(p, dtype=np.int64))   # with its counts
    comm.alltoallv(np.zeros((p, 2), dtype=np.float32), np.ones(p, dtype=np.int64), recv_counts=np.ones(p))
    comm.barrier()
    log = latency_steps("tree", p)
    assert comm.stats.steps == log + 2 * log + (p - 1 + log) + (p - 1) + log
    assert comm.stats.calls == 5


@on_every_job
def test_agree_raises_the_error_of_one_rank_on_every_rank(comm):
    def maybe_fail():
        if comm.rank == comm.size - 1:
            raise InputError("only the last rank fails")
        return comm.rank

    with pytest.raises(MpidweError, match="only the last rank fails") as info:
        comm.agree(maybe_fail)
    assert info.value.agreed
    assert comm.agree(lambda: comm.rank * 2) == comm.rank * 2      # and the ranks are still in step


@on_every_job
def test_on_root_runs_on_rank_0_and_its_result_and_its_error_reach_every_rank(comm):
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

    with pytest.raises(MpidweError, match="rank 0 says no") as info:
        comm.on_root(root_fails)
    assert info.value.agreed and info.value.exit_code == EXIT_DIVERGED
    assert comm.on_root(lambda: "still in step") == "still in step"


@on_every_job
def test_a_dup_runs_collectives_in_a_second_thread_and_barrier_sleeping_waits_for_the_last_rank(comm):
    # the sharded store's prefetch: collectives on a second communicator in another thread
    # while this thread's run on the first
    assert comm.thread_multiple
    p = comm.size
    second = comm.dup()
    got = {}

    def in_thread():
        time.sleep(0.05 * comm.rank)          # arrive at different times: the barrier must hold
        got["entered"] = time.monotonic()     # one clock for every process of the machine
        second.barrier_sleeping()
        got["left"] = time.monotonic()
        got["rows"], _ = second.alltoallv(np.full((p, 2), comm.rank, dtype=np.int64), np.ones(p, dtype=np.int64))

    thread = threading.Thread(target=in_thread)
    thread.start()
    main_side = comm.allgather(comm.rank * 10)          # meanwhile, on the first communicator
    thread.join()
    assert main_side == [r * 10 for r in range(p)]
    assert got["rows"][:, 0].tolist() == list(range(p))
    assert second.stats.calls == 2 and second.stats.seconds > 0
    # no rank left the barrier before the last one entered it (measured, not assumed from
    # the sleeps: on a loaded machine the ranks start the test up to a second apart)
    last_in = max(comm.allgather(got["entered"]))
    assert got["left"] >= last_in, f"left the barrier {last_in - got['left']:.4f} s before the last rank came"


@on_every_job
def test_every_rank_of_a_one_machine_job_is_node_local(comm):
    assert comm.node_size == comm.size and comm.node_rank == comm.rank
