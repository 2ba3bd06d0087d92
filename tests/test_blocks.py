"""--store blocks: the arithmetic (blocks, the ring, the hand-offs), the compiled pair kernels
against plain Python, the noise restricted to a block, and the options it refuses."""

import numpy as np
import pytest

from mpidwe.core.blocks import (block_members, block_noise_tables, handoff, held_block, ring_shifts,
                                snake_blocks)
from mpidwe.core.config import TrainConfig, parse_command
from mpidwe.core.errors import ConfigError
from mpidwe.core.vocab import negative_probabilities, table_probabilities
from mpidwe.kernels.common import LCG_INCREMENT, LCG_MULTIPLIER
from mpidwe.kernels.pairs import Noise, Span, partition, piece_pairs, train_bucket, window_pairs
from mpidwe.kernels.rows import Params

MASK = (1 << 64) - 1


def zipf_counts(v: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (1e6 / np.arange(1, v + 1) * rng.uniform(0.9, 1.1, v)).astype(np.int64) + 1


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("v", [1, 7, 64, 1001])
def test_snake_blocks_split_every_word_once_with_about_equal_mass(parts, v):
    counts = zipf_counts(v)
    block_of = snake_blocks(counts, parts)
    assert block_of.dtype == np.int32 and block_of.min() >= 0 and block_of.max() < parts
    sizes = np.bincount(block_of, minlength=parts)
    assert sizes.max() - sizes.min() <= 1
    members, offsets = block_members(block_of, parts)
    assert sorted(members.tolist()) == list(range(v)) and offsets[-1] == v
    for b in range(parts):
        assert (block_of[members[offsets[b]:offsets[b + 1]]] == b).all()
    if v >= 64 * parts and parts > 1:
        # the snake deals the head evenly: the heaviest block holds at most what the lightest
        # holds plus the single most frequent word
        mass = np.bincount(block_of, weights=counts.astype(float), minlength=parts)
        assert mass.max() - mass.min() <= counts.max()


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 5, 8])
def test_the_ring_trains_every_bucket_once_per_pass_with_disjoint_blocks_per_step(parts):
    for rnd in range(6):
        shifts = ring_shifts(7, rnd * 1000, parts)
        assert sorted(shifts.tolist()) == list(range(parts))       # a permutation
        assert shifts[-1] == 0                                      # every pass ends where the next starts
        seen = np.zeros((parts, parts), int)
        for s in shifts:
            held = [held_block(r, int(s), parts) for r in range(parts)]
            assert sorted(held) == list(range(parts))              # one writer per output block
            for r, j in enumerate(held):
                seen[r, j] += 1
        assert (seen == 1).all()                                    # bucket (r, j) once per pass
    assert [ring_shifts(7, 3, parts).tolist() for _ in range(2)] == [ring_shifts(7, 3, parts).tolist()] * 2
    if parts >= 4:              # another pass, another order (PyTorch-BigGraph: a fixed one overfits)
        assert len({tuple(ring_shifts(7, w, parts)) for w in range(20)}) > 1


@pytest.mark.parametrize("parts", [1, 2, 3, 4, 5])
def test_a_handoff_sends_each_block_to_the_rank_that_holds_it_next(parts):
    for before in range(parts):
        for after in range(parts):
            for r in range(parts):
                dest, source = handoff(r, before, after, parts)
                assert held_block(dest, after, parts) == held_block(r, before, parts)
                assert held_block(r, after, parts) == held_block(source, before, parts)
                assert handoff(dest, before, after, parts)[1] == r          # dest expects it from r


@pytest.mark.parametrize("parts", [1, 3, 4])
def test_noise_from_a_block_follows_unigram_075_within_it(parts):
    counts = zipf_counts(200, seed=3)
    members, offsets = block_members(snake_blocks(counts, parts), parts)
    table = block_noise_tables(counts, members, offsets)
    for b in range(parts):
        lo, hi = offsets[b], offsets[b + 1]
        np.testing.assert_allclose(table_probabilities(table[lo:hi]),
                                   negative_probabilities(counts[members[lo:hi]]), atol=1e-9)
        assert table[lo:hi, 1].max() < hi - lo                   # aliases index the block's members


