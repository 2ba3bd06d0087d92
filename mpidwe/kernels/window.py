"""Skip-gram windows whose contexts share their outputs, compiled: pWord2Vec's shared
negatives, and the same for a shared Huffman path.

All contexts of one centre are scored against the same output rows, so a window is a small
[contexts x outputs] matrix product whose rows stay in L1: the gradients G come from the rows
as they were before the window, then in_i += sum_j G_ij out_j and out_j += sum_i G_ij in_i.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .hsoftmax import hs_gradient
from .rows import add_rows, dot, gradient, mark, zero


@njit(inline="always")
def axpy(y, a, x, dim):
    for k in range(dim):
        y[k] += a * x[k]


@njit(inline="always")
def shared_window(rows, contexts, n_ctx, outs, lr, scratch, dim):
    """Train the window; returns its loss. ``outs`` = (ids, codes, n, hs): output rows
    ``ids[:n]`` with labels ``1 - codes[j]`` (the centre's noise: the centre, code 0, then the
    noise words, code 1; or its Huffman path), and ``hs`` whether they are a path (whose
    nodes scored beyond +-MAX_EXP get no update)."""
    ids, codes, n_out, hs = outs
    scores_g, grad_in = scratch.scores_g, scratch.grad_in
    loss = 0.0
    for i in range(n_ctx):
        h = rows.w_in[contexts[i]]
        for j in range(n_out):
            score = dot(h, rows.w_out[ids[j]], dim)
            label = 1 - np.int64(codes[j])
            g, l_ = hs_gradient(score, label, lr) if hs else gradient(score, label, lr)
            scores_g[i, j] = g
            loss += l_
    for i in range(n_ctx):
        gi = grad_in[i]
        zero(gi, dim)
        for j in range(n_out):
            if not hs or scores_g[i, j] != 0.0:
                axpy(gi, scores_g[i, j], rows.w_out[ids[j]], dim)
    for j in range(n_out):
        o = rows.w_out[ids[j]]
        for i in range(n_ctx):
            if not hs or scores_g[i, j] != 0.0:
                axpy(o, scores_g[i, j], rows.w_in[contexts[i]], dim)
        mark(rows.touched_out, ids[j])
    add_rows(rows, contexts, n_ctx, grad_in, dim)
    return loss
