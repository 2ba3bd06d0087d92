"""Tiered syncs and encoded rows under MPI: a sync that combines only some rows keeps the
others' changes (nothing is lost), a full sync after it gives what one full sync of every
change gives, encoded all-reduces leave every rank bit-identical, and training with tiers
ends with every rank holding the same parameters."""

import numpy as np
import pytest

from mpidwe.parallel import wire
from mpidwe.parallel.comm import Comm, latency_steps
from mpidwe.parallel.replicated import Synchronizer, rest_of

from test_mpi_train import demo, train_here  # noqa: F401  (demo: the module's corpus fixture)

V, D = 60, 8


def local_change(rank: int):
    """Rank ``rank``'s change: rows 0-9 (hot), 30 (only rank 0) and 55 (every rank)."""
    rng = np.random.default_rng(100 + rank)
    rows = np.array([*range(10), 55] + ([30] if rank == 0 else []))
    delta = np.zeros((V, D), np.float32)
    delta[rows] = rng.standard_normal((len(rows), D)).astype(np.float32)
    mask = np.zeros(V, np.uint8)
    mask[rows] = 1
    return delta, mask


@pytest.mark.parallel([2, 3, 4])
@pytest.mark.parametrize("mode", ["sparse", "dense", "auto"])
def test_a_partial_sync_keeps_the_other_rows_changes_until_a_full_one_combines_them(mode):
    comm = Comm.world()
    start = np.random.default_rng(0).standard_normal((V, D)).astype(np.float32)
    delta, mask = local_change(comm.rank)

    once, once_mask = start.copy(), mask.copy()                # one full sync of everything
    first = Synchronizer(comm, [once], mode=mode, scale=2)     # its base: the start
    once += delta
    first.sync([once], [once_mask])

    # auto may send the span dense and the full sync sparse (or the other way round): the
    # same sums in another order beyond 2 ranks, so equal to float32 rounding only
    same = (np.testing.assert_array_equal if mode != "auto" or comm.size == 2
            else lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6))
    tiered, tiered_mask = start.copy(), mask.copy()
    s = Synchronizer(comm, [tiered], mode=mode, scale=2)
    tiered += delta
    s.sync([tiered], [tiered_mask], [(0, 10)])                 # the hot rows only
    assert not tiered_mask[:10].any() and tiered_mask[55] == 1 and tiered_mask[30] == (comm.rank == 0)
    np.testing.assert_array_equal(tiered[10:], (start + delta)[10:])      # waiting, untouched
    same(tiered[:10], once[:10])
    s.sync([tiered], [tiered_mask])                            # the full sync
    assert not tiered_mask.any()
    same(tiered, once)
    assert len(set(comm.allgather(tiered.tobytes()))) == 1

    # a flush syncs only the rows outside the last span (rest_of): the same bits as a
    # sync of every row, in fewer rows
    rest, rest_mask = start.copy(), mask.copy()
    r = Synchronizer(comm, [rest], mode=mode, scale=2)
    rest += delta
    r.sync([rest], [rest_mask], [(0, 10)])
    assert rest_of([(0, 10)], [V]) == [(10, V)] and rest_of([(V - 10, V)], [V]) == [(0, V - 10)]
    r.sync([rest], [rest_mask], rest_of([(0, 10)], [V]))
    assert not rest_mask.any()
    if mode != "auto":        # auto: the rest may travel sparse where every row went dense
        np.testing.assert_array_equal(rest, tiered)
    same(rest, once)
    assert len(set(comm.allgather(rest.tobytes()))) == 1


