"""``--exchange torch`` (parallel/torchdist.py, gloo on CPU torch here): the device store's rows go
between ranks over torch.distributed and are combined by the rule in torch ops. It gives the
model the MPI exchange gives (bit for bit with --sync sparse at any rank count, and with
every mode at 2 ranks; to float32 rounding for the all-reduce modes beyond, where the sum's
order is the backend's), every rank holds the same parameters, and nothing on that path
becomes host numpy (spied on: a conversion there fails the test)."""

import contextlib
import hashlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mpidwe.core.config import TrainConfig, parse_command  # noqa: E402
from mpidwe.parallel.comm import Comm  # noqa: E402
from mpidwe.parallel.device import DeviceStore  # noqa: E402
from mpidwe.parallel.rule import lr_scale  # noqa: E402
from mpidwe.parallel.store import StoreSetup  # noqa: E402
from mpidwe.train import run  # noqa: E402

from conftest import made_once, make_demo_corpus  # noqa: E402


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return made_once("MPIDWE_TEST_DEMO_300K_5",
                     lambda: make_demo_corpus(tmp_path_factory.mktemp("demo"), tokens=300_000, seed=5))


pytestmark = pytest.mark.usefixtures("torch_one_thread")


@contextlib.contextmanager
def host_conversions():
    """Counts every Tensor -> host conversion (``.numpy()``, ``.cpu()``, ``np.asarray(t)``)
    made inside the block; each still does its work."""
    seen = []
    saved = {name: getattr(torch.Tensor, name) for name in ("numpy", "cpu", "__array__")}

    def spy(name):
        def wrapper(self, *args, **kwargs):
            seen.append(name)
            return saved[name](self, *args, **kwargs)
        return wrapper

    for name in saved:
        setattr(torch.Tensor, name, spy(name))
    try:
        yield seen
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)


def digest(*arrays) -> str:
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


def device_store(comm, sync: str, exchange: str, w_in, w_out) -> DeviceStore:
    cfg = TrainConfig(out="unused", kernel="torch", device="cpu", sync=sync, exchange=exchange)
    scale = lr_scale(sync, comm.size, cfg.lr, cfg.max_local_lr)
    return DeviceStore(comm, w_in.copy(), w_out.copy(), StoreSetup(cfg, scale, "cpu", len(w_out)))


def train_a_round(store: DeviceStore, rng) -> None:
    """What a round of the kernel leaves: some rows changed and flagged (overlapping between
    ranks, some changed by exactly 0 or to -0.0), the rest untouched."""
    for param, touched in zip(store.params, store.touched):
        rows = rng.choice(len(param), size=rng.integers(0, len(param) // 2), replace=False)
        change = rng.normal(0, 0.01, (len(rows), param.shape[1])).astype(np.float32)
        change[::7] = 0.0
        param[torch.from_numpy(rows)] += torch.from_numpy(change)
        if len(rows):
            param[int(rows[0]), 0] = -0.0
        touched[torch.from_numpy(rows)] = 1


@pytest.mark.timeout(300)
@pytest.mark.parallel([2, 3])
def test_the_torch_exchange_combines_as_the_mpi_exchange_without_host_numpy():
    comm = Comm.world()
    rng = np.random.default_rng(0)
    w_in = rng.normal(0, 0.1, (300, 8)).astype(np.float32)
    w_out = rng.normal(0, 0.1, (200, 8)).astype(np.float32)
    for sync in ("sparse", "dense", "average"):
        by_mpi = device_store(comm, sync, "mpi", w_in, w_out)
        by_torch = device_store(comm, sync, "torch", w_in, w_out)
        assert by_torch.exchange is not None and by_torch.exchange.group.backend == "gloo"
        for rnd in range(4):
            for store in (by_mpi, by_torch):
                train_a_round(store, np.random.default_rng([rnd, comm.rank]))
            with host_conversions() as seen_mpi:
                biggest_mpi = by_mpi.sync(rnd)
            with host_conversions() as seen_torch:
                biggest_torch = by_torch.sync(rnd)
            assert seen_mpi, "the spy sees the MPI exchange's host copies (else it proves nothing)"
            assert seen_torch == [], f"--exchange torch staged through the host: {seen_torch}"
            assert not any(t.any() for t in by_torch.touched)
            got = [p.clone() for p in by_torch.params]
            want = [p.clone() for p in by_mpi.params]
            mine = digest(*[p.numpy() for p in got])
            assert len(set(comm.allgather(mine))) == 1, f"ranks differ after --exchange torch --sync {sync}"
            if sync == "sparse" or comm.size == 2:
                assert all(torch.equal(a, b) for a, b in zip(got, want)), \
                    f"--sync {sync} at {comm.size} ranks: not the MPI exchange's model bit for bit"
                assert biggest_torch == biggest_mpi
            else:     # the all-reduce's order of three terms is the backend's
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
                assert biggest_torch == pytest.approx(biggest_mpi, rel=1e-6)
            if sync != "sparse" or comm.size == 2:    # bring them together for the next round
                for a, b in zip(by_torch.params, by_mpi.params):
                    a.copy_(b)
                for a, b in zip(by_torch.exchange.base, by_mpi.params):
                    a.copy_(b)
        assert by_torch.stats.syncs == 4 and by_torch.stats.bytes_sent > 0
        assert by_torch.extra_comm_bytes() == by_torch.stats.bytes_sent
        by_torch.close()
        by_mpi.close()


def train_here(comm: Comm, demo, out, *flags: str):
    cfg = parse_command(TrainConfig, ["--corpus", str(demo / "corpus.h5"), "--out", str(out), "--dim", "16",
                                      "--sync-every", "20000", "--epochs", "1", "--threads", "1", "--no-progress",
                                      "--kernel", "torch", "--device", "cpu", *flags], prog="test", description="")
    res = run(cfg, comm, log=None)
    return digest(res.w_in, res.w_out), res


@pytest.mark.timeout(400)
@pytest.mark.parallel([2, 3])
def test_a_run_with_the_torch_exchange_trains_the_mpi_exchanges_model(demo, job_tmp, monkeypatch):
    comm = Comm.world()
    conversions = []
    real_sync = DeviceStore.sync

    def spied_sync(self, rnd):
        with host_conversions() as seen:
            biggest = real_sync(self, rnd)
        conversions.append((self.exchange is not None, len(seen)))
        return biggest

    monkeypatch.setattr(DeviceStore, "sync", spied_sync)
    by_mpi, _ = train_here(comm, demo, job_tmp / "mpi", "--exchange", "mpi")
    by_torch, res = train_here(comm, demo, job_tmp / "torch", "--exchange", "torch")
    assert len(set(comm.allgather(by_torch))) == 1
    assert by_torch == by_mpi, f"--exchange torch at {comm.size} ranks trained another model than --exchange mpi"
    torch_syncs = [n for on_torch, n in conversions if on_torch]
    assert len(torch_syncs) == res.config["rounds"] > 1 and set(torch_syncs) == {0}, conversions
    assert all(n > 0 for on_torch, n in conversions if not on_torch)
    if comm.is_root:
        last = res.metrics[-1]
        assert last["exchange"] == "torch.distributed (gloo)"
        assert min(last["sync_bytes"]) > 0 and min(last["comm_bytes"]) >= min(last["sync_bytes"])
