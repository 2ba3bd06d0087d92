"""The PIP reference embedding: truncated SVD of the shifted positive PMI matrix.

Levy & Goldberg (2014) showed that SGNS with k negatives implicitly factorises the PMI
matrix shifted by log k; the explicit factorisation of ``max(PMI - log k, 0)`` (SPPMI) over
the training window therefore makes a natural reference to measure embeddings against
with the PIP loss (Yin & Shen 2018). Steps, each a function:

1. :func:`count_cooccurrences`: every rank counts, on its own shard, the pairs of words at
   distance 1..window inside a sentence, both among the ``top_n`` most frequent words;
   only forward pairs (left word, right word) are counted; :func:`symmetrize` adds the
   transpose (the window is symmetric).
2. :func:`sum_over_ranks`: the sparse counts are summed on rank 0 (gathered in chunks).
3. :func:`sppmi_matrix`: ``max(log(#(w,c) D / (#w #c)) - log k, 0)`` with the marginals and
   D taken from the counted matrix itself.
4. :func:`factorize`: ``E = U_d S_d^alpha`` from ``scipy.sparse.linalg.svds`` with a seeded
   start vector, so the result does not depend on luck (nor on the number of ranks: the
   counts are integers, summed exactly).

:func:`reference_embedding` wires these together with the cache (:mod:`.refcache`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import svds

from ..parallel.comm import Comm
from ..io.corpus import Corpus
from ..core.errors import ConfigError
from ..io import refcache

GATHER_ENTRIES = 1 << 22   # non-zeros sent to rank 0 per gather round (64 MiB of COO)
SVD_SEED = 0


@dataclass(frozen=True)
class ReferenceSpec:
    """How the reference is made; with the corpus id it is the cache key."""

    window: int = 5
    negatives: int = 5
    dim: int = 100
    top_n: int = 30000
    alpha: float = 0.5

    def check(self, n_words: int) -> int:
        """Validate against a vocabulary of ``n_words``; returns the rows actually used."""
        for name in ("window", "negatives", "dim", "top_n"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"PIP reference: {name} must be > 0, got {getattr(self, name)}")
        if not np.isfinite(self.alpha) or self.alpha < 0:
            raise ConfigError(f"PIP reference: alpha must be >= 0, got {self.alpha}")
        n = min(self.top_n, n_words)
        if self.dim >= n:
            raise ConfigError(f"PIP reference: dimension {self.dim} must be below the number of "
                              f"words used ({n}: top {self.top_n} of a {n_words}-word vocabulary)")
        return n


@dataclass
class Reference:
    """A reference embedding: row i is ``words[i]``, the i-th most frequent word."""

    words: list[str]
    vectors: np.ndarray              # (n, dim) float32
    singular_values: np.ndarray      # (dim,) descending
    key: refcache.ReferenceKey
    cached: bool                     # True: read from the cache, nothing recomputed
    info: dict = field(default_factory=dict)


# ------------------------------------------------------------------------ counting
def forward_pairs(tokens: np.ndarray, sentence_starts: np.ndarray, window: int,
                  top_n: int) -> tuple[np.ndarray, np.ndarray]:
    """(left, right) ids of every pair at distance 1..window in the same sentence with both
    ids below ``top_n``. ``sentence_starts`` are local to ``tokens`` (first one is 0)."""
    tokens = np.asarray(tokens)
    sentence = np.zeros(len(tokens), dtype=np.int64)
    starts = np.asarray(sentence_starts, dtype=np.int64)
    sentence[starts[(starts > 0) & (starts < len(tokens))]] = 1
    sentence = np.cumsum(sentence)
    frequent = tokens < top_n
    left, right = [], []
    for o in range(1, min(window, len(tokens) - 1) + 1):
        keep = (sentence[:-o] == sentence[o:]) & frequent[:-o] & frequent[o:]
        left.append(tokens[:-o][keep])
        right.append(tokens[o:][keep])
    if not left:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    return np.concatenate(left), np.concatenate(right)


def _counts(left: np.ndarray, right: np.ndarray, n: int) -> sp.csr_matrix:
    ones = np.ones(len(left), dtype=np.float64)
    return sp.coo_matrix((ones, (left, right)), shape=(n, n)).tocsr()  # tocsr sums duplicates


def count_cooccurrences(corpus: Corpus, window: int, top_n: int, *, rank: int = 0, world_size: int = 1,
                        block_tokens: int = 1 << 20) -> sp.csr_matrix:
    """Forward pair counts (float64, exact integers) on ``rank``'s shard, as an
    ``n x n`` matrix with ``n = min(top_n, vocabulary)``. Blocks are sentence-aligned, so no
    pair is lost at a block edge."""
    n = min(top_n, corpus.n_words)
    total = sp.csr_matrix((n, n), dtype=np.float64)
    for tokens, starts, _ in corpus.iter_blocks(corpus.shard(rank, world_size), block_tokens):
        total = total + _counts(*forward_pairs(tokens, starts, window, n), n)
    return total


def symmetrize(forward: sp.spmatrix) -> sp.csr_matrix:
    """Counts of the symmetric window from the forward counts."""
    forward = sp.csr_matrix(forward)
    return (forward + forward.T).tocsr()


def sum_over_ranks(local: sp.csr_matrix, comm: Comm,
                   chunk_entries: int = GATHER_ENTRIES) -> sp.csr_matrix | None:
    """Sum every rank's sparse matrix on rank 0 (None elsewhere). Each rank sends its
    non-zeros as (row, col, value) in rounds of at most ``chunk_entries``, so no message
    gets near MPI's 2 GiB limit and rank 0 never holds all ranks' copies at once."""
    if comm.size == 1:
        return local
    coo = local.tocoo()
    rounds = comm.allreduce_scalar(-(-coo.nnz // chunk_entries), op="max")
    total = sp.csr_matrix(local.shape, dtype=np.float64) if comm.is_root else None
    for r in range(rounds):
        s = slice(r * chunk_entries, (r + 1) * chunk_entries)
        parts = comm.gather((coo.row[s].astype(np.int32), coo.col[s].astype(np.int32), coo.data[s]))
        if comm.is_root:
            rows, cols, vals = (np.concatenate(x) for x in zip(*parts))
            total = total + sp.coo_matrix((vals, (rows, cols)), shape=local.shape).tocsr()
    return total


# ----------------------------------------------------------------- PMI and the SVD
def sppmi_matrix(counts: sp.spmatrix, negatives: int) -> sp.csr_matrix:
    """``max(PMI - log k, 0)`` on the non-zero counts (zero counts stay 0, as in Levy &
    Goldberg). Marginals are the row and column sums of ``counts``."""
    coo = sp.coo_matrix(counts)
    rows = np.asarray(coo.sum(axis=1)).ravel()
    cols = np.asarray(coo.sum(axis=0)).ravel()
    total = rows.sum()
    if total <= 0:
        return sp.csr_matrix(coo.shape, dtype=np.float64)
    val = (np.log(coo.data) + np.log(total) - np.log(rows[coo.row]) - np.log(cols[coo.col])
           - np.log(negatives))
    keep = val > 0
    return sp.coo_matrix((val[keep], (coo.row[keep], coo.col[keep])), shape=coo.shape).tocsr()


def factorize(matrix: sp.spmatrix, dim: int, alpha: float = 0.5,
              seed: int = SVD_SEED) -> tuple[np.ndarray, np.ndarray]:
    """``U_d S_d^alpha`` (float32) and the singular values (descending) of the rank-``dim``
    truncated SVD. The start vector is seeded and each column's sign is fixed (largest
    entry positive), so the same matrix gives the same embedding."""
    m = sp.csr_matrix(matrix, dtype=np.float64)
    if m.nnz == 0:
        raise ConfigError("PIP reference: the SPPMI matrix is all zeros (corpus too small, or "
                          "--negative too large for it)")
    v0 = np.random.default_rng(seed).standard_normal(min(m.shape))
    u, s, _ = svds(m, k=dim, v0=v0, solver="arpack")
    order = np.argsort(-s, kind="stable")
    u, s = u[:, order], s[order]
    signs = np.sign(u[np.argmax(np.abs(u), axis=0), np.arange(u.shape[1])])
    u = u * np.where(signs == 0, 1.0, signs)
    return (u * s ** alpha).astype(np.float32), s


# ---------------------------------------------------------------------- the driver
def compute_reference(corpus: Corpus, spec: ReferenceSpec, comm: Comm, *,
                      block_tokens: int = 1 << 20, log=None) -> refcache.CachedReference | None:
    """Count on every rank, then PMI and SVD on rank 0 (returns None on the other ranks).
    Every rank first checks its share of the corpus against its id: the cache is keyed by
    that id, so a reference counted from damaged tokens under it would be reused as the
    corpus's own."""
    n = spec.check(corpus.n_words)
    comm.agree(corpus.verify, comm.rank, comm.size)
    key = refcache.ReferenceKey(corpus.corpus_id, spec.window, spec.negatives, spec.dim, n, spec.alpha)
    t0 = time.perf_counter()
    local = comm.agree(count_cooccurrences, corpus, spec.window, n, rank=comm.rank,
                       world_size=comm.size, block_tokens=block_tokens)
    forward = sum_over_ranks(local, comm)
    del local
    t_count = time.perf_counter() - t0

    def finish():
        counts = symmetrize(forward)
        pmi = sppmi_matrix(counts, spec.negatives)
        t1 = time.perf_counter()
        if log:
            log(f"SPPMI {n:,} x {n:,}: {counts.nnz:,} co-occurring pairs, {pmi.nnz:,} positive "
                f"({t1 - t0:.1f} s); SVD to {spec.dim} dimensions ...")
        emb, s = factorize(pmi, spec.dim, spec.alpha)
        info = {"pairs": float(counts.sum()) / 2, "cooccurrence_nnz": int(counts.nnz),
                "sppmi_nnz": int(pmi.nnz), "ranks": comm.size, "svd": "scipy.sparse.linalg.svds(arpack)",
                "svd_seed": SVD_SEED, "count_seconds": round(t_count, 3),
                "svd_seconds": round(time.perf_counter() - t1, 3),
                "seconds": round(time.perf_counter() - t0, 3)}
        return refcache.CachedReference(key, corpus.words[:n], emb, s, info)

    return comm.on_root(finish, broadcast=False)