@pytest.mark.parallel([2, 3, 4])
@pytest.mark.parametrize("name", ["bf16", "int8", "int4"])
def test_an_encoded_all_reduce_is_bit_identical_on_every_rank_and_close_to_the_sum(name):
    """Each value is encoded twice (by its sender and by its segment's owner), whatever P."""
    comm = Comm.world()
    rng = np.random.default_rng(7 + comm.rank)
    n = 1000 + 3       # more rows than ranks and not a multiple of them
    mine = rng.standard_normal((n, D)).astype(np.float32)
    every = np.stack(comm.allgather(mine))
    got = mine.copy()
    before = comm.stats.bytes_sent
    comm.allreduce_rows_encoded_(got, name)
    sent = comm.stats.bytes_sent - before
    assert len(set(comm.allgather(got.tobytes()))) == 1
    in_pieces = mine.copy()             # row ranges (the threads' split) give the same bits
    comm.allreduce_rows_encoded_(in_pieces, name, split=lambda m, work: [
        work(int(a), int(b)) for a, b in zip(np.linspace(0, m, 4)[:-1], np.linspace(0, m, 4)[1:])])
    assert in_pieces.tobytes() == got.tobytes()
    exact = every.sum(axis=0)
    rel = {"bf16": 2 ** -8, "int8": 0.5 / 127, "int4": 0.5 / 7}[name]
    # the senders' rounding (P values, each within rel of its row's peak), then the owner's
    peaks = np.abs(every).max(axis=2).sum(axis=0)[:, None]
    assert (np.abs(got - exact) <= rel * (peaks + np.abs(exact).max(axis=1, keepdims=True) * 1.01) + 1e-6).all()
    assert sent == pytest.approx(2 * (comm.size - 1) / comm.size * n * wire.row_bytes(name, D), rel=0.01)


@pytest.mark.parallel([2, 3, 4])
@pytest.mark.parametrize("name", ["bf16", "int4"])
@pytest.mark.parametrize("count_type", [np.uint8, np.int32])        # int32: the counts from 256 ranks on
def test_parts_travel_together_as_the_same_bytes_as_one_array_at_a_time(name, count_type):
    """Comm.reduce_parts_encoded (a sync's two matrices and their touch counts in one
    all-to-all and one allgather) gives each part the bytes reduce_rows_encoded gives it
    alone, the counts' sum, and the same owner residuals, in 2 collectives instead of 3 each."""
    comm = Comm.world()
    rng = np.random.default_rng(11 + comm.rank)
    parts, alone = [], []
    for n in (1000 + 3, 57):           # unequal parts, one shorter than a segment per rank at 4
        arr, base = rng.standard_normal((n, D)).astype(np.float32), rng.standard_normal((n, D)).astype(np.float32)
        touched = (rng.random(n) < 0.5).astype(np.uint8)
        fed = ((np.zeros((n, D), np.float32), touched), (np.zeros((n, D), np.float32), None)) if name == "int4" \
            else (None, None)
        parts.append((arr, base, touched.astype(count_type), fed[0], fed[1]))
        counts = comm.allreduce_(touched.astype(count_type))
        owner = None if fed[1] is None else (np.zeros((n, D), np.float32), (counts != 0).view(np.uint8))
        own_fed = None if fed[0] is None else (np.zeros((n, D), np.float32), touched)
        alone.append((comm.reduce_rows_encoded(arr, name, minus=base, feedback=own_fed, owner_feedback=owner),
                      counts, own_fed, owner))
    calls = comm.stats.calls
    together = comm.reduce_parts_encoded(parts, name)
    assert comm.stats.calls - calls == 2
    for (every, bounds, counts), ((every1, bounds1), counts1, own_fed, owner), part in zip(together, alone, parts):
        assert np.array_equal(bounds, bounds1) and np.array_equal(counts, counts1) and counts.dtype == count_type
        for s in range(comm.size):
            k = int(bounds[s + 1] - bounds[s])
            assert every[s, :k].tobytes() == every1[s, :k].tobytes()
        if own_fed is not None:
            assert np.array_equal(part[3][0], own_fed[0]) and np.array_equal(part[4][0], owner[0])


