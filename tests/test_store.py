"""The sharded store's pieces, serially: owner arithmetic, the planner against the kernel,
the owners' rule against the replicated sync, the rows' initialisation and the part files."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest

from mpidwe.io import checkpoint
from mpidwe.parallel import rows as store
from mpidwe.parallel.comm import Comm
from mpidwe.io.formats import check_seal
from mpidwe.kernels import cpu
from mpidwe.kernels.args import KernelArgs
from mpidwe.kernels.plan import plan_block
from mpidwe.parallel.sharded import ShardStore, init_own_rows
from mpidwe.parallel.rule import _apply_rows, apply_pushed
from mpidwe.parallel.replicated import init_params
from mpidwe.core.vocab import keep_probabilities, negative_table


@pytest.mark.parametrize("vocab, world", [(1, 1), (10, 3), (17, 4), (1000, 7), (5, 8)])
def test_every_row_has_exactly_one_owner(vocab, world):
    seen = np.zeros(vocab, dtype=int)
    for r in range(world):
        ids = store.owned_ids(vocab, r, world)
        assert len(ids) == store.owned_count(vocab, r, world)
        assert np.all(store.owner_of(ids, world) == r)
        assert np.array_equal(store.local_index(ids, world), np.arange(len(ids)))
        seen[ids] += 1
        for lo, hi in [(0, vocab), (3, 9), (vocab // 2, vocab), (2, 3)]:
            lo, hi = min(lo, vocab), min(hi, vocab)
            a, b = store.owned_in_range(lo, hi, r, world)
            assert np.array_equal(ids[a:b], ids[(ids >= lo) & (ids < hi)])
    assert np.all(seen == 1)


def test_striding_spreads_the_hot_rows():
    """Zipf counts (ids ranked by frequency). An owner's traffic is the rows of its share that
    a block's working set holds (a row travels once per block, however often it occurs):
    every owner serves about 1/P of it. Token occurrences cannot be split evenly (the top
    word alone is 8% of them); no owner exceeds the mean by as much as that one row."""
    counts = 1e6 / np.arange(1, 100_001)
    in_block = 1 - np.exp(-50_000 * counts / counts.sum())      # P(row in a 50k-word block)
    for world in (2, 4, 8):
        owners = store.owner_of(np.arange(len(counts)), world)
        rows = np.bincount(owners, weights=in_block)
        assert rows.max() / rows.mean() < 1.01
        tokens = np.bincount(owners, weights=counts)
        assert tokens.max() - tokens.mean() < counts[0]


def test_group_by_owner():
    ids = np.array([7, 2, 9, 4, 3, 8])
    order, counts = store.group_by_owner(ids, 3)
    assert counts.tolist() == [2, 2, 2]
    assert ids[order].tolist() == [9, 3, 7, 4, 2, 8]


def _block(seed=3, vocab=300, n=4000):
    rng = np.random.default_rng(seed)
    counts = np.sort(rng.zipf(1.3, vocab).astype(np.int64) + 1)[::-1].copy()
    tokens = rng.choice(vocab, size=n, p=counts / counts.sum()).astype(np.int32)
    starts = np.concatenate(([0], np.sort(rng.choice(np.arange(1, n), 150, replace=False)))).astype(np.int64)
    return counts, tokens, starts


KINDS = [("skipgram", False, 1), ("skipgram", True, 1), ("cbow", False, 1), ("skipgram", True, 3),
         ("skipgram", False, 2)]


@pytest.mark.parametrize("model, shared, threads", KINDS)
def test_planner_marks_exactly_the_rows_the_kernel_touches(model, shared, threads):
    counts, tokens, starts = _block()
    vocab, dim = len(counts), 8
    keep = keep_probabilities(counts, 1e-3).astype(np.float32)
    table = negative_table(counts)
    rng = np.arange(1, threads + 1, dtype=np.uint64) * np.uint64(12345)
    args = KernelArgs(keep_prob=keep, neg_table=table, words_total=10 ** 6, model=model, window=4, negative=5,
                      lr0=0.025, threads=threads, shared_negatives=shared)
    mark_in, mark_out = np.zeros(vocab, np.uint8), np.zeros(vocab, np.uint8)
    planned = rng.copy()
    plan_block(tokens, starts, planned, mark_in, mark_out, args)
    w_in, w_out = init_params(vocab, dim, 1)
    t_in, t_out = np.zeros(vocab, np.uint8), np.zeros(vocab, np.uint8)
    trained = rng.copy()
    cpu.train_block(w_in, w_out, tokens, starts, trained, t_in, t_out, args)
    assert np.array_equal(planned, trained)                   # the same random stream, to the end
    assert np.all(mark_in[t_in > 0] == 1)                     # every context row is a token
    assert np.all(np.isin(np.flatnonzero(mark_in), tokens)) and mark_in[tokens].all()
    reach = (mark_in > 0) | (mark_out > 0)
    assert np.array_equal(reach[t_out > 0], np.ones(int((t_out > 0).sum()), bool))
    # noise rows the kernel updated are exactly the planned ones (tokens aside)
    assert np.array_equal((t_out > 0) & (mark_in == 0), (mark_out > 0) & (mark_in == 0))


@pytest.mark.parametrize("model, shared, threads", KINDS[:3])
def test_working_set_training_equals_full_training(model, shared, threads):
    """The kernel on the remapped working set makes bit for bit the full kernel's updates."""
    counts, tokens, starts = _block(seed=5)
    vocab, dim = len(counts), 16
    keep = keep_probabilities(counts, 1e-3).astype(np.float32)
    table = negative_table(counts)
    args = KernelArgs(keep_prob=keep, neg_table=table, words_total=10 ** 5, model=model, window=5, negative=4,
                      lr0=0.05, threads=threads, shared_negatives=shared)
    w_in, w_out = init_params(vocab, dim, 2)
    w_out += np.random.default_rng(0).normal(0, 0.1, w_out.shape).astype(np.float32)
    full_in, full_out = w_in.copy(), w_out.copy()
    t_in, t_out = np.zeros(vocab, np.uint8), np.zeros(vocab, np.uint8)
    rng_full = np.array([99], dtype=np.uint64)
    cpu.train_block(full_in, full_out, tokens, starts, rng_full, t_in, t_out, args)

    marks = np.zeros(vocab, np.uint8), np.zeros(vocab, np.uint8)
    plan_block(tokens, starts, np.array([99], dtype=np.uint64), *marks, args)
    slots = np.full(vocab, -1, np.int32)
    ws = store.working_set(*marks, slots)
    assert not marks[0].any() and not marks[1].any()          # cleared for the next block
    assert np.array_equal(np.sort(ws.ids), np.unique(ws.ids)) and len(ws.ids) <= vocab
    ws_in, ws_out = w_in[ws.ids[:ws.n_in]].copy(), w_out[ws.ids].copy()
    s_in, s_out = np.zeros(ws.n_in, np.uint8), np.zeros(ws.size, np.uint8)
    rng_ws = np.array([99], dtype=np.uint64)
    cpu.train_block(ws_in, ws_out, slots[tokens], starts, rng_ws, s_in, s_out,
                    args.on_slots(keep[ws.ids[:ws.n_in]].copy(), slots))
    assert np.array_equal(rng_ws, rng_full)
    assert np.array_equal(ws_in, full_in[ws.ids[:ws.n_in]]) and np.array_equal(ws_out, full_out[ws.ids])
    outside = np.setdiff1d(np.arange(vocab), ws.ids)
    assert np.array_equal(full_out[outside], w_out[outside])  # nothing outside the set changed
    assert np.array_equal(ws.ids[:ws.n_in][s_in > 0], np.flatnonzero(t_in))
    assert np.array_equal(np.sort(ws.ids[s_out > 0]), np.flatnonzero(t_out))


