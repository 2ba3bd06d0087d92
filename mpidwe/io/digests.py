"""The checksums of checkpoints and the files beside them (parts, character models):
over the vocabulary, the parameter matrices, and every attribute and dataset of an open
HDF5 file (h5py's objects, duck-typed: this module imports no h5py). Pure hashing of
what io/checkpoint.py reads and writes."""

from __future__ import annotations

import hashlib

import numpy as np

from .formats import _text as _str


def vocab_sha256(words: list[str]) -> str:
    return hashlib.sha256("\n".join(words).encode("utf-8")).hexdigest()


def params_sha256(w_in: np.ndarray, w_out: np.ndarray) -> str:
    h = hashlib.sha256()
    for w in (w_in, w_out):     # hashed in place: tobytes() would copy a whole matrix
        h.update(memoryview(np.ascontiguousarray(w)).cast("B"))
    return h.hexdigest()


def content_sha256(f) -> str:
    """SHA-256 over every attribute (but itself) and every dataset of an open checkpoint, in
    name order: a flipped byte anywhere (RNG state, progress, history, counts...) changes it.
    Computed from the file itself, by the writer after writing and by the reader."""
    h = hashlib.sha256()
    for name in sorted(k for k in f.attrs if k != "content_sha256"):
        value = f.attrs[name]
        if isinstance(value, np.ndarray):
            value = value.tolist()
        elif isinstance(value, np.generic):
            value = value.item()       # repr(np.int64(2)) depends on the numpy version; 2 does not
        h.update(f"{name}={_str(value) if isinstance(value, (str, bytes)) else repr(value)}\n".encode())
    datasets = []
    # virtual datasets (a sharded checkpoint's parameters) are the part files' data: each part
    # has its own seal and checksum, and reading them here would load the whole model
    f.visititems(lambda name, obj: datasets.append(name)
                 if hasattr(obj, "is_virtual") and not obj.is_virtual else None)
    for name in sorted(datasets):
        data = f[name][()]
        h.update(f"{name}:{getattr(data, 'shape', ())}\n".encode())
        if isinstance(data, np.ndarray) and data.dtype != object:
            h.update(np.ascontiguousarray(data).tobytes())
        elif isinstance(data, np.ndarray):
            h.update("\n".join(_str(x) for x in data.ravel()).encode("utf-8"))
        else:
            h.update(_str(data).encode("utf-8"))
    return h.hexdigest()


def streamed_sha256(f, names, piece_rows: int = 1 << 16) -> str:
    """params_sha256 of an open file's matrices ``names``, read in pieces of rows."""
    h = hashlib.sha256()
    for name in names:
        d = f[name]
        for a in range(0, d.shape[0], piece_rows):
            h.update(np.ascontiguousarray(d[a:a + piece_rows]).tobytes())
    return h.hexdigest()
