"""SGNS / CBOW training on the CPU with numba: word2vec's algorithm, compiled.

``train_block`` (signature in kernels/__init__.py) trains one block of tokens in place.
Speed comes from four choices, each measured against gensim in benchmarks/kernel_speed.py:

* the embedding size is compiled in (numba ``literally``), so the loops over it become
  straight-line SIMD code instead of a generic loop with a long scalar tail (1.6x);
* negatives come from a small alias table (kernels stay in cache) and their rows are
  prefetched as soon as they are drawn, while the positive pair is being computed;
* dot, sigmoid-table lookup and both updates are fused in one pass per target row;
* optionally (``shared_negatives=True``, skip-gram only) one set of negatives serves the
  whole window of a centre word, as in Intel's pWord2Vec: the window is then a small
  [contexts x (1 + negative)] matrix product whose rows stay in L1.

Threads are Python threads running the nogil chunk function on contiguous sentence ranges
of the block (Hogwild: no locks). The compiled code is cached on disk (``cache=True``), so
only the first run on a machine pays the compile time, once per (model, dim).
"""

from __future__ import annotations

import threading

import numpy as np
from llvmlite import binding, ir
from numba import literally, njit, typeof, types
from numba.core import cgutils
from numba.extending import intrinsic

from .common import (LCG_INCREMENT, LCG_MULTIPLIER, LR_REFRESH_WORDS, MAX_EXP, SIGMOID_BIN_SCALE, check_block,
    check_hs, sigmoid_tables, split_sentences)

SIGMOID, LOSS = sigmoid_tables()

# Kernel modes, a compile-time constant of the chunk function (HS: hierarchical softmax).
SKIPGRAM, SKIPGRAM_SHARED, CBOW = 0, 1, 2
SKIPGRAM_HS, SKIPGRAM_HS_SHARED, CBOW_HS = 3, 4, 5

_A = np.uint64(LCG_MULTIPLIER)
_C = np.uint64(LCG_INCREMENT)
_S32 = np.uint64(32)
_S40 = np.uint64(40)
_LOW32 = np.uint64(0xFFFFFFFF)
# The prefetch intrinsic is named after its pointer type: opaque `ptr` from LLVM 17 on.
_PREFETCH = "llvm.prefetch.p0" if binding.llvm_version_info >= (17,) else "llvm.prefetch.p0i8"


# ------------------------------------------------------------------ random numbers
@njit(inline="always")
def _lcg(state):
    return state * _A + _C


@njit(inline="always")
def _below(state, n):
    """An integer in [0, n) from the high 32 bits (multiply-shift: no division)."""
    return np.int64(((state >> _S32) * np.uint64(n)) >> _S32)


@njit(inline="always")
def _uniform(state):
    return np.float32(state >> _S40) * np.float32(1.0 / 16777216.0)


@njit(inline="always")
def _draw_negative(state, table):
    """Alias draw: bucket from the high bits of (state >> 32) * V, coin from its low bits."""
    scaled = (state >> _S32) * np.uint64(table.shape[0])
    bucket = np.int64(scaled >> _S32)
    if np.uint32(scaled & _LOW32) < table[bucket, 0]:
        return bucket
    return np.int64(table[bucket, 1])


