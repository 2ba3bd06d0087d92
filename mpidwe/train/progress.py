"""Progress for people and for batch logs.

On a terminal, rank 0 shows a tqdm bar. Anywhere else (standard error redirected to a Slurm
log, or ``--no-progress``) it writes a plain line every ``--log-seconds`` through the standard
:mod:`logging` module (logger ``mpidwe.train``), so a user can route, filter or silence it::

    2026-11-23 19:40:02 mpidwe.train: 42.0% 25.2M/60.0M words, loss 2.3456, lr 0.01234,
        1.23M words/s, ETA 0:00:32; slowest rank 1: compute 91%, comm 7%

(one line in the log; with --eval-every, ``, evaluation N%`` adds the share of the time spent
evaluating on rank 0, for which the other ranks wait, instead of counting it as communication). The command-line entry points attach a timestamped standard-error
handler to the ``mpidwe`` logger when nothing else handles it (:func:`setup_cli_logging`);
the Python API leaves logging to the caller, as gensim does.
"""

from __future__ import annotations

import logging
import sys
import time

import numpy as np

LOGGER = logging.getLogger("mpidwe.train")
FORMAT = "%(asctime)s %(name)s: %(message)s"
DATEFMT = "%Y-%m-%d %H:%M:%S"


def setup_cli_logging() -> None:
    """A timestamped standard-error handler for the ``mpidwe`` loggers, unless the
    application (or the root logger) already has one."""
    root = logging.getLogger("mpidwe")
    if root.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(FORMAT, DATEFMT))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False


def bar_wanted(progress: bool, stream=None) -> bool:
    """A live bar only for a person watching: ``--progress`` and a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return progress and stream.isatty()
    except (AttributeError, ValueError):
        return False


def human(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.{1 if abs(n) >= 10 * size else 2}f}{unit}"
    return f"{n:.0f}"


def clock(seconds: float) -> str:
    s = int(round(max(seconds, 0)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class ProgressLog:
    """Rank 0's clock for the plain progress line. :meth:`due` is rank 0's opinion only;
    the trainer makes it every rank's decision in the round's all-reduce, because the line
    gathers every rank's timings (a collective)."""

    def __init__(self, every_s: float, words_total: int, words_start: int, *, logger=LOGGER,
                 now=time.monotonic):
        self.every_s, self.total, self.logger, self.now = every_s, words_total, logger, now
        t = now()
        self.last_t, self.last_words = t, words_start
        self.last_loss = np.zeros(2)          # loss sum, examples at the last line
        self.last_ranks: np.ndarray | None = None

    def rebase(self, words: int, loss_sum: float, examples: float, per_rank: np.ndarray) -> None:
        """Measure from here: the next line's rate, ETA, loss and shares leave out what came
        before (the first round, in which numba compiles the kernel: seconds to a minute on a
        machine without its disk cache, which would make the rate look 100x too slow)."""
        self.last_t, self.last_words = self.now(), words
        self.last_loss = np.array([loss_sum, examples])
        self.last_ranks = per_rank.copy()

    def due(self) -> bool:
        return self.every_s > 0 and self.now() - self.last_t >= self.every_s

    def line(self, words: int, loss_sum: float, examples: float, lr: float, per_rank: np.ndarray) -> str:
        """``per_rank``: one row per rank of cumulative (compute s, sync communication s[,
        evaluation s]). Rates and shares are over the time since the previous line."""
        t = self.now()
        dt = max(t - self.last_t, 1e-9)
        rate = (words - self.last_words) / dt
        d_loss = np.array([loss_sum, examples]) - self.last_loss
        loss = f"{d_loss[0] / d_loss[1]:.4f}" if d_loss[1] > 0 else "-"
        left = self.total - words
        eta = clock(left / rate) if rate > 0 else "?"
        delta = per_rank if self.last_ranks is None else per_rank - self.last_ranks
        slow = int(np.argmax(delta[:, 0]))
        shares = (100 * delta[slow] / dt).round().astype(int)
        compute, comm = shares[:2]
        evaluating = int(shares[2]) if len(shares) > 2 else 0
        pct = 100 * words / max(self.total, 1)
        text = (f"{pct:.1f}% {human(words)}/{human(self.total)} words, loss {loss}, lr {lr:.5f}, "
                f"{human(rate)} words/s, ETA {eta}")
        if len(per_rank) > 1:
            text += f"; slowest rank {slow}: compute {compute}%, comm {comm}%"
        else:
            text += f"; compute {compute}%"
        if evaluating > 0:     # rank 0 evaluates (--eval-every) and the other ranks wait for it
            text += f", evaluation {evaluating}%" + (" (rank 0 evaluates, the others wait)" if len(per_rank) > 1 else "")
        self.last_t, self.last_words = t, words
        self.last_loss = np.array([loss_sum, examples])
        self.last_ranks = per_rank.copy()
        return text

    def emit(self, *args) -> None:
        self.logger.info(self.line(*args))
