"""Pass 1 of the compiled engine: a rank's byte range read block by block and tokenized by
the kernels of kernels/tokenize.py into a TokenTable. The same tokens, line ends and
statistics as io/text.py's ``scan_range`` and ``tokenize`` (the readable reference, which
tests/test_tokenize.py compares it with)."""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from ..io.text import (DOC_LINE_MAX, Piece, ScanStats, Source, TextOptions, last_whitespace_end, open_reader,
    read_or_fail)
from .tokens import TokenTable, pack

_SPACES = None


def _space_table() -> np.ndarray:
    global _SPACES
    if _SPACES is None:
        from ..kernels.tokenize import space_table

        _SPACES = space_table()
    return _SPACES


class RankScan:
    """Pass 1 of one rank with the compiled tokenizer: every token of the rank's range is
    looked up in ``table`` (and counted there); its raw id goes to ``sink`` (a callable
    taking an int32 array), and the raw-token index at which each line starts to
    ``line_ends``. ``stats`` as ScanStats; ``sizes`` the bytes read of each source scanned
    to its end without a known size."""

    def __init__(self, opts: TextOptions, sink):
        self.opts = opts
        self.sink = sink
        self.table = TokenTable()
        self.line_ends: list[np.ndarray] = []
        self.n_raw = 0
        self._stats = np.zeros(3, dtype=np.int64)
        self.sizes: dict[int, int] = {}

    @property
    def stats(self) -> ScanStats:
        return ScanStats(raw_tokens=int(self._stats[0]), invalid_utf8=int(self._stats[1]),
                         doc_lines=int(self._stats[2]))

    def scan(self, sources: list[Source], pieces: list[Piece]) -> None:
        """Tokens of this rank's pieces, in order (as text.scan_pieces). A piece with no
        end (a compressed input read whole by this rank, not sized first) is read to the
        end of its file, and the file's size noted in ``sizes``."""
        for p in pieces:
            n = self._range(sources[p.source], p.start, p.end, p.line_start)
            if p.end is None:
                self.sizes[p.source] = n

    def _range(self, source: Source, start: int, end: int | None, line_start: bool) -> int:  # noqa: C901
        """One source's bytes [start, end) (end None: to the end of the file); returns the
        bytes read. Blocks are cut after their last newline, else after their last
        whitespace; a line that may be a doc tag is kept whole (up to DOC_LINE_MAX)."""
        opts = self.opts
        block = opts.block_bytes
        with open_reader(source) as fh:
            fh.seek(start)
            pos, carry = start, b""
            while True:
                want = block if end is None else min(block, end - pos)
                data = read_or_fail(fh, want, source.path) if want > 0 else b""
                if end is not None and want > 0 and not data:
                    raise InputError(f"{source.path} ended early (changed while reading?)")
                pos += len(data)
                final = (pos >= end) if end is not None else not data
                if carry:
                    data, carry = carry + data, b""
                if not final:
                    cut = data.rfind(b"\n") + 1
                    if cut == 0:
                        # one line longer than the block: it may be cut at a whitespace, unless it
                        # may still turn out to be a doc tag line
                        if line_start and opts.strip_doc_tags and len(data) < DOC_LINE_MAX and \
                                _may_be_doc_tag(data):
                            carry = data
                            continue
                        cut = last_whitespace_end(data)
                        if cut < 0:          # one token longer than a block: keep reading
                            carry = data
                            continue
                    if cut < len(data):
                        data, carry = data[:cut], data[cut:]
                line_start = self._block(data, line_start, final and (end is None or end == source.size))
                if final:
                    break
        if (end is None and pos > 0) or (end is not None and end == source.size and end > start):
            self.line_ends.append(np.array([self.n_raw], dtype=np.int64))  # a file end ends its line
        return pos

    def _block(self, data: bytes, line_start: bool, at_eof: bool) -> bool:
        from ..kernels.tokenize import OK, Cursor, ScanFlags, ScanOut, scan_block

        if not data:
            return line_start
        opts, t = self.opts, self.table
        buf = np.frombuffer(data, dtype=np.uint8)
        flags = ScanFlags(opts.normalize == "text8", opts.lowercase, opts.strip_doc_tags, _space_table())
        out = ScanOut(np.empty(len(data) // 2 + 2, dtype=np.int32), np.empty(data.count(b"\n") + 1, dtype=np.int64),
                      self._stats, self.n_raw)
        t.tok_buffer(3 * len(data) + 8)
        at = Cursor(0, 0, 0, line_start)
        while True:
            status, at = scan_block(buf, at_eof, flags, t.kernel_arrays(), out, at)
            if status == OK:
                break
            t.grow(3 * (len(data) - at.p) + 8)
        if at.n_lines:
            self.line_ends.append(out.line_ends[:at.n_lines].copy())
        if at.n_ids:
            self.sink(out.ids[:at.n_ids])
        self.n_raw += at.n_ids
        return at.line_start

    def canonical(self):
        """(table of distinct tokens, raw id -> its id) after the Unicode part of
        ``lowercase`` (the kernel lowers ASCII only): a token with other characters is
        decoded, lowered with str.lower and encoded again, which may merge types (the
        Kelvin sign K lowers to k). Whitespace never lowers to anything else or from
        anything else, and str.lower's context rule (final sigma) stops at it, so lowering
        each token is lowering the line."""
        t = self.table
        raw_ids = np.arange(len(t), dtype=np.int32)
        if not (self.opts.lowercase and self.opts.normalize != "text8"):
            return t, raw_ids
        arena, starts, lens, counts = t.arrays()
        high = np.flatnonzero(arena >= 0x80)
        if not len(high):
            return t, raw_ids
        which = np.unique(np.searchsorted(starts, high, side="right") - 1)
        words = t.words()
        for i in which.tolist():
            words[i] = words[i].decode("utf-8").lower().encode("utf-8")
        canon = TokenTable.from_words(list(dict.fromkeys(words)))
        remap = canon.lookup_all(*pack(words))
        canon.counts[: len(canon)] = np.bincount(remap, weights=counts, minlength=len(canon)).astype(np.int64)
        return canon, remap


def _may_be_doc_tag(data: bytes) -> bool:
    """Whether a line starting with ``data`` (no newline in it yet) may be a doc tag line."""
    s = data.lstrip()
    return len(s) < 6 or s.startswith((b"<doc", b"</doc"))
