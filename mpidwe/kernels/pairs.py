"""Block-partitioned skip-gram (``--store blocks``), compiled: a round's training pairs, their
sorting into buckets, and the training of one bucket with noise words from one block.

A pair (inp, out) is word2vec's skip-gram example: the input row of the context word
``inp`` predicts the centre word ``out`` against noise words. The pairs of a round are made
where the text is read (``window_pairs``), sent to the rank that owns ``inp``'s block, sorted
there by ``out``'s block (``partition``) and trained one bucket per ring step
(``train_bucket``), with every noise word drawn from the output block the rank holds.

Random draws (the contract of common.py, for this store): ``window_pairs`` draws, sentence
by sentence, the subsampling uniforms (one per token whose keep probability is < 1) and per
kept position one ``below(window)`` for its shrunk window, from the rank's first stream;
``train_bucket`` draws ``negative`` noise words per pair (shared negatives: per run of pairs
with the same output word, at most 2 x window long), thread t of a bucket from stream t,
each a bucket of the block's alias table from the high bits of (state >> 32) x n and the
coin from its low bits, as draw_negative does for the whole vocabulary.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import literally, njit, typeof, types

from .cache import stamp_sources
from .common import split_sentences
from .cpu import run_threads
from .negative import skipgram_pair
from .rows import Params
from .sampling import lcg, prefetch_row, shrunk_window, subsample
from .window import shared_window

_S32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)


@njit(cache=True, nogil=True)
def window_pairs(tokens, sent_starts, keep_prob, window, position, rng_state):
    """The skip-gram pairs of a piece: (inp int32 [n], out int32 [n]), contexts before the
    centre's right side, centre by centre, each centre as ``position[centre]`` (the row of
    the block store's output matrix, kept in block order); ``rng_state[0]`` advances in place."""
    state = rng_state[0]
    n_tokens = tokens.shape[0]
    cap = n_tokens * 2 * window
    inp = np.empty(cap, np.int32)
    out = np.empty(cap, np.int32)
    kept = np.empty(n_tokens, np.int32)
    raw_pos = np.empty(n_tokens, np.int64)
    n = 0
    n_sent = sent_starts.shape[0]
    for s in range(n_sent):
        beg = sent_starts[s]
        end = sent_starts[s + 1] if s + 1 < n_sent else n_tokens
        m, state = subsample(tokens, beg, end, keep_prob, state, kept, raw_pos, 0)
        for i in range(m):
            state, lo, hi = shrunk_window(state, window, i, m)
            for j in range(lo, hi + 1):
                if j != i:
                    inp[n] = kept[j]
                    out[n] = position[kept[i]]
                    n += 1
    rng_state[0] = state
    return inp[:n].copy(), out[:n].copy()


@njit(cache=True, nogil=True)
def count_groups(inp, out, block_of, by_out, parts, lo, hi):
    """How many of pairs [lo, hi) fall in each block (of the output word, ``by_out``, or of
    the input word)."""
    counts = np.zeros(parts, np.int64)
    for i in range(lo, hi):
        counts[block_of[out[i]] if by_out else block_of[inp[i]]] += 1
    return counts


@njit(cache=True, nogil=True)
def scatter_groups(inp, out, block_of, by_out, lo, hi, fill, to):
    """Pairs [lo, hi) to their block's next free slots ``fill`` (advanced in place) of ``to``
    = (inputs, outputs)."""
    inp_to, out_to = to
    for i in range(lo, hi):
        k = block_of[out[i]] if by_out else block_of[inp[i]]
        j = fill[k]
        inp_to[j] = inp[i]
        out_to[j] = out[i]
        fill[k] = j + 1


