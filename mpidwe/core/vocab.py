"""Per-word sampling tables derived from word counts: subsampling keep probabilities and
the unigram^0.75 negative-sampling table. Pure functions, rebuilt at every start (never
stored), so every rank derives the same tables from the same counts.
"""

from __future__ import annotations

import numpy as np


def keep_probabilities(counts, sample: float) -> np.ndarray:
    """word2vec's subsampling: a word of frequency f = count / total is kept with probability
    (sqrt(f / sample) + 1) * sample / f, i.e. (sqrt(c / (sample*total)) + 1) * (sample*total) / c,
    clipped to 1. ``sample <= 0`` keeps everything. float32 [V], as the kernels read it."""
    counts = np.asarray(counts, dtype=np.float64)
    if sample <= 0:
        return np.ones(len(counts), dtype=np.float32)
    threshold = sample * counts.sum()
    with np.errstate(divide="ignore"):
        keep = (np.sqrt(counts / threshold) + 1) * threshold / counts
    return np.minimum(keep, 1.0).astype(np.float32)


def negative_probabilities(counts, power: float = 0.75) -> np.ndarray:
    """The noise distribution of negative sampling: counts**power, normalised (float64 [V])."""
    weights = np.asarray(counts, dtype=np.float64) ** power
    return weights / weights.sum()


def negative_table(counts, power: float = 0.75) -> np.ndarray:
    """Walker/Vose alias table for drawing word ids from counts**power: uint32 [V, 2] with
    column 0 a threshold and column 1 an alias id.

    A draw takes a uniform bucket i and a uniform 32-bit u: the word is i if u < threshold[i],
    else alias[i]. Unlike word2vec's 1e8-entry table (400 MB, a cache miss per negative) it is
    exact and takes 8 bytes a word, so it stays in cache; kernels/common.py says which random
    bits make i and u.
    """
    prob = negative_probabilities(counts, power)
    n = len(prob)
    scaled = prob * n                      # mean 1: a bucket holds 1 unit of mass
    threshold = np.ones(n)
    alias = np.arange(n, dtype=np.int64)   # a full bucket is its own alias
    small = [i for i in range(n) if scaled[i] < 1.0]
    large = [i for i in range(n) if scaled[i] >= 1.0]
    scaled = scaled.tolist()               # Python floats: this loop is O(V) scalar work
    while small and large:
        lo, hi = small.pop(), large[-1]
        threshold[lo], alias[lo] = scaled[lo], hi
        scaled[hi] -= 1.0 - scaled[lo]     # hi gives lo's bucket the mass it lacks
        if scaled[hi] < 1.0:
            small.append(large.pop())
    # Leftovers are 1 up to rounding: they keep threshold 1 and alias themselves.
    table = np.empty((n, 2), dtype=np.uint32)
    table[:, 0] = np.minimum(np.round(threshold * 2.0**32), 2.0**32 - 1).astype(np.uint64)
    table[:, 1] = alias
    return table


def table_probabilities(table: np.ndarray) -> np.ndarray:
    """The distribution an alias table draws from (to check a table against its counts)."""
    n = len(table)
    keep = table[:, 0].astype(np.float64) / 2.0**32
    prob = keep.copy()
    np.add.at(prob, table[:, 1].astype(np.int64), 1.0 - keep)
    return prob / n