def test_partition_groups_pairs_stably_by_either_blocks_with_empty_groups():
    rng = np.random.default_rng(1)
    block_of = rng.integers(0, 5, 50).astype(np.int32)
    block_of[block_of == 2] = 3                                    # block 2 empty
    inp, out = rng.integers(0, 50, 1000).astype(np.int32), rng.integers(0, 50, 1000).astype(np.int32)
    for by_out, key in ((True, block_of[out]), (False, block_of[inp])):
        to = np.empty((1000, 2), np.int32)                          # columns: strided views, as the store's
        for threads in (1, 3):                                      # the same order on any threads
            starts = partition(inp, out, block_of, by_out, 6, to[:, 0], to[:, 1], threads)   # block 5 empty too
            order = np.argsort(key, kind="stable")
            np.testing.assert_array_equal(to[:, 0], inp[order])
            np.testing.assert_array_equal(to[:, 1], out[order])
            np.testing.assert_array_equal(starts, np.searchsorted(np.sort(key), np.arange(7)))
            assert starts[3] == starts[2] and starts[6] == starts[5] == 1000


def python_pairs(tokens, starts, keep, window, state):
    """word2vec's subsampling and shrunk window, by the contract in kernels/pairs.py."""
    def lcg(s):
        return (s * LCG_MULTIPLIER + LCG_INCREMENT) & MASK
    pairs = []
    bounds = list(starts) + [len(tokens)]
    for s in range(len(starts)):
        kept = []
        for w in tokens[bounds[s]:bounds[s + 1]]:
            if keep[w] < 1.0:
                state = lcg(state)
                if np.float32(state >> 40) * np.float32(1.0 / 16777216.0) > keep[w]:
                    continue
            kept.append(int(w))
        for i in range(len(kept)):
            state = lcg(state)
            reach = window - (((state >> 32) * window) >> 32)
            for j in range(max(i - reach, 0), min(i + reach, len(kept) - 1) + 1):
                if j != i:
                    pairs.append((kept[j], kept[i]))
    return pairs, state


def test_window_pairs_follow_the_contract():
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 50, 3000).astype(np.int32)
    starts = np.array([0, 5, 6, 6, 400, 1200, 2999], np.int64)    # an empty and a one-word sentence
    keep = rng.uniform(0.3, 1.2, 50).astype(np.float32)
    state = np.array([12345, 999], np.uint64)
    inp, out = window_pairs(tokens, starts, keep, 5, np.arange(50, dtype=np.int32), state)
    want, end = python_pairs(tokens, starts, keep, 5, 12345)
    assert list(zip(inp.tolist(), out.tolist())) == want
    assert int(state[0]) == end and int(state[1]) == 999


def test_train_bucket_touches_only_its_input_rows_and_the_held_block():
    v, dim, parts = 120, 8, 4
    counts = zipf_counts(v, seed=5)
    block_of = snake_blocks(counts, parts)
    members, offsets = block_members(block_of, parts)
    table = block_noise_tables(counts, members, offsets)
    rng = np.random.default_rng(6)
    w_in = rng.standard_normal((v, dim)).astype(np.float32)
    w_out = rng.standard_normal((v, dim)).astype(np.float32) * 0.1
    before_in, before_out = w_in.copy(), w_out.copy()
    j = 2
    inp = members[offsets[1]:offsets[2]][rng.integers(0, offsets[2] - offsets[1], 500)]
    out = np.repeat(members[offsets[j]:offsets[j] + 3], 200)[:500]       # three centres
    rows = Params(w_in, w_out, np.zeros(v, np.uint8), np.zeros(v, np.uint8))
    noise = Noise(table, members, int(offsets[j]), int(offsets[j + 1] - offsets[j]), 5, False, 10)
    loss, n = train_bucket(rows, inp, out, noise, Span(0.05, 1e-4, 0.0, 1000.0, 1e6), np.array([1, 2], np.uint64), 2)
    assert n == 500 and np.isfinite(loss) and loss > 0
    changed_in = np.flatnonzero((w_in != before_in).any(axis=1))
    changed_out = np.flatnonzero((w_out != before_out).any(axis=1))
    assert set(changed_in) <= set(inp.tolist()) and len(changed_in) > 0
    assert (block_of[changed_out] == j).all() and len(changed_out) > 3      # the noise, from block j only


