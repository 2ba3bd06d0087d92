"""--store blocks under MPI: the routed pairs and the ring train exactly what a one-process
replay of the same P ranks trains, pair for pair and bit for bit (so every pair is trained
once per pass, by the rank that owns its input word, in the step that holds its output
word's block); every rank ends with the same parameters; and a run through train.run
resumes exactly, and on another rank count."""

import numpy as np
import pytest

from mpidwe.core.blocks import block_noise_tables, held_block, piece_members, ring_shifts, snake_blocks, snake_pieces
from mpidwe.core.config import TrainConfig
from mpidwe.io import checkpoint
from mpidwe.kernels.args import KernelArgs
from mpidwe.kernels.pairs import Noise, Span, train_bucket, window_pairs
from mpidwe.kernels.rows import Params
from mpidwe.parallel.blocks import BlockStore
from mpidwe.parallel.comm import Comm
from mpidwe.parallel.store import StoreSetup, Work

from test_mpi_train import demo, digest, train_here  # noqa: F401  (demo: the module's corpus fixture)

V, DIM, ROUNDS = 90, 8, 3


def corpus_of(rank: int, rnd: int) -> list:
    """Rank ``rank``'s pieces in round ``rnd``: Zipf-ish ids, a few sentences; rank 1's
    second round is empty (an empty bucket everywhere)."""
    rng = np.random.default_rng([rank, rnd])
    if rank == 1 and rnd == 1:
        return []
    pieces = []
    for _ in range(2):
        n = int(rng.integers(50, 400))
        tokens = np.minimum(rng.zipf(1.3, n) - 1, V - 1).astype(np.int32)
        starts = np.unique(np.concatenate(([0], rng.integers(0, n, 6)))).astype(np.int64)
        pieces.append((tokens, starts))
    return pieces


def setup_of(p: int, pieces: int = 1):
    counts = np.bincount(np.concatenate([t for r in range(p) for k in range(ROUNDS) for t, _ in corpus_of(r, k)]),
                         minlength=V).astype(np.int64) + 1
    cfg = TrainConfig(store="blocks", seed=3, dim=DIM, threads=1)
    args = KernelArgs(keep_prob=np.full(V, 0.9, np.float32), neg_table=np.zeros((V, 2), np.uint32),
                      words_total=1e5, window=3, negative=4, lr0=0.05, lr_min=1e-4, shared_negatives=True)
    return counts, StoreSetup(cfg, 1, "cpu", V, 1, None, counts, pieces), args


def start_params():
    rng = np.random.default_rng(11)
    return rng.uniform(-0.5, 0.5, (V, DIM)).astype(np.float32) / DIM, np.zeros((V, DIM), np.float32)


def replay(p: int, counts, args, pieces: int = 1) -> tuple[np.ndarray, np.ndarray, int]:
    """What P ranks compute, one rank after another in one process, written out plainly:
    each rank's pairs, routed in sender order, bucketed by output block, P ring steps, each
    a bucket's pieces one after another (noise words from the piece; one piece: the block)."""
    w_in, w_out = start_params()
    block_of = snake_blocks(counts, p)
    pieces = pieces if p > 1 else 1
    piece_of = snake_pieces(counts, block_of, pieces)
    members, offsets = piece_members(block_of, piece_of, p, pieces)
    noise = block_noise_tables(counts, members, offsets)
    rngs = [np.array([1000 + r], np.uint64) for r in range(p)]
    rows = Params(w_in, w_out, np.zeros(V, np.uint8), np.zeros(V, np.uint8))
    done, pairs = 0.0, 0
    for rnd in range(ROUNDS):
        made = {r: [window_pairs(t, s, args.keep_prob, args.window, np.arange(V, dtype=np.int32), rngs[r])
                    for t, s in corpus_of(r, rnd)]
                for r in range(p)}
        words = {r: sum(len(t) for t, _ in corpus_of(r, rnd)) for r in range(p)}
        got = {}
        for owner in range(p):              # what rank `owner` receives: senders in rank order
            ins, outs = [], []
            for r in range(p):
                for i, o in made[r]:
                    keep = block_of[i] == owner
                    ins.append(i[keep])
                    outs.append(o[keep])
            i, o = np.concatenate(ins + [np.zeros(0, np.int32)]), np.concatenate(outs + [np.zeros(0, np.int32)])
            order = np.argsort(block_of[o], kind="stable")
            got[owner] = (i[order], o[order])
        for k, shift in enumerate(ring_shifts(3, int(done), p)):
            for r in range(p):
                j = held_block(r, int(shift), p)
                i, o = got[r]
                bucket = int((block_of[o] == j).sum())
                before = 0
                for h in range(pieces):
                    sel = (block_of[o] == j) & (piece_of[o] == h)
                    g, n_h = j * pieces + h, int(sel.sum())
                    span = p * words[r] / p
                    _, n = train_bucket(rows, i[sel], o[sel], Noise(noise, members, int(offsets[g]),
                                                                     int(offsets[g + 1] - offsets[g]), args.negative,
                                                                     args.shared_negatives, 2 * args.window),
                                        Span(args.lr0, args.lr_min, done + span * (k + before / max(bucket, 1)),
                                             span * (n_h / max(bucket, 1)) if pieces > 1 else span,
                                             args.words_total), rngs[r], 1)
                    pairs += n
                    before += n_h
        done += sum(words.values())
    return w_in, w_out, pairs


