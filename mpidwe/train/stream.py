"""A rank's words, round after round: the pieces the trainer hands to the store.

:class:`ShardStream` (the static split): the rank's own shard, epoch after epoch, read ahead
block by block in a background thread. :class:`EpochStream` (``--balance speed``): the whole
corpus as one stream addressed by a global position, each round's range divided among the
ranks by their measured speeds (core/balance.py). Pieces end at sentence boundaries.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from ..io.corpus import Corpus, Shard, prefetch


# ------------------------------------------------------------------ data stream
class ShardStream:
    """The shard's sentences, epoch after epoch, handed out in pieces that end at sentence
    boundaries once a requested number of words is reached."""

    def __init__(self, corpus: Corpus, shard: Shard, epochs: int, block_tokens: int, start: int = 0):
        self.corpus, self.shard, self.epochs, self.block_tokens = corpus, shard, epochs, block_tokens
        self._held: tuple[np.ndarray, np.ndarray] | None = None
        self.consumed = start
        self._blocks = self._all_blocks(start)

    def _all_blocks(self, start: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = self.shard.n_tokens
        if n == 0:
            return
        first_epoch, offset = divmod(start, n)
        for epoch in range(first_epoch, self.epochs):
            begin = self.shard.token_start + offset if epoch == first_epoch and offset else None
            for tokens, starts, _ in prefetch(self.corpus.iter_blocks(self.shard, self.block_tokens, begin)):
                yield tokens, starts

    def take(self, until: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Pieces until ``consumed >= until`` (the last piece ends at the first sentence
        boundary at or after it)."""
        while self.consumed < until:
            if self._held is None:
                try:
                    self._held = next(self._blocks)
                except StopIteration:
                    return
            tokens, starts = self._held
            need = until - self.consumed
            if len(tokens) <= need:
                piece, self._held = (tokens, starts), None
            else:
                k = int(np.searchsorted(starts, need, side="left"))
                if k >= len(starts):
                    piece, self._held = (tokens, starts), None
                else:
                    cut = int(starts[k])
                    piece = (tokens[:cut], starts[:k])
                    self._held = (tokens[cut:], starts[k:] - cut)
            self.consumed += len(piece[0])
            if len(piece[0]):
                yield piece


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