@pytest.mark.parallel([2, 3])
@pytest.mark.parametrize("name", ["int8", "int4"])
def test_error_feedback_moves_what_the_encoding_rounds_away_and_keeps_the_ranks_identical(name):
    """--wire-feedback: each rank adds to a row's change what its last encoding of that row
    left out. A change whose small values round to 0 at every sync (int4: below 1/14 of the
    row's largest) moves them only with feedback, near the exact mean; the ranks stay
    bit-identical after every sync and with 1 or 3 threads; drop_feedback forgets it."""
    comm = Comm.world()
    p, syncs, n = comm.size, 300, 2000
    start = np.zeros((n, D), np.float32)
    step = np.full((n, D), 0.003 * (1 + comm.rank), np.float32)    # small next to the first column
    step[:, 0] = 1.0
    mask = np.ones(n, np.uint8)
    ran = {}
    for feedback, threads in [(False, 1), (True, 1), (True, 3)]:
        param = start.copy()
        s = Synchronizer(comm, [param], mode="dense", scale=p, wire=name, threads=threads)
        if feedback:
            s.keep_residuals()
        assert s.feedback == feedback and len(s.residual) == int(feedback)
        for _ in range(syncs):
            param += step
            s.sync([param], [mask.copy()])
            assert len(set(comm.allgather(param.tobytes()))) == 1
        ran[feedback, threads] = param.copy()
        if feedback:
            assert all(r.any() for r in s.residual[0])
            s.drop_feedback()
            assert not any(r.any() for r in s.residual[0])
    exact = syncs * np.mean([0.003 * (1 + r) for r in range(p)])   # every rank touched it: the mean
    assert ran[True, 1].tobytes() == ran[True, 3].tobytes()
    # what still waits: half a level of each sender's encoding and of the owner's, over the mean
    level = 1.0 / (127 if name == "int8" else 7)
    assert np.abs(ran[True, 1][:, 1:] - exact).max() <= 1.05 * level
    assert exact > 5 * level
    if name == "int4":
        assert np.abs(ran[False, 1][:, 1:] - exact).max() > 0.5 * exact    # rounded away, sync after sync
    np.testing.assert_allclose(ran[True, 1][:, 0], syncs, rtol=1e-5)


@pytest.mark.timeout(400)
@pytest.mark.parallel([3])
def test_training_in_tiers_leaves_the_ranks_identical_and_sends_less(demo, job_tmp):  # noqa: F811
    comm = Comm.world()
    flags = ("--dim", "16", "--sync-every", "5000", "--epochs", "1")
    _, plain = train_here(comm, demo, job_tmp / "plain", "dense", *flags, "--wire", "fp32")   # every row, float32
    for sync, extra in [("sparse", ()), ("dense", ("--wire", "int8"))]:
        _, tiered = train_here(comm, demo, job_tmp / f"tiers-{sync}", sync, *flags,
                               "--sync-full", "8", "--sync-hot", "64", *extra)
        if comm.is_root:
            last, base = tiered.metrics[-1], plain.metrics[-1]
            assert sum(last["sync_bytes"]) < 0.5 * sum(base["sync_bytes"]), (sync, last["sync_bytes"])
            assert last["loss"] < tiered.metrics[0]["loss"]
            # the latency steps the cluster model charges, 2 a collective at 3 ranks (log2 and
            # P - 1 agree there): sparse, one allgather of both matrices' row counts and two
            # per matrix (rows, values); dense, both matrices and their touch counts in one
            # all-to-all and one allgather
            assert latency_steps("tree", 3) == latency_steps("alltoall", 3) == 2
            assert last["sync_steps"] == last["syncs"] * (10 if sync == "sparse" else 4), (sync, last["sync_steps"])


@pytest.mark.parallel([2, 3])
@pytest.mark.parametrize("mode,wire_name", [("sparse", "fp32"), ("dense", "fp32"), ("dense", "int8"), ("auto", "int8"),
                                             ("dense", "int4"), ("dense", "bf16")])
def test_the_array_work_on_several_threads_gives_the_same_bits(mode, wire_name):
    """Row ranges per thread: each row is computed as on one thread, in rank order."""
    comm = Comm.world()
    n = 5000                                   # enough rows for every thread to get a range
    rng = np.random.default_rng(50 + comm.rank)
    start = np.random.default_rng(1).standard_normal((n, D)).astype(np.float32)
    delta = rng.standard_normal((n, D)).astype(np.float32)
    mask = (rng.random(n) < 0.3).astype(np.uint8)
    delta[mask == 0] = 0
    got = {}
    for threads in (1, 3):
        param = start.copy()
        s = Synchronizer(comm, [param], mode=mode, scale=2, wire=wire_name, threads=threads)
        param += delta
        biggest = s.sync([param], [mask.copy()])
        got[threads] = (param.tobytes(), biggest, s.changed_rows[0].tobytes())
    assert got[1] == got[3]
    assert len(set(comm.allgather(got[3][0]))) == 1


