"""The input layer of the compiled kernel: a word's own row of ``w_in``, or fastText's
subwords, the mean of its rows ``ids[ptr[w]:ptr[w + 1]]`` (its own, then its n-grams').

The update rules (negative.py, hsoftmax.py) train whatever ``Params`` they are given. Without
subwords that is the parameters themselves. With subwords, each context's mean is gathered
into a small buffer (``load``), the same rules train the buffer as if it were ``w_in``, and
each buffer row's change then goes to every row of its word (``store``, as fastText, whose
rows each get the full gradient of the hidden layer). The random draws do not change.

Which of the two is chosen when compiling: numba prunes the branches on ``subwords is None``
(``subwords`` must reach these functions as the chunk function's own argument, not inside a
tuple, for that), so the plain path compiles to the code it would be without this layer.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .rows import Params, mark


@njit(inline="always")
def step_rows(subwords, params, scratch):
    """The Params the update rules train: ``params``, or the buffer of means (whose input
    marks go to a scratch mask: ``store`` marks the word's real rows)."""
    if subwords is None:
        return params
    return Params(scratch.hbuf, params.w_out, scratch.no_touch, params.touched_out)


@njit(inline="always")
def input_row(subwords, word, i):
    """Where the update rules find a context: its row ``word``, or buffer row ``i``."""
    if subwords is None:
        return word
    return i


@njit(inline="always")
def input_rows(subwords, scratch):
    """The context rows of a window: the words (scratch.contexts), or buffer rows 0, 1, ..."""
    if subwords is None:
        return scratch.contexts
    return scratch.local


@njit(inline="always")
def load(subwords, params, scratch, word, i, dim):
    """Before an update: buffer row i = the mean of the word's rows (nothing without subwords)."""
    if subwords is not None:
        gather(params.w_in, subwords, word, scratch, i, dim)


@njit(inline="always")
def store(subwords, params, scratch, word, i, dim):
    """After an update: the word's rows receive buffer row i's change (nothing without subwords)."""
    if subwords is not None:
        scatter(params, subwords, word, scratch, i, dim)


@njit(inline="always")
def gather(w_in, subwords, word, scratch, i, dim):
    """hbuf[i] = hold[i] = the mean of the word's input rows (its own and its n-grams')."""
    ptr, ids = subwords
    h = scratch.hbuf[i]
    for k in range(dim):
        h[k] = 0.0
    for p in range(ptr[word], ptr[word + 1]):
        row = w_in[ids[p]]
        for k in range(dim):
            h[k] += row[k]
    inv = np.float32(1.0) / np.float32(ptr[word + 1] - ptr[word])
    o = scratch.hold[i]
    for k in range(dim):
        h[k] *= inv
        o[k] = h[k]


@njit(inline="always")
def scatter(params, subwords, word, scratch, i, dim):
    """Every row of the word receives the whole change of its mean, hbuf[i] - hold[i]."""
    ptr, ids = subwords
    h = scratch.hbuf[i]
    o = scratch.hold[i]
    for k in range(dim):
        h[k] -= o[k]
    for p in range(ptr[word], ptr[word + 1]):
        r = ids[p]
        row = params.w_in[r]
        for k in range(dim):
            row[k] += h[k]
        mark(params.touched_in, r)
