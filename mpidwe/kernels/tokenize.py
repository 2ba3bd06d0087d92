"""The compiled tokenizer and token table of preprocessing (numba, over bytes; no I/O).

``scan_block`` turns a buffer of raw text into token ids and line ends in one pass, with
exactly the rules of the readable Python path (``text.tokenize`` on line pieces, which the
tests compare it with):

* mode ``none``: control bytes (< 0x20 other than TAB..CR, and 0x7f) are spaces; the bytes
  are decoded as UTF-8 where every invalid sequence, as CPython's decoder delimits it,
  becomes U+FFFD (EF BF BD) and is counted; tokens split at every character for which
  ``str.isspace()`` is true; with ``lower``, A-Z become a-z here and other characters are
  lowered per distinct token afterwards (``str.lower`` needs Unicode tables: see
  preprocess/scan.py, ``RankScan.canonical``);
* mode ``text8``: every byte outside a-z and A-Z is a space, A-Z become a-z; invalid UTF-8
  sequences are counted all the same;
* with ``strip_doc``, a line that starts at a line start and is a WikiExtractor tag
  (``text.is_doc_tag``) is dropped and counted.

The token table maps token bytes to dense ids in order of first sight: open addressing
(linear probing) over a power-of-two slot array, the bytes of every token in one arena.
A call that runs out of room returns ``NEED_ROOM`` and where it stopped (the start of the
token it could not store, nothing of which was counted yet); the caller grows the arrays
and calls again from there. All compiled functions are cached on disk (``cache=True``).
The arrays and flags travel in small named tuples (``TableArrays``, ``ScanFlags``,
``ScanOut``, ``Cursor``), which numba passes as plain structs (the scan's speed is that of
separate arguments, measured).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

OK, NEED_ROOM = 0, 1
# stats[...] slots
RAW_TOKENS, INVALID_UTF8, DOC_LINES = 0, 1, 2
# meta[...] slots of a table
N_TYPES, ARENA_USED = 0, 1

DOC_LINE_MAX = 1 << 20              # text.DOC_LINE_MAX (tests check they agree)
_FNV_OFFSET = np.uint64(0xcbf29ce484222325)
_FNV_PRIME = np.uint64(0x100000001b3)
_TAG_MASK = np.int64(-1) << 32
_ID_MASK = np.int64(0xFFFFFFFF)


def space_table() -> np.ndarray:
    """uint8[0x10000]: 1 for the code points (all in the BMP) that ``str.isspace()`` is
    true for in this interpreter's Unicode database."""
    t = np.zeros(0x10000, dtype=np.uint8)
    for c in range(0x10000):
        if chr(c).isspace():
            t[c] = 1
    return t


@njit(cache=True)
def _warm(x):
    """Nothing: the first cached function a process loads costs numba's one-time set-up
    (about 0.2 s here), whichever it is."""
    return x + 1


def warm_up() -> None:
    """Pay numba's one-time set-up now (``preprocess`` calls it in a background thread)."""
    _warm(1)


@njit(inline="always")
def _is_cont(b):
    return (b & 0xC0) == 0x80