@pytest.mark.timeout(400)
@pytest.mark.parallel([2, 3])
def test_an_overlapped_exchange_is_deterministic_leaves_the_ranks_identical_and_learns(demo, job_tmp):  # noqa: F811
    comm = Comm.world()
    flags = ("--dim", "16", "--sync-every", "5000", "--epochs", "1", "--eval-every", "100000",
             "--eval-sim", str(demo / "demo-similarity.tsv"))
    runs = {}
    for name, extra in [("a", ("--overlap",)), ("b", ("--overlap",)), ("plain", ()),
                        ("tiers", ("--overlap", "--wire", "int8", "--sync-full", "4", "--sync-hot", "64"))]:
        runs[name] = train_here(comm, demo, job_tmp / name, "dense", *flags, *extra)
    assert runs["a"][0] == runs["b"][0], "an overlapped run depends on timing"
    assert runs["a"][0] != runs["plain"][0], "the exchange did not land one round late"
    if comm.is_root:
        for name, (_, res) in runs.items():
            first, last = res.metrics[0], res.metrics[-1]
            assert last["loss"] < first["loss"], name
            assert min(last["sync_bytes"]) > 0 and min(last["comm_bytes"]) >= min(last["sync_bytes"]), name
        quality = {n: r.metrics[-1]["eval"] for n, (_, r) in runs.items()}
        sim = {n: next(v for k, v in q.items() if k.startswith("sim:")) for n, q in quality.items()}
        assert sim["a"] > sim["plain"] - 0.15, sim     # one round of staleness: 0.70 against 0.77 at 2 ranks


@pytest.mark.timeout(400)
@pytest.mark.parallel([3])
def test_the_defaults_combine_in_tiers_as_int4_from_the_rank_count_that_turns_them_on(demo, job_tmp,  # noqa: F811
                                                                                       monkeypatch):
    """From TIERS_AUTO_MIN_RANKS ranks on (8; lowered to 3 here, the rest unchanged) a run
    with no sync flags combines in tiers of 64 x P hot rows with int4 rows: config.json says
    so, the interval is at most 16 ranks', the ranks end bit-identical, the model is that of
    explicit tiers with the same settings, and at the same interval every row at every sync
    sends more than twice the bytes."""
    import mpidwe.core.config as config
    from mpidwe.train.plan import auto_sync_every

    comm = Comm.world()
    monkeypatch.setattr(config, "TIERS_AUTO_MIN_RANKS", comm.size)
    flags = ("--dim", "16", "--epochs", "1")
    auto_digest, auto = train_here(comm, demo, job_tmp / "auto", "auto", *flags)
    assert auto.config["sync_tiers"] == dict(full=config.TIERS_AUTO_FULL, hot=64 * comm.size, wire="int4")
    vocab = auto.config["vocab_size"]
    assert auto.config["sync_every"] == auto_sync_every(vocab, comm.size, tiered=True) < auto_sync_every(vocab, comm.size)
    given = ("--sync-full", str(config.TIERS_AUTO_FULL), "--sync-hot", str(64 * comm.size), "--wire", "int4",
             "--sync-every", str(auto.config["sync_every"]))
    given_digest, given_run = train_here(comm, demo, job_tmp / "given", "auto", *flags, *given)
    assert auto_digest == given_digest, "the automatic tiers are the explicit ones"
    monkeypatch.setattr(config, "TIERS_AUTO_MIN_RANKS", comm.size + 1)           # one rank short: off
    _, off = train_here(comm, demo, job_tmp / "off", "auto", *flags, "--sync-every", str(auto.config["sync_every"]))
    assert off.config["sync_tiers"] is None and off.config["rounds"] == auto.config["rounds"]
    if comm.is_root:
        sent = lambda res: sum(res.metrics[-1]["sync_bytes"]) / sum(res.metrics[-1]["words_rank"])  # noqa: E731
        assert sent(auto) == sent(given_run) < 0.5 * sent(off), (sent(auto), sent(off))


