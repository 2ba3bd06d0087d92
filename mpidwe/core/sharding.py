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
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world of {world_size}")
    bounds = np.append(np.asarray(sentence_starts, dtype=np.int64), np.int64(n_tokens))
    n_sent = len(bounds) - 1

    def cut(r: int) -> int:
        if r <= 0:
            return 0
        if r >= world_size:
            return n_sent
        target = n_tokens * r / world_size
        i = int(np.searchsorted(bounds, target))
        # nearest boundary among bounds[i-1], bounds[i]
        if i > 0 and (i > n_sent or target - bounds[i - 1] <= bounds[i] - target):
            i -= 1
        return min(i, n_sent)

    s0, s1 = cut(rank), cut(rank + 1)
    return int(bounds[s0]), int(bounds[s1]), s0, s1
