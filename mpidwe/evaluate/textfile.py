"""Reading the user's small UTF-8 test files (similarity pairs, analogy questions) line by line,
with one-line errors for a file that cannot be opened or is not UTF-8 text."""

from __future__ import annotations

from collections.abc import Iterator

from ..core.errors import InputError


def _first_bad_utf8(path: str) -> tuple[int, int, int] | None:
    """(line number, 1-based column in bytes, byte value) of the first invalid UTF-8 byte.
    A newline byte is never part of a multi-byte UTF-8 sequence, so lines decode alone."""
    try:
        with open(path, "rb") as fh:
            for no, raw in enumerate(fh, 1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    return no, e.start + 1, raw[e.start]
    except OSError:
        pass
    return None


def utf8_lines(path: str, kind: str) -> Iterator[tuple[int, str]]:
    """(line number, line) pairs of a UTF-8 text file; ``kind`` names the file in errors
    ("similarity", "analogy"). A file that is not UTF-8 (Latin-1, UTF-16, binary) raises an
    InputError naming the file, the line and the byte."""
    try:
        fh = open(path, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read {kind} file {path}: {e.strerror}") from None
    with fh:
        no = 0
        try:
            for no, line in enumerate(fh, 1):
                yield no, line
        except UnicodeDecodeError:
            where = _first_bad_utf8(path)
            if where is None:  # the file changed under us: no exact place to show
                raise InputError(f"{path}: not UTF-8 text (after line {no}); the {kind} file must "
                                 f"be saved as UTF-8") from None
            line_no, col, byte = where
            raise InputError(f"{path}:{line_no}: not UTF-8 text (byte 0x{byte:02x} at column {col}); "
                             f"the {kind} file must be saved as UTF-8") from None
        except OSError as e:
            raise InputError(f"cannot read {kind} file {path}: {e.strerror}") from None
