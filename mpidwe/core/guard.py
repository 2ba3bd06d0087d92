"""The divergence guard: numbers in, a verdict out (no comm, no I/O).

A diverging SGNS run does not always produce NaN: with stale updates summed over ranks the
loss climbs to 1e5 and the vectors become noise while every step stays finite. The guard
watches the two symptoms after every sync: a smoothed loss far above the best it has been,
and parameters far outside the range trained SGNS reaches.
"""

from __future__ import annotations

import math


class DivergenceGuard:
    """Call :meth:`check` once per sync with the round's mean loss and the largest |value|
    of the synced parameters; it returns ``None`` or why the run is judged diverged."""

    def __init__(self, loss_ratio: float = 2.0, max_abs: float = 100.0, smoothing: float = 0.3,
                 warmup: int = 3):
        self.loss_ratio, self.max_abs = loss_ratio, max_abs
        self.smoothing, self.warmup = smoothing, warmup
        self.smoothed: float | None = None
        self.best = math.inf
        self.seen = 0

    def check(self, loss: float | None, max_abs: float) -> str | None:
        """``loss`` is None for a round in which no rank trained an example."""
        if loss is not None and not math.isfinite(loss):
            return f"the loss became {loss}"
        if not math.isfinite(max_abs):
            return "a parameter became NaN or infinite"
        if max_abs > self.max_abs:
            return f"a parameter reached |{max_abs:.3g}| (limit {self.max_abs:g})"
        if loss is None:
            return None
        self.seen += 1
        a = self.smoothing
        self.smoothed = loss if self.smoothed is None else a * loss + (1 - a) * self.smoothed
        # the first rounds start from a random model: their loss is no baseline yet
        if self.seen <= self.warmup:
            self.best = min(self.best, self.smoothed)
            return None
        if self.loss_ratio and self.smoothed > self.loss_ratio * self.best:
            return (f"the smoothed loss {self.smoothed:.4g} is {self.smoothed / self.best:.1f}x "
                    f"its best {self.best:.4g}")
        self.best = min(self.best, self.smoothed)
        return None
