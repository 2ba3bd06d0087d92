"""Comm in one process, and the ring plan; tests/mpi/test_mpi_comm.py runs the collectives on
jobs of 1 to 5 ranks."""

import numpy as np
import pytest

from mpidwe.parallel.comm import Comm, ring_plan
from mpidwe.core.errors import EXIT_DIVERGED, ConfigError, InputError


def test_serial_comm_collectives_are_identity():
    c = Comm.serial()
    a = np.arange(5, dtype=np.float32)
    assert c.allreduce_(a.copy()).tolist() == a.tolist()
    assert c.ring_allreduce_(a.copy()).tolist() == a.tolist()
    assert c.allgather(3) == [3] and c.bcast("x") == "x" and c.gather(1) == [1]
    stacked = c.allgather_array(a)
    assert stacked.shape == (1, 5) and stacked[0].tolist() == a.tolist()
    with pytest.raises(InputError):
        c.agree(lambda: (_ for _ in ()).throw(InputError("boom")))


def test_serial_on_root_calls_fn_once_and_keeps_its_error():
    c = Comm.serial()
    calls = []

    def fn(x, *, plus):
        calls.append(x)
        return x + plus

    assert c.on_root(fn, 40, plus=2) == 42
    assert c.on_root(fn, 1, plus=1, broadcast=False) == 2
    assert calls == [40, 1]

    def fails():
        err = ConfigError("no")
        err.exit_code = EXIT_DIVERGED
        raise err

    with pytest.raises(ConfigError) as info:
        c.on_root(fails)
    assert info.value.exit_code == EXIT_DIVERGED


@pytest.mark.parametrize("n_items, p, step_items", [
    (1_006_633 * 100, 12, (4 << 20) // 4),  # 1,006,633 x 100 float32 in 4 MiB chunks
    (13, 3, 4), (0, 3, 4), (1, 5, 1), (4, 4, 1), (4 * 4 * 3 + 1, 4, 4)])
def test_ring_plan_gives_every_rank_enough_chunks(n_items, p, step_items):
    # the chunk count is one number for all ranks, so ring neighbours make the same
    # number of Sendrecv calls; it must cover the longest segment and not more
    bounds, n_chunks = ring_plan(n_items, p, step_items)
    seg = np.diff(bounds)
    assert bounds[0] == 0 and bounds[-1] == n_items and seg.max() - seg.min() <= 1
    assert n_chunks == -(-int(seg.max()) // step_items)


def test_ring_plan_covers_segments_whose_own_chunk_counts_differ():
    # the case that hung with the default 4 MiB chunks: segments of 8 and of 9 chunks
    bounds, n_chunks = ring_plan(1_006_633 * 100, 12, 1 << 20)
    own = {-(-int(n) // (1 << 20)) for n in np.diff(bounds)}
    assert own == {8, 9} and n_chunks == 9

