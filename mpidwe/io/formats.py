"""The checks every mpidwe file reader makes first: the seal (a checksum of the raw file
bytes, checked before HDF5 parses anything), then the ``format`` and ``format_version``
root attributes (docs/hdf5-format.md). Imports no h5py: it reads bytes and attribute
mappings."""

from __future__ import annotations

import hashlib
import os

from ..version import __version__
from ..core.errors import InputError


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# what each mpidwe file kind is called in a refusal ("X is an mpidwe corpus, not a checkpoint")
KNOWN_FORMATS = {"mpidwe-corpus": "corpus", "mpidwe-checkpoint": "checkpoint",
                 "mpidwe-checkpoint-part": "checkpoint part", "mpidwe-char-model": "character model",
                 "mpidwe-sppmi-cache": "PIP reference cache"}


def check_format(attrs, path: str, expected: str, version: int, what: str,
                 older: tuple[int, ...] = ()) -> int:
    """Refuse a file that is not ``expected`` (naming what it is) or has a version other than
    ``version`` or one of the ``older`` ones this reader still understands; return it."""
    fmt = _text(attrs.get("format", ""))
    if fmt in KNOWN_FORMATS and fmt != expected:
        raise InputError(f"{path} is an mpidwe {KNOWN_FORMATS[fmt]}, not a {what}")
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
    if head != HDF5_SIGNATURE and head != SEAL_MAGIC.encode()[:len(HDF5_SIGNATURE)]:
        return InputError(f"{path} is not an mpidwe {what} (not an HDF5 file){hint}")
    return InputError(f"{path} is not a readable HDF5 file (truncated, damaged or opened by another program)")


def is_hdf5(path: str) -> bool:
    """Whether ``path`` is an HDF5 file, sealed (every mpidwe file: checkpoints, their parts,
    character models, corpora) or not; False for one that cannot be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(HDF5_SIGNATURE))
    except OSError:
        return False
    return head in (HDF5_SIGNATURE, SEAL_MAGIC.encode()[:len(HDF5_SIGNATURE)])


def _elements(shape) -> int:
    n = 1
    for k in shape or ():
        n *= int(k)
    return n


def check_stored(f, path: str, what: str, fix: str = "") -> None:
    """Refuse an open HDF5 file ``f`` holding a dataset whose shape asks for more than is
    stored: mpidwe writes every dataset whole and uncompressed, so a numeric dataset stores
    all of its bytes, and no dataset has more elements than the file has bytes. Checked
    before anything is read, so a crafted shape ((2,000,000,000, 8) in a small file, which
    the seal cannot catch once resealed) is one line instead of a 60 GiB allocation.
    Virtual datasets (their data in other files) are left to the caller's shape checks."""
    size = os.path.getsize(path)
    found = []
    f.visititems(lambda name, obj: found.append((name, obj)) if hasattr(obj, "is_virtual") else None)
    for name, d in found:
        if d.is_virtual:
            continue
        n = _elements(d.shape)
        numeric = d.dtype.kind in "iuf"
        need = n * d.dtype.itemsize if numeric else n
        if need > size or (numeric and d.id.get_storage_size() < need):
            raise InputError(f"{path} is damaged: its dataset /{name} has shape {d.shape}, more than "
                             f"the file stores ({size:,} bytes){fix}")


def check_shape(path: str, name: str, shape, expected, kinds: str, dtype, fix: str = "") -> None:
    """Refuse dataset ``name`` unless its shape is ``expected`` (None in it: any length)
    and its dtype kind one of ``kinds`` ('i', 'u', 'f', 'O' for strings)."""
    shape = tuple(int(k) for k in shape)
    fits = len(shape) == len(expected) and all(e is None or e == k for e, k in zip(expected, shape))
    kind = "O" if dtype.kind in "OSU" else dtype.kind
    if not fits or kind not in kinds:
        want = "(" + ", ".join("*" if e is None else str(e) for e in expected) + ("," if len(expected) == 1 else "") + ")"
        raise InputError(f"{path} is damaged: its dataset /{name} has shape {shape} and type {dtype}, "
                         f"where its header says {want}{fix}")


