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

import numpy as np

# weight of the newest measurement in the smoothed speed
SPEED_SMOOTHING = 0.5
# no rank's share falls below this fraction of an equal share (a rank that stalled once
# must still get enough words to measure its speed again)
MIN_SHARE = 0.1


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
