"""Raw text -> tokens, streamed over a byte range. No MPI, no HDF5.

The input (one or more files, plain or compressed) is one byte space split into rank
ranges at whitespace. Within a range, text is read a block at a time, cut at the last
whitespace byte, split into lines and tokenized, so no token is lost or doubled and
memory stays bounded by the block size.

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
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

from .errors import InputError

WHITESPACE = b" \t\n\r\x0b\x0c"
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
    size: int                 # uncompressed bytes


def detect_compression(path: str) -> str:
    with open(path, "rb") as fh:
        magic = fh.read(3)
    if magic[:2] == b"\x1f\x8b":
        return "gzip"
    if magic == b"BZh":
        return "bz2"
    return "none"


def open_source(path: str, compression: str) -> BinaryIO:
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "bz2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def _read(fh: BinaryIO, n: int, path: str) -> bytes:
    try:
        return fh.read(n)
    except (OSError, EOFError, ValueError) as e:  # gzip/bz2 corruption or truncation
        raise InputError(f"cannot read {path}: {e}") from None


def describe_source(path: str) -> Source:
    """Check that ``path`` is a readable file and find its uncompressed size
    (compressed inputs are decompressed once to count)."""
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
        size = 0
        with open_source(path, compression) as fh:
            while True:
                chunk = _read(fh, 8 << 20, path)
                if not chunk:
                    break
                size += len(chunk)
        return Source(path, compression, file_bytes, size)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None


@dataclass(frozen=True)
class Boundary:
    """A rank range boundary in the concatenated byte space."""

    offset: int
    line_start: bool


def find_boundaries(sources: list[Source], world_size: int) -> list[Boundary]:
    """``world_size + 1`` boundaries: rank r reads [b[r], b[r+1]).

    Each inner boundary starts at the even split point and moves forward to just after
    the next newline within DOC_LINE_MAX bytes, else just after the next whitespace byte,
    else to the end of that file. Pure function of the input bytes and world_size."""
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
                handles[i] = open_source(sources[i].path, sources[i].compression)
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
            found = _first_whitespace(window)
            while found < 0 and pos < starts[i + 1]:
                window = _read(fh, 1 << 20, sources[i].path)
                if not window:
                    break
                found = _first_whitespace(window)
                if found < 0:
                    pos += len(window)
                else:
                    nominal = pos
            if found < 0:
                out.append(Boundary(starts[i + 1], True))
            else:
                out.append(Boundary(nominal + found + 1, window[found:found + 1] == b"\n"))
    finally:
        for fh in handles.values():
            fh.close()
    out.append(Boundary(total, True))
    return out


def _first_whitespace(buf: bytes) -> int:
    hits = [i for i in (buf.find(bytes([c])) for c in WHITESPACE) if i >= 0]
    return min(hits) if hits else -1


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
    """One piece of a line -> tokens (valid UTF-8 bytes)."""
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
        toks = text.encode("utf-8").split()
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
            cut = max(data.rfind(bytes([c])) for c in WHITESPACE)
            if cut < 0:          # one token longer than a block: keep reading
                carry = data
                continue
            data, carry = data[:cut + 1], data[cut + 1:]
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
    with open_source(source.path, source.compression) as fh:
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
