"""The only module that reads or writes the PIP reference cache (HDF5).

Layout: docs/pip-reference-format.md. The cache sits next to its corpus
(``corpus.h5`` -> ``corpus.h5.sppmi.h5``) and holds one group per reference key
(window, negatives, dimension, top-N, alpha) of that corpus. It is only ever replaced
whole: a new file is written under a temporary name, fsynced and renamed over the old one,
so a crash leaves either the old cache or the new one, never half of one.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from ..version import __version__
from ..core.errors import InputError
from .formats import SEAL_SIZE, _text, check_seal, check_shape, check_stored, seal
from .fsutil import atomic_path

FORMAT = "mpidwe-sppmi-cache"
FORMAT_VERSION = 1
SUFFIX = ".sppmi.h5"
DELETE = "; delete it to recompute"

# names of groups, datasets and attributes
A_FORMAT = "format"
A_VERSION = "format_version"
A_CORPUS_ID = "corpus_id"
A_TOOL_VERSION = "tool_version"
A_CREATED = "created_utc"
A_WINDOW = "window"
A_NEGATIVES = "negatives"
A_DIM = "dim"
A_TOP_N = "top_n"
A_ALPHA = "alpha"
A_INFO = "info"
A_SHA = "content_sha256"
G_REFERENCES = "references"
D_WORDS = "words"
D_EMBEDDING = "embedding"
D_SINGULAR = "singular_values"


@dataclass(frozen=True)
class ReferenceKey:
    """What a cached reference depends on. ``top_n`` is the number of rows actually used
    (at most the vocabulary size)."""

    corpus_id: str
    window: int
    negatives: int
    dim: int
    top_n: int
    alpha: float

    @property
    def group(self) -> str:
        return (f"window={self.window},negatives={self.negatives},dim={self.dim},"
                f"top_n={self.top_n},alpha={float(self.alpha)!r}")


@dataclass
class CachedReference:
    key: ReferenceKey
    words: list[str]
    embedding: np.ndarray            # (top_n, dim) float32
    singular_values: np.ndarray      # (dim,) float64, descending
    info: dict = field(default_factory=dict)   # how it was computed (JSON-able)


def cache_path(corpus_path: str) -> str:
    return str(corpus_path) + SUFFIX


def _open_checked(path: str) -> h5py.File:
    """Open an existing cache read-only after checking its seal (from the raw bytes, before
    HDF5 parses anything), its format and its version."""
    check_seal(path, "PIP reference cache", DELETE, DELETE)
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise InputError(f"{path} is not a readable HDF5 file; delete it to recompute the "
                         f"PIP reference") from None
    fmt = _text(f.attrs.get(A_FORMAT, ""))
    version = int(f.attrs.get(A_VERSION, -1))
    if fmt != FORMAT or version != FORMAT_VERSION:
        f.close()
        raise InputError(f"{path} is not a PIP reference cache this mpidwe (v{__version__}) reads "
                         f"(format {fmt!r} version {version}, expected {FORMAT!r} version "
                         f"{FORMAT_VERSION}); delete it to recompute")
    try:
        check_stored(f, path, "PIP reference cache", DELETE)
    except BaseException:
        f.close()
        raise
    return f


def read_reference(path: str, key: ReferenceKey) -> CachedReference | None:
    """The cached reference for ``key``, or None when the file, the entry, or an entry for
    this corpus (same ``corpus_id``) is not there."""
    if not os.path.exists(path):
        return None
    with _open_checked(path) as f:
        if _text(f.attrs.get(A_CORPUS_ID, "")) != key.corpus_id:
            return None  # the corpus was rewritten since: every entry is stale
        g = f.get(f"{G_REFERENCES}/{key.group}")
        if g is None:
            return None
        stored = (_text(g.attrs.get(A_CORPUS_ID, "")), int(g.attrs.get(A_WINDOW, -1)),
                  int(g.attrs.get(A_NEGATIVES, -1)), int(g.attrs.get(A_DIM, -1)),
                  int(g.attrs.get(A_TOP_N, -1)), float(g.attrs.get(A_ALPHA, np.nan)))
        expected = (key.corpus_id, key.window, key.negatives, key.dim, key.top_n, float(key.alpha))
        if stored != expected:
            raise InputError(f"{path} is damaged: entry {key.group} holds {stored}; delete it to recompute")
        for name in (D_WORDS, D_EMBEDDING, D_SINGULAR):
            if name not in g:
                raise InputError(f"{path} is damaged: {key.group}/{name} is missing; delete it to recompute")
        for name, expected, kinds in ((D_EMBEDDING, (key.top_n, key.dim), "f"), (D_SINGULAR, (key.dim,), "f"),
                                      (D_WORDS, (key.top_n,), "O")):    # before anything is read
            check_shape(path, f"{G_REFERENCES}/{key.group}/{name}", g[name].shape, expected, kinds,
                        g[name].dtype, DELETE)
        emb = g[D_EMBEDDING][:]
        sv = g[D_SINGULAR][:]
        words = [_text(w) for w in g[D_WORDS][:]]
        info_text = _text(g.attrs.get(A_INFO, "{}"))
        if A_SHA in g.attrs and _entry_sha256(key, words, emb, sv, info_text) != _text(g.attrs[A_SHA]):
            raise InputError(f"{path} is damaged: entry {key.group} fails its checksum; delete it to recompute")
        info = json.loads(info_text)
        return CachedReference(key, words, emb.astype(np.float32, copy=False), sv.astype(np.float64), info)


def _entry_sha256(key: ReferenceKey, words: list[str], embedding: np.ndarray, singular: np.ndarray,
                  info: str) -> str:
    """SHA-256 over an entry's key, words, matrices and info: a flipped byte anywhere in it
    is refused instead of silently changing every PIP loss computed from it."""
    import hashlib

    h = hashlib.sha256(repr((key.corpus_id, key.window, key.negatives, key.dim, key.top_n,
                             float(key.alpha))).encode())
    h.update("\n".join(words).encode("utf-8"))
    h.update(np.ascontiguousarray(embedding, dtype=np.float32).tobytes())
    h.update(np.ascontiguousarray(singular, dtype=np.float64).tobytes())
    h.update(info.encode("utf-8"))
    return h.hexdigest()


def _write_entry(f: h5py.File, ref: CachedReference) -> None:
    g = f.require_group(G_REFERENCES).create_group(ref.key.group)
    k = ref.key
    g.attrs[A_CORPUS_ID] = k.corpus_id
    g.attrs[A_WINDOW] = k.window
    g.attrs[A_NEGATIVES] = k.negatives
    g.attrs[A_DIM] = k.dim
    g.attrs[A_TOP_N] = k.top_n
    g.attrs[A_ALPHA] = float(k.alpha)
    g.attrs[A_CREATED] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    g.attrs[A_INFO] = json.dumps(ref.info, sort_keys=True)
    g.attrs[A_SHA] = _entry_sha256(k, list(ref.words), ref.embedding, ref.singular_values, g.attrs[A_INFO])
    g.create_dataset(D_WORDS, data=np.array(ref.words, dtype=object), dtype=h5py.string_dtype("utf-8"))
    g.create_dataset(D_EMBEDDING, data=np.asarray(ref.embedding, dtype=np.float32))
    g.create_dataset(D_SINGULAR, data=np.asarray(ref.singular_values, dtype=np.float64))


def write_reference(path: str, ref: CachedReference) -> None:
    """Add (or replace) ``ref``'s entry. Entries of the same corpus are kept; entries of
    another corpus (the corpus file was rewritten) are dropped. Crash-safe."""
    old = _open_checked(path) if os.path.exists(path) else None
    try:
        with atomic_path(path) as tmp:
            _write_file(tmp, ref, old)
            seal(tmp)           # atomic_path fsyncs it before the rename
    finally:
        if old is not None:
            old.close()


def _write_file(tmp: str, ref: CachedReference, old: h5py.File | None) -> None:
    """The new cache: ``ref`` plus the other entries of ``old`` for the same corpus."""
    with h5py.File(tmp, "w", userblock_size=SEAL_SIZE) as f:
        f.attrs[A_FORMAT] = FORMAT
        f.attrs[A_VERSION] = FORMAT_VERSION
        f.attrs[A_CORPUS_ID] = ref.key.corpus_id
        f.attrs[A_TOOL_VERSION] = __version__
        if old is not None and _text(old.attrs.get(A_CORPUS_ID, "")) == ref.key.corpus_id:
            dst = f.require_group(G_REFERENCES)
            for gname, g in old.get(G_REFERENCES, {}).items():
                if gname != ref.key.group:
                    old.copy(g, dst, name=gname)
        _write_entry(f, ref)
        f.flush()


def list_references(path: str) -> list[str]:
    """Group names of the entries in a cache file (for tools and tests)."""
    if not os.path.exists(path):
        return []
    with _open_checked(path) as f:
        return sorted(f.get(G_REFERENCES, {}).keys())