def partition(inp, out, block_of, by_out: bool, parts: int, inp_to, out_to, threads: int = 1) -> np.ndarray:
    """Pairs into ``inp_to``/``out_to`` grouped by the block of their output word (``by_out``)
    or of their input word, stably (a counting sort: each thread counts, then scatters, a
    contiguous share, so the order is the same on any number of threads); returns starts
    int64 [parts + 1]: group b is [starts[b], starts[b + 1])."""
    cuts = np.linspace(0, len(inp), threads + 1).astype(np.int64)
    counts = np.stack(by_threads(lambda t: count_groups(inp, out, block_of, by_out, parts, cuts[t], cuts[t + 1]),
                                 threads))
    starts = np.zeros(parts + 1, np.int64)
    np.cumsum(counts.sum(axis=0), out=starts[1:])
    fill = starts[:parts] + np.cumsum(counts, axis=0) - counts        # [thread, block]: its first slot
    by_threads(lambda t: scatter_groups(inp, out, block_of, by_out, cuts[t], cuts[t + 1], fill[t], (inp_to, out_to)),
               threads)
    return starts


def by_threads(work, threads: int) -> list:
    """``work(t)`` for t in range(threads), on as many threads (the compiled work releases the
    GIL); the results in order."""
    return [work(0)] if threads == 1 else run_threads(work, threads)


@njit(inline="always")
def draw_in_block(state, table, members, lo, n):
    """A noise word of the block members[lo:lo + n] (its alias table table[lo:lo + n])."""
    scaled = (state >> _S32) * np.uint64(n)
    bucket = np.int64(scaled >> _S32)
    if np.uint32(scaled & _LOW32) < table[lo + bucket, 0]:
        return members[lo + bucket]
    return members[lo + np.int64(table[lo + bucket, 1])]


class Noise(NamedTuple):
    """Where a bucket's noise words come from: block members[lo:lo + n] and its alias table."""
    table: np.ndarray
    members: np.ndarray
    lo: int
    n: int
    negative: int
    shared: bool          # consecutive pairs with the same output word share one draw (pWord2Vec)
    group: int            # at most this many pairs share a draw (a window's contexts: 2 x --window)


class Scratch(NamedTuple):
    """A shared draw's buffers (window.shared_window reads these fields)."""
    scores_g: np.ndarray
    scores_t: np.ndarray
    grad_in: np.ndarray
    contexts: np.ndarray
    codes: np.ndarray


class Bucket(NamedTuple):
    """The pairs of a bucket, and where each thread's share starts."""
    inp: np.ndarray
    out: np.ndarray
    cuts: np.ndarray


class Span(NamedTuple):
    """A bucket's learning-rate schedule: pair i of len(inp) trains at the linear schedule's
    rate at global words done0 + span x i / len(inp)."""
    lr0: float
    lr_min: float
    done0: float
    span: float
    total: float


@njit(nogil=True, fastmath=True, cache=True)
def train_span(dim, rows, bucket, noise, sched, rng_state, tid, result):
    """Train thread ``tid``'s share of a bucket, its pairs [cuts[tid], cuts[tid + 1]), with
    word2vec's skip-gram pair update (negative.skipgram_pair: the SIMD row code of the numba
    kernel); ``rows`` is a rows.Params. Loss and examples go to result[tid]."""
    dim = literally(dim)
    inp, out = bucket.inp, bucket.out
    a, b = bucket.cuts[tid], bucket.cuts[tid + 1]
    state = rng_state[tid]
    grad = np.empty(dim, np.float32)
    n_out = noise.negative + 1
    outs = np.empty(n_out, np.int64)
    m = max(noise.group, 1)
    codes = np.ones(n_out, np.uint8)
    codes[0] = 0
    scratch = Scratch(np.empty((m, n_out), np.float32), np.empty((n_out, m), np.float32),
                      np.empty((m, dim), np.float32), np.empty(m, np.int64), codes)
    n_all = max(inp.shape[0], 1)
    loss = 0.0
    i = a
    while i < b:
        lr = max(sched.lr_min, sched.lr0 * (1.0 - (sched.done0 + sched.span * i / n_all) / sched.total))
        centre = out[i]
        e = i + 1
        if noise.shared:                  # the pairs of one centre's window that this bucket holds
            while e < b and e - i < m and out[e] == centre:
                e += 1
        outs[0] = centre
        kept = 1
        for _ in range(noise.negative):
            state = lcg(state)
            target = draw_in_block(state, noise.table, noise.members, noise.lo, noise.n)
            if target != centre:
                outs[kept] = target
                kept += 1
                prefetch_row(rows.w_out, target)
        if e - i == 1:
            loss += skipgram_pair(rows, inp[i], outs, kept, lr, grad, dim)
        else:
            for c in range(e - i):
                scratch.contexts[c] = inp[i + c]
            loss += shared_window(rows, scratch.contexts, e - i, (outs, codes, kept, False), lr, scratch, dim)
        i = e
    rng_state[tid] = state
    result[tid, 0] = loss
    result[tid, 1] = b - a