@pytest.mark.parallel([2, 3])
@pytest.mark.parametrize("mode,wire_name", [("auto", "int4"), ("sparse", "fp32"), ("dense", "int8")])
def test_the_device_store_combines_in_tiers_as_the_host_synchronizer_does(mode, wire_name):
    """The torch kernel's store (parameters on the device; CPU torch here) in tiers: each
    sync brings its spans' rows down, combines them on the host and sends the touched ones
    back, so the device holds what a Synchronizer on host arrays computes from the same
    changes and spans, bit for bit, sync after sync; rows outside a span keep their change
    and their touched flag on the device until a sync (here the flush) combines them."""
    pytest.importorskip("torch")
    import torch

    from mpidwe.core.config import TrainConfig
    from mpidwe.parallel.device import DeviceStore
    from mpidwe.parallel.replicated import Tiers
    from mpidwe.parallel.store import StoreSetup

    comm = Comm.world()
    cfg = TrainConfig(corpus="c.h5", out="o", kernel="torch", device="cpu", sync=mode, wire=wire_name,
                      sync_full=4, sync_hot=10)
    tiers = dict(full=4, hot=10, wire=wire_name)
    start = [np.random.default_rng(k).standard_normal((V, D)).astype(np.float32) for k in (0, 1)]
    store = DeviceStore(comm, start[0].copy(), start[1].copy(), StoreSetup(cfg, 2, "cpu", V, 1, tiers))
    ref = [s.copy() for s in start]
    sync = Synchronizer(comm, ref, mode=mode, scale=2, wire=wire_name, by_bytes=True)
    if wire_name in ("int8", "int4"):
        sync.keep_residuals()
    assert store.syncer.feedback == sync.feedback
    schedule = Tiers([V, V], V, 10, 4, [False, False])
    ref_masks = [np.zeros(V, np.uint8) for _ in ref]
    down = up = 0                     # the copies the store reports: flags and span rows down,

    def copies(spans):                # the rows any rank touched (and their int64 ids) up
        return (2 * V + sum((hi - lo) * D * 4 for lo, hi in spans),
                sum(len(rows) * (8 + 4 * D) for rows in sync.changed_rows))

    for rnd in range(3):              # syncs 1, 2, 3: 10 rows, 24 rows, 10 rows
        for k, (dev, mask, host, ref_mask) in enumerate(zip(store.params, store.touched, ref, ref_masks)):
            delta, touched = local_change(comm.rank + 10 * rnd + 100 * k)
            dev += torch.from_numpy(delta)
            mask |= torch.from_numpy(touched)
            host += delta
            ref_mask |= touched
        spans = schedule.spans(rnd + 1)
        store.sync(rnd)
        sync.sync(ref, ref_masks, spans)
        down, up = (a + b for a, b in zip((down, up), copies(spans)))
        for dev, mask, host, ref_mask, (lo, hi) in zip(store.params, store.touched, ref, ref_masks, spans):
            np.testing.assert_array_equal(dev.numpy(), host)
            np.testing.assert_array_equal(mask.numpy(), ref_mask)
            assert not ref_mask[lo:hi].any() and ref_mask[hi:].any()       # the rest waits, flagged
        assert store.pending
    store.flush()
    sync.sync(ref, ref_masks, rest_of(schedule.spans(3), [V, V]))
    down, up = (a + b for a, b in zip((down, up), copies(rest_of(schedule.spans(3), [V, V]))))
    for k, (dev, mask, host, ref_mask) in enumerate(zip(store.params, store.touched, ref, ref_masks)):
        delta, touched = local_change(comm.rank + 30 + 100 * k)        # sync 4 combines every row
        dev += torch.from_numpy(delta)
        mask |= torch.from_numpy(touched)
        host += delta
        ref_mask |= touched
    mine = [np.flatnonzero(m) for m in ref_masks]
    store.sync(3)
    sync.sync(ref, ref_masks, None)
    if mode == "sparse":              # only this rank's touched rows come down, their ids go up
        down, up = down + 2 * V + sum(len(r) * D * 4 for r in mine), up + sum(len(r) * 8 for r in mine)
    else:
        down += 2 * V + 2 * V * D * 4
    up += sum(len(rows) * (8 + 4 * D) for rows in sync.changed_rows)
    report = store.report()
    assert (report["device_down_bytes"], report["device_up_bytes"]) == (down, up) and up > 0
    assert report["device_copy_seconds"] > 0
    store.host()
    for dev, host_param, host, mask in zip(store.params, store.host_params, ref, store.touched):
        np.testing.assert_array_equal(dev.numpy(), host)
        np.testing.assert_array_equal(host_param, host)
        assert not mask.numpy().any()
    assert len(set(comm.allgather(b"".join(h.tobytes() for h in store.host_params)))) == 1
    assert store.stats.syncs == 5 and store.stats.bytes_sent > 0
