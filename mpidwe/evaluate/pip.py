"""PIP loss (Yin & Shen 2018) between two embeddings of the same words, without n x n matrices.

``PIP(E1, E2) = ||E1 E1^T - E2 E2^T||_F``. Expanding the square with the trace identity
``||A B^T||_F^2 = ||A^T B||_F^2`` gives

    PIP^2 = ||E1^T E1||_F^2 + ||E2^T E2||_F^2 - 2 ||E1^T E2||_F^2

which needs only the d1 x d1, d2 x d2 and d1 x d2 Gram matrices. They are sums over rows,
so each rank accumulates them (in float64) over its own block of rows and one all-reduce
adds them up. ``E1`` and ``E2`` may have different dimensions; row i of both must be the
same word.

Pure math: the caller passes ``rank``/``world_size`` and, on several ranks, a ``reduce``
callback that sums a float64 array over ranks in place (``Comm.allreduce_``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..core.sharding import even_split

Reduce = Callable[[np.ndarray], np.ndarray]

BLOCK_ROWS = 8192   # rows converted to float64 at a time (bounds the extra memory)


def _rows(e1: np.ndarray, e2: np.ndarray, top_n: int | None) -> int:
    if e1.ndim != 2 or e2.ndim != 2:
        raise ValueError(f"embeddings must be 2-D, got shapes {e1.shape} and {e2.shape}")
    if e1.shape[0] != e2.shape[0]:
        raise ValueError(f"embeddings have {e1.shape[0]} and {e2.shape[0]} rows; PIP needs the same words")
    n = e1.shape[0]
    if top_n is not None:
        if top_n <= 0:
            raise ValueError(f"top_n must be > 0, got {top_n}")
        n = min(n, top_n)
    return n


def gram_matrices(e1: np.ndarray, e2: np.ndarray, *, top_n: int | None = None, rank: int = 0,
                  world_size: int = 1, reduce: Reduce | None = None,
                  block_rows: int = BLOCK_ROWS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(E1^T E1, E2^T E2, E1^T E2)`` in float64 over the first ``top_n`` rows (all rows
    when None). This rank adds up its even share of those rows; with ``reduce`` the three
    matrices are then summed over ranks in one call (every rank must call it, even one with
    no rows)."""
    n = _rows(e1, e2, top_n)
    d1, d2 = e1.shape[1], e2.shape[1]
    # one buffer, so that the ranks need a single collective
    buf = np.zeros(d1 * d1 + d2 * d2 + d1 * d2, dtype=np.float64)
    g11 = buf[:d1 * d1].reshape(d1, d1)
    g22 = buf[d1 * d1:d1 * d1 + d2 * d2].reshape(d2, d2)
    g12 = buf[d1 * d1 + d2 * d2:].reshape(d1, d2)
    lo, hi = even_split(n, rank, world_size)
    for a in range(lo, hi, block_rows):
        b = min(a + block_rows, hi)
        x1 = np.asarray(e1[a:b], dtype=np.float64)
        x2 = np.asarray(e2[a:b], dtype=np.float64)
        g11 += x1.T @ x1
        g22 += x2.T @ x2
        g12 += x1.T @ x2
    if reduce is not None:
        reduce(buf)
    return g11, g22, g12


def pip_from_grams(g11: np.ndarray, g22: np.ndarray, g12: np.ndarray) -> float:
    """The PIP loss from the three Gram matrices. Rounding can make the square slightly
    negative when the embeddings are equal up to rotation; that is clipped to 0."""
    sq = float(np.sum(g11 * g11) + np.sum(g22 * g22) - 2.0 * np.sum(g12 * g12))
    return float(np.sqrt(max(sq, 0.0)))


def pip_loss(e1: np.ndarray, e2: np.ndarray, *, top_n: int | None = None, rank: int = 0,
             world_size: int = 1, reduce: Reduce | None = None) -> float:
    """``||E1 E1^T - E2 E2^T||_F`` over the first ``top_n`` rows (see :func:`gram_matrices`)."""
    return pip_from_grams(*gram_matrices(e1, e2, top_n=top_n, rank=rank, world_size=world_size,
                                         reduce=reduce))


def pip_report(e1: np.ndarray, e2: np.ndarray, *, top_n: int | None = None, rank: int = 0,
               world_size: int = 1, reduce: Reduce | None = None) -> dict:
    """PIP loss with the numbers needed to read it, ``E2`` taken as the reference:

    - ``pip``: ``||E1 E1^T - E2 E2^T||_F``;
    - ``norm``, ``reference_norm``: ``||E1 E1^T||_F`` and ``||E2 E2^T||_F``;
    - ``relative``: ``pip / reference_norm``;
    - ``normalized``: the PIP loss after scaling each embedding so that ``||E E^T||_F = 1``,
      which ignores the overall scale (word2vec and SVD vectors differ a lot in scale);
      it lies in [0, sqrt(2)]: 0 for embeddings equal up to rotation and scale.
    """
    g11, g22, g12 = gram_matrices(e1, e2, top_n=top_n, rank=rank, world_size=world_size, reduce=reduce)
    norm1, norm2 = float(np.linalg.norm(g11)), float(np.linalg.norm(g22))
    pip = pip_from_grams(g11, g22, g12)
    cross = float(np.sum(g12 * g12))
    normalized = None
    if norm1 > 0 and norm2 > 0:
        normalized = float(np.sqrt(max(2.0 - 2.0 * cross / (norm1 * norm2), 0.0)))
    return {"rows": _rows(e1, e2, top_n), "dim": int(e1.shape[1]), "reference_dim": int(e2.shape[1]),
            "pip": pip, "norm": norm1, "reference_norm": norm2,
            "relative": pip / norm2 if norm2 > 0 else None, "normalized": normalized}


def pip_loss_dense(e1: np.ndarray, e2: np.ndarray, top_n: int | None = None) -> float:
    """The definition, with the n x n matrices: for tests and tiny inputs only."""
    n = _rows(e1, e2, top_n)
    x1 = np.asarray(e1[:n], dtype=np.float64)
    x2 = np.asarray(e2[:n], dtype=np.float64)
    return float(np.linalg.norm(x1 @ x1.T - x2 @ x2.T))