def test_owners_rule_equals_the_replicated_sparse_sync():
    """Three ranks' changes to overlapping rows: the owners, each applying its rows, end with
    the replicated store's rows bit for bit."""
    rng = np.random.default_rng(4)
    vocab, dim, world, scale = 50, 6, 3, 2
    base = rng.normal(size=(vocab, dim)).astype(np.float32)
    rows = [np.sort(rng.choice(vocab, size=n, replace=False)).astype(np.int32) for n in (20, 35, 12)]
    deltas = [rng.normal(size=(len(r), dim)).astype(np.float32) for r in rows]
    longest = max(len(r) for r in rows)
    all_rows = np.zeros((world, longest), np.int32)
    all_values = np.zeros((world, longest, dim), np.float32)
    for k, (r, d) in enumerate(zip(rows, deltas)):
        all_rows[k, :len(r)], all_values[k, :len(r)] = r, d
    rep_base, rep_param = base.copy(), base.copy()
    big_rep = _apply_rows(rep_base, rep_param, all_rows, all_values, np.array([len(r) for r in rows]), scale,
                          np.zeros(vocab, np.int32), 0, vocab)
    biggest = 0.0
    for owner in range(world):
        own = base[owner::world].copy()
        got_rows, got_values, seg = [], [], []
        for r, d in zip(rows, deltas):                        # what each sender pushes to this owner
            mine = r % world == owner
            got_rows.append(r[mine] // world)
            got_values.append(d[mine])
            seg.append(int(mine.sum()))
        n = sum(seg)
        pos = np.full(len(own), -1, np.int32)
        scratch = (pos, np.empty((n, dim), np.float32), np.empty(n, np.int32), np.empty(n, np.int64))
        biggest = max(biggest, apply_pushed(own, np.concatenate(got_rows).astype(np.int64),
                                            np.concatenate(got_values), np.array(seg), scale, False, scratch))
        assert np.all(pos == -1)
        assert np.array_equal(own, rep_base[owner::world])
    assert biggest == big_rep


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_own_rows_are_the_replicated_initialisation(world):
    full_in, _ = init_params(1000, 7, 11)
    for r in range(world):
        w_in, w_out = init_own_rows(1000, 7, 11, r, world, piece_rows=64)
        assert np.array_equal(w_in, full_in[r::world]) and not w_out.any()


def test_serial_store_pull_push_and_streams():
    comm = Comm.serial()
    rng = np.random.default_rng(0)
    w_in, w_out = rng.normal(size=(40, 4)).astype(np.float32), rng.normal(size=(40, 4)).astype(np.float32)
    st = ShardStore(comm, 40, w_in.copy(), w_out.copy(), scale=1)
    ws = store.WorkingSet(np.array([3, 7, 1, 30, 5], np.int64), 3, np.zeros(40, np.int32))
    a, b, _ = st.pull(ws)
    assert np.array_equal(a, w_in[[3, 7, 1]]) and np.array_equal(b, w_out[[3, 7, 1, 30, 5]])
    a += 1
    b[3] -= 1
    st.push(ws, (a, b), (None, None), (np.array([1, 0, 1], np.uint8), np.array([0, 0, 0, 1, 0], np.uint8)))
    assert np.array_equal(st.own[0][[3, 1]], w_in[[3, 1]] + 1) and np.array_equal(st.own[0][7], w_in[7])
    assert np.array_equal(st.own[1][30], w_out[30] - 1)
    ids = np.array([1, 3, 30])
    assert np.array_equal(st.gather_rows(ids), st.own[0][ids])
    assert np.array_equal(np.concatenate(list(st.row_blocks(1, piece_rows=16))), st.own[1])


def test_refresh_gives_a_prefetched_set_the_rows_a_pull_after_the_push_would():
    """The pipeline pulls round k+1 before round k's push; the refresh sends again exactly
    the rows of that pull the push changed (a token row with both matrices if either did)."""
    comm = Comm.serial()
    rng = np.random.default_rng(1)
    w_in, w_out = rng.normal(size=(50, 3)).astype(np.float32), rng.normal(size=(50, 3)).astype(np.float32)
    st = ShardStore(comm, 50, w_in.copy(), w_out.copy(), scale=1, refreshes=True)
    ws = store.WorkingSet(np.array([4, 9, 2, 40, 11], np.int64), 3, np.zeros(50, np.int32))
    nxt = store.WorkingSet(np.array([9, 40, 5, 4, 2, 11, 33], np.int64), 3, np.zeros(50, np.int32))
    a, b, _ = st.pull(ws)
    na, nb, requests = st.pull(nxt)             # the prefetch: before the push
    a[[0, 2]] += 1                              # input rows of 4 and 2
    b[3] -= 2                                   # output row of 40 (a token of nxt)
    b[4] += 3                                   # output row of 11 (a noise row of nxt)
    st.push(ws, (a, b), (None, None), (np.array([1, 0, 1], np.uint8), np.array([0, 0, 0, 1, 1], np.uint8)))
    stale = (na.copy(), nb.copy())
    assert not np.array_equal(stale[1], st.pull(nxt)[1])
    before = st.rows_refreshed
    st.refresh(nxt, na, nb, requests)
    want_in, want_out, _ = st.pull(nxt)
    assert np.array_equal(na, want_in) and np.array_equal(nb, want_out)
    # of nxt's tokens only 40 changed (its output row): it travels with both matrices; of its
    # noise rows only 11's output row changed (4 and 2 changed input rows, which noise rows lack)
    assert st.rows_refreshed - before == 2 + 1
    assert np.array_equal(na[[0, 2]], stale[0][[0, 2]]) and np.array_equal(nb[2:], np.concatenate(
        (stale[1][2:5], want_out[5:6], stale[1][6:])))


def test_part_files_join_into_a_sealed_checkpoint(tmp_path):
    """Three owners' parts, one checkpoint: readers see the whole matrices through the
    virtual datasets, each part is sealed and checksummed, and any world size reads its rows."""
    vocab, dim, world = 23, 5, 3
    full_in, full_out = (np.random.default_rng(k).normal(size=(vocab, dim)).astype(np.float32) for k in (1, 2))
    d = str(tmp_path / "checkpoints")
    parts = [checkpoint.save_part(d, 4, r, world, vocab, full_in[r::world], full_out[r::world])
             for r in range(world)]
    words = [f"w{i}" for i in range(vocab)]
    progress = checkpoint.Progress(round=4, rounds=9, words_done=10, words_total=20, world_size=world,
                                   positions=[1, 2, 3], lr=0.01)
    state = checkpoint.TrainingState(None, None, progress, np.zeros((world, 1), np.uint64), [{"step": 1}])
    ck = checkpoint.Checkpoint(state=state, words=words, counts=np.arange(vocab), config={"dim": dim},
                               corpus_id="c", corpus_path="p")
    path = checkpoint.save(d, ck, parts=parts)
    assert check_seal(path, "checkpoint") and all(check_seal(os.path.join(d, p["file"]), "part") for p in parts)
    with h5py.File(path) as f:
        assert f[checkpoint.D_W_IN].is_virtual and f.attrs[checkpoint.A_VERSION] == checkpoint.SHARDED_VERSION
    back = checkpoint.load(path)
    assert np.array_equal(back.w_in, full_in) and np.array_equal(back.w_out, full_out)
    header = checkpoint.load(path, params=False)
    assert header.w_in is None and len(header.parts) == world
    for p in (2, 3, 4):
        for r in range(p):
            a, b = checkpoint.read_rows(path, header.parts, vocab, r, p, piece_rows=4)
            assert np.array_equal(a, full_in[r::p]) and np.array_equal(b, full_out[r::p])
    pieces = list(checkpoint.iter_rows(header, piece_rows=10))
    assert np.array_equal(np.concatenate([x[1] for x in pieces]), full_in)
    # a damaged part: the checkpoint is refused, naming the part
    part1 = os.path.join(d, parts[1]["file"])
    with h5py.File(part1, "r") as f:
        offset = f[checkpoint.D_W_OUT].id.get_offset()
    with open(part1, "r+b") as fh:
        fh.seek(offset + 3)
        byte = fh.read(1)
        fh.seek(offset + 3)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(checkpoint.InputError, match="part.*damaged"):
        checkpoint.load(path)
    # parts of a round without a checkpoint are removed; those of kept checkpoints stay
    stray = checkpoint.save_part(d, 2, 0, 1, vocab, full_in, full_out)
    checkpoint.remove_stale_parts(d)
    assert not os.path.exists(os.path.join(d, stray["file"])) and os.path.exists(part1)
