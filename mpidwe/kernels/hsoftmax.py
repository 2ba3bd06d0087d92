"""The hierarchical-softmax updates, compiled (word2vec's ``-hs 1 -negative 0``).

The centre's path from the root of the Huffman tree replaces the positive and noise words:
at inner node ``points[center, j]`` (row ``w_out[node]``) the label is ``1 - codes[center,
j]``. ``tree`` is a chunk.Targets (its codes, points and lengths); ``rows`` a rows.Params.
Skip-gram windows that share a path are in window.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .common import MAX_EXP
from .rows import add_row, context_mean, dot, mark, spread, table_gradient, zero


@njit(inline="always")
def hs_gradient(score, label, lr):
    """(g, loss) for one inner node: as word2vec.c and gensim, a node scored beyond +-MAX_EXP
    gets no update (g = 0); its loss is the linear asymptote."""
    if score >= MAX_EXP:
        return np.float32(0.0), (score if label == 0 else 0.0)
    if score <= -MAX_EXP:
        return np.float32(0.0), (-score if label == 1 else 0.0)
    return table_gradient(score, label, lr)


@njit(inline="always")
def hs_path(h, w_out, tree, center, grad_h, lr, dim):
    """Walk the centre's path: at each inner node, score h . out_node towards label 1 - code;
    grad_h collects the input gradient, out_node moves at once."""
    loss = 0.0
    for j in range(tree.lengths[center]):
        out_row = w_out[tree.points[center, j]]
        g, l_ = hs_gradient(dot(h, out_row, dim), 1 - np.int64(tree.codes[center, j]), lr)
        loss += l_
        if g != 0.0:
            for k in range(dim):
                grad_h[k] += g * out_row[k]
                out_row[k] += g * h[k]
    return loss


@njit(inline="always")
def mark_path(touched_out, tree, center):
    for j in range(tree.lengths[center]):
        mark(touched_out, tree.points[center, j])


@njit(inline="always")
def skipgram_pair_hs(rows, context, tree, center, lr, grad_h, dim):
    """Skip-gram: the context's input row walks the centre's path; the input row moves once,
    after the path."""
    zero(grad_h, dim)
    loss = hs_path(rows.w_in[context], rows.w_out, tree, center, grad_h, lr, dim)
    add_row(rows, context, grad_h, dim)
    return loss


@njit(inline="always")
def cbow_center_hs(rows, contexts, n_ctx, tree, center, lr, scratch, dim):
    """CBOW (cbow_mean=1): the mean context row walks the centre's path; every context row
    then receives the whole gradient."""
    h, grad_h = context_mean(rows, contexts, n_ctx, scratch, dim)
    loss = hs_path(h, rows.w_out, tree, center, grad_h, lr, dim)
    spread(rows, contexts, n_ctx, grad_h, dim)
    return loss
