"""The negative-sampling updates, compiled: skip-gram pairs and CBOW (skip-gram windows with
shared negatives are in window.py).

Every rule takes ``rows`` (a rows.Params: the input and output matrices and their touched
masks) and ``outs[:n_out]``: the centre word, then its noise words (label 1, then 0).
"""

from __future__ import annotations

from numba import njit

from .rows import add_row, context_mean, mark, spread, update_target, zero


@njit(inline="always")
def skipgram_pair(rows, context, outs, n_out, lr, grad_h, dim):
    """word2vec skip-gram pair: the context's input row predicts the centre word against
    the noise words; the input row moves once, after all targets."""
    h = rows.w_in[context]
    zero(grad_h, dim)
    loss = update_target(h, rows.w_out[outs[0]], 1, grad_h, lr, dim)
    for d in range(1, n_out):
        loss += update_target(h, rows.w_out[outs[d]], 0, grad_h, lr, dim)
        mark(rows.touched_out, outs[d])
    add_row(rows, context, grad_h, dim)
    return loss


@njit(inline="always")
def cbow_center(rows, contexts, n_ctx, outs, n_out, lr, scratch, dim):
    """word2vec CBOW with cbow_mean=1: the mean of the context rows predicts the centre;
    every context row then receives the whole gradient (as word2vec.c and gensim)."""
    h, grad_h = context_mean(rows, contexts, n_ctx, scratch, dim)
    loss = update_target(h, rows.w_out[outs[0]], 1, grad_h, lr, dim)
    for d in range(1, n_out):
        loss += update_target(h, rows.w_out[outs[d]], 0, grad_h, lr, dim)
        mark(rows.touched_out, outs[d])
    mark(rows.touched_out, outs[0])
    spread(rows, contexts, n_ctx, grad_h, dim)
    return loss