@intrinsic
def _prefetch_row(typingctx, matrix, row):
    """Hint the cache to fetch every 64-byte line of matrix[row]; results do not change."""
    def codegen(context, builder, sig, args):
        mty = sig.args[0]
        mat = context.make_array(mty)(context, builder, args[0])
        row_i = context.cast(builder, args[1], sig.args[1], types.intp)
        zero = context.get_constant(types.intp, 0)
        ptr = cgutils.get_item_pointer(context, builder, mty, mat, [row_i, zero])
        base = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [base.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH)
        row_bytes = builder.mul(builder.extract_value(mat.shape, 1),
                                context.get_constant(types.intp, mty.dtype.bitwidth // 8))
        with cgutils.for_range_slice(builder, zero, row_bytes,
                                     context.get_constant(types.intp, 64)) as (offset, _):
            # (read, highest locality, data cache)
            builder.call(fn, [builder.gep(base, [offset]), ir.Constant(i32, 0),
                              ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(matrix, row), codegen


# ------------------------------------------------------------------ one training step
@njit(inline="always")
def _mark(touched, row):
    """touched[row] = 1, writing only if needed: the flags of frequent words share cache
    lines, and a store (even of the same value) would bounce them between Hogwild cores."""
    if touched[row] == 0:
        touched[row] = 1


@njit(inline="always")
def _gradient(score, label, lr, sigmoid, loss_table):
    """(g, loss) for one score: g = (label - sigmoid(score)) * lr from word2vec's table;
    beyond +-MAX_EXP the saturated gradient, and the loss by its linear asymptote."""
    if score >= MAX_EXP:
        return np.float32((label - 1) * lr), (score if label == 0 else 0.0)
    if score <= -MAX_EXP:
        return np.float32(label * lr), (-score if label == 1 else 0.0)
    i = int((score + MAX_EXP) * SIGMOID_BIN_SCALE)
    return np.float32((label - sigmoid[i]) * lr), np.float64(loss_table[label, i])


@njit(inline="always")
def _update_target(h, out_row, label, grad_h, lr, sigmoid, loss_table, dim):
    """One target of a pair: score h . out_row, then grad_h += g out_row, out_row += g h."""
    score = np.float32(0.0)
    for k in range(dim):
        score += h[k] * out_row[k]
    g, loss = _gradient(score, label, lr, sigmoid, loss_table)
    for k in range(dim):
        grad_h[k] += g * out_row[k]
        out_row[k] += g * h[k]
    return loss


@njit(inline="always")
def _draw_negatives(state, n_draws, skip, table, negs, w_out, slots):
    """Draw n_draws noise words, dropping any equal to ``skip`` (as word2vec), and start
    fetching their output rows. ``slots`` (None, or the sharded store's global id ->
    working-set row map) turns a drawn word into its row. Returns (state, how many were
    kept in negs)."""
    kept = 0
    for _ in range(n_draws):
        state = _lcg(state)
        target = _draw_negative(state, table)
        if slots is not None:      # pruned at compile time for the replicated store
            target = np.int64(slots[target])
        if target != skip:
            negs[kept] = target
            kept += 1
            _prefetch_row(w_out, target)
    return state, kept


@njit(inline="always")
def _skipgram_pair(w_in, w_out, context, center, negs, n_negs, lr, grad_h,
                   sigmoid, loss_table, touched_out, dim):
    """word2vec skip-gram pair: the context's input row predicts the centre word against
    the noise words; the input row moves once, after all targets."""
    h = w_in[context]
    for k in range(dim):
        grad_h[k] = 0.0
    loss = _update_target(h, w_out[center], 1, grad_h, lr, sigmoid, loss_table, dim)
    for d in range(n_negs):
        loss += _update_target(h, w_out[negs[d]], 0, grad_h, lr, sigmoid, loss_table, dim)
        _mark(touched_out, negs[d])
    for k in range(dim):
        h[k] += grad_h[k]
    return loss


@njit(inline="always")
def _skipgram_window_shared(w_in, w_out, contexts, n_ctx, outs, n_out, lr, scores_g,
                            grad_in, sigmoid, loss_table, touched_in, touched_out, dim):
    """pWord2Vec: all contexts of one centre share its negatives. Gradients are computed
    from the rows as they were before the window (a [contexts x outputs] matrix G), then
    applied: in_i += sum_j G_ij out_j and out_j += sum_i G_ij in_i."""
    loss = 0.0
    for i in range(n_ctx):
        h = w_in[contexts[i]]
        for j in range(n_out):
            o = w_out[outs[j]]
            score = np.float32(0.0)
            for k in range(dim):
                score += h[k] * o[k]
            g, l_ = _gradient(score, 1 if j == 0 else 0, lr, sigmoid, loss_table)
            scores_g[i, j] = g
            loss += l_
    for i in range(n_ctx):
        gi = grad_in[i]
        for k in range(dim):
            gi[k] = 0.0
        for j in range(n_out):
            o = w_out[outs[j]]
            g = scores_g[i, j]
            for k in range(dim):
                gi[k] += g * o[k]
    for j in range(n_out):
        o = w_out[outs[j]]
        for i in range(n_ctx):
            h = w_in[contexts[i]]
            g = scores_g[i, j]
            for k in range(dim):
                o[k] += g * h[k]
        _mark(touched_out, outs[j])
    for i in range(n_ctx):
        h = w_in[contexts[i]]
        gi = grad_in[i]
        for k in range(dim):
            h[k] += gi[k]
        _mark(touched_in, contexts[i])
    return loss


@njit(inline="always")
def _cbow_center(w_in, w_out, contexts, n_ctx, center, negs, n_negs, lr, h, grad_h,
                 sigmoid, loss_table, touched_in, touched_out, dim):
    """word2vec CBOW with cbow_mean=1: the mean of the context rows predicts the centre;
    every context row then receives the whole gradient (as word2vec.c and gensim)."""
    for k in range(dim):
        h[k] = 0.0
        grad_h[k] = 0.0
    for i in range(n_ctx):
        row = w_in[contexts[i]]
        for k in range(dim):
            h[k] += row[k]
    inv = np.float32(1.0) / np.float32(n_ctx)
    for k in range(dim):
        h[k] *= inv
    loss = _update_target(h, w_out[center], 1, grad_h, lr, sigmoid, loss_table, dim)
    for d in range(n_negs):
        loss += _update_target(h, w_out[negs[d]], 0, grad_h, lr, sigmoid, loss_table, dim)
        _mark(touched_out, negs[d])
    _mark(touched_out, center)
    for i in range(n_ctx):
        row = w_in[contexts[i]]
        for k in range(dim):
            row[k] += grad_h[k]
        _mark(touched_in, contexts[i])
    return loss


# ------------------------------------------------------------------ hierarchical softmax
@njit(inline="always")
def _hs_gradient(score, label, lr, sigmoid, loss_table):
    """(g, loss) for one inner node: as word2vec.c and gensim, a node scored beyond +-MAX_EXP
    gets no update (g = 0); its loss is the linear asymptote."""
    if score >= MAX_EXP:
        return np.float32(0.0), (score if label == 0 else 0.0)
    if score <= -MAX_EXP:
        return np.float32(0.0), (-score if label == 1 else 0.0)
    i = int((score + MAX_EXP) * SIGMOID_BIN_SCALE)
    return np.float32((label - sigmoid[i]) * lr), np.float64(loss_table[label, i])


@njit(inline="always")
def _hs_path(h, w_out, codes, points, length, center, grad_h, lr, sigmoid, loss_table, dim):
    """The centre's path from the root: at each inner node, score h . out_node towards
    label 1 - code; grad_h collects the input gradient, out_node moves at once."""
    loss = 0.0
    for j in range(length):
        out_row = w_out[points[center, j]]
        score = np.float32(0.0)
        for k in range(dim):
            score += h[k] * out_row[k]
        g, l_ = _hs_gradient(score, 1 - np.int64(codes[center, j]), lr, sigmoid, loss_table)
        loss += l_
        if g != 0.0:
            for k in range(dim):
                grad_h[k] += g * out_row[k]
                out_row[k] += g * h[k]
    return loss


@njit(inline="always")
def _mark_path(touched_out, points, length, center):
    for j in range(length):
        _mark(touched_out, points[center, j])


@njit(inline="always")
def _skipgram_pair_hs(w_in, w_out, context, center, codes, points, length, lr, grad_h,
                      sigmoid, loss_table, dim):
    """word2vec skip-gram with hierarchical softmax: the context's input row walks the
    centre's path; the input row moves once, after the path."""
    h = w_in[context]
    for k in range(dim):
        grad_h[k] = 0.0
    loss = _hs_path(h, w_out, codes, points, length, center, grad_h, lr, sigmoid, loss_table, dim)
    for k in range(dim):
        h[k] += grad_h[k]
    return loss


@njit(inline="always")
def _skipgram_window_hs(w_in, w_out, contexts, n_ctx, codes, points, length, center, lr,
                        scores_g, grad_in, sigmoid, loss_table, touched_in, dim):
    """All contexts of one centre share its path (as pWord2Vec shares negatives): the
    [contexts x path] gradients come from the rows as they were before the window, then
    in_i += sum_j G_ij out_j and out_j += sum_i G_ij in_i."""
    loss = 0.0
    for i in range(n_ctx):
        h = w_in[contexts[i]]
        for j in range(length):
            o = w_out[points[center, j]]
            score = np.float32(0.0)
            for k in range(dim):
                score += h[k] * o[k]
            g, l_ = _hs_gradient(score, 1 - np.int64(codes[center, j]), lr, sigmoid, loss_table)
            scores_g[i, j] = g
            loss += l_
    for i in range(n_ctx):
        gi = grad_in[i]
        for k in range(dim):
            gi[k] = 0.0
        for j in range(length):
            g = scores_g[i, j]
            if g != 0.0:
                o = w_out[points[center, j]]
                for k in range(dim):
                    gi[k] += g * o[k]
    for j in range(length):
        o = w_out[points[center, j]]
        for i in range(n_ctx):
            g = scores_g[i, j]
            if g != 0.0:
                h = w_in[contexts[i]]
                for k in range(dim):
                    o[k] += g * h[k]
    for i in range(n_ctx):
        h = w_in[contexts[i]]
        gi = grad_in[i]
        for k in range(dim):
            h[k] += gi[k]
        _mark(touched_in, contexts[i])
    return loss


@njit(inline="always")
def _cbow_center_hs(w_in, w_out, contexts, n_ctx, codes, points, length, center, lr, h, grad_h,
                    sigmoid, loss_table, touched_in, dim):
    """CBOW (cbow_mean=1) with hierarchical softmax: the mean context row walks the centre's
    path; every context row then receives the whole gradient."""
    for k in range(dim):
        h[k] = 0.0
        grad_h[k] = 0.0
    for i in range(n_ctx):
        row = w_in[contexts[i]]
        for k in range(dim):
            h[k] += row[k]
    inv = np.float32(1.0) / np.float32(n_ctx)
    for k in range(dim):
        h[k] *= inv
    loss = _hs_path(h, w_out, codes, points, length, center, grad_h, lr, sigmoid, loss_table, dim)
    for i in range(n_ctx):
        row = w_in[contexts[i]]
        for k in range(dim):
            row[k] += grad_h[k]
        _mark(touched_in, contexts[i])
    return loss


# ------------------------------------------------------------------ the sentence loop
@njit(inline="always")
def _longest_sentence(sent_starts, s_lo, s_hi, n_tokens):
    """Tokens in the longest of sentences [s_lo, s_hi): the size of a chunk's buffers."""
    n_starts = sent_starts.shape[0]
    longest = 0
    for si in range(s_lo, s_hi):
        end = sent_starts[si + 1] if si + 1 < n_starts else n_tokens
        longest = max(longest, end - sent_starts[si])
    return longest


@njit(inline="always")
def _subsample(tokens, beg, end, keep_prob, state, kept, raw_pos, raw_base):
    """Drop frequent words per occurrence (one draw only for words with keep < 1).
    kept[:n] are the surviving ids, raw_pos[:n] their raw offsets in this chunk."""
    n = 0
    for i in range(beg, end):
        word = tokens[i]
        keep = keep_prob[word]
        if keep < 1.0:
            state = _lcg(state)
            if _uniform(state) > keep:
                continue
        kept[n] = word
        raw_pos[n] = raw_base + i - beg
        n += 1
    return n, state


@njit(inline="always")
def _refresh_lr(progress, tid, local_words, lr0, lr_min, words_done, words_scale, words_total):
    """Publish this thread's progress and read everyone's: the block's progress is the sum
    (other threads' slots are read without locks; a stale value only delays the decay)."""
    progress[tid] = local_words
    block_words = 0
    for t in range(progress.shape[0]):
        block_words += progress[t]
    return max(lr_min, lr0 * (1.0 - (words_done + words_scale * block_words) / words_total))


@njit(nogil=True, fastmath=True, cache=True)
def _train_chunk(mode, dim, w_in, w_out, tokens, sent_starts, s_lo, s_hi, keep_prob,
                 neg_table, rng_state, tid, progress, window, negative, lr0, lr_min,
                 words_done, words_scale, words_total, touched_in, touched_out,
                 sigmoid, loss_table, codes, points, lengths, neg_slots):
    """Train sentences [s_lo, s_hi) of the block; returns (loss_sum, n_examples).
    ``codes``/``points``/``lengths``: the Huffman tree (HS modes; dummies otherwise);
    ``neg_slots``: None, or the sharded store's global id -> working-set row map."""
    mode = literally(mode)
    dim = literally(dim)
    n_tokens = tokens.shape[0]
    n_starts = sent_starts.shape[0]
    longest = _longest_sentence(sent_starts, s_lo, s_hi, n_tokens)
    kept = np.empty(longest, np.int32)
    raw_pos = np.empty(longest, np.int64)
    contexts = np.empty(2 * window, np.int64)
    negs = np.empty(negative + 1, np.int64)
    h = np.empty(dim, np.float32)
    grad_h = np.empty(dim, np.float32)
    scores_g = np.empty((2 * window, max(negative + 1, points.shape[1])), np.float32)
    grad_in = np.empty((2 * window, dim), np.float32)

    state = rng_state[tid]
    raw_done = 0
    last_refresh = 0
    lr = _refresh_lr(progress, tid, 0, lr0, lr_min, words_done, words_scale, words_total)
    loss = 0.0
    n_examples = 0
    for si in range(s_lo, s_hi):
        beg = sent_starts[si]
        end = sent_starts[si + 1] if si + 1 < n_starts else n_tokens
        n, state = _subsample(tokens, beg, end, keep_prob, state, kept, raw_pos, raw_done)
        for pos in range(n):
            if raw_pos[pos] - last_refresh >= LR_REFRESH_WORDS:
                last_refresh = raw_pos[pos]
                lr = _refresh_lr(progress, tid, last_refresh, lr0, lr_min, words_done,
                                 words_scale, words_total)
            center = kept[pos]
            state = _lcg(state)
            reach = window - _below(state, window)        # word2vec's shrunk window
            lo = max(pos - reach, 0)
            hi = min(pos + reach, n - 1)
            if mode == SKIPGRAM_HS:
                length = lengths[center]
                for c in range(lo, hi + 1):
                    if c == pos:
                        continue
                    loss += _skipgram_pair_hs(w_in, w_out, kept[c], center, codes, points, length,
                                              lr, grad_h, sigmoid, loss_table, dim)
                    _mark(touched_in, kept[c])
                    n_examples += 1
                if hi > lo:
                    _mark_path(touched_out, points, length, center)
            elif mode == SKIPGRAM_HS_SHARED or mode == CBOW_HS:
                n_ctx = 0
                for c in range(lo, hi + 1):
                    if c != pos:
                        contexts[n_ctx] = kept[c]
                        n_ctx += 1
                if n_ctx == 0:
                    continue
                length = lengths[center]
                if mode == SKIPGRAM_HS_SHARED:
                    loss += _skipgram_window_hs(w_in, w_out, contexts, n_ctx, codes, points, length,
                                                center, lr, scores_g, grad_in, sigmoid, loss_table,
                                                touched_in, dim)
                    n_examples += n_ctx
                else:
                    loss += _cbow_center_hs(w_in, w_out, contexts, n_ctx, codes, points, length,
                                            center, lr, h, grad_h, sigmoid, loss_table, touched_in, dim)
                    n_examples += 1
                _mark_path(touched_out, points, length, center)
            elif mode == SKIPGRAM:
                for c in range(lo, hi + 1):
                    if c == pos:
                        continue
                    state, n_negs = _draw_negatives(state, negative, center, neg_table, negs, w_out,
                                                    neg_slots)
                    loss += _skipgram_pair(w_in, w_out, kept[c], center, negs, n_negs, lr,
                                           grad_h, sigmoid, loss_table, touched_out, dim)
                    _mark(touched_in, kept[c])
                    n_examples += 1
                if hi > lo:
                    _mark(touched_out, center)
            else:
                n_ctx = 0
                for c in range(lo, hi + 1):
                    if c != pos:
                        contexts[n_ctx] = kept[c]
                        n_ctx += 1
                if n_ctx == 0:
                    continue
                if mode == SKIPGRAM_SHARED:
                    negs[0] = center                      # the positive is output 0
                    state, n_negs = _draw_negatives(state, negative, center, neg_table,
                                                    negs[1:], w_out, neg_slots)
                    loss += _skipgram_window_shared(w_in, w_out, contexts, n_ctx, negs,
                                                    n_negs + 1, lr, scores_g, grad_in, sigmoid,
                                                    loss_table, touched_in, touched_out, dim)
                    n_examples += n_ctx
                else:
                    state, n_negs = _draw_negatives(state, negative, center, neg_table, negs, w_out,
                                                    neg_slots)
                    loss += _cbow_center(w_in, w_out, contexts, n_ctx, center, negs, n_negs, lr,
                                         h, grad_h, sigmoid, loss_table, touched_in,
                                         touched_out, dim)
                    n_examples += 1
        raw_done += end - beg
    rng_state[tid] = state
    progress[tid] = raw_done
    return loss, n_examples


# ------------------------------------------------------------------ subwords (fastText)
@njit(inline="always")
def _gather(w_in, sub_ptr, sub_ids, word, hbuf, hold, i, dim):
    """hbuf[i] = hold[i] = the mean of the word's input rows (its own and its n-grams')."""
    h = hbuf[i]
    for k in range(dim):
        h[k] = 0.0
    for p in range(sub_ptr[word], sub_ptr[word + 1]):
        row = w_in[sub_ids[p]]
        for k in range(dim):
            h[k] += row[k]
    inv = np.float32(1.0) / np.float32(sub_ptr[word + 1] - sub_ptr[word])
    o = hold[i]
    for k in range(dim):
        h[k] *= inv
        o[k] = h[k]


@njit(inline="always")
def _scatter(w_in, sub_ptr, sub_ids, word, hbuf, hold, i, touched_in, dim):
    """Every row of the word receives the whole change of its mean (as fastText, whose rows
    each get the full gradient of the hidden layer)."""
    h = hbuf[i]
    o = hold[i]
    for k in range(dim):
        h[k] -= o[k]
    for p in range(sub_ptr[word], sub_ptr[word + 1]):
        r = sub_ids[p]
        row = w_in[r]
        for k in range(dim):
            row[k] += h[k]
        _mark(touched_in, r)


@njit(nogil=True, fastmath=True, cache=True)
def _train_chunk_sub(mode, dim, w_in, w_out, tokens, sent_starts, s_lo, s_hi, keep_prob,
                     neg_table, rng_state, tid, progress, window, negative, lr0, lr_min,
                     words_done, words_scale, words_total, touched_in, touched_out,
                     sigmoid, loss_table, codes, points, lengths, sub_ptr, sub_ids):
    """_train_chunk with subword inputs: each context's input is the mean of its rows
    (word + hashed n-grams), gathered into a small buffer that the same update functions
    train as if it were w_in; each buffer row's change then goes to all the word's rows.
    The random draws are _train_chunk's, draw for draw."""
    mode = literally(mode)
    dim = literally(dim)
    n_tokens = tokens.shape[0]
    n_starts = sent_starts.shape[0]
    longest = _longest_sentence(sent_starts, s_lo, s_hi, n_tokens)
    kept = np.empty(longest, np.int32)
    raw_pos = np.empty(longest, np.int64)
    contexts = np.empty(2 * window, np.int64)
    local = np.arange(2 * window).astype(np.int64)
    no_touch = np.zeros(2 * window, np.uint8)
    hbuf = np.empty((2 * window, dim), np.float32)
    hold = np.empty((2 * window, dim), np.float32)
    negs = np.empty(negative + 1, np.int64)
    h = np.empty(dim, np.float32)
    grad_h = np.empty(dim, np.float32)
    scores_g = np.empty((2 * window, max(negative + 1, points.shape[1])), np.float32)
    grad_in = np.empty((2 * window, dim), np.float32)

    state = rng_state[tid]
    raw_done = 0
    last_refresh = 0
    lr = _refresh_lr(progress, tid, 0, lr0, lr_min, words_done, words_scale, words_total)
    loss = 0.0
    n_examples = 0
    for si in range(s_lo, s_hi):
        beg = sent_starts[si]
        end = sent_starts[si + 1] if si + 1 < n_starts else n_tokens
        n, state = _subsample(tokens, beg, end, keep_prob, state, kept, raw_pos, raw_done)
        for pos in range(n):
            if raw_pos[pos] - last_refresh >= LR_REFRESH_WORDS:
                last_refresh = raw_pos[pos]
                lr = _refresh_lr(progress, tid, last_refresh, lr0, lr_min, words_done,
                                 words_scale, words_total)
            center = kept[pos]
            state = _lcg(state)
            reach = window - _below(state, window)
            lo = max(pos - reach, 0)
            hi = min(pos + reach, n - 1)
            length = lengths[center] if mode >= SKIPGRAM_HS else 0
            if mode == SKIPGRAM or mode == SKIPGRAM_HS:
                for c in range(lo, hi + 1):
                    if c == pos:
                        continue
                    _gather(w_in, sub_ptr, sub_ids, kept[c], hbuf, hold, 0, dim)
                    if mode == SKIPGRAM:
                        state, n_negs = _draw_negatives(state, negative, center, neg_table, negs, w_out, None)
                        loss += _skipgram_pair(hbuf, w_out, 0, center, negs, n_negs, lr, grad_h,
                                               sigmoid, loss_table, touched_out, dim)
                    else:
                        loss += _skipgram_pair_hs(hbuf, w_out, 0, center, codes, points, length,
                                                  lr, grad_h, sigmoid, loss_table, dim)
                    _scatter(w_in, sub_ptr, sub_ids, kept[c], hbuf, hold, 0, touched_in, dim)
                    n_examples += 1
                if hi > lo:
                    if mode == SKIPGRAM:
                        _mark(touched_out, center)
                    else:
                        _mark_path(touched_out, points, length, center)
                continue
            n_ctx = 0
            for c in range(lo, hi + 1):
                if c != pos:
                    contexts[n_ctx] = kept[c]
                    _gather(w_in, sub_ptr, sub_ids, kept[c], hbuf, hold, n_ctx, dim)
                    n_ctx += 1
            if n_ctx == 0:
                continue
            if mode == SKIPGRAM_SHARED:
                negs[0] = center
                state, n_negs = _draw_negatives(state, negative, center, neg_table, negs[1:], w_out, None)
                loss += _skipgram_window_shared(hbuf, w_out, local, n_ctx, negs, n_negs + 1, lr,
                                                scores_g, grad_in, sigmoid, loss_table, no_touch,
                                                touched_out, dim)
                n_examples += n_ctx
            elif mode == CBOW:
                state, n_negs = _draw_negatives(state, negative, center, neg_table, negs, w_out, None)
                loss += _cbow_center(hbuf, w_out, local, n_ctx, center, negs, n_negs, lr, h, grad_h,
                                     sigmoid, loss_table, no_touch, touched_out, dim)
                n_examples += 1
            elif mode == SKIPGRAM_HS_SHARED:
                loss += _skipgram_window_hs(hbuf, w_out, local, n_ctx, codes, points, length, center,
                                            lr, scores_g, grad_in, sigmoid, loss_table, no_touch, dim)
                _mark_path(touched_out, points, length, center)
                n_examples += n_ctx
            else:
                loss += _cbow_center_hs(hbuf, w_out, local, n_ctx, codes, points, length, center, lr,
                                        h, grad_h, sigmoid, loss_table, no_touch, dim)
                _mark_path(touched_out, points, length, center)
                n_examples += 1
            for i in range(n_ctx):
                _scatter(w_in, sub_ptr, sub_ids, contexts[i], hbuf, hold, i, touched_in, dim)
        raw_done += end - beg
    rng_state[tid] = state
    progress[tid] = raw_done
    return loss, n_examples


# ------------------------------------------------------------------ the public entry point
def train_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args):
    """Train one block in place; returns (loss_sum, n_examples, words_processed).
    See kernels/__init__.py for the arguments and the determinism contract."""
    check_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args)
    a = args
    keep_prob, neg_table, threads, hs, subwords, neg_slots = a.keep_prob, a.neg_table, a.threads, a.hs, a.subwords, a.neg_slots
    model, window, negative, shared_negatives = a.model, a.window, a.negative, a.shared_negatives
    lr0, lr_min, words_done, words_scale, words_total = a.lr0, a.lr_min, a.words_done, a.words_scale, a.words_total
    n_tokens = len(tokens)
    if n_tokens == 0:
        return 0.0, 0, 0
    if hs is not None:
        codes, points, lengths = check_hs(hs, w_out.shape[0])
        mode = CBOW_HS if model == "cbow" else (SKIPGRAM_HS_SHARED if shared_negatives else SKIPGRAM_HS)
        negative = 0
    else:
        codes, points, lengths = _NO_TREE
        mode = CBOW if model == "cbow" else (SKIPGRAM_SHARED if shared_negatives else SKIPGRAM)
    bounds = split_sentences(sent_starts, n_tokens, threads)
    progress = np.zeros(threads, dtype=np.int64)
    fixed = (window, negative, float(lr0), float(lr_min), float(words_done),
             float(words_scale), float(words_total), touched_in, touched_out, SIGMOID, LOSS,
             codes, points, lengths)

    if subwords is not None:
        fixed = fixed + tuple(subwords)
    else:
        fixed = fixed + (neg_slots,)

    def args(t):
        return (mode, w_in.shape[1], w_in, w_out, tokens, sent_starts, bounds[t], bounds[t + 1],
                keep_prob, neg_table, rng_state, t, progress) + fixed

    compiled = _compiled_chunk(args(0), sub=subwords is not None)

    def chunk(t):
        return compiled(*args(t))

    if threads == 1:
        results = [chunk(0)]
    else:
        results = _run_threads(chunk, threads)
    loss = sum(r[0] for r in results)
    n_examples = sum(int(r[1]) for r in results)
    return float(loss), n_examples, n_tokens


_COMPILED = {}
# the tree arguments of the negative-sampling modes (never read there)
_NO_TREE = (np.zeros((1, 1), np.uint8), np.zeros((1, 1), np.int32), np.zeros(1, np.int32))


def _compiled_chunk(args, sub=False):
    """The machine code of _train_chunk for these argument types, with mode and dim as
    compile-time constants. Calling it directly skips numba's dispatcher, which would
    otherwise re-resolve the literal arguments (seconds) on every call."""
    key = args[:2] + (sub, sub or args[-1] is None)    # check_block fixed every other argument's type
    compiled = _COMPILED.get(key)
    if compiled is None:
        argtypes = tuple(types.IntegerLiteral(a) if i < 2 else typeof(a) for i, a in enumerate(args))
        compiled = _COMPILED[key] = (_train_chunk_sub if sub else _train_chunk).compile(argtypes)
    return compiled


def _run_threads(chunk, threads):
    """Hogwild: one Python thread per chunk; the compiled code releases the GIL."""
    results = [None] * threads
    errors = []

    def work(t):
        try:
            results[t] = chunk(t)
        except BaseException as e:   # re-raised in the caller's thread below
            errors.append(e)

    pool = [threading.Thread(target=work, args=(t,), name=f"sgns-{t}") for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    if errors:
        raise errors[0]
    return results