@njit(cache=True, nogil=True)
def place_rows(rows, dest):
    """Move row i of ``rows`` to row dest[i] (a permutation), in place: one row of scratch,
    each cycle of the permutation followed once."""
    n, d = rows.shape
    done = np.zeros(n, np.uint8)
    carried = np.empty(d, rows.dtype)
    for start in range(n):
        if done[start]:
            continue
        done[start] = 1
        if dest[start] == start:
            continue
        carried[:] = rows[start]
        i = dest[start]
        while True:                 # put the carried row at i, carry on with the one it displaces
            for c in range(d):
                x = rows[i, c]
                rows[i, c] = carried[c]
                carried[c] = x
            done[i] = 1
            if i == start:
                break
            i = dest[i]


for _dispatcher in (window_pairs, count_groups, scatter_groups, train_span, place_rows):
    stamp_sources(_dispatcher)


def train_bucket(rows: Params, inp, out, noise: Noise, sched: Span, rng_state, threads: int) -> tuple[float, int]:
    """Train one bucket's pairs in place, Hogwild on ``threads`` threads (each a contiguous
    share, its own random stream); noise words from ``noise``'s block. Returns (loss sum,
    examples)."""
    if len(inp) == 0:
        return 0.0, 0
    result = np.zeros((max(threads, 1), 2), np.float64)
    cuts = np.linspace(0, len(inp), threads + 1).astype(np.int64)
    dim = rows.w_in.shape[1]
    bucket = Bucket(inp, out, cuts)
    compiled = _compiled_span(dim, (rows, bucket, noise, sched, rng_state, 0, result))

    def run(t):
        compiled(dim, rows, bucket, noise, sched, rng_state, t, result)

    if threads == 1:
        run(0)
    else:
        run_threads(run, threads)
    return float(result[:, 0].sum()), int(result[:, 1].sum())


_COMPILED = {}


def _compiled_span(dim: int, rest: tuple):
    """train_span's machine code for ``dim`` (a compile-time constant, as cpu._compiled_chunk)."""
    compiled = _COMPILED.get(dim)
    if compiled is None:
        argtypes = (types.IntegerLiteral(dim),) + tuple(typeof(a) for a in rest)
        compiled = _COMPILED[dim] = train_span.compile(argtypes)
    return compiled


def piece_pairs(tokens, sent_starts, keep_prob, window: int, position, rng_state, threads: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of a piece (window_pairs) on ``threads`` threads: thread t makes those of
    its contiguous share of the sentences from random stream t, in order (cpu.chunks' split)."""
    if threads == 1 or len(sent_starts) < 2 * threads:
        return window_pairs(tokens, sent_starts, keep_prob, window, position, rng_state)
    bounds = split_sentences(sent_starts, len(tokens), threads)

    def run(t):
        s_lo, s_hi = bounds[t], bounds[t + 1]
        lo = sent_starts[s_lo] if s_lo < len(sent_starts) else len(tokens)
        hi = sent_starts[s_hi] if s_hi < len(sent_starts) else len(tokens)
        state = rng_state[t:t + 1]             # a view: the thread's stream advances in place
        return window_pairs(tokens[lo:hi], sent_starts[s_lo:s_hi] - lo, keep_prob, window, position, state)

    made = run_threads(run, threads)
    return np.concatenate([m[0] for m in made]), np.concatenate([m[1] for m in made])
