import numpy as np
import pytest

from mpidwe.comm import Comm
from mpidwe.errors import InputError

from conftest import run_mpi


def test_serial_comm_collectives_are_identity():
    c = Comm.serial()
    a = np.arange(5, dtype=np.float32)
    assert c.allreduce_(a.copy()).tolist() == a.tolist()
    assert c.ring_allreduce_(a.copy()).tolist() == a.tolist()
    assert c.allgather(3) == [3] and c.bcast("x") == "x" and c.gather(1) == [1]
    out, rows = c.allgatherv(a)
    assert rows == [5] and out.tolist() == a.tolist()
    with pytest.raises(InputError):
        c.agree(lambda: (_ for _ in ()).throw(InputError("boom")))


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_ring_allreduce_equals_mpi_allreduce(ranks):
    proc = run_mpi(ranks, ["tests/mpi/check_comm.py"], cwd=str(__import__("conftest").ROOT))
    assert f"comm ok {ranks}" in proc.stdout
