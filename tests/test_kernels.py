"""SGNS kernels: the numba kernel against the numpy reference, determinism, the
bookkeeping a distributed trainer relies on (rng state, touched rows, learning rate),
the sampling tables against word2vec's formulas, and the torch kernel learning."""

from __future__ import annotations

import numpy as np
import pytest

from mpidwe.kernels import cpu, reference
from mpidwe.kernels.args import KernelArgs
from mpidwe.kernels.common import learning_rate
from mpidwe.core.vocab import keep_probabilities, negative_probabilities, negative_table, table_probabilities

VOCAB, DIM = 40, 12
VARIANTS = [("skipgram", False), ("skipgram", True), ("cbow", False)]


def zipf_corpus(n_tokens, seed, vocab=VOCAB, mean_len=12):
    """Zipf-distributed ids cut into sentences of random length (some of length 1)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1)
    tokens = rng.choice(vocab, size=n_tokens, p=p / p.sum()).astype(np.int32)
    lengths = rng.integers(1, 2 * mean_len, size=n_tokens)
    starts = np.concatenate(([0], np.cumsum(lengths)))
    starts = starts[starts < n_tokens].astype(np.int64)
    counts = np.bincount(tokens, minlength=vocab) + 1
    return tokens, starts, counts


def make_state(seed=3, vocab=VOCAB, dim=DIM):
    """Random w_out (not zeros) so that every update changes the rows it touches."""
    rng = np.random.default_rng(seed)
    w_in = ((rng.random((vocab, dim), dtype=np.float32) - 0.5) / dim).astype(np.float32)
    w_out = ((rng.random((vocab, dim), dtype=np.float32) - 0.5) / dim).astype(np.float32)
    return dict(w_in=w_in, w_out=w_out, touched_in=np.zeros(vocab, np.uint8),
                touched_out=np.zeros(vocab, np.uint8), rng_state=np.array([12345, 678], np.uint64))


def run(kernel, state, tokens, starts, counts, *, model="skipgram", shared=False, sample=0.02,
        threads=1, **overrides):
    """One train_block call on ``state``; ``overrides`` are KernelArgs fields."""
    fields = dict(keep_prob=keep_probabilities(counts, sample), neg_table=negative_table(counts),
                  model=model, window=3, negative=4, lr0=0.05, lr_min=0.001, words_done=0.0,
                  words_scale=1.0, words_total=2 * len(tokens), threads=threads, shared_negatives=shared)
    fields.update(overrides)
    return kernel.train_block(state["w_in"], state["w_out"], tokens, starts, state["rng_state"],
                              state["touched_in"], state["touched_out"], KernelArgs(**fields))


@pytest.mark.parametrize("model,shared", VARIANTS)
def test_numba_matches_reference(model, shared):
    tokens, starts, counts = zipf_corpus(1500, seed=1)
    fast, slow = make_state(), make_state()
    got = run(cpu, fast, tokens, starts, counts, model=model, shared=shared)
    want = run(reference, slow, tokens, starts, counts, model=model, shared=shared)
    assert got[1] == want[1] > 0 and got[2] == want[2] == len(tokens)
    assert got[0] == pytest.approx(want[0], rel=1e-4)
    assert np.array_equal(fast["rng_state"], slow["rng_state"])   # same draws, same order
    for name in ("touched_in", "touched_out"):
        assert np.array_equal(fast[name], slow[name]), name
    for name in ("w_in", "w_out"):
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-4, atol=2e-6, err_msg=name)


def test_learning_rate_refresh_matches_reference():
    """Over 25k raw words the rate is refreshed twice; both kernels must use the same rates
    (window 1 and no negatives keep the reference fast)."""
    tokens, starts, counts = zipf_corpus(25_000, seed=2, mean_len=50)
    fast, slow = make_state(), make_state()
    kw = dict(window=1, negative=0, lr0=0.5, lr_min=0.0, words_total=30_000, sample=0.0)
    run(cpu, fast, tokens, starts, counts, **kw)
    run(reference, slow, tokens, starts, counts, **kw)
    np.testing.assert_allclose(fast["w_in"], slow["w_in"], rtol=1e-4, atol=1e-5)
    no_decay = make_state()
    run(cpu, no_decay, tokens, starts, counts, **dict(kw, words_total=1e12))
    assert not np.allclose(no_decay["w_in"], fast["w_in"], rtol=1e-3, atol=0)


@pytest.mark.parametrize("model,shared", VARIANTS)
def test_single_thread_is_bit_deterministic(model, shared):
    tokens, starts, counts = zipf_corpus(3000, seed=4)
    a, b = make_state(), make_state()
    ra = run(cpu, a, tokens, starts, counts, model=model, shared=shared)
    rb = run(cpu, b, tokens, starts, counts, model=model, shared=shared)
    assert ra == rb
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def test_rng_state_advances_and_resumes_exactly():
    tokens, starts, counts = zipf_corpus(2000, seed=5)
    state = make_state()
    before = state["rng_state"].copy()
    run(cpu, state, tokens, starts, counts)
    assert state["rng_state"][0] != before[0]
    assert state["rng_state"][1] == before[1]           # thread 1 did not run
    saved = {k: v.copy() for k, v in state.items()}     # a checkpoint between two blocks
    run(cpu, state, tokens[::-1].copy(), starts, counts, words_done=len(tokens))
    resumed = {k: v.copy() for k, v in saved.items()}
    run(cpu, resumed, tokens[::-1].copy(), starts, counts, words_done=len(tokens))
    for name in state:
        assert np.array_equal(state[name], resumed[name]), name


@pytest.mark.parametrize("model,shared", VARIANTS)
def test_touched_rows_are_exactly_the_changed_rows(model, shared):
    # Words 200..299 never occur and are never drawn as negatives: their rows must stay.
    tokens, starts, counts = zipf_corpus(400, seed=6, vocab=200)
    counts = np.concatenate((counts, np.zeros(100, counts.dtype)))
    state = make_state(vocab=300)
    w_in0, w_out0 = state["w_in"].copy(), state["w_out"].copy()
    run(cpu, state, tokens, starts, counts, model=model, shared=shared)
    changed_in = np.any(state["w_in"] != w_in0, axis=1)
    changed_out = np.any(state["w_out"] != w_out0, axis=1)
    assert 0 < changed_in.sum() < 200 and 0 < changed_out.sum() <= 200
    assert np.array_equal(state["touched_in"].astype(bool), changed_in)
    assert np.array_equal(state["touched_out"].astype(bool), changed_out)


def test_learning_rate_never_below_lr_min():
    assert learning_rate(0.025, 0.001, 10_000, 1.0, 5_000, 10_000) == 0.001
    assert learning_rate(0.025, 0.001, 0, 4.0, 2_500, 20_000) == pytest.approx(0.025 * 0.5)
    # Past the end of the schedule the kernel trains at exactly lr_min.
    tokens, starts, counts = zipf_corpus(2000, seed=7)
    late, floor = make_state(), make_state()
    run(cpu, late, tokens, starts, counts, lr0=0.05, lr_min=0.002, words_done=10**9, words_total=1000)
    run(cpu, floor, tokens, starts, counts, lr0=0.002, lr_min=0.002, words_total=1e12)
    assert np.array_equal(late["w_in"], floor["w_in"])
    assert np.array_equal(late["w_out"], floor["w_out"])


@pytest.mark.parametrize("kernel", [cpu, reference])
@pytest.mark.parametrize("model", ["skipgram", "cbow"])
def test_windows_stop_at_sentence_boundaries(kernel, model):
    lengths = [1, 2, 3, 1, 5, 1]
    tokens = np.arange(sum(lengths), dtype=np.int32) % VOCAB
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    counts = np.ones(VOCAB)
    state = make_state()
    _, n_examples, _ = run(kernel, state, tokens, starts, counts, model=model, sample=0.0, window=1)
    # window 1: skip-gram has 2 (L - 1) pairs per sentence, CBOW one example per word of a
    # sentence longer than 1; any pair across a boundary would add to these counts.
    expected = sum(2 * (n - 1) for n in lengths) if model == "skipgram" else sum(n for n in lengths if n > 1)
    assert n_examples == expected


def test_one_word_sentences_train_nothing():
    tokens = np.arange(20, dtype=np.int32)
    starts = np.arange(20, dtype=np.int64)
    state = make_state()
    w_in0 = state["w_in"].copy()
    loss, n_examples, words = run(cpu, state, tokens, starts, np.ones(VOCAB), sample=0.0)
    assert (loss, n_examples, words) == (0.0, 0, 20)
    assert np.array_equal(state["w_in"], w_in0) and not state["touched_in"].any()


@pytest.mark.parametrize("shared", [False, True])
def test_two_threads_train_and_use_their_own_rng(shared):
    tokens, starts, counts = zipf_corpus(4000, seed=8)
    state = make_state()
    before = state["rng_state"].copy()
    loss, n_examples, words = run(cpu, state, tokens, starts, counts, threads=2, shared=shared)
    one = make_state()
    _, n_one, _ = run(cpu, one, tokens, starts, counts, shared=shared)
    assert words == len(tokens) and np.all(state["rng_state"] != before)
    assert abs(n_examples - n_one) < 0.1 * n_one and np.isfinite(loss)


def test_bad_arguments_are_refused():
    tokens, starts, counts = zipf_corpus(100, seed=9)
    state = make_state()
    with pytest.raises(TypeError, match="tokens"):
        run(cpu, state, tokens.astype(np.int64), starts, counts)
    with pytest.raises(ValueError, match="token ids"):
        run(cpu, state, tokens + VOCAB, starts, counts)
    with pytest.raises(ValueError, match="rng_state"):
        run(cpu, state, tokens, starts, counts, threads=3)
    with pytest.raises(ValueError, match="shared_negatives"):
        run(cpu, state, tokens, starts, counts, model="cbow", shared=True)


# ------------------------------------------------------------------ sampling tables
def test_keep_probabilities_follow_word2vec():
    counts = np.array([1_000_000, 10_000, 100, 1])
    sample, total = 1e-3, counts.sum()
    keep = keep_probabilities(counts, sample)
    for c, k in zip(counts, keep):
        want = min(1.0, (np.sqrt(c / (sample * total)) + 1) * (sample * total) / c)
        assert k == pytest.approx(want, rel=1e-6)
    assert keep[0] < keep[1] < 1.0 and keep[-1] == 1.0
    assert np.all(keep_probabilities(counts, 0.0) == 1.0)


def test_negative_table_draws_unigram_to_the_three_quarters():
    counts = np.array([5, 1000, 37, 1, 250_000, 12, 5, 900])
    table = negative_table(counts)
    want = counts**0.75 / np.sum(counts**0.75)
    np.testing.assert_allclose(table_probabilities(table), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(negative_probabilities(counts), want)
    # The kernels' draw (reference.Lcg.negative) samples that distribution.
    rng = reference.Lcg(42)
    draws = np.bincount([rng.negative(table) for _ in range(200_000)], minlength=len(counts))
    np.testing.assert_allclose(draws / draws.sum(), want, atol=0.004)


# ------------------------------------------------------------------ torch
def planted_corpus(n_sentences=400, seed=0):
    """Two topics of 10 words each; a sentence uses one topic only, so the model can learn
    that words co-occur within topics."""
    rng = np.random.default_rng(seed)
    sentences = [rng.integers(0, 10, 8) + 10 * rng.integers(0, 2) for _ in range(n_sentences)]
    tokens = np.concatenate(sentences).astype(np.int32)
    starts = np.arange(0, len(tokens), 8, dtype=np.int64)
    return tokens, starts, np.bincount(tokens, minlength=20)


@pytest.fixture
def torch_one_thread():
    """One intra-op thread: spinning OpenMP threads make tiny batches slow on a busy machine."""
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(before)


@pytest.mark.parametrize("model", ["skipgram", "cbow"])
def test_torch_kernel_learns_planted_topics(model, torch_one_thread):
    torch = torch_one_thread
    from mpidwe.kernels import torch_kernel
    tokens, starts, counts = planted_corpus()
    state = make_state(vocab=20, dim=16)
    state["w_out"][:] = 0
    w_in, w_out = torch.from_numpy(state["w_in"]), torch.from_numpy(state["w_out"])
    losses = []
    for epoch in range(8):
        args = KernelArgs(keep_prob=keep_probabilities(counts, 0.0), neg_table=negative_table(counts),
                          model=model, window=3, negative=4, lr0=0.05, lr_min=0.001,
                          words_done=epoch * len(tokens), words_total=8 * len(tokens), batch_size=32)
        loss, n_examples, _ = torch_kernel.train_block(w_in, w_out, tokens, starts, state["rng_state"],
                                                       state["touched_in"], state["touched_out"], args)
        losses.append(loss / n_examples)
    assert losses[-1] < 0.9 * losses[0]     # the floor is about 1.83: topics are uniform inside
    v = state["w_in"] / np.linalg.norm(state["w_in"], axis=1, keepdims=True)
    sim = v @ v.T
    same = np.mean([sim[i, j] for i in range(20) for j in range(20) if i != j and i // 10 == j // 10])
    other = np.mean([sim[i, j] for i in range(20) for j in range(20) if i // 10 != j // 10])
    assert same > other + 0.3
    assert state["touched_in"].all() and state["touched_out"].all()


# ------------------------------------------------------------------ the compiled kernel's plumbing
def test_disk_cache_stamp_covers_every_compiled_module():
    """numba stamps a cached function with its own file only; the chunk function inlines
    code from every module of kernels/ that jit-compiles (tokenize.py aside: its own cache), so
    kernels/cache.py must list each of them, or an edit would leave stale machine code in use."""
    from pathlib import Path

    from mpidwe.kernels import cache
    here = Path(cache.__file__).parent
    compiled = {p.stem for p in here.glob("*.py") if "@njit" in p.read_text() or "@overload" in p.read_text()}
    assert compiled - {"tokenize"} <= set(cache.SOURCES)


def test_planner_refuses_what_it_cannot_plan():
    from mpidwe.core.huffman import build_tree
    from mpidwe.kernels.plan import plan_block
    tokens, starts, counts = zipf_corpus(100, seed=9)
    marks = np.zeros(VOCAB, np.uint8), np.zeros(VOCAB, np.uint8)
    args = KernelArgs(keep_prob=keep_probabilities(counts, 0.0), neg_table=negative_table(counts), words_total=100,
                      hs=build_tree(counts).tables())
    with pytest.raises(ValueError, match="negative sampling"):
        plan_block(tokens, starts, np.array([1], np.uint64), *marks, args)
