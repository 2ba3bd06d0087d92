"""Pure shard arithmetic: integers in, ranges out. No I/O, no MPI."""

from __future__ import annotations

import numpy as np


def even_split(total: int, rank: int = 0, world_size: int = 1) -> tuple[int, int]:
    """[start, end) of ``rank``'s share when ``total`` items are split as evenly as possible."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of {world_size}")
    return total * rank // world_size, total * (rank + 1) // world_size


def sentence_shard(sentence_starts: np.ndarray, n_tokens: int, rank: int = 0,
                   world_size: int = 1) -> tuple[int, int, int, int]:
    """A contiguous, sentence-aligned token range for ``rank``.

    ``sentence_starts`` holds the first token of every sentence (ascending, first is 0 when
    there are tokens). Rank r's range starts at the sentence boundary nearest to
    ``r * n_tokens / world_size``, so every shard is within one sentence of the ideal share.
    Returns (token_start, token_end, sentence_start, sentence_end).
    """
    starts = np.asarray(sentence_starts, dtype=np.int64)
    return sentence_shard_by(lambda k: int(starts[k]), len(starts), n_tokens, rank, world_size)


def sentence_shard_by(start_of, n_sent: int, n_tokens: int, rank: int = 0,
                      world_size: int = 1) -> tuple[int, int, int, int]:
    """``sentence_shard`` where ``start_of(k)`` gives sentence k's first token: a binary
    search looks at about 2 log2(n_sent) of them, so a rank of a corpus read from a file
    never holds every sentence start."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of {world_size}")

    def bound(k: int) -> int:          # sentence starts, then n_tokens
        return n_tokens if k >= n_sent else start_of(k)

    def cut(r: int) -> int:
        if r <= 0:
            return 0
        if r >= world_size:
            return n_sent
        target = n_tokens * r / world_size
        lo, hi = 0, n_sent + 1         # the first k with bound(k) >= target (searchsorted, left)
        while lo < hi:
            mid = (lo + hi) // 2
            if bound(mid) < target:
                lo = mid + 1
            else:
                hi = mid
        i = lo
        # nearest boundary among bound(i-1), bound(i)
        if i > 0 and (i > n_sent or target - bound(i - 1) <= bound(i) - target):
            i -= 1
        return min(i, n_sent)

    s0, s1 = cut(rank), cut(rank + 1)
    return bound(s0), bound(s1), s0, s1
