"""The token table of the compiled engine: distinct tokens (bytes) -> dense ids, with counts,
in numpy arrays that the kernels of kernels/tokenize.py fill (numba, imported at the first
call: ``preprocess.cli`` imports it in the background while MPI starts)."""

from __future__ import annotations

import numpy as np


class TokenTable:
    """Distinct tokens (bytes) -> dense ids in order of first sight, with their counts."""

    def __init__(self, types: int = 1 << 14, arena: int = 1 << 18):
        self.slots = np.zeros(_pow2(2 * types), dtype=np.int64)
        self.hashes = np.zeros(types, dtype=np.uint64)
        self.starts = np.zeros(types, dtype=np.int64)
        self.lens = np.zeros(types, dtype=np.int64)
        self.counts = np.zeros(types, dtype=np.int64)
        self.arena = np.zeros(arena, dtype=np.uint8)
        self.meta = np.zeros(2, dtype=np.int64)
        self._tok = np.zeros(1 << 16, dtype=np.uint8)

    def __len__(self) -> int:
        return int(self.meta[0])

    def arrays(self):
        """(arena, starts, lens, counts) of the tokens, for sending or merging."""
        n = len(self)
        return self.arena[: int(self.meta[1])], self.starts[:n], self.lens[:n], self.counts[:n]

    def words(self, ids=None) -> list[bytes]:
        arena, starts, lens = self.arena, self.starts, self.lens
        ids = range(len(self)) if ids is None else ids
        return [arena[starts[i]: starts[i] + lens[i]].tobytes() for i in ids]

    def tok_buffer(self, n: int) -> np.ndarray:
        """Scratch room for a token of ``n`` bytes (the kernels build a token there)."""
        if len(self._tok) < n:
            self._tok = np.zeros(_pow2(n), dtype=np.uint8)
        return self._tok

    def kernel_arrays(self):
        """The arrays as the kernels take them (kernels.tokenize.TableArrays); taken again
        after ``grow``, which replaces them."""
        from ..kernels.tokenize import TableArrays

        return TableArrays(self.slots, self.hashes, self.starts, self.lens, self.counts, self.arena, self.meta,
                           self._tok)

    def grow(self, token_bytes: int) -> None:
        """Room for at least one more type of ``token_bytes`` bytes (called when a kernel
        returned NEED_ROOM: the types, the slots or the arena were full)."""
        from ..kernels.tokenize import rehash

        n, used = len(self), int(self.meta[1])
        if n + 1 > len(self.hashes):
            cap = 2 * len(self.hashes)
            for name in ("hashes", "starts", "lens", "counts"):
                old = getattr(self, name)
                new = np.zeros(cap, dtype=old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
        if 2 * (n + 1) > len(self.slots):
            self.slots = np.zeros(2 * len(self.slots), dtype=np.int64)
            rehash(self.slots, self.hashes, n)
        if used + token_bytes > len(self.arena):
            new = np.zeros(_pow2(max(2 * len(self.arena), used + token_bytes)), dtype=np.uint8)
            new[:used] = self.arena[:used]
            self.arena = new

    def add_all(self, arena, starts, lens) -> np.ndarray:
        """Add another table's tokens; their ids here (int32)."""
        from ..kernels.tokenize import intern_all

        out = np.empty(len(lens), dtype=np.int32)
        self.tok_buffer(int(lens.max()) if len(lens) else 1)
        i = 0
        while i < len(lens):
            i = intern_all((arena, starts, lens), self.kernel_arrays(), out, i)
            if i < len(lens):
                self.grow(int(lens[i]))
        return out

    def lookup_all(self, arena, starts, lens) -> np.ndarray:
        """The ids here of another table's tokens, -1 where absent (int32)."""
        from ..kernels.tokenize import lookup_all

        out = np.empty(len(lens), dtype=np.int32)
        lookup_all((arena, starts, lens), self.kernel_arrays(), out)
        return out

    @classmethod
    def from_words(cls, words: list[bytes]) -> "TokenTable":
        """A table holding ``words`` (distinct) with ids in their order."""
        arena, starts, lens = pack(words)
        t = cls(types=max(16, len(words)), arena=max(16, len(arena)))
        t.add_all(arena, starts, lens)
        return t


def pack(words: list[bytes]):
    """(arena, starts, lens) of a list of byte strings."""
    arena = np.frombuffer(b"".join(words), dtype=np.uint8)
    lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.zeros(len(words), dtype=np.int64)
    if len(words) > 1:
        np.cumsum(lens[:-1], out=starts[1:])
    return arena, starts, lens


def _pow2(n: int) -> int:
    return 1 << max(4, int(n - 1).bit_length())
