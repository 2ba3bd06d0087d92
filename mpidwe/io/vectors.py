"""Word vectors on disk: word2vec text and binary files (as word2vec and gensim write them).

Both start with a ``count dim`` header line. Text: one ``word v1 ... vd`` line per word.
Binary: per word, the UTF-8 word, one space and ``dim`` little-endian float32 (word2vec
adds a newline after each vector, gensim does not; both are read). Which of the two a file
is, is found from its content, not its name. :func:`load_vectors` is the one entry point
that tools use; it dispatches on the file's first bytes, so other kinds of files
(checkpoints) can be added there.

Words are written so that every file stays readable, whatever the vocabulary holds
(:func:`escape_word`): a character for which ``str.isspace()`` is true (space, TAB, LF,
U+0085, U+00A0, U+3000...) would end the word early or break the line, and a lone
surrogate (U+D800..U+DFFF) cannot be encoded as UTF-8, so each such character is written
as its visible escape ``\\uXXXX`` (a backslash, ``u``, four lowercase hex digits), as
Python and JSON spell it: ``new\u3000york`` is written ``new\\u3000york``. Every other
word, backslashes included, is written as it is. The escape is not undone on reading.
An escape rather than ``_``: ``_`` already joins real tokens (word2vec phrases such as
``new_york``), so ``new\u00a0york`` and ``new_york`` would become one word twice over;
the escape keeps them apart and shows which character it was.
"""

from __future__ import annotations

import mmap
import os
import re

import numpy as np

from ..core.errors import InputError
from .formats import SEAL_MAGIC
from .fsutil import atomic_write

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
MAX_HEADER = 256


def _header(path: str, first: bytes) -> tuple[int, int]:
    line = first.split(b"\n", 1)[0]
    try:
        count, dim = (int(x) for x in line.decode("ascii").split())
    except (UnicodeDecodeError, ValueError):
        raise InputError(f"{path}:1: expected a word2vec header 'count dim', got "
                         f"{line[:60].decode('utf-8', 'replace')!r}") from None
    if count < 0 or dim <= 0:
        raise InputError(f"{path}:1: bad word2vec header: {count} words of dimension {dim}")
    return count, dim


def _check_fits(path: str, count: int, dim: int, size: int) -> None:
    """Refuse a header that announces more than the rest of the file (``size`` bytes) can
    hold, before the count x dim matrix is allocated: an entry takes at least 2 dim + 1 bytes
    (a one-byte word and dim one-digit numbers, each after a space; binary: 4 dim + 2)."""
    most = size // (2 * dim + 1)
    if count > most:
        raise InputError(f"{path}:1: the header announces {count:,} vectors of dimension {dim:,}; the "
                         f"{size:,} bytes after it hold at most {most:,} (a truncated file or a wrong header)")


def _is_text(first_entry: bytes, dim: int) -> bool:
    """A text file's first entry line is valid UTF-8 with ``dim`` numbers after the word;
    a binary entry (raw float32 bytes) essentially never is."""
    try:
        cols = first_entry.decode("utf-8").rstrip(" \t\r\n").split(" ")
        if len([c for c in cols[1:] if c]) != dim:
            return False
        [float(c) for c in cols[1:] if c]
        return True
    except (UnicodeDecodeError, ValueError):
        return False


def read_word2vec(path: str, warn=None) -> tuple[list[str], np.ndarray]:
    """(words, float32 matrix) from a word2vec text or binary file. Malformed input raises
    an InputError naming the file and the line (text) or entry and byte offset (binary). A
    word given twice keeps its first vector, as gensim reads such files (fastText's
    published ``.vec`` files hold some); ``warn`` receives one line saying so."""
    return _first_of_each(path, *_read_word2vec(path), warn)


def _first_of_each(path: str, words: list[str], vectors: np.ndarray, warn) -> tuple[list[str], np.ndarray]:
    """Only the first entry of each word: a second one would be a word's nearest neighbour,
    and which of them a lookup finds would be chance."""
    first: dict[str, int] = {}
    for i, w in enumerate(words):
        first.setdefault(w, i)
    if len(first) == len(words):
        return words, vectors
    keep = np.fromiter(first.values(), dtype=np.int64, count=len(first))
    dup = next(i for i, w in enumerate(words) if first[w] != i)
    if warn is not None:
        warn(f"warning: {path}: {len(words) - len(first):,} duplicate word(s) (the first: {words[dup]!r}, "
             f"entries {first[words[dup]] + 1} and {dup + 1}); kept the first vector of each")
    return list(first), vectors[keep]