@pytest.mark.parametrize("flags, says", [
    (["--model", "cbow"], "skip-gram"),
    (["--loss", "hs"], "skip-gram"),
    (["--subwords"], "subword"),
    (["--balance", "speed"], "--balance speed"),
    (["--kernel", "triton"], "--kernel torch"),
    (["--device", "cuda"], "numba kernel or --kernel torch"),
])
def test_the_block_store_refuses_what_it_cannot_train_in_one_line(flags, says):
    with pytest.raises((ConfigError, SystemExit)) as err:
        parse_command(TrainConfig, ["--store", "blocks", *flags], prog="test", description="")
    text = str(err.value)
    assert says in text and "--store replicated" in text and "\n" not in text


def lcg_steps(state: int, n: int) -> int:
    for _ in range(n):
        state = (state * LCG_MULTIPLIER + LCG_INCREMENT) & MASK
    return state


@pytest.mark.parametrize("shared", [False, True])
def test_shared_negatives_draw_once_per_run_of_a_centres_pairs(shared):
    v, dim = 40, 8
    counts = zipf_counts(v, seed=7)
    members, offsets = block_members(snake_blocks(counts, 1), 1)
    table = block_noise_tables(counts, members, offsets)
    rng = np.random.default_rng(8)
    w_in = rng.standard_normal((v, dim)).astype(np.float32) * 0.1
    w_out = np.zeros((v, dim), np.float32)
    out = np.array([3] * 7 + [5] * 2 + [3] * 3 + [9], np.int32)     # runs of 7 (capped at 4: 4 + 3), 2, 3, 1
    inp = rng.integers(0, v, len(out)).astype(np.int32)
    state = np.array([42], np.uint64)
    rows = Params(w_in, w_out, np.zeros(v, np.uint8), np.zeros(v, np.uint8))
    _, n = train_bucket(rows, inp, out, Noise(table, members, 0, v, 5, shared, 4), Span(0.05, 1e-4, 0, 1, 1e6),
                        state, 1)
    draws = 5 * (5 if shared else len(out))
    assert n == len(out) and int(state[0]) == lcg_steps(42, draws)


def test_pairs_on_threads_are_each_shares_pairs_in_order():
    rng = np.random.default_rng(9)
    tokens = rng.integers(0, 30, 5000).astype(np.int32)
    starts = np.arange(0, 5000, 37, dtype=np.int64)
    keep = np.full(30, 0.8, np.float32)
    state = np.array([5, 6, 7], np.uint64)
    inp, out = piece_pairs(tokens, starts, keep, 4, np.arange(30, dtype=np.int32), state, 3)
    from mpidwe.kernels.common import split_sentences
    bounds = split_sentences(starts, len(tokens), 3)
    want = []
    for t in range(3):
        lo = starts[bounds[t]]
        hi = starts[bounds[t + 1]] if bounds[t + 1] < len(starts) else len(tokens)
        pairs, end = python_pairs(tokens[lo:hi], starts[bounds[t]:bounds[t + 1]] - lo, keep, 4, [5, 6, 7][t])
        want += pairs
        assert int(state[t]) == end
    assert list(zip(inp.tolist(), out.tolist())) == want


