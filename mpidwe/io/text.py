"""Raw text -> tokens, streamed over a byte range. No MPI, no HDF5.

The input (one or more files, plain or compressed) is one byte space split into rank
ranges at whitespace. Within a range, text is read a block at a time, cut just after the
last whitespace, split into lines and tokenized, so no token is lost or doubled and
memory stays bounded by the block size.

Whitespace is every character for which ``str.isspace()`` is true: the ASCII bytes
space, TAB, LF, VT, FF, CR, and the Unicode spaces (U+0085 NEL, U+00A0 no-break space,
U+2000..U+200A, U+2028, U+2029, U+3000 ideographic space...), so no token holds any of
them. Cuts (range boundaries and block ends) are made only just after a whole whitespace
character: after an ASCII whitespace byte, or after the complete UTF-8 encoding of a
Unicode space. Such an encoding starts with a lead byte, which no earlier byte can claim
as a continuation, so the bytes before the cut decode the same alone as with what
follows, and a multi-byte space is never split between two ranges or two blocks.

Two implementations give the same tokens: ``scan_range``/``tokenize`` below, readable and
slow (the reference), and ``RankScan``, which runs the compiled kernels of
kernels/tokenize.py over whole blocks (the default of preprocessing).

Line rules (identical whatever the rank count):
- a file end is a line end;
- with ``strip_doc_tags``, a line that starts with ``<doc`` (and ends with ``>``) or is
  ``</doc>`` is dropped when it is shorter than ``DOC_LINE_MAX`` bytes. Range boundaries
  only fall inside lines at least that long, so every rank can decide alone.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import os
import sys
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import numpy as np

from ..core.errors import InputError
from .fsutil import reason

WHITESPACE = b" \t\n\r\x0b\x0c"   # ASCII whitespace bytes
# The UTF-8 encodings of the other characters that str.split() splits on (of the
# interpreter running: the Unicode database decides), from the Basic Multilingual Plane,
# where all of them are. ASCII control bytes 0x1c..0x1f are left out: they become spaces
# (see _CONTROL) but are no cut points, as before.
UNICODE_WHITESPACE = tuple(chr(c).encode() for c in range(0x80, 0x10000)
                           if not 0xD800 <= c < 0xE000 and chr(c).isspace())
DOC_LINE_MAX = 1 << 20     # also the window in which a range boundary looks for a newline

_TEXT8 = bytes(c if 97 <= c <= 122 else (c + 32 if 65 <= c <= 90 else 32) for c in range(256))
# control bytes other than whitespace become spaces: they are never part of a word
_CONTROL = bytes(32 if (c < 32 and c not in b"\t\n\r\x0b\x0c") or c == 127 else c for c in range(256))


class _InvalidCounter:
    """codecs error handler that counts invalid UTF-8 sequences and replaces them."""

    count = 0

    @classmethod
    def handler(cls, err: UnicodeDecodeError):
        cls.count += 1
        return "\ufffd", err.end


codecs.register_error("mpidwe-count", _InvalidCounter.handler)


# ------------------------------------------------------------------------------ inputs
@dataclass(frozen=True)
class Source:
    """One input file: its path, compression and uncompressed size."""

    path: str
    compression: str          # "none", "gzip" or "bz2"
    file_bytes: int
    size: int | None          # uncompressed bytes (None: not sized, read to the end)
    spool: str | None = None  # a plain copy to read instead (decompressed once)


def detect_compression(path: str) -> str:
    with open(path, "rb") as fh:
        magic = fh.read(3)
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if magic == b"BZh":
        return "bz2"
    return "none"


try:   # Intel ISA-L's gzip reader: the same stream, decompressed about 3x faster than zlib
    from isal import igzip as _gzip
    from isal.isal_zlib import error as _IsalError
except ImportError:   # a platform without its wheel: the standard library's
    _gzip, _IsalError = gzip, OSError

READ_ERRORS = (OSError, EOFError, ValueError, _IsalError)   # corruption or truncation of a gzip/bz2 stream


def open_source(path: str, compression: str) -> BinaryIO:
    if compression == "gzip":
        return _gzip.open(path, "rb")
    if compression == "bz2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def open_reader(source: "Source") -> BinaryIO:
    """The bytes of ``source``: its plain spool if it has one, else the file itself."""
    if source.spool:
        return open(source.spool, "rb")
    return open_source(source.path, source.compression)


def _read(fh: BinaryIO, n: int, path: str) -> bytes:
    try:
        return fh.read(n)
    except READ_ERRORS as e:
        raise InputError(f"cannot read {path}: {e}") from None


def describe_source(path: str, *, sized: bool = True, spool: str | None = None) -> Source:
    """Check that ``path`` is a readable file and find its uncompressed size: a compressed
    input is decompressed once to count, and with ``spool`` written there as plain text (a
    new file) that ranks then read instead. ``sized=False`` leaves a compressed input's size
    None (one rank streams it once, and counts as it goes)."""
    if not os.path.exists(path):
        raise InputError(f"input not found: {path}")
    if os.path.isdir(path):
        raise InputError(f"input is a directory, not a file: {path}")
    if not os.access(path, os.R_OK):
        raise InputError(f"input is not readable (permission denied): {path}")
    try:
        compression = detect_compression(path)
        file_bytes = os.path.getsize(path)
        if compression == "none":
            return Source(path, compression, file_bytes, file_bytes)
        if not sized:
            return Source(path, compression, file_bytes, None)
        size = 0
        out = open(spool, "xb") if spool else None
        try:
            with open_source(path, compression) as fh:
                while True:
                    chunk = _read(fh, 8 << 20, path)
                    if not chunk:
                        break
                    size += len(chunk)
                    if out is not None:
                        write_or_fail(out, chunk, spool)
        finally:
            if out is not None:
                close_or_fail(out, spool)
        return Source(path, compression, file_bytes, size, spool)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None


def write_or_fail(fh, data, path: str) -> None:
    """``fh.write(data)``; a failure (a full disk) is an InputError naming ``path``."""
    try:
        fh.write(data)
    except OSError as e:
        raise InputError(f"cannot write {path}: {reason(e)}") from None


def close_or_fail(fh, path: str) -> None:
    try:
        fh.close()
    except OSError as e:   # the last buffered bytes did not fit
        raise InputError(f"cannot write {path}: {reason(e)}") from None


@dataclass(frozen=True)
class Boundary:
    """A rank range boundary in the concatenated byte space."""

    offset: int
    line_start: bool


def find_boundaries(sources: list[Source], world_size: int) -> list[Boundary]:
    """``world_size + 1`` boundaries: rank r reads [b[r], b[r+1]).

    Each inner boundary starts at the even split point and moves forward to just after
    the next newline within DOC_LINE_MAX bytes, else just after the next whitespace byte,
    else to the end of that file. Pure function of the input bytes and world_size. One
    rank reads everything, also sources whose size is not known (None) yet."""
    if world_size == 1:
        known = all(s.size is not None for s in sources)
        return [Boundary(0, True), Boundary(sum(s.size for s in sources) if known else sys.maxsize, True)]
    total = sum(s.size for s in sources)
    starts = [0]
    for s in sources:
        starts.append(starts[-1] + s.size)
    out = [Boundary(0, True)]
    handles: dict[int, BinaryIO] = {}
    try:
        for r in range(1, world_size):
            nominal = max(total * r // world_size, out[-1].offset)
            i = next((k for k in range(len(sources)) if starts[k] <= nominal < starts[k + 1]), None)
            if i is None:
                out.append(Boundary(total, True))
                continue
            local = nominal - starts[i]
            if local == 0:
                out.append(Boundary(nominal, True))
                continue
            if i not in handles:
                handles[i] = open_reader(sources[i])
            fh = handles[i]
            fh.seek(local - 1)
            window = _read(fh, DOC_LINE_MAX + 1, sources[i].path)
            prev, window = window[:1], window[1:]
            if prev == b"\n":
                out.append(Boundary(nominal, True))
                continue
            nl = window.find(b"\n")
            if nl >= 0:
                out.append(Boundary(nominal + nl + 1, True))
                continue
            pos = nominal + len(window)
            found, after = _first_whitespace(window)
            while found < 0 and pos < starts[i + 1]:
                window = _read(fh, 1 << 20, sources[i].path)
                if not window:
                    break
                found, after = _first_whitespace(window)
                if found < 0:
                    pos += len(window)
                else:
                    nominal = pos
            if found < 0:
                out.append(Boundary(starts[i + 1], True))
            else:
                out.append(Boundary(nominal + after, window[found:found + 1] == b"\n"))
    finally:
        for fh in handles.values():
            fh.close()
    out.append(Boundary(total, True))
    return out


def _first_whitespace(buf: bytes) -> tuple[int, int]:
    """(start, end) of the first whole whitespace character in ``buf`` (an ASCII byte or
    a Unicode space's UTF-8 encoding); (-1, -1) if there is none. A match of an encoding
    is always a real character: it starts with a lead byte (see the module docstring)."""
    hits = [(i, i + 1) for i in (buf.find(bytes([c])) for c in WHITESPACE) if i >= 0]
    if not buf.isascii():
        hits += [(i, i + len(seq)) for i, seq in ((buf.find(seq), seq) for seq in UNICODE_WHITESPACE) if i >= 0]
    return min(hits) if hits else (-1, -1)


def _last_whitespace_end(buf: bytes) -> int:
    """The offset just after the last ASCII whitespace byte in ``buf``, else just after the
    last whole Unicode space (looked for only then: a block of text with no ASCII
    whitespace, such as Chinese or Japanese text); -1 if there is neither."""
    cut = max(buf.rfind(bytes([c])) for c in WHITESPACE)
    if cut >= 0:
        return cut + 1
    if buf.isascii():
        return -1
    return max((i + len(seq) for i, seq in ((buf.rfind(seq), seq) for seq in UNICODE_WHITESPACE) if i >= 0),
               default=-1)


# ---------------------------------------------------------------------------- scanning
@dataclass
class ScanStats:
    raw_tokens: int = 0
    invalid_utf8: int = 0
    doc_lines: int = 0
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TextOptions:
    normalize: str = "none"        # none | text8
    lowercase: bool = False
    strip_doc_tags: bool = False
    block_bytes: int = 4 << 20


def tokenize(line: bytes, opts: TextOptions, stats: ScanStats) -> list[bytes]:
    """One piece of a line -> tokens (valid UTF-8 bytes), split at every character for
    which ``str.isspace()`` is true (ASCII text: at the ASCII whitespace bytes, as
    ``bytes.split()``; other control bytes became spaces before)."""
    before = _InvalidCounter.count
    if opts.normalize == "text8":
        # count invalid sequences only when there are non-ASCII bytes at all
        if not line.isascii():
            line.decode("utf-8", "mpidwe-count")
        toks = line.translate(_TEXT8).split()
    else:
        text = line.translate(_CONTROL).decode("utf-8", "mpidwe-count")
        if opts.lowercase:
            text = text.lower()
        if text.isascii():
            toks = text.encode("ascii").split()
        else:
            # str.split() splits on all Unicode whitespace; joining with one space and
            # splitting the bytes again spares an encode per token
            joined = " ".join(text.split())
            toks = joined.encode("utf-8").split(b" ") if joined else []
    stats.invalid_utf8 += _InvalidCounter.count - before
    stats.raw_tokens += len(toks)
    return toks


def is_doc_tag(line: bytes) -> bool:
    s = line.strip()
    return len(line) < DOC_LINE_MAX and ((s.startswith(b"<doc") and s.endswith(b">")) or s == b"</doc>")


def _pieces(fh: BinaryIO, path: str, start: int, end: int, block: int) -> Iterator[tuple[bytes, bool]]:
    """Raw line pieces of [start, end): (bytes without newline, newline follows)."""
    fh.seek(start)
    pos, carry = start, b""
    while pos < end:
        data = _read(fh, min(block, end - pos), path)
        if not data:
            raise InputError(f"{path} ended early (changed while reading?)")
        pos += len(data)
        data = carry + data
        carry = b""
        if pos < end:
            cut = _last_whitespace_end(data)
            if cut < 0:          # one token longer than a block: keep reading
                carry = data
                continue
            data, carry = data[:cut], data[cut:]
        lines = data.split(b"\n")
        for k, ln in enumerate(lines):
            yield ln, k < len(lines) - 1


def scan_range(source: Source, start: int, end: int, line_start: bool, opts: TextOptions,
               stats: ScanStats) -> Iterator[tuple[list[bytes], bool]]:
    """Tokens of ``source``'s bytes [start, end): yields (tokens, line_ends_after)."""
    at_line_start = line_start
    pending: list[bytes] | None = None   # raw pieces of a line that may be a doc tag
    pending_len = 0
    at_eof = end == source.size
    with open_reader(source) as fh:
        for piece, newline in _pieces(fh, source.path, start, end, opts.block_bytes):
            if pending is not None:
                pending.append(piece)
                pending_len += len(piece)
                if newline:
                    line, pending = b"".join(pending), None
                    if is_doc_tag(line):
                        stats.doc_lines += 1
                        yield [], True
                    else:
                        yield tokenize(line, opts, stats), True
                elif pending_len >= DOC_LINE_MAX:
                    yield tokenize(b"".join(pending), opts, stats), False
                    pending = None
                at_line_start = newline
                continue
            if at_line_start and opts.strip_doc_tags and piece.lstrip().startswith((b"<doc", b"</doc")):
                if newline:
                    if is_doc_tag(piece):
                        stats.doc_lines += 1
                        yield [], True
                    else:
                        yield tokenize(piece, opts, stats), True
                else:
                    pending, pending_len = [piece], len(piece)
                at_line_start = newline
                continue
            yield tokenize(piece, opts, stats), newline
            # a blank piece (a block cut inside leading blanks) keeps us at the line start
            at_line_start = newline or (at_line_start and not piece.strip())
    if pending is not None:
        line = b"".join(pending)
        # the line ends here only at the end of the file; else it runs on past this
        # range and so is at least DOC_LINE_MAX long
        if at_eof and is_doc_tag(line):
            stats.doc_lines += 1
            yield [], False
        else:
            yield tokenize(line, opts, stats), False
    if at_eof and end > start:
        yield [], True  # the end of a file ends its last line


def scan_rank(sources: list[Source], lo: Boundary, hi: Boundary, opts: TextOptions,
              stats: ScanStats) -> Iterator[tuple[list[bytes], bool]]:
    """Tokens of the concatenated byte range [lo, hi) over all sources."""
    base = 0
    for src in sources:
        a, b = max(lo.offset, base), min(hi.offset, base + src.size)
        if a < b:
            line_start = lo.line_start if a == lo.offset else True
            yield from scan_range(src, a - base, b - base, line_start, opts, stats)
        base += src.size


# ------------------------------------------------------------------ the compiled path
# The default of preprocessing: the same tokens, line ends and statistics as scan_range and
# tokenize above (the readable reference, which the tests compare it with), from numba
# kernels (kernels/tokenize.py) that hash the token bytes into a TokenTable block by block.

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
        if len(self._tok) < n:
            self._tok = np.zeros(_pow2(n), dtype=np.uint8)
        return self._tok

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
        tok = self.tok_buffer(int(lens.max()) if len(lens) else 1)
        i = 0
        while i < len(lens):
            i = intern_all(arena, starts, lens, tok, self.slots, self.hashes, self.starts, self.lens,
                           self.arena, self.meta, out, i)
            if i < len(lens):
                self.grow(int(lens[i]))
        return out

    def lookup_all(self, arena, starts, lens) -> np.ndarray:
        """The ids here of another table's tokens, -1 where absent (int32)."""
        from ..kernels.tokenize import lookup_all

        out = np.empty(len(lens), dtype=np.int32)
        lookup_all(arena, starts, lens, self.slots, self.starts, self.lens, self.arena, out)
        return out

    @classmethod
    def from_words(cls, words: list[bytes]) -> "TokenTable":
        """A table holding ``words`` (distinct) with ids in their order."""
        arena = np.frombuffer(b"".join(words), dtype=np.uint8)
        lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64) if words else lens.copy()
        t = cls(types=max(16, len(words)), arena=max(16, len(arena)))
        t.add_all(arena, starts, lens)
        return t