def reference_embedding(corpus_path: str, spec: ReferenceSpec, comm: Comm | None = None, *,
                        cache: bool = True, block_tokens: int = 1 << 20, log=None) -> Reference:
    """The SPPMI reference of ``corpus_path`` on every rank of ``comm``: read from the cache
    beside the corpus when there, else computed (all ranks count) and cached by rank 0.
    ``cache=False`` neither reads nor writes the cache."""
    comm = comm or Comm.serial()
    corpus = comm.agree(Corpus, corpus_path)
    try:
        n = comm.agree(spec.check, corpus.n_words)
        key = refcache.ReferenceKey(corpus.corpus_id, spec.window, spec.negatives, spec.dim, n, spec.alpha)
        path = refcache.cache_path(corpus_path)
        hit = comm.on_root(refcache.read_reference, path, key, broadcast=False) if cache else None
        cached = comm.bcast(hit is not None)
        if cached:
            ref = hit
        else:
            if log:
                log(f"computing the SPPMI reference of {corpus_path} ({key.group}) on {comm.size} rank(s)")
            ref = compute_reference(corpus, spec, comm, block_tokens=block_tokens, log=log)
            if cache and comm.is_root:
                try:
                    refcache.write_reference(path, ref)
                    if log:
                        log(f"cached in {path}")
                except OSError as e:  # a read-only corpus directory: the result is still good
                    if log:
                        log(f"warning: could not write the PIP reference cache {path}: {e}")
        ref = comm.bcast(ref)
    finally:
        corpus.close()
    return Reference(ref.words, ref.embedding, ref.singular_values, ref.key, cached, ref.info)
