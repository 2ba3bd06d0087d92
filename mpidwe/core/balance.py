"""Load balancing for ranks of uneven speed (``--balance speed``).

With the static split every rank owns a fixed shard and trains the same number of words per
round, so at every sync the fast ranks wait for the slowest. Balanced, the corpus is one
stream (all sentences, epoch after epoch, addressed by a global position) and each round's
words are divided among the ranks in proportion to the speed each measured in earlier
rounds (words per second of its own compute, smoothed). The number of rounds and the
collectives are the same on every rank: the speeds travel in the round's one all-reduce,
and every rank derives the same split from them. A rank's range always starts and ends at
a sentence start.

The split depends on measured times, so a balanced run is not bit-reproducible; its
checkpoints store the stream position and resume on any number of ranks.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

# weight of the newest measurement in the smoothed speed
SPEED_SMOOTHING = 0.5
# no rank's share falls below this fraction of an equal share (a rank that stalled once
# must still get enough words to measure its speed again)
MIN_SHARE = 0.1


class EpochStream:
    """The corpus (its selected segments) repeated ``epochs`` times, read by global position
    (epoch x tokens + offset; offsets count from the first selected token)."""

    def __init__(self, corpus, epochs: int, block_tokens: int, start: int = 0):
        self.corpus, self.epochs, self.block_tokens = corpus, epochs, block_tokens
        self.n = corpus.n_tokens
        whole = corpus.shard(0, 1)
        self.base = whole.token_start
        spans = [start_ - self.base + local
                 for start_, _, local in corpus.block_spans(whole, max(block_tokens, 1 << 16))]
        self.sentences = np.concatenate(spans).astype(np.int64) if spans else np.zeros(0, np.int64)
        self.total = self.n * epochs
        self.consumed = start           # the global position every rank has reached

    def snap(self, position: int) -> int:
        """The first sentence start at or after ``position`` (an epoch's start is one)."""
        if position >= self.total or self.n == 0:
            return self.total
        epoch, offset = divmod(int(position), self.n)
        k = int(np.searchsorted(self.sentences, offset))
        if k < len(self.sentences):
            return epoch * self.n + int(self.sentences[k])
        return (epoch + 1) * self.n

    def pieces(self, lo: int, hi: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Tokens of [lo, hi) (both sentence starts) with sentence starts local to each piece,
        in pieces of at most ``block_tokens`` (or one longer sentence) that end at sentence
        starts or at an epoch's end."""
        sents = self.sentences
        while lo < hi:
            epoch, offset = divmod(lo, self.n)
            end = min(hi - epoch * self.n, self.n)
            stop = end
            if end - offset > self.block_tokens:
                k = int(np.searchsorted(sents, offset + self.block_tokens, side="right")) - 1
                if k >= 0 and int(sents[k]) > offset:
                    stop = int(sents[k])
                else:                      # one sentence longer than a block: take it whole
                    k = int(np.searchsorted(sents, offset, side="right"))
                    stop = min(int(sents[k]), end) if k < len(sents) else end
            a, b = np.searchsorted(sents, [offset, stop])
            yield self.corpus.read_tokens(self.base + offset, self.base + stop), sents[a:b] - offset
            lo = epoch * self.n + stop


def split_points(lo: int, hi: int, weights: np.ndarray, snap) -> list[int]:
    """Where each rank's range of [lo, hi) begins and ends: P + 1 non-decreasing positions,
    shares in proportion to ``weights`` and cut at sentence starts (``snap``)."""
    w = np.asarray(weights, dtype=np.float64)
    cum = np.concatenate(([0.0], np.cumsum(w))) / w.sum()
    points = [lo]
    for c in cum[1:-1]:
        points.append(max(points[-1], min(hi, snap(lo + int(round(c * (hi - lo)))))))
    points.append(hi)
    return points


class SpeedWeights:
    """Every rank's smoothed speed (words per compute second), the same on every rank."""

    def __init__(self, ranks: int):
        self.speed = np.ones(ranks)
        self.measured = False

    def weights(self) -> np.ndarray:
        s = self.speed / self.speed.mean()
        return np.maximum(s, MIN_SHARE)

    def update(self, speeds: np.ndarray) -> None:
        """``speeds``: this round's words per compute second per rank (0: not measured)."""
        seen = speeds > 0
        if not seen.any():
            return
        if not self.measured:
            fill = speeds[seen].mean()
            self.speed = np.where(seen, speeds, fill)
            self.measured = True
            return
        self.speed = np.where(seen, (1 - SPEED_SMOOTHING) * self.speed + SPEED_SMOOTHING * speeds, self.speed)