def _pow2(n: int) -> int:
    return 1 << max(4, int(n - 1).bit_length())


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

    def scan(self, sources: list[Source], lo: Boundary, hi: Boundary) -> None:
        """Tokens of the concatenated byte range [lo, hi) over all sources (as scan_rank).
        A source whose size is None (a compressed input not sized first: one rank only) is
        read to its end, and its size noted in ``sizes``."""
        base = 0
        for i, src in enumerate(sources):
            if src.size is None:
                self.sizes[i] = self._range(src, 0, None, True)
                continue
            a, b = max(lo.offset, base), min(hi.offset, base + src.size)
            if a < b:
                self._range(src, a - base, b - base, lo.line_start if a == lo.offset else True)
            base += src.size

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
                data = _read(fh, want, source.path) if want > 0 else b""
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
                        cut = _last_whitespace_end(data)
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
        from ..kernels.tokenize import OK, scan_block

        if not data:
            return line_start
        opts, t = self.opts, self.table
        buf = np.frombuffer(data, dtype=np.uint8)
        ids = np.empty(len(data) // 2 + 2, dtype=np.int32)
        ends = np.empty(data.count(b"\n") + 1, dtype=np.int64)
        tok = t.tok_buffer(3 * len(data) + 8)
        p = n_ids = n_lines = 0
        while True:
            status, p, n_ids, n_lines, line_start = scan_block(
                buf, p, opts.normalize == "text8", opts.lowercase, opts.strip_doc_tags, line_start, at_eof,
                _space_table(), tok, t.slots, t.hashes, t.starts, t.lens, t.counts, t.arena, t.meta,
                ids, n_ids, ends, n_lines, self.n_raw, self._stats)
            if status == OK:
                break
            t.grow(3 * (len(data) - p) + 8)
        if n_lines:
            self.line_ends.append(ends[:n_lines].copy())
        if n_ids:
            self.sink(ids[:n_ids])
        self.n_raw += n_ids
        return line_start

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
        remap = canon.lookup_all(*_pack(words))
        canon.counts[: len(canon)] = np.bincount(remap, weights=counts, minlength=len(canon)).astype(np.int64)
        return canon, remap


def _pack(words: list[bytes]):
    """(arena, starts, lens) of a list of byte strings."""
    arena = np.frombuffer(b"".join(words), dtype=np.uint8)
    lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
    starts = np.zeros(len(words), dtype=np.int64)
    if len(words) > 1:
        np.cumsum(lens[:-1], out=starts[1:])
    return arena, starts, lens


def _may_be_doc_tag(data: bytes) -> bool:
    """Whether a line starting with ``data`` (no newline in it yet) may be a doc tag line."""
    s = data.lstrip()
    return len(s) < 6 or s.startswith((b"<doc", b"</doc"))
