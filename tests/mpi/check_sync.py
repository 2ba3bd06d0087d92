"""Run under mpiexec -n P: the sync modes against each other and a serial reference."""

import numpy as np

from mpidwe.comm import Comm
from mpidwe.sync import Synchronizer

comm = Comm.world()
P, r = comm.size, comm.rank
V, D = 50, 4
start = np.random.default_rng(0).standard_normal((V, D)).astype(np.float32)

# every rank's local update, known to all (for the reference)
def update(rank):
    rng = np.random.default_rng(10 + rank)
    rows = rng.choice(V, size=12, replace=False)
    rows[0] = 7 if rank == 0 else rows[0]  # row 7: touched by rank 0 only
    rows = np.unique(rows[rows != 7] if rank else rows)
    delta = np.zeros((V, D), np.float32)
    delta[rows] = rng.standard_normal((len(rows), D)).astype(np.float32)
    mask = np.zeros(V, np.uint8)
    mask[rows] = 1
    return delta, mask

deltas = [update(k) for k in range(P)]
expected_sum = start + sum(d for d, _ in deltas)
touch_count = sum(m.astype(int) for _, m in deltas)


def run(mode, allreduce="mpi", rows="touched"):
    param = start.copy()
    s = Synchronizer(comm, [param], mode=mode, allreduce=allreduce, average_rows=rows)
    delta, mask = deltas[r]
    param += delta
    mask = mask.copy()
    s.sync([param], [mask])
    assert mask.sum() == 0
    everyone = comm.allgather(param.tobytes())
    assert all(b == everyone[0] for b in everyone), f"{mode}: ranks differ after sync"
    assert np.array_equal(param, s.base[0])
    return param

dense = run("dense")
sparse = run("sparse")
ring = run("dense", "ring")
np.testing.assert_allclose(dense, expected_sum, rtol=1e-6, atol=1e-6)
np.testing.assert_allclose(sparse, expected_sum, rtol=1e-6, atol=1e-6)
np.testing.assert_allclose(ring, expected_sum, rtol=1e-6, atol=1e-6)
avg_all = run("average", rows="all")
np.testing.assert_allclose(avg_all, start + sum(d for d, _ in deltas) / P, rtol=1e-5, atol=1e-6)
avg_touched = run("average", rows="touched")
np.testing.assert_allclose(avg_touched, start + sum(d for d, _ in deltas) / np.maximum(touch_count, 1)[:, None],
                           rtol=1e-5, atol=1e-6)
# a row touched by rank 0 alone keeps rank 0's full change with "touched" averaging
assert touch_count[7] == 1
np.testing.assert_allclose(avg_touched[7], start[7] + deltas[0][0][7], rtol=1e-6)
# sparse sends fewer bytes than dense for a sparse update
comm.stats.bytes_sent = 0
run("sparse")
sparse_bytes = comm.stats.bytes_sent
comm.stats.bytes_sent = 0
run("dense")
assert sparse_bytes < comm.stats.bytes_sent, (sparse_bytes, comm.stats.bytes_sent)
if r == 0:
    print("sync ok", P)
