"""The compiled sentence loop: one thread's chunk of a block, centre word by centre word.

For every sentence: subsampling, then per kept word the learning-rate refresh, the shrunk
window and the centre's update (its noise draws included), in the order of the contract in
common.py. The update itself is one of the rules of negative.py or hsoftmax.py, chosen by
``mode``, a compile-time constant like the embedding size ``dim`` (their loops then become
straight-line SIMD code). The arguments come in named tuples, one per kind, built once per
call by ``chunks`` and ``targets_of`` (numba compiles a named tuple's fields as if they were
separate arguments).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import literally, njit

from .cache import stamp_sources
from .common import LR_REFRESH_WORDS, check_hs, split_sentences
from .hsoftmax import cbow_center_hs, mark_path, skipgram_pair_hs
from .inputs import input_row, input_rows, load, step_rows, store
from .negative import cbow_center, skipgram_pair
from .rows import mark
from .sampling import draw_negatives, longest_sentence, sentence, shrunk_window, subsample
from .window import shared_window

# Kernel modes, a compile-time constant of the chunk function (HS: hierarchical softmax).
SKIPGRAM, SKIPGRAM_SHARED, CBOW = 0, 1, 2
SKIPGRAM_HS, SKIPGRAM_HS_SHARED, CBOW_HS = 3, 4, 5

# the tree of the negative-sampling modes (never read there)
_NO_TREE = (np.zeros((1, 1), np.uint8), np.zeros((1, 1), np.int32), np.zeros(1, np.int32))


class Chunk(NamedTuple):
    """What one thread trains: sentences [s_lo, s_hi) of the block, subsampled by keep_prob,
    in windows of up to ``window``; its random stream is rng_state[tid], and progress[tid]
    its raw words done (the learning rate reads the sum over the threads)."""
    tokens: np.ndarray
    sent_starts: np.ndarray
    s_lo: int
    s_hi: int
    keep_prob: np.ndarray
    window: int
    tid: int
    rng_state: np.ndarray
    progress: np.ndarray


class Targets(NamedTuple):
    """How a centre's output rows are chosen: ``negative`` draws from the alias table
    ``neg_table`` (each mapped through the working set's ``neg_slots`` unless it is None), or
    the centre's Huffman path (codes, points, lengths; dummies in the negative modes)."""
    neg_table: np.ndarray
    neg_slots: np.ndarray | None
    negative: int
    codes: np.ndarray
    points: np.ndarray
    lengths: np.ndarray


class Schedule(NamedTuple):
    """The learning rate's linear decay with global progress (common.learning_rate)."""
    lr0: float
    lr_min: float
    words_done: float
    words_scale: float
    words_total: float


class Scratch(NamedTuple):
    """A chunk's buffers: the kept words of a sentence and their raw offsets, a window's
    contexts and outputs (the centre, then the noise words, and their Huffman-style codes), the
    gradients, and for subwords the window's means (hbuf; hold: as gathered), their rows
    (local) and a throwaway mask."""
    kept: np.ndarray
    raw_pos: np.ndarray
    contexts: np.ndarray
    negs: np.ndarray
    h: np.ndarray
    grad_h: np.ndarray
    scores_g: np.ndarray
    scores_t: np.ndarray    # scores_g transposed: an output row's gradients, contiguous
    grad_in: np.ndarray
    hbuf: np.ndarray
    hold: np.ndarray
    local: np.ndarray
    no_touch: np.ndarray
    codes: np.ndarray       # of the outputs in negs: 0 for the centre, 1 for the noise words


class Work(NamedTuple):
    """What a centre's update reads and writes: the parameters, the rows the rules train
    (the parameters, or the subwords' buffer: inputs.step_rows), the buffers and the targets.
    (``subwords`` travels beside it: numba compiles the branches on ``subwords is None`` away
    only for a function's own argument.)"""
    params: tuple
    rows: tuple
    scratch: Scratch
    targets: Targets


def mode_of(args) -> int:
    """The kernel mode of a KernelArgs."""
    if args.hs is not None:
        return CBOW_HS if args.model == "cbow" else (SKIPGRAM_HS_SHARED if args.shared_negatives else SKIPGRAM_HS)
    return CBOW if args.model == "cbow" else (SKIPGRAM_SHARED if args.shared_negatives else SKIPGRAM)


def targets_of(args, n_out: int) -> Targets:
    """The Targets of a KernelArgs whose output matrix has n_out rows (HS: no noise draws)."""
    if args.hs is not None:
        return Targets(args.neg_table, args.neg_slots, 0, *check_hs(args.hs, n_out))
    return Targets(args.neg_table, args.neg_slots, args.negative, *_NO_TREE)


def chunks(tokens, sent_starts, rng_state, args) -> list[Chunk]:
    """The block cut into ``args.threads`` contiguous chunks of about equal token counts."""
    bounds = split_sentences(sent_starts, len(tokens), args.threads)
    progress = np.zeros(args.threads, dtype=np.int64)
    return [Chunk(tokens, sent_starts, bounds[t], bounds[t + 1], args.keep_prob, args.window, t, rng_state,
                  progress) for t in range(args.threads)]


def chunk_function(mode):
    """The chunk function of one mode. ``mode`` is a constant of the closure, so numba prunes
    the other modes' branches before typing them (a fraction of the compile time); ``dim`` is
    a literal argument (compile with ``types.IntegerLiteral``). Both compile to constants."""

    @njit(nogil=True, fastmath=True, cache=True)
    def train_chunk(dim, params, chunk, targets, schedule, subwords):
        """Train the chunk's sentences; returns (loss_sum, n_examples). ``params``: a rows.Params;
        ``subwords``: None, or (ptr, ids) of kernels/__init__.py."""
        dim = literally(dim)
        scratch = make_scratch(chunk, targets, dim)
        work = Work(params, step_rows(subwords, params, scratch), scratch, targets)
        kept, raw_pos = scratch.kept, scratch.raw_pos
        state = chunk.rng_state[chunk.tid]
        raw_done = 0
        last_refresh = 0
        lr = refresh_lr(chunk, 0, schedule)
        loss = 0.0
        n_examples = 0
        for si in range(chunk.s_lo, chunk.s_hi):
            beg, end = sentence(chunk, si)
            n, state = subsample(chunk.tokens, beg, end, chunk.keep_prob, state, kept, raw_pos, raw_done)
            for pos in range(n):
                if raw_pos[pos] - last_refresh >= LR_REFRESH_WORDS:
                    last_refresh = raw_pos[pos]
                    lr = refresh_lr(chunk, last_refresh, schedule)
                state, lo, hi = shrunk_window(state, chunk.window, pos, n)
                center = kept[pos]
                if mode == SKIPGRAM or mode == SKIPGRAM_HS:       # one (context, centre) pair at a time
                    for c in range(lo, hi + 1):
                        if c != pos:
                            state, pair_loss = train_pair(mode, dim, work, subwords, kept[c], center, lr, state)
                            loss += pair_loss
                    n_examples += hi - lo
                    if hi > lo:
                        mark_centre(mode, work, center)
                elif hi > lo:                                   # the whole window at once
                    n_ctx = open_window(subwords, work, (pos, lo, hi), dim)
                    contexts = input_rows(subwords, scratch)
                    if mode == SKIPGRAM_SHARED or mode == CBOW:
                        state, window_loss = noise_window(mode, dim, work, contexts, n_ctx, center, lr, state)
                    else:
                        window_loss = path_window(mode, dim, work, contexts, n_ctx, center, lr)
                    loss += window_loss
                    close_window(subwords, work, n_ctx, dim)
                    n_examples += 1 if mode == CBOW or mode == CBOW_HS else n_ctx
            raw_done += end - beg
        chunk.rng_state[chunk.tid] = state
        chunk.progress[chunk.tid] = raw_done
        return loss, n_examples

    stamp_sources(train_chunk)
    return train_chunk


TRAIN_CHUNK = tuple(chunk_function(mode) for mode in range(CBOW_HS + 1))


@njit(inline="always")
def make_scratch(chunk, targets, dim):
    longest = longest_sentence(chunk)
    m = 2 * chunk.window
    n_out = max(targets.negative + 1, targets.points.shape[1])
    return Scratch(np.empty(longest, np.int32), np.empty(longest, np.int64), np.empty(m, np.int64),
                   np.empty(targets.negative + 1, np.int64), np.empty(dim, np.float32), np.empty(dim, np.float32),
                   np.empty((m, n_out), np.float32), np.empty((n_out, m), np.float32), np.empty((m, dim), np.float32),
                   np.empty((m, dim), np.float32), np.empty((m, dim), np.float32),
                   np.arange(m).astype(np.int64), np.zeros(m, np.uint8), _noise_codes(targets.negative))


@njit(inline="always")
def _noise_codes(negative):
    codes = np.ones(negative + 1, np.uint8)
    codes[0] = 0
    return codes


@njit(inline="always")
def refresh_lr(chunk, local_words, schedule):
    """Publish this thread's progress and read everyone's: the block's progress is the sum
    (other threads' slots are read without locks; a stale value only delays the decay)."""
    chunk.progress[chunk.tid] = local_words
    block_words = 0
    for t in range(chunk.progress.shape[0]):
        block_words += chunk.progress[t]
    s = schedule
    return max(s.lr_min, s.lr0 * (1.0 - (s.words_done + s.words_scale * block_words) / s.words_total))


@njit(inline="always")
def train_pair(mode, dim, work, subwords, word, center, lr, state):
    """Skip-gram's (context, centre) pair: it draws its own noise words (or walks the
    centre's path), and the context's input row moves after its targets. Returns (state, loss)."""
    scratch = work.scratch
    load(subwords, work.params, scratch, word, 0, dim)
    row = input_row(subwords, word, 0)
    if mode == SKIPGRAM:
        outs = scratch.negs
        outs[0] = center                                  # the positive is output 0
        state, n_negs = draw_negatives(state, center, work.targets, outs[1:], work.params.w_out)
        loss = skipgram_pair(work.rows, row, outs, n_negs + 1, lr, scratch.grad_h, dim)
    else:
        loss = skipgram_pair_hs(work.rows, row, work.targets, center, lr, scratch.grad_h, dim)
    store(subwords, work.params, scratch, word, 0, dim)
    return state, loss


@njit(inline="always")
def mark_centre(mode, work, center):
    """The centre's output rows, once per centre: its own (noise) or its path's."""
    if mode == SKIPGRAM:
        mark(work.params.touched_out, center)
    else:
        mark_path(work.params.touched_out, work.targets, center)


@njit(inline="always")
def open_window(subwords, work, span, dim):
    """The contexts of the centre at span = (pos, lo, hi) into scratch.contexts (and, with
    subwords, their means into the buffer); returns how many."""
    pos, lo, hi = span
    scratch = work.scratch
    n_ctx = 0
    for c in range(lo, hi + 1):
        if c != pos:
            scratch.contexts[n_ctx] = scratch.kept[c]
            load(subwords, work.params, scratch, scratch.kept[c], n_ctx, dim)
            n_ctx += 1
    return n_ctx


@njit(inline="always")
def close_window(subwords, work, n_ctx, dim):
    """With subwords: every context's rows receive its mean's change."""
    for i in range(n_ctx):
        store(subwords, work.params, work.scratch, work.scratch.contexts[i], i, dim)


@njit(inline="always")
def noise_window(mode, dim, work, contexts, n_ctx, center, lr, state):
    """Shared negatives or CBOW: one draw of noise words serves the window. Returns (state, loss)."""
    scratch = work.scratch
    outs = scratch.negs
    outs[0] = center                                      # the positive is output 0
    state, n_negs = draw_negatives(state, center, work.targets, outs[1:], work.params.w_out)
    if mode == SKIPGRAM_SHARED:
        noise = (outs, scratch.codes, n_negs + 1, False)
        return state, shared_window(work.rows, contexts, n_ctx, noise, lr, scratch, dim)
    return state, cbow_center(work.rows, contexts, n_ctx, outs, n_negs + 1, lr, scratch, dim)


@njit(inline="always")
def path_window(mode, dim, work, contexts, n_ctx, center, lr):
    """Hierarchical softmax, the window sharing the centre's path (skip-gram) or CBOW."""
    tree = work.targets
    if mode == SKIPGRAM_HS_SHARED:
        path = (tree.points[center], tree.codes[center], tree.lengths[center], True)
        return shared_window(work.rows, contexts, n_ctx, path, lr, work.scratch, dim)
    loss = cbow_center_hs(work.rows, contexts, n_ctx, tree, center, lr, work.scratch, dim)
    mark_path(work.params.touched_out, tree, center)
    return loss
