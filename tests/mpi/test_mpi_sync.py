"""The sync modes against each other and a dense reference, on jobs of 2, 3 and 4 ranks:
dense == sparse == ring == auto for the same updates, rows divided as documented, every rank ends
bit-identical. (A world of one never combines anything: tests/test_sync.py has it.)"""

import numpy as np
import pytest

from mpidwe.parallel.comm import Comm
from mpidwe.parallel.replicated import Synchronizer

# on each test, not as pytestmark: mpi-pytest reads the marks of the function
on_2_3_4_ranks = pytest.mark.parallel([2, 3, 4])

V, D = 50, 4
TRANSPORTS = (("sparse", "mpi"), ("dense", "mpi"), ("dense", "ring"), ("auto", "mpi"))


@pytest.fixture
def comm():
    # like every fixture of a parallel test, this one runs in the serial pytest too (where
    # it is a world of one) before the ranks start: no checks here
    return Comm.world()


@pytest.fixture
def start():
    return np.random.default_rng(0).standard_normal((V, D)).astype(np.float32)


def update(rank):
    """Rank ``rank``'s local change and its touched rows, known to every rank (for the
    reference): row 7 is touched by rank 0 only, row 3 by every rank."""
    rng = np.random.default_rng(10 + rank)
    rows = rng.choice(V, size=12, replace=False)
    rows[0] = 7 if rank == 0 else rows[0]
    rows = np.unique(rows[rows != 7] if rank else rows)
    rows = np.union1d(rows, [3])
    delta = np.zeros((V, D), np.float32)
    delta[rows] = rng.standard_normal((len(rows), D)).astype(np.float32)
    mask = np.zeros(V, np.uint8)
    mask[rows] = 1
    return delta, mask


def all_updates(comm):
    assert comm.size > 1
    deltas = [update(k) for k in range(comm.size)]
    total = sum(d for d, _ in deltas)
    touch_count = sum(m.astype(int) for _, m in deltas)
    assert touch_count[7] == 1 and touch_count[3] == comm.size
    return deltas, total, touch_count


def sync_once(comm, start, updates, mode, scale, allreduce="mpi"):
    """One sync of every rank's update from ``start``; checks what holds for every mode."""
    deltas, _, touch_count = updates
    param = start.copy()
    s = Synchronizer(comm, [param], mode=mode, scale=scale, allreduce=allreduce)
    delta, mask = deltas[comm.rank]
    param += delta
    mask = mask.copy()
    biggest = s.sync([param], [mask])
    assert mask.sum() == 0, "the touched mask is cleared"
    assert len(set(comm.allgather(param.tobytes()))) == 1, f"{mode}/{allreduce}: ranks differ after sync"
    assert np.array_equal(param, s.base[0]), "the base copy is the synced parameters"
    assert biggest == np.abs(param[touch_count > 0]).max()
    assert s.stats.syncs == 1 and s.stats.seconds >= s.stats.comm_seconds > 0
    return param


@on_2_3_4_ranks
def test_every_transport_divides_each_row_by_max_of_half_its_senders_and_the_scale(comm, start):
    updates = all_updates(comm)
    _, total, touch_count = updates
    for scale in (1, 2, comm.size):
        expected = start + total / np.maximum(touch_count / 2, scale)[:, None]
        for mode, allreduce in TRANSPORTS:
            got = sync_once(comm, start, updates, mode, scale, allreduce)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"{mode}/{allreduce} scale {scale}")


@on_2_3_4_ranks
def test_a_row_one_rank_touched_moves_by_its_change_over_the_scale_and_a_shared_row_by_the_mean(
        comm, start):
    # one lr-sized step, since that rank trained at scale x lr; with scale = P a row every
    # rank touched is their mean, with a smaller scale at most twice it
    updates = all_updates(comm)
    deltas, total, _ = updates
    for scale in (1, 2, comm.size):
        for mode, allreduce in TRANSPORTS:
            got = sync_once(comm, start, updates, mode, scale, allreduce)
            np.testing.assert_allclose(got[7], start[7] + deltas[0][0][7] / scale, rtol=1e-6)
            np.testing.assert_allclose(got[3], start[3] + total[3] / max(scale, comm.size / 2), rtol=1e-5, atol=1e-6)


@on_2_3_4_ranks
def test_average_mode_is_the_plain_mean(comm, start):
    updates = all_updates(comm)
    _, total, _ = updates
    got = sync_once(comm, start, updates, "average", comm.size)
    np.testing.assert_allclose(got, start + total / comm.size, rtol=1e-5, atol=1e-6)


@on_2_3_4_ranks
def test_sparse_sends_fewer_bytes_than_dense_for_a_sparse_update(comm, start):
    updates = all_updates(comm)
    sent = {}
    for mode in ("sparse", "dense"):
        before = comm.stats.bytes_sent
        sync_once(comm, start, updates, mode, comm.size)
        sent[mode] = comm.stats.bytes_sent - before
    assert 0 < sent["sparse"] < sent["dense"], sent


@on_2_3_4_ranks
def test_auto_goes_dense_once_the_ranks_blocks_would_cover_the_rows_and_gives_that_mode_bit_for_bit(comm, start):
    # every rank touches k rows; the allgather would walk P x k rows against V for dense
    for k in (2, V // comm.size, V):
        rows = (np.arange(k) + 5 * comm.rank) % V
        results = {}
        for mode in ("sparse", "dense", "auto"):
            param, mask = start.copy(), np.zeros(V, np.uint8)
            param[rows] += np.float32(0.5 + comm.rank)
            mask[rows] = 1
            s = Synchronizer(comm, [start.copy()], mode=mode, scale=comm.size)
            before = comm.stats.bytes_sent
            s.sync([param], [mask])
            results[mode] = (param, comm.stats.bytes_sent - before, s.stats.dense_syncs)
        dense = comm.size * k >= V
        twin = results["dense" if dense else "sparse"]
        assert np.array_equal(results["auto"][0], twin[0]), (k, dense)
        extra = results["auto"][1] - twin[1]                                      # dense: + the counts' allgather
        assert (0 < extra <= 8 * comm.size) if dense else extra == 0, (k, extra)
        assert results["auto"][2] == int(dense) and results["dense"][2] == results["sparse"][2] == 0
