"""One rank's two passes over its byte range, with either engine: pass 1 counts its tokens,
pass 2 maps them to the vocabulary's ids (out-of-vocabulary tokens dropped) and finds its
line starts. The compiled engine spools its raw token ids to a file between the passes
(``IdSpool``), so that pass 2 reads 4 bytes a token instead of tokenizing again."""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Callable, Iterator

import numpy as np

from ..core.errors import InputError
from ..io.fsutil import reason
from ..io.text import Piece, ScanStats, Source, TextOptions, close_or_fail, scan_pieces, write_or_fail
from .scan import RankScan
from .tokens import TokenTable

FLUSH_TOKENS = 1 << 20


class IdSpool:
    """One rank's raw token ids between its two passes: int32 in a file beside the output,
    so that pass 2 reads 4 bytes a token instead of decompressing and tokenizing again."""

    def __init__(self, path: str):
        self.path = path
        self.n = 0
        try:
            self._fh = open(path, "xb")
        except OSError as e:
            raise InputError(f"cannot write {path}: {reason(e)}") from None

    def write(self, ids: np.ndarray) -> None:
        write_or_fail(self._fh, memoryview(ids), self.path)
        self.n += len(ids)

    def close(self) -> None:
        if not self._fh.closed:
            close_or_fail(self._fh, self.path)

    def chunks(self, items: int):
        with open(self.path, "rb") as fh:
            while True:
                a = np.fromfile(fh, dtype=np.int32, count=items)
                if not len(a):
                    return
                yield a


@dataclasses.dataclass
class RankIds:
    """One rank's pass 2: how many tokens it keeps, its line starts (kept indices within its
    slice, ascending), and its final ids as a stream of int32 blocks (called once per write)."""
    kept: int
    line_starts: np.ndarray
    blocks: Callable[[], Iterator[np.ndarray]]


# ------------------------------------------------------------ the Python engine
def count_tokens(sources, pieces, opts) -> tuple[collections.Counter, ScanStats]:
    """Pass 1 of the Python engine: this rank's token counts and scan statistics."""
    counter: collections.Counter = collections.Counter()
    stats = ScanStats()
    for toks, _ in scan_pieces(sources, pieces, opts, stats):
        counter.update(toks)
    return counter, stats


def final_ids(sources, pieces, opts, lookup: dict[bytes, int], spool: IdSpool) -> RankIds:
    """Pass 2 of the Python engine: this rank's final ids (out-of-vocabulary tokens dropped)
    into ``spool``, and its line starts."""
    stats = ScanStats()
    lines: list[int] = []
    get = lookup.get
    for toks, newline in scan_pieces(sources, pieces, opts, stats):
        if toks:
            arr = np.fromiter(map(get, toks, itertools.repeat(-1, len(toks))), dtype=np.int64, count=len(toks))
            spool.write(arr[arr >= 0].astype(np.int32))
        if newline:
            lines.append(spool.n)  # the next line starts at this kept-token index
    spool.close()
    return RankIds(spool.n, np.array(lines, dtype=np.int64), lambda: spool.chunks(FLUSH_TOKENS))


# ----------------------------------------------------------- the compiled engine
@dataclasses.dataclass
class CompiledCount:
    """Pass 1 of the compiled engine on one rank: the spool of its raw token ids, the
    RankScan (line ends, stats, sizes of unsized sources), the table of its distinct tokens
    after lowercasing (with counts), and raw id -> id in that table."""
    spool: IdSpool
    scan: RankScan
    table: TokenTable
    raw_to_type: np.ndarray


def count_compiled(sources: list[Source], pieces: list[Piece], opts: TextOptions,
                   spool_path: str) -> CompiledCount:
    """Pass 1 with the compiled tokenizer: raw token ids into a new IdSpool at
    ``spool_path`` (closed, whatever happens), the distinct tokens counted."""
    spool = IdSpool(spool_path)
    try:
        scan = RankScan(opts, spool.write)
        scan.scan(sources, pieces)
    finally:
        spool.close()
    table, raw_to_type = scan.canonical()
    return CompiledCount(spool, scan, table, raw_to_type)


def final_ids_compiled(count: CompiledCount, words: list[bytes]) -> RankIds:
    """Pass 2 of the compiled engine over the spooled raw ids, for the vocabulary ``words``."""
    final = TokenTable.from_words(words).lookup_all(*count.table.arrays()[:3])
    scan = count.scan
    line_ends = np.concatenate(scan.line_ends) if scan.line_ends else np.zeros(0, dtype=np.int64)
    return remap_spool(count.spool, final[count.raw_to_type], line_ends)


def remap_spool(spool: IdSpool, remap: np.ndarray, line_ends: np.ndarray) -> RankIds:
    """The final ids of the spooled raw ids: ``remap`` gives each raw id's final id (-1:
    dropped). One read of the spool finds the kept count and the line starts (kept
    indices); the final ids are remapped again as they are written (a few ms per million
    tokens, and nothing held in memory)."""
    from ..kernels.tokenize import remap_and_count_lines

    base = kept = j = found = 0
    lines = np.empty(len(line_ends), dtype=np.int64)     # every chunk fills the next of its slots
    for raw in itertools.chain(spool.chunks(FLUSH_TOKENS), [np.zeros(0, dtype=np.int32)]):
        k, j, nl = remap_and_count_lines(raw, remap, line_ends, j, base, kept, lines[found:])
        found += nl
        base += len(raw)
        kept += k

    def blocks():
        none = np.zeros(0, dtype=np.int64)
        for raw in spool.chunks(FLUSH_TOKENS):
            k, _, _ = remap_and_count_lines(raw, remap, none, 0, 0, 0, none)
            yield raw[:k]

    return RankIds(kept, lines[:found], blocks)
