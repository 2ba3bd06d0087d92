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
slow (the reference), and preprocess/scan.py's ``RankScan``, which runs the compiled
kernels of kernels/tokenize.py over whole blocks (the default of preprocessing).

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


BINARY_SAMPLE = 1 << 20      # bytes of a text that ``binary_reason`` looks at
MOST_INVALID = 0.2           # a text with more of its characters invalid UTF-8 is not text


def binary_reason(path: str, sample: int = BINARY_SAMPLE) -> str | None:
    """Why ``path`` (plain, gzip or bz2) is not text, judged from its first ``sample``
    uncompressed bytes: it holds NUL bytes, or more than MOST_INVALID of its characters are
    invalid UTF-8 (preprocess would replace them and keep junk words for good); None for
    text, or where it cannot be read (preprocess then says why)."""
    try:
        with open_source(path, detect_compression(path)) as fh:
            data = fh.read(sample)
    except READ_ERRORS:
        return None
    if b"\0" in data:
        return "it holds NUL bytes (a binary file, not text)"
    text = data.decode("utf-8", errors="replace")
    invalid = text.count("\ufffd") - data.count("\ufffd".encode())
    if text and invalid > MOST_INVALID * len(text):
        return (f"{invalid:,} of its first {len(text):,} characters are invalid UTF-8 (a binary file, or "
                f"text in another encoding: convert it to UTF-8)")
    return None


def markup_signs(path: str, sample: int = BINARY_SAMPLE) -> list[str]:
    """What in the first ``sample`` bytes of a text says it wants normalising before training:
    ``doc tags`` (WikiExtractor's ``<doc ...>`` lines) and ``mixed case`` (a word seen both
    capitalised and in lowercase, as ``The`` and ``the``, which would be two words); [] for
    neither, or where the file cannot be read."""
    try:
        with open_source(path, detect_compression(path)) as fh:
            data = fh.read(sample)
    except READ_ERRORS:
        return []
    signs = ["doc tags"] if any(is_doc_tag(line) for line in data.splitlines()[:1000]) else []
    words = set(data.decode("utf-8", errors="replace").split())
    if any(w != w.lower() and w.lower() in words for w in words):
        signs.append("mixed case")
    return signs


def read_or_fail(fh: BinaryIO, n: int, path: str) -> bytes:
    """``fh.read(n)``; a corrupt or truncated compressed stream is an InputError naming ``path``."""
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
                    chunk = read_or_fail(fh, 8 << 20, path)
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


def estimated_size(source: Source) -> float:
    """The uncompressed bytes of ``source``: its size when known, else an estimate that only
    balances the ranks' shares (split_pieces): a gzip file's own trailer (its size modulo
    2^32: a smaller one than the file is a larger file or the last of several members),
    else 3 bytes a byte."""
    if source.size is not None:
        return float(source.size)
    guess = 3.0 * source.file_bytes
    if source.compression == "gzip" and source.file_bytes >= 18:
        try:
            with open(source.path, "rb") as fh:
                fh.seek(-4, os.SEEK_END)
                isize = int.from_bytes(fh.read(4), "little")
        except OSError:
            return guess
        return float(isize) if isize >= source.file_bytes else guess
    return guess


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
            out.append(_boundary_after(handles[i], sources[i].path, nominal, local, starts[i + 1]))
    finally:
        for fh in handles.values():
            fh.close()
    out.append(Boundary(total, True))
    return out


def _boundary_after(fh: BinaryIO, path: str, nominal: int, local: int, source_end: int) -> Boundary:
    """The boundary at or after byte ``nominal`` of the byte space, byte ``local`` (> 0) of
    the source open as ``fh`` (``path``), which ends at ``source_end``: just after the next
    newline within DOC_LINE_MAX bytes, else just after the next whitespace, else at the
    source's end."""
    fh.seek(local - 1)
    window = read_or_fail(fh, DOC_LINE_MAX + 1, path)
    prev, window = window[:1], window[1:]
    if prev == b"\n":
        return Boundary(nominal, True)
    nl = window.find(b"\n")
    if nl >= 0:
        return Boundary(nominal + nl + 1, True)
    pos = nominal + len(window)
    found, after = _first_whitespace(window)
    while found < 0 and pos < source_end:
        window = read_or_fail(fh, 1 << 20, path)
        if not window:
            break
        found, after = _first_whitespace(window)
        if found < 0:
            pos += len(window)
        else:
            nominal = pos
    if found < 0:
        return Boundary(source_end, True)
    return Boundary(nominal + after, window[found:found + 1] == b"\n")