def test_a_pass_is_4m_words_or_what_bounds_the_rings_bytes_and_steps_and_a_run_has_12():
    from mpidwe.train.plan import block_pass_words

    run = 3 * 64_332_282                                                 # enwiki-64M x 3
    assert block_pass_words(run, 8, 145_785) == 500_000                   # 4M-word passes
    assert block_pass_words(run, 16, 145_785) == int(145_785 * 104 * 15 / 30) // 16      # the ring's bytes
    assert block_pass_words(run, 16, 50_000) == int(40 * 16 * 1e6 / 150) // 16           # the latency steps
    assert block_pass_words(run, 32, 145_785) == int(145_785 * 104 * 31 / 30) // 32
    assert block_pass_words(run, 32, 100_000) == int(72 * 32 * 1e6 / 150) // 32
    assert block_pass_words(10**10, 16, 2_000_000) == int(2_000_000 * 104 * 15 / 30) // 16   # the ring's bytes
    assert block_pass_words(run // 3, 32, 145_785) == run // 3 // 12 // 32            # 12 passes at least
    assert block_pass_words(2 * 3_000_000, 8, 2_724) == 6_000_000 // 12 // 8   # the demo x 2
    assert block_pass_words(10_000, 4) == 5_000                                # never below the floor


@pytest.mark.parametrize("pieces", [1, 2, 3])
@pytest.mark.parametrize("parts", [1, 2, 5])
@pytest.mark.parametrize("v", [1, 7, 1001])
def test_the_pieces_of_a_block_split_its_words_once_with_about_equal_mass(pieces, parts, v):
    from mpidwe.core.blocks import piece_members, snake_pieces

    counts = zipf_counts(v)
    block_of = snake_blocks(counts, parts)
    piece_of = snake_pieces(counts, block_of, pieces)
    members, offsets = piece_members(block_of, piece_of, parts, pieces)
    assert sorted(members.tolist()) == list(range(v)) and len(offsets) == parts * pieces + 1
    blocks, block_offsets = block_members(block_of, parts)
    for b in range(parts):       # a block's slots hold its words, its pieces one after another
        lo, hi = offsets[b * pieces], offsets[(b + 1) * pieces]
        assert (lo, hi) == (block_offsets[b], block_offsets[b + 1])
        assert sorted(members[lo:hi].tolist()) == sorted(blocks[lo:hi].tolist())
        sizes = np.diff(offsets[b * pieces:(b + 1) * pieces + 1])
        assert sizes.max() - sizes.min() <= 1
        for h in range(pieces):
            got = members[offsets[b * pieces + h]:offsets[b * pieces + h + 1]]
            assert (piece_of[got] == h).all() and (np.diff(got) > 0).all()
    if pieces == 1:               # one piece: the blocks' own order
        np.testing.assert_array_equal(members, blocks)


def test_the_ring_overlaps_in_halves_where_a_pass_has_room_for_their_latency_steps():
    from mpidwe.core.blocks import ring_pieces
    from mpidwe.train.plan import block_pass_words

    run = 3 * 64_332_282                                                 # enwiki-64M x 3
    assert ring_pieces("auto", 8, block_pass_words(run, 8, 145_785)) == 2      # 32 steps a 500k-word pass
    assert ring_pieces("auto", 16, block_pass_words(run, 16, 145_785)) == 2     # 56 steps a 474k-word pass
    assert ring_pieces("auto", 32, block_pass_words(run, 32, 145_785)) == 1     # 104 steps a 502k-word pass
    assert ring_pieces("auto", 16, block_pass_words(run // 4, 16, 69_000)) == 1  # enwiki x 3: 250k-word passes
    assert ring_pieces("auto", 16, 373_334) == 2 and ring_pieces("auto", 16, 373_333) == 1   # 56 x 1e6 / 150
    assert ring_pieces("on", 32, 1) == 2 and ring_pieces("off", 8, 10**9) == 1
    assert ring_pieces("on", 1, 10**9) == 1                               # one rank has no ring
    with pytest.raises(ConfigError, match="--ring-overlap reads only the block store"):
        parse_command(TrainConfig, ["--store", "replicated", "--ring-overlap", "on"], prog="test", description="")
    # a checkpoint from before the halves resumes with "off" (train/resume.py), whatever its store
    assert TrainConfig(corpus="c.h5", out="o", store="replicated", ring_overlap="off").store == "replicated"


def test_the_ring_goes_int8_from_16_ranks_and_int16_for_large_vocabularies_unless_wire_says():
    from mpidwe.core.blocks import block_wire

    cfg = TrainConfig(store="blocks")
    assert [block_wire(cfg, p, 145_785, 100) for p in (1, 8, 15, 16, 32)] == ["fp32"] * 3 + ["int8"] * 2
    # int8's float32 residuals would take 256 MB a rank from 671,089 words at d = 100
    assert [block_wire(cfg, 32, v, 100) for v in (671_088, 671_089, 2_000_000)] == ["int8", "int16", "int16"]
    assert block_wire(cfg, 8, 2_000_000, 100) == "fp32"
    assert block_wire(TrainConfig(store="blocks", wire="bf16"), 32, 2_000_000, 100) == "bf16"
    assert block_wire(TrainConfig(store="blocks", wire="int8"), 32, 2_000_000, 100) == "int8"


def auto_cfg(*flags: str) -> TrainConfig:
    return parse_command(TrainConfig, list(flags), prog="test", description="")


@pytest.mark.parametrize("ranks, words, store", [
    (1, 10**9, "replicated"), (4, 10**9, "replicated"),            # few ranks: averaging keeps quality
    (8, 64_000_000, "replicated"), (16, 39_999_999, "replicated"),  # short runs: averaging learns more per word
    (8, 80_000_000, "blocks"), (16, 40_000_000, "blocks"), (32, 40_000_000, "blocks"), (32, 39_999_999, "replicated"),
])
def test_store_auto_trains_long_runs_on_many_ranks_on_blocks(ranks, words, store):
    from mpidwe.core.config import store_of

    got, why = store_of(auto_cfg(), ranks, words, "numba", "cpu")
    assert got == store
    assert (why == "") == (ranks < 8)                  # from 8 ranks the first log line says why
    assert got == "replicated" or "long run" in why


@pytest.mark.parametrize("flags, kernel, device, names", [
    (["--model", "cbow"], "numba", "cpu", "CBOW"),
    (["--loss", "hs"], "numba", "cpu", "--loss hs"),
    (["--subwords"], "numba", "cpu", "--subwords"),
    ([], "torch", "cuda", "the torch kernel"),
    (["--sync-full", "64"], "numba", "cpu", "--sync-full"),
    (["--max-local-lr", "0.1"], "numba", "cpu", "--max-local-lr"),
    (["--sync-every", "20000"], "numba", "cpu", "--sync-every"),
    (["--wire", "int4"], "numba", "cpu", "--wire int4"),
    (["--overlap"], "numba", "cpu", "--overlap"),
    (["--follow", "incoming", "--corpus", "c.h5"], "numba", "cpu", "--follow"),
])
def test_store_auto_stays_replicated_where_the_run_needs_averaging_and_says_why(flags, kernel, device, names):
    from mpidwe.core.config import store_of

    store, why = store_of(auto_cfg(*flags), 16, 193_000_000, kernel, device)
    assert store == "replicated" and names in why and "\n" not in why


@pytest.mark.parametrize("wire", ["fp32", "int8", "int16"])
def test_store_auto_keeps_long_runs_on_blocks_with_a_wire_the_ring_was_measured_with(wire):
    # --wire is read by both stores; the ring's measured encodings do not send a run to averaging
    from mpidwe.core.config import store_of

    store, why = store_of(auto_cfg("--wire", wire), 16, 193_000_000, "numba", "cpu")
    assert store == "blocks" and "long run" in why
    assert store_of(auto_cfg("--wire", "bf16"), 16, 193_000_000, "numba", "cpu")[0] == "replicated"


def test_an_explicit_store_is_kept_whatever_the_run():
    from mpidwe.core.config import store_of

    assert store_of(auto_cfg("--store", "replicated"), 16, 193_000_000, "numba", "cpu") == ("replicated", "")
    assert store_of(auto_cfg("--store", "blocks"), 2, 1_000, "numba", "cpu") == ("blocks", "")
    assert TrainConfig().store == "auto"


def test_the_first_log_line_says_which_store_auto_chose_and_why():
    from mpidwe.core.config import store_of
    from mpidwe.train.rundir import summary_line

    store, why = store_of(auto_cfg(), 16, 193_000_000, "numba", "cpu")
    r = dict(loss="ns", negative=5, subwords=False, store=store, store_choice=why, balance="off", model="skipgram",
             dim=100, window=5, epochs=3, words_total=193_000_000, vocab_size=145_785, corpus="c.h5", ranks=16,
             threads=1, kernel="numba", device="cpu", sync="auto", sync_every=473_806, lr=0.025, lr_scale=1,
             compute_choice="", exchange="mpi", block_wire="int8")
    line = summary_line(r, "run/config.json")
    assert "store blocks (auto: a long run (193,000,000 words) on 16 ranks" in line and "no averaging" in line
    short = dict(r, store="replicated", store_choice=store_of(auto_cfg(), 16, 16_000_000, "numba", "cpu")[1])
    assert "store replicated (auto: 16,000,000 words, under 40,000,000 on 16 ranks" in summary_line(dict(short, sync_tiers=None), "c.json")
    assert ", store" not in summary_line(dict(short, store_choice="", sync_tiers=None), "c.json")


@pytest.mark.parametrize("world", [1, 2, 3, 5])
def test_a_rank_starts_from_its_rows_of_the_one_process_initialisation(world):
    """--store blocks, a fresh run: each rank's input block rows, made without the whole
    matrix, are the replicated initialisation's rows bit for bit; its output rows are zeros."""
    from types import SimpleNamespace

    from mpidwe.parallel import blocks
    from mpidwe.parallel.replicated import init_params
    from mpidwe.parallel.sharded import init_rows

    v, dim, seed = 300, 6, 4
    counts = zipf_counts(v, 2)
    full_in, _ = init_params(v, dim, seed)
    members, offsets = blocks.rank_blocks(counts, world)
    cfg = TrainConfig(store="blocks", dim=dim, seed=seed)
    for r in range(world):
        w_in, w_out = blocks.fresh_params(cfg, SimpleNamespace(rank=r, size=world), v, counts)
        mine = members[offsets[r]:offsets[r + 1]]
        assert len(mine) < v or world == 1
        np.testing.assert_array_equal(w_in, full_in[mine])
        assert w_out.shape == w_in.shape and not w_out.any()
        np.testing.assert_array_equal(init_rows(v, dim, seed, mine, piece_rows=7), full_in[mine])


@pytest.mark.parametrize("threads, n", [(1, 10), (2, 10), (3, 1023), (2, 1024), (4, 5000)])
def test_the_ring_encodes_and_decodes_every_row_of_a_block(threads, n):
    """by_rows (the lossy ring's encoding and decoding) covers all n rows once on any number
    of threads: with 2 threads and a block under 1,024 rows it once did half of them, so half
    a received block kept what the buffer held before."""
    from types import SimpleNamespace

    from mpidwe.parallel.blocks import BlockStore

    seen = np.zeros(n, int)

    def work(a, b):
        seen[a:b] += 1

    BlockStore.by_rows(SimpleNamespace(threads=threads), n, work)
    assert (seen == 1).all()


@pytest.mark.parametrize("n", [0, 1, 2, 7, 300])
def test_place_rows_puts_every_row_where_the_permutation_says_in_place(n):
    from mpidwe.kernels.pairs import place_rows

    rng = np.random.default_rng(n)
    rows, dest = rng.standard_normal((n, 5)).astype(np.float32), rng.permutation(n).astype(np.int64)
    want = np.empty_like(rows)
    want[dest] = rows
    place_rows(rows, dest)
    np.testing.assert_array_equal(rows, want)


@pytest.mark.parametrize("wire,vocab", [("int8", 10**7), ("int4", 10**7), ("bf16", 10**7), ("int8", 1000)])
def test_the_lossy_ring_sends_what_it_rounded_away_later_keeping_int8_residuals(wire, vocab):
    """Error feedback: over many sends of the same rows, what arrives adds up to what was
    sent, within about one rounding step, not one per send. An int8 or int4 ring keeps its
    residuals as int8 rows (a quarter of float32's memory) where float32 ones would take 256
    MB or more (a vocabulary of 10M words here), bf16 and smaller vocabularies as float32."""
    from types import SimpleNamespace

    from mpidwe.parallel.blocks import BlockStore
    from mpidwe.parallel.wire import decode, row_bytes

    rows, dim, sends = 6, 8, 400
    store = SimpleNamespace(wire=wire, dim=dim, vocab=vocab, threads=1, residual=[None], size=lambda b: rows)
    store.by_rows = lambda n, work, threads=None: BlockStore.by_rows(store, n, work, threads)
    store.carries_int8 = lambda: BlockStore.carries_int8(store)
    store.residual_row = lambda: BlockStore.residual_row(store)
    held = np.random.default_rng(3).uniform(-1, 1, (rows, dim)).astype(np.float32)
    held[:, 0] = 1.27                   # row scale 0.01 (int8): the others fall between the levels
    arrived = np.zeros((rows, dim), np.float64)
    for _ in range(sends):
        arrived += decode(BlockStore.encoded(store, held, 0, 0, rows, 1), wire, dim)
    step = {"int8": 1.27 / 127, "int4": 1.27 / 7, "bf16": 2 ** -8}[wire]
    assert np.abs(arrived - sends * held.astype(np.float64)).max() < 2 * step
    once = np.abs(decode(BlockStore.encoded(SimpleNamespace(**{**vars(store), "residual": [None]}), held, 0, 0,
                                            rows, 1), wire, dim) - held).max()
    assert sends * once > 20 * step          # without the feedback the sum would drift by sends x that
    kept = store.residual[0]
    width, kind = store.residual_row()
    assert kept.dtype == kind and kept.shape == (rows, width)
    int8 = wire != "bf16" and vocab * dim * 4 >= 256 * 2 ** 20
    assert (width, kind) == ((row_bytes("int8", dim), np.uint8) if int8 else (dim, np.float32))


def test_an_int16_ring_keeps_no_residual_and_sends_each_row_within_a_65534th_of_its_largest_value():
    from types import SimpleNamespace

    from mpidwe.parallel.blocks import BlockStore
    from mpidwe.parallel.wire import decode

    rows, dim = 5, 8
    store = SimpleNamespace(wire="int16", dim=dim, vocab=2_000_000, threads=1, residual=None, size=lambda b: rows)
    store.by_rows = lambda n, work, threads=None: BlockStore.by_rows(store, n, work, threads)
    held = np.random.default_rng(4).uniform(-1, 1, (rows, dim)).astype(np.float32)
    sent = decode(BlockStore.encoded(store, held, 0, 0, rows, 1), "int16", dim)
    assert store.residual is None
    peak = np.abs(held).max(axis=1, keepdims=True)
    assert (np.abs(sent - held) <= 0.5 / 32767 * peak * (1 + 1e-6)).all() and not np.array_equal(sent, held)


def test_the_int8_rings_one_pass_carry_is_the_three_passes_bit_for_bit():
    """wire.encode_carried (the int8 ring's error feedback in int8 rows) gives the bits of
    decoding the carried rows, encoding with feedback and encoding what was left, also for
    rows of zeros, negative zeros and a NaN."""
    from mpidwe.parallel.wire import decode, encode, encode_carried

    n, d = 300, 16
    rng = np.random.default_rng(5)
    carry, want = np.zeros((n, d + 4), np.uint8), np.zeros((n, d + 4), np.uint8)
    for step in range(6):
        rows = rng.standard_normal((n, d)).astype(np.float32) * (10.0 ** -step)
        rows[7] = 0.0
        rows[8, ::2] = -0.0
        if step == 3:
            rows[9, 4] = np.nan
        left = decode(want, "int8", d)
        sent = encode(rows, "int8", feedback=(left, np.ones(n, np.uint8)))
        want[:] = encode(left, "int8")
        np.testing.assert_array_equal(encode_carried(rows, carry), sent)
        np.testing.assert_array_equal(carry, want)
    assert np.abs(decode(carry, "int8", d)).max() > 0