@njit(inline="always")
def _char(buf, p, n):
    """(code point, length) of the character at ``p``; code point -1 for an invalid
    sequence of ``length`` bytes, delimited as CPython's UTF-8 decoder does (the end of
    the buffer acts as a byte that continues nothing)."""
    b0 = np.int64(buf[p])
    if b0 < 0x80:
        return b0, 1
    if b0 < 0xC2:
        return -1, 1
    b1 = np.int64(buf[p + 1]) if p + 1 < n else 0
    if b0 < 0xE0:
        if not _is_cont(b1):
            return -1, 1
        return ((b0 & 0x1F) << 6) | (b1 & 0x3F), 2
    if b0 < 0xF0:
        if not _is_cont(b1) or (b0 == 0xE0 and b1 < 0xA0) or (b0 == 0xED and b1 >= 0xA0):
            return -1, 1
        b2 = np.int64(buf[p + 2]) if p + 2 < n else 0
        if not _is_cont(b2):
            return -1, 2
        return ((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (b2 & 0x3F), 3
    if b0 < 0xF5:
        if not _is_cont(b1) or (b0 == 0xF0 and b1 < 0x90) or (b0 == 0xF4 and b1 >= 0x90):
            return -1, 1
        b2 = np.int64(buf[p + 2]) if p + 2 < n else 0
        if not _is_cont(b2):
            return -1, 2
        b3 = np.int64(buf[p + 3]) if p + 3 < n else 0
        if not _is_cont(b3):
            return -1, 3
        return ((b0 & 0x07) << 18) | ((b1 & 0x3F) << 12) | ((b2 & 0x3F) << 6) | (b3 & 0x3F), 4
    return -1, 1


@njit(inline="always")
def _blank(b):
    """bytes.strip()'s whitespace."""
    return b == 32 or (9 <= b <= 13)


@njit(cache=True)
def _is_doc_tag(buf, a, e):
    """``text.is_doc_tag(buf[a:e])``."""
    if e - a >= DOC_LINE_MAX:
        return False
    while a < e and _blank(buf[a]):
        a += 1
    while e > a and _blank(buf[e - 1]):
        e -= 1
    m = e - a
    if m >= 5 and buf[a] == 60 and buf[a + 1] == 100 and buf[a + 2] == 111 and buf[a + 3] == 99 \
            and buf[e - 1] == 62:                                    # <doc ... >
        return True
    return m == 6 and buf[a] == 60 and buf[a + 1] == 47 and buf[a + 2] == 100 and buf[a + 3] == 111 \
        and buf[a + 4] == 99 and buf[a + 5] == 62                    # </doc>


# The arrays of a token table, as the kernels take them (``TokenTable.kernel_arrays``):
# the slots, per type its hash, arena start, length and count, the bytes of all types,
# meta[N_TYPES, ARENA_USED], and ``tok``, scratch room for one token's bytes.
TableArrays = namedtuple("TableArrays", "slots hashes starts lens counts arena meta tok")
# The options of a scan (``mode`` above): bools, and ``is_space`` from space_table().
ScanFlags = namedtuple("ScanFlags", "text8 lower strip_doc is_space")
# Where scan_block writes: token ids, line ends (raw-token indices: ``id_base`` + index in
# ``ids``) and the stats[RAW_TOKENS, INVALID_UTF8, DOC_LINES] it adds to.
ScanOut = namedtuple("ScanOut", "ids line_ends stats id_base")
# Where a scan_block call starts and where it stopped: the position in the buffer, ids and
# line ends written so far, and whether the position starts a line.
Cursor = namedtuple("Cursor", "p n_ids n_lines line_start")


@njit(inline="always")
def _find(tok, m, h, table):
    """(slot, type id or -1) of token ``tok[:m]`` with hash ``h`` in ``table``. A slot holds
    the upper 32 bits of the hash and 1 + the type id (0: empty), so a probe reads one
    array."""
    slots, lens, starts, arena = table.slots, table.lens, table.starts, table.arena
    mask = len(slots) - 1
    tag = np.int64(h >> np.uint64(32)) << 32
    i = np.int64(h & np.uint64(mask))
    while True:
        v = slots[i]
        if v == 0:
            return i, -1
        if (v & _TAG_MASK) == tag:
            t = (v & _ID_MASK) - 1
            if lens[t] == m:
                s = starts[t]
                k = 0
                while k < m and arena[s + k] == tok[k]:
                    k += 1
                if k == m:
                    return i, t
        i = (i + 1) & mask


@njit(cache=True)
def _insert(tok, m, h, i, table):
    """Add a new token at empty slot ``i`` (found by _find); its id, or -1 when the table
    needs room. Called as ``i, t = _find(..); if t < 0: t = _insert(..)``: a lookup and
    insert in one inlined function with two returns compiled to code 4x slower per token."""
    meta = table.meta
    n = meta[N_TYPES]
    used = meta[ARENA_USED]
    if n >= len(table.hashes) or 2 * (n + 1) > len(table.slots) or used + m > len(table.arena):
        return -1
    for k in range(m):
        table.arena[used + k] = tok[k]
    table.slots[i] = (np.int64(h >> np.uint64(32)) << 32) | (n + 1)
    table.hashes[n] = h
    table.starts[n] = used
    table.lens[n] = m
    meta[N_TYPES] = n + 1
    meta[ARENA_USED] = used + m
    return n


@njit(cache=True)
def rehash(slots, hashes, n):
    """Fill the empty ``slots`` (all 0, a power of two) with types 0..n-1."""
    mask = len(slots) - 1
    for t in range(n):
        h = hashes[t]
        i = np.int64(h & np.uint64(mask))
        while slots[i] != 0:
            i = (i + 1) & mask
        slots[i] = (np.int64(h >> np.uint64(32)) << 32) | (t + 1)


@njit(cache=True)
def hash_bytes(buf, a, m):
    h = _FNV_OFFSET
    for k in range(a, a + m):
        h = (h ^ np.uint64(buf[k])) * _FNV_PRIME
    return h


_FFFD = (0xEF, 0xBF, 0xBD)   # U+FFFD in UTF-8: what an invalid sequence becomes in a token


# The helpers of scan_block below have no loop (but _doc_tag_end, called once a line): an
# inlined helper with a loop that takes arrays and runs once a token or character took and
# dropped references to them each time, and made the scan 1.5-2x slower (measured).
@njit(inline="always")
def _is_separator(cp, text8, is_space):
    """Whether the character ``cp`` (-1: an invalid sequence) separates tokens."""
    if text8:
        return not (97 <= cp <= 122 or 65 <= cp <= 90)
    return 0 <= cp <= 32 or cp == 127 or (0x80 <= cp < 0x10000 and is_space[cp] != 0)


@njit(inline="always")
def _ascii_in_token(b, text8, lower):
    """The byte that ASCII ``b`` adds to a token, or -1 if it ends the token."""
    if text8:
        if 97 <= b <= 122:
            return np.int64(b)
        if 65 <= b <= 90:
            return np.int64(b + 32)
        return np.int64(-1)
    if b <= 32 or b == 127:
        return np.int64(-1)
    return np.int64(b + 32 if lower and 65 <= b <= 90 else b)


@njit(inline="always")
def _doc_tag_end(buf, p, n, at_eof):
    """The end of the line that starts at ``p`` if it is a doc tag line, else -1 (a line
    running past the buffer's end is no tag unless the buffer ends its file)."""
    e = p
    while e < n and buf[e] != 10:
        e += 1
    if (e < n or at_eof) and _is_doc_tag(buf, p, e):
        return e
    return -1


@njit(cache=True, nogil=True)
def scan_block(buf, at_eof, flags, table, out, at):
    """Tokens of ``buf[at.p:]`` into ``out.ids[at.n_ids:]`` (table ids, counted in ``table``)
    and, for every newline, the raw-token index where the next line starts into
    ``out.line_ends[at.n_lines:]``. ``at.line_start``: a doc tag check is due at ``at.p``.
    ``at_eof``: the buffer ends its file (a last line without a newline is whole; else a
    line running past its end is known not to be a tag). Returns (status, Cursor where it
    stopped: with NEED_ROOM, at the token that did not fit, nothing of which was counted)."""
    text8, lower, strip_doc, is_space = flags
    tok, n = table.tok, len(buf)
    p, n_ids, n_lines, line_start = at
    raw = invalid = docs = 0
    while p < n:
        e = _doc_tag_end(buf, p, n, at_eof) if line_start and strip_doc else -1
        line_start = False
        if e >= 0:           # a doc tag line, dropped
            docs, p = docs + 1, e
            continue
        if buf[p] == 10:
            out.line_ends[n_lines] = out.id_base + n_ids
            n_lines, line_start, p = n_lines + 1, True, p + 1
            continue
        cp, k = _char(buf, p, n)
        if _is_separator(cp, text8, is_space):
            invalid += text8 and cp < 0      # text8 counts the invalid sequences it drops
            p += k
            continue
        start, m, bad, h = p, 0, 0, _FNV_OFFSET
        while p < n:         # the token's bytes, as stored, into tok[:m]
            b = buf[p]
            if b < 0x80:
                c = _ascii_in_token(b, text8, lower)
                if c < 0:
                    break
                tok[m] = c
                h = (h ^ np.uint64(c)) * _FNV_PRIME
                m, p = m + 1, p + 1
                continue
            if text8:
                break
            cp, k = _char(buf, p, n)
            if 0 <= cp < 0x10000 and is_space[cp]:
                break
            for j in range(3 if cp < 0 else k):
                c = _FFFD[j] if cp < 0 else buf[p + j]
                tok[m + j] = c
                h = (h ^ np.uint64(c)) * _FNV_PRIME
            bad += cp < 0
            m, p = m + (3 if cp < 0 else k), p + k
        i, t = _find(tok, m, h, table)
        if t < 0:
            t = _insert(tok, m, h, i, table)
        if t < 0:
            _add_stats(out.stats, raw, invalid, docs)
            return NEED_ROOM, Cursor(start, n_ids, n_lines, False)
        table.counts[t] += 1
        out.ids[n_ids] = t
        n_ids, raw, invalid = n_ids + 1, raw + 1, invalid + bad
    _add_stats(out.stats, raw, invalid, docs)
    return OK, Cursor(p, n_ids, n_lines, line_start)


@njit(inline="always")
def _add_stats(stats, raw, invalid, docs):
    stats[RAW_TOKENS] += raw
    stats[INVALID_UTF8] += invalid
    stats[DOC_LINES] += docs


@njit(cache=True)
def intern_all(words, table, out, i0):
    """Add tokens i0.. of another table (``words``: its arena, starts, lens) to ``table``;
    their ids into ``out``. Returns where it stopped (len(lens) when done, earlier when the
    table needs room)."""
    arena_in, starts_in, lens_in = words
    tok = table.tok
    for i in range(i0, len(lens_in)):
        a, m = starts_in[i], lens_in[i]
        for k in range(m):
            tok[k] = arena_in[a + k]
        h = hash_bytes(arena_in, a, m)
        j, t = _find(tok, m, h, table)
        if t < 0:
            t = _insert(tok, m, h, j, table)
        if t < 0:
            return i
        out[i] = t
    return len(lens_in)


@njit(cache=True)
def lookup_all(words, table, out):
    """The ids in ``table`` of another table's tokens (``words``: its arena, starts, lens),
    -1 where absent."""
    arena_in, starts_in, lens_in = words
    for q in range(len(lens_in)):
        a, m = starts_in[q], lens_in[q]
        out[q] = _find(arena_in[a:a + m], m, hash_bytes(arena_in, a, m), table)[1]


@njit(cache=True)
def remap_and_count_lines(raw, remap, line_ends, j, base, kept_before, out_lines):
    """Pass 2 over one chunk of raw ids whose first raw index is ``base``: their final ids
    (``remap[raw]``, -1 dropped), compacted in place into ``raw``'s front, and the kept
    index of every line end in [base, base + len(raw)] from ``line_ends[j:]``. Returns
    (kept in this chunk, next j, line starts written)."""
    kept = 0
    nl = 0
    end = base + len(raw)
    for i in range(len(raw)):
        while j < len(line_ends) and line_ends[j] <= base + i:
            out_lines[nl] = kept_before + kept
            nl += 1
            j += 1
        f = remap[raw[i]]
        if f >= 0:
            raw[kept] = f
            kept += 1
    while j < len(line_ends) and line_ends[j] <= end:
        out_lines[nl] = kept_before + kept
        nl += 1
        j += 1
    return kept, j, nl
