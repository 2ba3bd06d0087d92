"""The row-level steps every compiled update rule is made of: the sigmoid-table gradient, one
target's dot-and-update, the mean of context rows, and the touched marks.

The sigmoid and loss tables are module constants: numba freezes them into the compiled code.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from .common import MAX_EXP, SIGMOID_BIN_SCALE, sigmoid_tables
from .simd import row_dot

SIGMOID, LOSS = sigmoid_tables()


class Params(NamedTuple):
    """The rows an update trains, and the masks of the rows it touched (numba takes a named
    tuple as one argument and compiles its fields as if they were separate ones)."""
    w_in: np.ndarray          # float32 [rows, dim]
    w_out: np.ndarray         # float32 [rows, dim]
    touched_in: np.ndarray    # uint8 [rows of w_in]
    touched_out: np.ndarray   # uint8 [rows of w_out]


@njit(inline="always")
def mark(touched, row):
    """touched[row] = 1, writing only if needed: the flags of frequent words share cache
    lines, and a store (even of the same value) would bounce them between Hogwild cores."""
    if touched[row] == 0:
        touched[row] = 1


@njit(inline="always")
def table_gradient(score, label, lr):
    """(g, loss) inside (-MAX_EXP, MAX_EXP): g = (label - sigmoid(score)) * lr from word2vec's
    table, in float32 (the precision it is applied in), and the loss from the same bin."""
    i = int((score + MAX_EXP) * SIGMOID_BIN_SCALE)     # the bin as the reference finds it (float64)
    return (np.float32(label) - SIGMOID[i]) * np.float32(lr), np.float64(LOSS[label, i])


@njit(inline="always")
def gradient(score, label, lr):
    """(g, loss) for one score; beyond +-MAX_EXP the saturated gradient (label - 1 or label - 0,
    as word2vec.c), and the loss by its linear asymptote."""
    if score >= MAX_EXP:
        return np.float32((label - 1) * lr), (score if label == 0 else 0.0)
    if score <= -MAX_EXP:
        return np.float32(label * lr), (-score if label == 1 else 0.0)
    return table_gradient(score, label, lr)


@njit(inline="always")
def dot(h, o, dim):
    """h . o in independent vector chains (simd.row_dot)."""
    return row_dot(h, o, dim)


@njit(inline="always")
def update_target(h, out_row, label, grad_h, lr, dim):
    """One target of an example: score h . out_row, then grad_h += g out_row, out_row += g h."""
    g, loss = gradient(dot(h, out_row, dim), label, lr)
    for k in range(dim):
        grad_h[k] += g * out_row[k]
        out_row[k] += g * h[k]
    return loss


@njit(inline="always")
def context_mean(rows, contexts, n_ctx, scratch, dim):
    """CBOW's input (cbow_mean=1): scratch.h = the mean of the context rows; scratch.grad_h
    cleared for the gradient. Returns (h, grad_h)."""
    h, grad_h = scratch.h, scratch.grad_h
    for k in range(dim):
        h[k] = 0.0
        grad_h[k] = 0.0
    for i in range(n_ctx):
        row = rows.w_in[contexts[i]]
        for k in range(dim):
            h[k] += row[k]
    inv = np.float32(1.0) / np.float32(n_ctx)
    for k in range(dim):
        h[k] *= inv
    return h, grad_h


@njit(inline="always")
def zero(v, dim):
    for k in range(dim):
        v[k] = 0.0


@njit(inline="always")
def add_row(rows, context, grad, dim):
    """Input row ``context`` += grad, and it is marked touched."""
    h = rows.w_in[context]
    for k in range(dim):
        h[k] += grad[k]
    mark(rows.touched_in, context)


@njit(inline="always")
def spread(rows, contexts, n_ctx, grad_h, dim):
    """Every context row receives the whole gradient of the mean (as word2vec.c and gensim)."""
    for i in range(n_ctx):
        add_row(rows, contexts[i], grad_h, dim)


@njit(inline="always")
def add_rows(rows, contexts, n_ctx, grad_in, dim):
    """Context row i += grad_in[i]: a window's own input gradient per context."""
    for i in range(n_ctx):
        add_row(rows, contexts[i], grad_in[i], dim)