@pytest.mark.parallel([1, 2, 3, 4])
@pytest.mark.parametrize("ring_pieces", [1, 2])
def test_the_ring_trains_what_a_replay_of_the_ranks_trains(job_tmp, ring_pieces):
    """Also with --ring-overlap's halves, which travel from a thread of their own while the
    other half trains: the same bits as the plain replay, whatever the timing."""
    comm = Comm.world()
    counts, setup, args = setup_of(comm.size, ring_pieces)
    w_in, w_out = start_params()
    store = BlockStore(comm, w_in, w_out, setup)
    rng = np.array([1000 + comm.rank], np.uint64)
    done = 0.0
    for rnd in range(ROUNDS):
        pieces = corpus_of(comm.rank, rnd)
        trained = store.train(Work(pieces, float(comm.size), None), None, rng, args.at(done, comm.size))
        assert trained.words == sum(len(t) for t, _ in pieces)
        assert np.isfinite(store.sync(rnd))
        done += comm.allreduce_scalar(trained.words)
    trained_steps = store.stats.steps       # the routing's and the ring's latency steps
    # the ring thread's hidden waits are not the store's seconds; its array work and exposed waits are
    assert 0 <= store.stats.comm_seconds <= store.stats.seconds and store.report()["block_ring_hidden_seconds"] >= 0
    # memory: the rank's input block, the held output block and one receive buffer (about
    # 3 V d / P floats), never a V x d matrix while it trains
    arrays = [v for v in vars(store).values() if isinstance(v, np.ndarray) and v.dtype == np.float32]
    held = store.report()["block_param_bytes"]
    mine, most = len(store.block(comm.rank)), int(np.diff(store.offsets).max())
    assert held == sum(a.nbytes for a in arrays) == (mine + min(comm.size, 2) * most) * DIM * 4
    if comm.size > 1:
        assert all(len(a) < V for a in arrays)
        assert held <= (3 * V / comm.size + 3) * DIM * 4 < 2 * V * DIM * 4
        w_in[:] = w_out[:] = np.nan   # the store trains its own copies of its rows (one rank: the arrays it was given)
    rows = store.rows(None)       # rank 0's whole input matrix: what evaluation and the export read
    want_in, want_out, want_pairs = replay(comm.size, counts, args, ring_pieces)
    assert comm.allreduce_scalar(store.pairs) == want_pairs > 0
    if comm.is_root:
        np.testing.assert_array_equal(rows, want_in)
    else:
        assert rows is None
    got_in, got_out = store.host()     # every rank gets the whole model: what a run returns
    np.testing.assert_array_equal(got_in, want_in)
    np.testing.assert_array_equal(got_out, want_out)
    # one message each way per ring step that moves a block (halves: two, but the first
    # of a pass), plus the routing all-to-all; halves travel from the ring thread
    report = store.report()
    assert (report["block_ring_bytes"] > 0) == (comm.size > 1)
    assert store.settings()["block_pieces"] == (ring_pieces if comm.size > 1 else 1)
    assert (store._pool is not None) == (ring_pieces > 1 and comm.size > 1)
    if comm.size > 1:
        ring = 2 * (comm.size - 1) + 1 if ring_pieces > 1 else comm.size
        assert trained_steps == ROUNDS * (ring + comm.size - 1 + (comm.size - 1).bit_length())
    store.close()
    assert store.stats.bytes_sent == report["block_ring_bytes"] + report["block_route_bytes"] + \
        (store.stats.bytes_sent - report["block_ring_bytes"] - report["block_route_bytes"])


@pytest.mark.timeout(300)
@pytest.mark.parallel([2, 3])
def test_a_block_run_is_identical_on_every_rank_and_resumes_exactly(demo, job_tmp):
    comm = Comm.world()
    flags = ("--store", "blocks", "--dim", "16", "--sync-every", "20000", "--epochs", "2")
    whole, res = train_here(comm, demo, job_tmp / "whole", "auto", *flags)
    assert not comm.is_root or res.metrics[-1]["blocks"] == comm.size
    if comm.is_root:              # each rank held its blocks' rows, not the matrices (3 V d)
        v, dim = res.w_in.shape
        held = res.metrics[-1]["block_param_bytes"]
        assert len(held) == comm.size and max(held) <= (3 * v / comm.size + 3) * dim * 4 < 2 * v * dim * 4
    assert res.config["lr_scale"] == 1 and res.config["sync_tiers"] is None   # no rule, no tiers
    # stopped half way (a checkpoint at a round), then resumed: the same bits
    first, _ = train_here(comm, demo, job_tmp / "half", "auto", *flags, "--checkpoint-every", "150000")
    path = job_tmp / "half" / "checkpoints"
    ckpts = sorted(path.glob("ckpt-*.h5"))
    if comm.is_root:
        for late in ckpts[1:]:            # keep the first, mid-run checkpoint only
            late.unlink()
    comm.barrier()
    again, _ = train_here(comm, demo, job_tmp / "half", "auto", *flags, "--checkpoint-every", "150000",
                          "--resume", "auto")
    assert first == whole and again == whole


