"""The kernels' explicit vector row products (mpidwe/kernels/simd.py) against numpy, for
embedding sizes with every kind of tail (8-wide blocks, a 4-wide piece, single floats)."""

import numpy as np
import pytest
from numba import literally, njit
from numba.core.errors import TypingError

from mpidwe.kernels.simd import accumulate_rows, row_dot, row_dots

DIMS = (1, 3, 4, 5, 8, 12, 13, 20, 50, 100, 128, 300)


@njit
def _dot(dim, x, y):
    dim = literally(dim)
    return row_dot(x, y, dim)


@njit
def _dots(dim, x, m, ids, n, out):
    dim = literally(dim)
    row_dots(x, m, ids, n, out, dim)


@njit
def _accumulate(dim, keep, y, coefs, m, ids, n):
    dim = literally(dim)
    keep = literally(keep)
    accumulate_rows(y, keep, coefs, m, ids, n, dim)


@pytest.mark.parametrize("dim", DIMS)
def test_row_dot_is_the_dot_product(dim):
    rng = np.random.default_rng(dim)
    x, y = rng.standard_normal((2, dim), dtype=np.float32)
    assert _dot(dim, x, y) == pytest.approx(float(x.astype(np.float64) @ y), rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("dim", DIMS)
def test_row_dots_scores_every_row_and_writes_nothing_else(dim):
    rng = np.random.default_rng(dim)
    x = rng.standard_normal(dim, dtype=np.float32)
    m = rng.standard_normal((30, dim), dtype=np.float32)
    for n in (0, 1, 3, 4, 5, 6, 9, 13):
        ids = rng.integers(0, 30, 13).astype(np.int32 if n % 2 else np.int64)
        out = np.full(14, -7.0, np.float32)
        _dots(dim, x, m, ids, n, out)
        np.testing.assert_allclose(out[:n], m[ids[:n]].astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
        assert (out[n:] == -7.0).all()


@pytest.mark.parametrize("dim", DIMS)
def test_accumulate_rows_adds_the_weighted_rows(dim):
    rng = np.random.default_rng(dim)
    m = rng.standard_normal((20, dim), dtype=np.float32)
    ids = np.array([3, 7, 3, 19, 0, 11, 5], np.int64)    # a row twice counts twice
    coefs = rng.standard_normal(7, dtype=np.float32)
    y0 = rng.standard_normal(dim, dtype=np.float32)
    for n in (0, 1, 5, 7):
        want = (coefs[:n, None].astype(np.float64) * m[ids[:n]]).sum(0)
        added, fresh = y0.copy(), y0.copy()
        _accumulate(dim, True, added, coefs, m, ids, n)
        _accumulate(dim, False, fresh, coefs, m, ids, n)
        np.testing.assert_allclose(added, y0 + want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(fresh, want, rtol=1e-5, atol=1e-5)


def test_the_embedding_size_must_be_known_when_compiling():
    @njit
    def runtime_dim(x, y, dim):
        return row_dot(x, y, dim)

    x = np.ones(8, np.float32)
    with pytest.raises(TypingError):
        runtime_dim(x, x, 8)


def test_strided_rows_are_refused():
    m = np.ones((4, 16), np.float32)
    with pytest.raises(TypingError):
        _dot(8, m[:, 0][:4].repeat(2), m[0, ::2])