def _first_whitespace(buf: bytes) -> tuple[int, int]:
    """(start, end) of the first whole whitespace character in ``buf`` (an ASCII byte or
    a Unicode space's UTF-8 encoding); (-1, -1) if there is none. A match of an encoding
    is always a real character: it starts with a lead byte (see the module docstring)."""
    hits = [(i, i + 1) for i in (buf.find(bytes([c])) for c in WHITESPACE) if i >= 0]
    if not buf.isascii():
        hits += [(i, i + len(seq)) for i, seq in ((buf.find(seq), seq) for seq in UNICODE_WHITESPACE) if i >= 0]
    return min(hits) if hits else (-1, -1)


def last_whitespace_end(buf: bytes) -> int:
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
        data = read_or_fail(fh, min(block, end - pos), path)
        if not data:
            raise InputError(f"{path} ended early (changed while reading?)")
        pos += len(data)
        data = carry + data
        carry = b""
        if pos < end:
            cut = last_whitespace_end(data)
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
    return scan_pieces(sources, pieces_between(sources, lo, hi), opts, stats)


def scan_pieces(sources: list[Source], pieces: list["Piece"], opts: TextOptions,
                stats: ScanStats) -> Iterator[tuple[list[bytes], bool]]:
    """Tokens of a rank's pieces, in order (every piece's source sized)."""
    for p in pieces:
        src = sources[p.source]
        yield from scan_range(src, p.start, src.size if p.end is None else p.end, p.line_start, opts, stats)


# ------------------------------------------------------------------------ rank pieces
@dataclass(frozen=True)
class Piece:
    """A part of one source that one rank reads: bytes [start, end) of source ``source``
    (``end`` None: to the end of the file, whose size is not known before it is read)."""

    source: int
    start: int
    end: int | None
    line_start: bool        # whether a line starts at ``start``


def pieces_between(sources: list[Source], lo: Boundary, hi: Boundary) -> list[Piece]:
    """The pieces of the concatenated byte range [lo, hi) over ``sources``. A source whose
    size is None (one rank reads everything) is one whole piece."""
    out, base = [], 0
    for i, src in enumerate(sources):
        if src.size is None:
            out.append(Piece(i, 0, None, True))
            continue
        a, b = max(lo.offset, base), min(hi.offset, base + src.size)
        if a < b:
            out.append(Piece(i, a - base, b - base, lo.line_start if a == lo.offset else True))
        base += src.size
    return out


def split_pieces(sources: list[Source], weights: list[float], world_size: int) -> list[list[Piece]]:
    """Every rank's pieces when a source of unknown size (a compressed file read once, by
    one rank) cannot be split: the sources, in order, cut into ``world_size`` runs of about
    equal ``weights`` (a source's expected uncompressed bytes). A cut inside a source of
    known size moves forward to just after a newline or whitespace (as find_boundaries); a
    cut inside one of unknown size moves to its nearer end. Pure function of the inputs'
    sizes and bytes and ``world_size``; a rank may get nothing."""
    starts = [0.0]
    for w in weights:
        starts.append(starts[-1] + w)
    cuts = [(0, 0, True)]                  # (source, offset in it, line starts there)
    for r in range(1, world_size):
        target = starts[-1] * r / world_size
        i = next((k for k in range(len(sources)) if starts[k] <= target < starts[k + 1]), len(sources))
        if i == len(sources):
            cut = (len(sources), 0, True)
        elif sources[i].size is None or weights[i] <= 0:
            cut = (i, 0, True) if target - starts[i] <= starts[i + 1] - target else (i + 1, 0, True)
        else:
            cut = _cut_in(sources[i], i, int(sources[i].size * (target - starts[i]) / weights[i]))
        cuts.append(max(cut, cuts[-1]))
    cuts.append((len(sources), 0, True))
    out = []
    for (a, off_a, line_a), (b, off_b, _) in zip(cuts, cuts[1:]):
        mine = []
        for i in range(a, min(b, len(sources) - 1) + 1):
            start = off_a if i == a else 0
            end = off_b if i == b else sources[i].size
            if i == b and off_b == 0:
                continue
            if end is None or start < end:
                mine.append(Piece(i, start, end, line_a if i == a else True))
        out.append(mine)
    return out


def _cut_in(source: Source, index: int, local: int) -> tuple[int, int, bool]:
    """A cut at or after byte ``local`` of a sized source (find_boundaries' rule); a cut at
    its end is the start of the next source."""
    if local <= 0:
        return (index, 0, True)
    with open_reader(source) as fh:
        b = _boundary_after(fh, source.path, local, local, source.size)
    return (index + 1, 0, True) if b.offset >= source.size else (index, b.offset, b.line_start)