@pytest.mark.timeout(300)
@pytest.mark.parallel(3)
def test_the_torch_kernel_trains_the_blocks_and_resumes_exactly(demo, job_tmp):
    """--kernel torch: the buckets train as the torch kernel's batches (on the CPU here; a
    GPU runs the same code on its device), another model than numba's, the same on every
    rank, and a resume from a mid-run checkpoint gives the same bits."""
    pytest.importorskip("torch")
    comm = Comm.world()
    flags = ("--store", "blocks", "--kernel", "torch", "--dim", "16", "--sync-every", "20000", "--epochs", "2",
             "--checkpoint-every", "150000")
    whole, res = train_here(comm, demo, job_tmp / "torch", "auto", *flags)
    numba, _ = train_here(comm, demo, job_tmp / "numba", "auto", *flags[:2], *flags[4:])
    assert whole != numba
    if comm.is_root:
        assert res.config["kernel"] == "torch" and res.metrics[-1]["blocks"] == 3 and np.isfinite(res.w_in).all()
        ckpts = sorted((job_tmp / "torch" / "checkpoints").glob("ckpt-*.h5"))
        for late in ckpts[1:]:            # keep the first, mid-run checkpoint only
            late.unlink()
    comm.barrier()
    again, _ = train_here(comm, demo, job_tmp / "torch", "auto", *flags, "--resume", "auto")
    assert again == whole


@pytest.mark.timeout(300)
@pytest.mark.parallel(2)
def test_a_block_run_resumes_on_another_rank_count(demo, job_tmp):
    from mpi4py import MPI

    comm = Comm.world()
    flags = ("--store", "blocks", "--dim", "16", "--sync-every", "20000", "--epochs", "2",
             "--checkpoint-every", "150000")
    train_here(comm, demo, job_tmp / "two", "auto", *flags)
    if comm.is_root:
        ckpts = sorted((job_tmp / "two" / "checkpoints").glob("ckpt-*.h5"))
        for late in ckpts[1:]:
            late.unlink()
        one = Comm(MPI.COMM_SELF)
        _, res = train_here(one, demo, job_tmp / "two", "auto", *flags, "--resume", "auto")
        ck = checkpoint.load(str(sorted((job_tmp / "two" / "checkpoints").glob("ckpt-*.h5"))[-1]))
        assert ck.config["ranks"] == 1 and ck.state.progress.words_done == res.words_total
        assert np.isfinite(res.w_in).all()
    comm.barrier()


@pytest.mark.timeout(300)
@pytest.mark.parallel(3)
@pytest.mark.parametrize("wire,overlap", [("bf16", "off"), ("int8", "off"), ("int8", "on"), ("int16", "on")])
def test_a_lossy_ring_keeps_what_it_rounds_away_and_resumes_exactly(demo, job_tmp, wire, overlap):
    """Also in halves (--ring-overlap on), which keep the residuals of each half; an int16 ring
    keeps none and rounds too (stop-and-resume exact from its checkpoint alone)."""
    comm = Comm.world()
    flags = ("--store", "blocks", "--dim", "16", "--sync-every", "20000", "--epochs", "2", "--ring-overlap", overlap,
             "--wire", wire, "--checkpoint-every", "150000")
    exact, _ = train_here(comm, demo, job_tmp / "fp32", "auto", *flags[:-4], "--checkpoint-every", "150000")
    whole, res = train_here(comm, demo, job_tmp / "whole", "auto", *flags)
    assert whole != exact                      # the encoding rounds ...
    if comm.is_root:
        ring = res.metrics[-1]["block_ring_bytes"]
        assert res.metrics[-1]["block_wire"] == wire
        assert res.metrics[-1]["block_pieces"] == (2 if overlap == "on" else 1) == res.config["ring_pieces"]
        fp32 = train_bytes(job_tmp / "fp32")
        assert ring[0] < 0.6 * fp32[0]         # ... and sends about half (bf16, int16) or a quarter (int8)
        ck = checkpoint.load(str(sorted((job_tmp / "whole" / "checkpoints").glob("ckpt-*.h5"))[-1]))
        ref = checkpoint.load(str(sorted((job_tmp / "fp32" / "checkpoints").glob("ckpt-*.h5"))[-1]))
        assert np.abs(ck.w_in - ref.w_in).max() < 0.05 * np.abs(ref.w_in).max()
    path = job_tmp / "whole" / "checkpoints"
    if comm.is_root:
        for late in sorted(path.glob("ckpt-*.h5"))[1:]:
            late.unlink()
    comm.barrier()
    again, _ = train_here(comm, demo, job_tmp / "whole", "auto", *flags, "--resume", "auto")
    assert again == whole


def train_bytes(run) -> list:
    import json

    return json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["block_ring_bytes"]
