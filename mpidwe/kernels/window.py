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
from .rows import add_rows, gradient, mark
from .simd import accumulate_rows, row_dots


@njit(inline="always")
def shared_window(rows, contexts, n_ctx, outs, lr, scratch, dim):
    """Train the window; returns its loss. ``outs`` = (ids, codes, n, hs): output rows
    ``ids[:n]`` with labels ``1 - codes[j]`` (the centre's noise: the centre, code 0, then the
    noise words, code 1; or its Huffman path), and ``hs`` whether they are a path (whose
    nodes scored beyond +-MAX_EXP get no update: their gradient is 0).

    The gradients G[i, j] (scratch.scores_g, and transposed in scratch.scores_t) come from
    the rows as they were before the window; each input gradient and each output row is then
    one simd.accumulate_rows: its vectors stay in registers over the window's rows."""
    ids, codes, n_out, hs = outs
    scores_g, scores_t, grad_in = scratch.scores_g, scratch.scores_t, scratch.grad_in
    loss = 0.0
    for i in range(n_ctx):          # every score first, four output rows per load of h
        row_dots(rows.w_in[contexts[i]], rows.w_out, ids, n_out, scores_g[i], dim)
    for i in range(n_ctx):          # then their gradients (table lookups, no row reads)
        for j in range(n_out):
            label = 1 - np.int64(codes[j])
            g, l_ = hs_gradient(scores_g[i, j], label, lr) if hs else gradient(scores_g[i, j], label, lr)
            scores_g[i, j] = g
            scores_t[j, i] = g
            loss += l_
    for i in range(n_ctx):
        accumulate_rows(grad_in[i], False, scores_g[i], rows.w_out, ids, n_out, dim)
    for j in range(n_out):
        accumulate_rows(rows.w_out[ids[j]], True, scores_t[j], rows.w_in, contexts, n_ctx, dim)
        mark(rows.touched_out, ids[j])
    add_rows(rows, contexts, n_ctx, grad_in, dim)
    return loss