# ------------------------------------------------------------------------------- the seal
# Every mpidwe HDF5 file starts with a SEAL_SIZE-byte header (an HDF5 "user block", which
# HDF5 itself skips) holding the file's size and a SHA-256 of its bytes. Readers check it
# from the raw bytes *before* HDF5 parses anything: HDF5 spins forever on some damaged
# structures (a global heap with one flipped byte) and cannot be interrupted, not even by
# SIGTERM. Only the raw data of large numeric datasets may be left out of the hash
# (``skip``): HDF5 copies those bytes without interpreting them, and each file kind checks
# them after reading (corpus id, parameter and content checksums). Layout in
# docs/hdf5-format.md ("The seal").
SEAL_SIZE = 512
SEAL_MAGIC = "MPIDWE-SEAL"
SEAL_VERSION = 1
_SEAL_BLOCK = 1 << 20


def _seal_digest(fh, header: bytes, size: int, skip: list[tuple[int, int]]) -> str:
    """SHA-256 of the header (its 64 digest digits read as zeros) and of every byte of
    [SEAL_SIZE, size) outside the ``skip`` ranges (offset, length)."""
    h = hashlib.sha256(header)
    pos = SEAL_SIZE
    for start, end in [(a, a + n) for a, n in skip] + [(size, size)]:
        fh.seek(pos)
        while pos < start:
            block = fh.read(min(_SEAL_BLOCK, start - pos))
            if not block:              # shorter than its header says: cannot match
                return ""
            h.update(block)
            pos += len(block)
        pos = end
    return h.hexdigest()


def _seal_header(size: int, skip: list[tuple[int, int]], digest: str) -> bytes:
    text = (f"{SEAL_MAGIC} {SEAL_VERSION}\nsize {size}\nskip" + "".join(f" {a}+{n}" for a, n in skip)
            + f"\nsha256 {digest}\n").encode("ascii")
    if len(text) > SEAL_SIZE:
        raise ValueError(f"seal header of {len(text)} bytes does not fit in {SEAL_SIZE}")
    return text + b"\0" * (SEAL_SIZE - len(text))


def seal(path: str, skip=()) -> None:
    """Write the seal into the user block of a closed HDF5 file that was created with
    ``userblock_size=SEAL_SIZE``. ``skip``: (offset, length) ranges of
    dataset raw data the hash leaves out (h5py's ``dsid.get_offset()`` and
    ``get_storage_size()``, or ``raw_extent``). The caller fsyncs (as before a rename)."""
    skip = sorted((int(a), int(n)) for a, n in skip if n)
    with open(path, "r+b") as fh:
        fh.seek(SEAL_SIZE)
        if fh.read(len(HDF5_SIGNATURE)) != HDF5_SIGNATURE:
            raise ValueError(f"{path} has no {SEAL_SIZE}-byte user block")
        size = os.fstat(fh.fileno()).st_size
        if any(a < SEAL_SIZE or a + n > size for a, n in skip) or any(
                a + n > b for (a, n), (b, _) in zip(skip, skip[1:])):
            raise ValueError(f"{path}: skip ranges {skip} overlap or leave the data")
        digest = _seal_digest(fh, _seal_header(size, skip, "0" * 64), size, skip)
        fh.seek(0)
        fh.write(_seal_header(size, skip, digest))


def raw_extent(dataset) -> tuple[int, int]:
    """(file offset, length) of an h5py dataset's raw data, for ``seal(skip=...)``; (0, 0)
    while nothing is stored. Only contiguous datasets of a fixed-size dtype have one."""
    if dataset.chunks is not None or dataset.dtype.kind not in "iuf":
        raise ValueError(f"{dataset.name}: only contiguous numeric data can be left out of the seal")
    offset = dataset.id.get_offset()
    return (0, 0) if offset is None else (int(offset), int(dataset.id.get_storage_size()))


