import numpy as np
import pytest

from mpidwe.comm import Comm
from mpidwe.sync import Synchronizer, apply_sparse, average_divisor

from conftest import ROOT, run_mpi


def test_apply_sparse_adds_in_rank_order_and_returns_union():
    base = np.zeros((5, 2), dtype=np.float32)
    union = apply_sparse(base, [np.array([1, 3]), np.array([3, 4])],
                         [np.ones((2, 2), np.float32), 2 * np.ones((2, 2), np.float32)])
    assert union.tolist() == [1, 3, 4]
    assert base[:, 0].tolist() == [0, 1, 0, 3, 2]


def test_average_divisor():
    counts = np.array([0, 1, 2, 3])
    assert average_divisor(counts, 3, "touched").tolist() == [1, 1, 2, 3]
    assert average_divisor(counts, 3, "all").tolist() == [3, 3, 3, 3]


def test_serial_sync_only_clears_masks():
    p = [np.ones((3, 2), np.float32)]
    m = [np.ones(3, np.uint8)]
    Synchronizer(Comm.serial(), p, mode="dense").sync(p, m)
    assert p[0].sum() == 6 and m[0].sum() == 0


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_sync_modes_under_mpi(ranks):
    """dense == sparse == ring for the same updates, average divides as documented, and
    every rank ends bit-identical (tests/mpi/check_sync.py)."""
    proc = run_mpi(ranks, ["tests/mpi/check_sync.py"], cwd=str(ROOT))
    assert f"sync ok {ranks}" in proc.stdout