def _read_word2vec(path: str) -> tuple[list[str], np.ndarray]:
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise InputError(f"cannot read vectors file {path}: {e.strerror}") from None
    with fh:
        if os.fstat(fh.fileno()).st_size == 0:
            raise InputError(f"{path}: empty file (expected word2vec vectors)")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            count, dim = _header(path, mm[:MAX_HEADER])
            start = mm.find(b"\n") + 1
            if start == 0:
                raise InputError(f"{path}: only a header line, no vectors")
            _check_fits(path, count, dim, len(mm) - start)
            end = mm.find(b"\n", start)
            first_entry = mm[start:end if end >= 0 else len(mm)]
            if count == 0 or _is_text(first_entry, dim):
                return _read_text(path, mm, start, count, dim)
            return _read_binary(path, mm, start, count, dim)


def _read_text(path: str, mm: mmap.mmap, start: int, count: int, dim: int) -> tuple[list[str], np.ndarray]:
    words: list[str] = []
    vectors = np.empty((count, dim), dtype=np.float32)
    pos, no = start, 1
    size = len(mm)
    while pos < size:
        end = mm.find(b"\n", pos)
        end = size if end < 0 else end
        raw = mm[pos:end]
        pos, no = end + 1, no + 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{path}:{no}: invalid UTF-8 at byte {e.start} of the line") from None
        cols = line.rstrip(" \t\r\n").split(" ")
        if len(cols) == 1 and not cols[0]:
            continue  # blank line (e.g. at the end)
        if len(words) == count:
            raise InputError(f"{path}:{no}: more vectors than the {count} announced in the header")
        values = [c for c in cols[1:] if c]
        if len(values) != dim:
            raise InputError(f"{path}:{no}: expected a word and {dim} numbers (header dimension), "
                             f"got {len(values)} number(s)")
        try:
            vectors[len(words)] = np.array(values, dtype=np.float32)
        except ValueError:
            bad = next(v for v in values if not _is_float(v))
            raise InputError(f"{path}:{no}: {bad[:40]!r} is not a number") from None
        words.append(cols[0])
    if len(words) != count:
        raise InputError(f"{path}:{no}: file ends after {len(words)} of the {count} vectors "
                         f"announced in the header")
    return words, vectors


def _is_float(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def _read_binary(path: str, mm: mmap.mmap, start: int, count: int, dim: int) -> tuple[list[str], np.ndarray]:
    words: list[str] = []
    vectors = np.empty((count, dim), dtype=np.float32)
    nbytes = 4 * dim
    pos, size = start, len(mm)
    for i in range(count):
        while pos < size and mm[pos] in (0x0A, 0x0D):  # word2vec's newline after a vector
            pos += 1
        sp = mm.find(b" ", pos)
        if pos >= size or sp < 0:
            raise InputError(f"{path}: file ends after {i} of the {count} vectors announced in the header")
        if sp - pos > 4096:
            raise InputError(f"{path}: entry {i + 1} (byte {pos}): no word followed by a space "
                             f"(a dimension other than {dim}, or not a word2vec file)")
        try:
            word = mm[pos:sp].decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}: entry {i + 1} (byte {pos}): word is not valid UTF-8"
                             + (f" (is the header dimension {dim} right?)" if i else "")) from None
        if not word or any(c in word for c in "\n\t"):
            raise InputError(f"{path}: entry {i + 1} (byte {pos}): bad word {word[:40]!r}")
        if sp + 1 + nbytes > size:
            raise InputError(f"{path}: entry {i + 1} (byte {pos}): file ends inside the vector of "
                             f"{word[:40]!r} (truncated; {i} of {count} vectors complete)")
        vectors[i] = np.frombuffer(mm, dtype="<f4", count=dim, offset=sp + 1)
        words.append(word)
        pos = sp + 1 + nbytes
    rest = mm[pos:pos + 64].strip()
    if rest:
        raise InputError(f"{path}: byte {pos}: data after the {count} vectors announced in the header "
                         f"(wrong count, or a dimension other than {dim})")
    return words, vectors


def _atomic_write(path: str, chunks) -> None:
    try:
        with atomic_write(path) as fh:
            for c in chunks:
                fh.write(c)
    except OSError as e:  # a missing or read-only folder, a full disk: nothing is left behind
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None


# whitespace (re's \s is exactly str.isspace() for str patterns) and lone surrogates
_NEEDS_ESCAPE = re.compile("[\\s\ud800-\udfff]")