def check_seal(path: str, what: str, hint: str = "", fix: str = "") -> bool:
    """Check the seal of ``path`` from its raw bytes, before HDF5 opens it. True: sealed
    and intact. False: an HDF5 file without a seal (written before seals existed; HDF5 is
    not protected from its damage). Anything else raises a one-line InputError: not HDF5
    at all (``hint`` says what to use instead), or damaged, truncated or a newer seal
    (``fix`` says what to do)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(SEAL_SIZE)
            if head[:len(HDF5_SIGNATURE)] == HDF5_SIGNATURE:
                return False
            size = os.fstat(fh.fileno()).st_size
            if not head.startswith(SEAL_MAGIC.encode() + b" "):
                fh.seek(SEAL_SIZE)
                if fh.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE:
                    raise InputError(f"{path} is damaged: its mpidwe header is not readable{fix}")
                raise InputError(f"{path} is not an mpidwe {what} (not an HDF5 file){hint}")
            skip, digest = _parse_seal(path, head, size, fix)
            zeroed = head.replace(f"sha256 {digest}\n".encode(), f"sha256 {'0' * 64}\n".encode(), 1)
            if _seal_digest(fh, zeroed, size, skip) != digest:
                raise InputError(f"{path} is damaged: the file fails its checksum{fix}")
            return True
    except OSError as e:
        raise InputError(f"{path} cannot be read: {e.strerror or e}") from None


def _parse_seal(path: str, head: bytes, size: int, fix: str) -> tuple[list[tuple[int, int]], str]:
    """(skip ranges, digest) from a seal header; every field is bound-checked."""
    damaged = InputError(f"{path} is damaged: its mpidwe header is not readable{fix}")
    try:
        lines = head.split(b"\0", 1)[0].decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise damaged from None
    version = lines[0][len(SEAL_MAGIC) + 1:]
    if version != str(SEAL_VERSION):
        if version.isdigit() and int(version) > SEAL_VERSION:
            raise InputError(f"{path} has an mpidwe header of version {version}; this mpidwe "
                             f"(v{__version__}) reads version {SEAL_VERSION}")
        raise damaged
    if len(lines) != 5 or lines[4] != "" or not lines[1].startswith("size ") \
            or not (lines[2] == "skip" or lines[2].startswith("skip ")) or not lines[3].startswith("sha256 "):
        raise damaged
    try:
        stored = int(lines[1][5:])
        skip = [(int(a), int(n)) for a, n in (r.split("+") for r in lines[2][5:].split())]
    except ValueError:
        raise damaged from None
    digest = lines[3][7:]
    try:
        canonical = _seal_header(stored, skip, digest)
    except ValueError:
        raise damaged from None
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or canonical != head:
        raise damaged
    pos = SEAL_SIZE
    for a, n in skip:
        if a < pos or n <= 0 or a + n > stored:
            raise damaged
        pos = a + n
    if size < stored:
        raise InputError(f"{path} is not a readable HDF5 file (truncated: {size} of {stored} bytes){fix}")
    if size > stored:
        raise InputError(f"{path} is damaged: {size} bytes where {stored} were written, the file "
                         f"fails its checksum{fix}")
    return skip, digest


def reseal(path: str) -> None:
    """Seal ``path`` again after a deliberate in-place edit (h5py mode "a"), keeping the
    ranges its seal leaves out: for tests and repair tools only. A reader never does this."""
    with open(path, "rb") as fh:
        head = fh.read(SEAL_SIZE)
    lines = head.split(b"\0", 1)[0].decode("ascii").split("\n")
    if not lines[0].startswith(SEAL_MAGIC + " ") or len(lines) < 3:
        raise ValueError(f"{path} has no mpidwe seal")
    seal(path, [tuple(int(x) for x in r.split("+")) for r in lines[2][5:].split()])
