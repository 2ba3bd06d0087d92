"""The check every mpidwe file reader makes first: the ``format`` and ``format_version``
root attributes (docs/hdf5-format.md). Pure: takes the attribute mapping, not a file."""

from __future__ import annotations

from . import __version__
from .errors import InputError


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def check_format(attrs, path: str, expected: str, version: int, what: str,
                 older: tuple[int, ...] = ()) -> int:
    """Refuse a file that is not ``expected`` (naming what it is) or has a version other than
    ``version`` or one of the ``older`` ones this reader still understands; return it."""
    fmt = _text(attrs.get("format", ""))
    if fmt != expected:
        raise InputError(f"{path} is not an mpidwe {what} (format attribute is {fmt!r})")
    found = int(attrs.get("format_version", -1))
    if found != version and found not in older:
        raise InputError(f"{path} has {what} format version {found}; this mpidwe "
                         f"(v{__version__}) reads version {version}")
    return found


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def unreadable(path: str, what: str, hint: str = "") -> InputError:
    """The error for a file h5py could not open: not HDF5 at all (say what to use instead),
    or HDF5 that is damaged, truncated or held open elsewhere."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(HDF5_SIGNATURE))
    except OSError as e:
        return InputError(f"{path} cannot be read: {e.strerror or e}")
    if head != HDF5_SIGNATURE:
        return InputError(f"{path} is not an mpidwe {what} (not an HDF5 file){hint}")
    return InputError(f"{path} is not a readable HDF5 file (truncated, damaged or opened by another program)")