def _escape_char(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"


def escape_word(word: str) -> str:
    """``word`` as the writers write it: each whitespace character (``str.isspace()``) and
    each lone surrogate becomes ``\\uXXXX`` (see the module docstring); a word without
    them is returned as it is."""
    return _NEEDS_ESCAPE.sub(_escape_char, word)


def _check_words(words: list[str], vectors: np.ndarray) -> None:
    if vectors.ndim != 2 or len(words) != vectors.shape[0]:
        raise ValueError(f"{len(words)} words for vectors of shape {vectors.shape}")


def write_word2vec(path: str, words: list[str], vectors: np.ndarray, *, binary: bool = True) -> None:
    """Write word2vec binary (default; as the C tool, a newline after each vector) or text,
    atomically (temporary name, fsync, rename). Whitespace and lone surrogates inside a word
    are written as ``\\uXXXX`` escapes (:func:`escape_word`), so no vocabulary makes the
    write fail or the file unreadable (gensim's ``load_word2vec_format`` reads it). An empty
    word, or as many words as rows, is a bug (ValueError); a file that cannot be written
    (missing or read-only folder, full disk) is an InputError naming ``path`` and the reason,
    and leaves neither the file nor a temporary one."""
    vectors = np.asarray(vectors, dtype=np.float32)
    _check_words(words, vectors)
    if not all(words):
        raise ValueError("an empty word is not writable as word2vec")

    write_word2vec_blocks(path, words, vectors.shape[1],
                          (vectors[a:a + 8192] for a in range(0, len(words), 8192)), binary=binary)


def write_word2vec_blocks(path: str, words: list[str], dim: int, blocks, *, binary: bool = True) -> None:
    """:func:`write_word2vec` from ``blocks``, an iterable of float32 row blocks in row order
    (together one row per word), so a model that no process holds whole (the sharded
    store) is written piece by piece. The same bytes as :func:`write_word2vec`."""
    if not all(words):
        raise ValueError("an empty word is not writable as word2vec")

    def chunks():
        yield f"{len(words)} {dim}\n".encode()
        a = 0
        for block in blocks:
            block = np.asarray(block, dtype=np.float32)
            names = words[a:a + len(block)]
            a += len(block)
            if _NEEDS_ESCAPE.search("".join(names)):
                names = [escape_word(w) for w in names]
            if binary:
                le = block.astype("<f4", copy=False)
                yield b"".join(w.encode() + b" " + row.tobytes() + b"\n" for w, row in zip(names, le))
            else:
                # 9 significant digits: every float32 reads back exactly. Row by row: a whole
                # block's text (thousands of rows' strings alive at once, then freed) left the
                # heap fragmented, and a long export grew the writer's data segment by hundreds
                # of MB; one row's strings at a time keep it flat (tests/test_sharded.py exports
                # under a memory cap)
                fmt = " ".join(["%.9g"] * dim)
                for w, row in zip(names, block.tolist()):
                    yield f"{w} {fmt % tuple(row)}\n".encode()
        if a != len(words):
            raise ValueError(f"{a} rows for {len(words)} words")

    _atomic_write(path, chunks())


def nonfinite_rows(vectors: np.ndarray, block: int = 65536) -> np.ndarray:
    """Boolean mask of the rows that hold a nan or an inf (tested in blocks of rows, so
    a large matrix needs no temporary of its own size)."""
    bad = np.zeros(len(vectors), dtype=bool)
    for a in range(0, len(vectors), block):
        bad[a:a + block] = ~np.isfinite(vectors[a:a + block]).all(axis=1)
    return bad


def _usable(path: str, words: list[str], vectors: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Refuse vectors of which every row holds a nan or inf (there is nothing to evaluate);
    rows with some of them are kept in place, and evaluation treats their words as missing."""
    if len(vectors) and nonfinite_rows(vectors).all():
        raise InputError(f"{path}: all {len(vectors):,} vectors contain nan or inf (diverged "
                         f"training?): nothing to evaluate")
    return words, vectors


def load_vectors(path: str, warn=None) -> tuple[list[str], np.ndarray]:
    """(words, float32 matrix) from any vectors file mpidwe reads, chosen by content: word2vec
    text or binary, an mpidwe checkpoint (its input vectors), or a run directory (its newest
    valid checkpoint). Vectors that are all nan or inf are refused; rows with nan or inf
    among others are returned as they are (see :func:`nonfinite_rows`). ``warn``: as
    :func:`read_word2vec`'s."""
    import os

    if os.path.isdir(path):
        from .checkpoint import latest_valid, run_checkpoints

        ck = latest_valid(run_checkpoints(path))
        if ck is None:
            raise InputError(f"no valid checkpoint in {run_checkpoints(path)}")
        return _usable(path, ck.words, ck.w_in)
    try:
        with open(path, "rb") as fh:
            first = fh.read(MAX_HEADER)
    except OSError as e:
        raise InputError(f"cannot read vectors file {path}: {e.strerror}") from None
    if first.startswith((HDF5_MAGIC, SEAL_MAGIC.encode())):   # mpidwe's files start with their seal
        from .checkpoint import load

        ck = load(path)  # refuses a corpus or any other HDF5 file with a clear message
        return _usable(path, ck.words, ck.w_in)
    head = first.split(b"\n", 1)[0].split()
    if len(head) == 2 and all(x.isdigit() for x in head):
        return _usable(path, *read_word2vec(path, warn))
    raise InputError(f"{path}: unknown vectors file (expected word2vec text or binary: a first "
                     f"line 'count dim'; GloVe files without that header are not read)")
