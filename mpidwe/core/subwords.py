"""fastText's subword model: hashed character n-grams (Bojanowski et al. 2017). Pure: no I/O.

A word's input vector is the mean of its own row and the rows of its character n-grams
(fastText's ``getWordVector`` and its hidden layer). The n-grams are those of ``<word>``
(the word between fastText's boundary marks) of ``minn`` to ``maxn`` characters (UTF-8
characters, not bytes), each hashed with 32-bit FNV-1a over its bytes, as fastText's
``Dictionary::hash`` (which xors each byte as a *signed* char, so bytes >= 0x80 are
sign-extended) and ``Dictionary::computeSubwords``. N-gram ``g`` owns row
``V + hash(g) % buckets`` of the input matrix, below the V word rows.

The table of every word's rows is derived from the words and (minn, maxn, buckets), so it
is rebuilt at every start and by every reader, never stored. A word outside the
vocabulary gets the mean of its n-gram rows alone (fastText's vector for an unseen word).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

BOW, EOW = "<", ">"
FNV_OFFSET = 2166136261
FNV_PRIME = 16777619


def fnv1a(data: bytes) -> int:
    """fastText's Dictionary::hash: 32-bit FNV-1a, each byte xored as a sign-extended char."""
    h = FNV_OFFSET
    for b in data:
        h ^= (b - 256 if b >= 128 else b) & 0xFFFFFFFF
        h = (h * FNV_PRIME) & 0xFFFFFFFF
    return h


def char_ngrams(word: str, minn: int, maxn: int) -> list[str]:
    """The n-grams of ``<word>`` in fastText's order (by start, then by length); a lone
    boundary mark is not an n-gram (it matters only for minn = 1)."""
    token = BOW + word + EOW
    out = []
    for i in range(len(token)):
        for n in range(1, maxn + 1):
            if i + n > len(token):
                break
            if n >= minn and not (n == 1 and (i == 0 or i + n == len(token))):
                out.append(token[i:i + n])
    return out


def ngram_buckets(word: str, minn: int, maxn: int, buckets: int) -> list[int]:
    """Bucket numbers (0..buckets-1) of the word's n-grams, in fastText's order."""
    return [fnv1a(g.encode("utf-8")) % buckets for g in char_ngrams(word, minn, maxn)]


@dataclass(frozen=True)
class SubwordSpec:
    minn: int
    maxn: int
    buckets: int

    def oov_rows(self, word: str, vocab_size: int) -> np.ndarray:
        """Input rows of a word the vocabulary does not hold: its n-gram rows."""
        return vocab_size + np.array(ngram_buckets(word, self.minn, self.maxn, self.buckets), dtype=np.int64)


@dataclass(frozen=True)
class SubwordTable:
    """CSR rows of every vocabulary word: ``ids[ptr[w]:ptr[w+1]]``, the word's own row first."""

    ptr: np.ndarray        # int64 [V + 1]
    ids: np.ndarray        # int32 [nnz]
    spec: SubwordSpec

    @property
    def vocab_size(self) -> int:
        return len(self.ptr) - 1

    @property
    def rows(self) -> int:
        """Rows of the input matrix: words, then buckets."""
        return self.vocab_size + self.spec.buckets

    def word_vectors(self, w_in: np.ndarray) -> np.ndarray:
        """float32 [V, dim]: each word's vector, the mean of its rows."""
        return _mean_rows(w_in, self.ptr, self.ids)

    def vector(self, w_in: np.ndarray, word: str, index: dict | None = None) -> np.ndarray:
        """A word's vector: the vocabulary's own for a known word, else its n-grams' mean."""
        if index is not None and word in index:
            w = index[word]
            rows = self.ids[self.ptr[w]:self.ptr[w + 1]]
        else:
            rows = self.spec.oov_rows(word, self.vocab_size)
        return w_in[rows].mean(axis=0, dtype=np.float64).astype(np.float32)


def build_table(words: list[str], minn: int, maxn: int, buckets: int) -> SubwordTable:
    """Every word's rows (its own id, then V + bucket of each n-gram), computed in numba over
    the UTF-8 bytes of ``<word>``; the same as :func:`ngram_buckets` word by word."""
    spec = SubwordSpec(minn, maxn, buckets)
    v = len(words)
    encoded = [(BOW + w + EOW).encode("utf-8") for w in words]
    starts = np.zeros(v + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=starts[1:])
    arena = np.frombuffer(b"".join(encoded), dtype=np.uint8) if v else np.zeros(0, np.uint8)
    counts = _count(arena, starts, minn, maxn)
    ptr = np.zeros(v + 1, dtype=np.int64)
    np.cumsum(counts + 1, out=ptr[1:])
    ids = np.empty(ptr[-1], dtype=np.int32)
    _fill(arena, starts, minn, maxn, buckets, v, ptr, ids)
    return SubwordTable(ptr, ids, spec)


@njit(inline="always")
def _continuation(b):
    return (b & 0xC0) == 0x80


@njit(cache=True)
def _walk(arena, lo, hi, minn, maxn, buckets, out, k, write):
    """fastText's computeSubwords over bytes [lo, hi) of one ``<word>``; returns the count."""
    n_found = 0
    for i in range(lo, hi):
        if _continuation(arena[i]):
            continue
        h = np.uint32(FNV_OFFSET)
        j = i
        n = 1
        while j < hi and n <= maxn:
            # one character: its first byte and its continuation bytes
            b = arena[j]
            h = np.uint32((h ^ np.uint32(np.int32(np.int8(b)))) * np.uint32(FNV_PRIME))
            j += 1
            while j < hi and _continuation(arena[j]):
                h = np.uint32((h ^ np.uint32(np.int32(np.int8(arena[j])))) * np.uint32(FNV_PRIME))
                j += 1
            if n >= minn and not (n == 1 and (i == lo or j == hi)):
                if write:
                    out[k + n_found] = np.int64(h) % buckets
                n_found += 1
            n += 1
    return n_found


@njit(cache=True)
def _count(arena, starts, minn, maxn):
    v = starts.shape[0] - 1
    counts = np.zeros(v, dtype=np.int64)
    dummy = np.zeros(1, dtype=np.int32)
    for w in range(v):
        counts[w] = _walk(arena, starts[w], starts[w + 1], minn, maxn, 1, dummy, 0, False)
    return counts


@njit(cache=True)
def _fill(arena, starts, minn, maxn, buckets, vocab, ptr, ids):
    for w in range(vocab):
        ids[ptr[w]] = w
        found = _walk(arena, starts[w], starts[w + 1], minn, maxn, buckets, ids, ptr[w] + 1, True)
        for k in range(ptr[w] + 1, ptr[w] + 1 + found):
            ids[k] += vocab


@njit(cache=True)
def _mean_rows(w_in, ptr, ids):
    v = ptr.shape[0] - 1
    dim = w_in.shape[1]
    out = np.zeros((v, dim), dtype=np.float32)
    for w in range(v):
        n = ptr[w + 1] - ptr[w]
        for p in range(ptr[w], ptr[w + 1]):
            row = w_in[ids[p]]
            for k in range(dim):
                out[w, k] += row[k]
        inv = np.float32(1.0) / np.float32(n)
        for k in range(dim):
            out[w, k] *= inv
    return out
