"""Run under mpiexec -n P: the sync modes against each other and a serial reference."""

import numpy as np

from mpidwe.dist.comm import Comm
from mpidwe.dist.replicated import Synchronizer

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
    rows = np.union1d(rows, [3])           # row 3: touched by every rank
    delta = np.zeros((V, D), np.float32)
    delta[rows] = rng.standard_normal((len(rows), D)).astype(np.float32)
    mask = np.zeros(V, np.uint8)
    mask[rows] = 1
    return delta, mask


deltas = [update(k) for k in range(P)]
total = sum(d for d, _ in deltas)
touch_count = sum(m.astype(int) for _, m in deltas)


def run(mode, scale, allreduce="mpi"):
    param = start.copy()
    s = Synchronizer(comm, [param], mode=mode, scale=scale, allreduce=allreduce)
    delta, mask = deltas[r]
    param += delta
    mask = mask.copy()
    biggest = s.sync([param], [mask])
    assert mask.sum() == 0
    everyone = comm.allgather(param.tobytes())
    assert all(b == everyone[0] for b in everyone), f"{mode}: ranks differ after sync"
    assert np.array_equal(param, s.base[0])
    changed = touch_count > 0
    assert biggest == np.abs(param[changed]).max()
    assert s.stats.syncs == 1 and s.stats.seconds >= s.stats.comm_seconds > 0
    return param


for scale in (1, 2, P):
    expected = start + total / np.maximum(touch_count / 2, scale)[:, None]
    for mode, allreduce in (("sparse", "mpi"), ("dense", "mpi"), ("dense", "ring")):
        got = run(mode, scale, allreduce)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # a row one rank touched moves by that rank's change / scale: one lr-sized step,
    # since that rank trained at scale x lr; with scale = P a row every rank touched is
    # their mean, with a smaller scale at most twice it
    assert touch_count[7] == 1 and touch_count[3] == P
    np.testing.assert_allclose(got[7], start[7] + deltas[0][0][7] / scale, rtol=1e-6)
    np.testing.assert_allclose(got[3], start[3] + total[3] / max(scale, P / 2), rtol=1e-5, atol=1e-6)
avg = run("average", P)
np.testing.assert_allclose(avg, start + total / P, rtol=1e-5, atol=1e-6)

# sparse sends fewer bytes than dense for a sparse update
comm.stats.bytes_sent = 0
run("sparse", P)
sparse_bytes = comm.stats.bytes_sent
comm.stats.bytes_sent = 0
run("dense", P)
assert sparse_bytes < comm.stats.bytes_sent, (sparse_bytes, comm.stats.bytes_sent)
if r == 0:
    print("sync ok", P)
