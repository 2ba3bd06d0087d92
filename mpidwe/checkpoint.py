"""The only module that reads or writes checkpoints (HDF5). Layout: docs/hdf5-format.md.

A checkpoint holds the complete training state at a sync point (when every rank holds the
same parameters): both matrices, the vocabulary, the full configuration, global progress,
every rank's position and RNG state, and the metrics history. It is written by rank 0
under a temporary name, flushed and fsynced, then renamed, so a crash at any moment
leaves the previous checkpoint intact. This module takes no Comm: the trainer decides who
writes and when.
"""

from __future__ import annotations

import datetime
import glob
import hashlib
import json
import os
import re
from dataclasses import dataclass, field

import h5py
import numpy as np

from . import __version__
from .errors import InputError
from .formats import SEAL_SIZE, check_format, check_seal, raw_extent, seal, unreadable
from .fsutil import atomic_path, reason

FORMAT = "mpidwe-checkpoint"
FORMAT_VERSION = 3          # 3: params/w_in may hold more rows than words (--subwords buckets)
OLDER_VERSIONS = (1, 2)     # 1: only the parameters and the vocabulary were checksummed
PLAIN_VERSION = 2           # what a checkpoint without extra input rows is still written as

A_FORMAT = "format"
A_VERSION = "format_version"
A_TOOL_VERSION = "tool_version"
A_CREATED = "created_utc"
A_CONFIG = "config"
A_CORPUS_ID = "corpus_id"
A_CORPUS_PATH = "corpus_path"
A_VOCAB_SHA = "vocab_sha256"
A_PROGRESS = "progress"
A_CHECKSUM = "params_sha256"
A_CONTENT = "content_sha256"
A_COMPLETE = "complete"
D_W_IN = "params/w_in"
D_W_OUT = "params/w_out"
D_WORDS = "vocab/words"
D_COUNTS = "vocab/counts"
D_RNG = "rng/state"
D_METRICS = "metrics/history"

NAME_RE = re.compile(r"^ckpt-(\d{9})\.h5$")


@dataclass
class Progress:
    """Where training stands at a sync point (identical on every rank)."""

    round: int                     # sync rounds completed
    rounds: int                    # sync rounds in the whole run
    words_done: int                # global words trained (all ranks, all epochs)
    words_total: int
    world_size: int
    positions: list[int]           # per rank: local words consumed (over epochs)
    lr: float

    @property
    def finished(self) -> bool:
        return self.round >= self.rounds


@dataclass
class TrainingState:
    """Everything a run needs to continue exactly where it stopped, identical on every rank
    at a sync point: saved, loaded and broadcast as one unit (``header`` + the matrices)."""

    w_in: np.ndarray
    w_out: np.ndarray
    progress: Progress
    rng_state: np.ndarray          # uint64 [world_size, threads]: every rank's kernel RNG
    history: list[dict] = field(default_factory=list)   # metrics records so far

    def header(self) -> dict:
        """The small, picklable part (for a broadcast next to the two matrices)."""
        return {"progress": self.progress, "rng_state": self.rng_state, "history": self.history}

    @classmethod
    def from_header(cls, header: dict, w_in: np.ndarray, w_out: np.ndarray) -> "TrainingState":
        return cls(w_in=w_in, w_out=w_out, **header)


@dataclass
class Checkpoint:
    state: TrainingState
    words: list[str]
    counts: np.ndarray
    config: dict
    corpus_id: str
    corpus_path: str
    path: str = ""
    created: str = ""
    tool_version: str = ""
    complete: bool = False

    # the parts readers use most, without reaching through ``state``
    @property
    def w_in(self) -> np.ndarray:
        return self.state.w_in

    @property
    def w_out(self) -> np.ndarray:
        return self.state.w_out

    @property
    def progress(self) -> Progress:
        return self.state.progress

    @property
    def metrics(self) -> list[dict]:
        return self.state.history


def vocab_sha256(words: list[str]) -> str:
    return hashlib.sha256("\n".join(words).encode("utf-8")).hexdigest()


def params_sha256(w_in: np.ndarray, w_out: np.ndarray) -> str:
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(w_in).tobytes())
    h.update(np.ascontiguousarray(w_out).tobytes())
    return h.hexdigest()


def content_sha256(f: h5py.File) -> str:
    """SHA-256 over every attribute (but itself) and every dataset of an open checkpoint, in
    name order: a flipped byte anywhere (RNG state, progress, history, counts...) changes it.
    Computed from the file itself, by the writer after writing and by the reader."""
    h = hashlib.sha256()
    for name in sorted(k for k in f.attrs if k != A_CONTENT):
        value = f.attrs[name]
        if isinstance(value, np.ndarray):
            value = value.tolist()
        elif isinstance(value, np.generic):
            value = value.item()       # repr(np.int64(2)) depends on the numpy version; 2 does not
        h.update(f"{name}={_str(value) if isinstance(value, (str, bytes)) else repr(value)}\n".encode())
    datasets = []
    f.visititems(lambda name, obj: datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
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


def checkpoint_name(round_: int) -> str:
    return f"ckpt-{round_:09d}.h5"


def save(directory: str, ckpt: Checkpoint, *, keep: int = 3) -> str:
    """Write ``ckpt`` atomically into ``directory``; keep the newest ``keep`` files."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, checkpoint_name(ckpt.progress.round))
    try:
        _write(path, ckpt)
    except OSError as e:   # a full or failing disk: atomic_path has removed the partial file
        raise InputError(f"cannot write checkpoint {path}: {reason(e)}; the earlier checkpoints "
                         f"are kept") from None
    for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        os.unlink(old)
    return path


def _write(path: str, ckpt: Checkpoint) -> None:
    with atomic_path(path) as tmp:
        skip = _write_hdf5(tmp, ckpt)
        seal(tmp, skip)     # atomic_path fsyncs it before the rename


def _write_hdf5(tmp: str, ckpt: Checkpoint) -> list[tuple[int, int]]:
    """The HDF5 part; returns the byte ranges of the two matrices, which the seal leaves
    out (the parameter and content checksums cover them when the file is read)."""
    with h5py.File(tmp, "w", userblock_size=SEAL_SIZE) as f:
        f.attrs[A_FORMAT] = FORMAT
        # version 3 only where a version-2 reader would misread the file (extra input rows)
        f.attrs[A_VERSION] = FORMAT_VERSION if len(ckpt.w_in) != len(ckpt.words) else PLAIN_VERSION
        f.attrs[A_TOOL_VERSION] = __version__
        f.attrs[A_CREATED] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        f.attrs[A_CONFIG] = json.dumps(ckpt.config, sort_keys=True)
        f.attrs[A_CORPUS_ID] = ckpt.corpus_id
        f.attrs[A_CORPUS_PATH] = ckpt.corpus_path
        f.attrs[A_VOCAB_SHA] = vocab_sha256(ckpt.words)
        f.attrs[A_PROGRESS] = json.dumps(ckpt.progress.__dict__, sort_keys=True)
        f.attrs[A_COMPLETE] = bool(ckpt.complete)
        f.attrs[A_CHECKSUM] = params_sha256(ckpt.w_in, ckpt.w_out)
        f.create_dataset(D_W_IN, data=ckpt.w_in)
        f.create_dataset(D_W_OUT, data=ckpt.w_out)
        f.create_dataset(D_WORDS, data=np.array(ckpt.words, dtype=object), dtype=h5py.string_dtype("utf-8"))
        f.create_dataset(D_COUNTS, data=np.asarray(ckpt.counts, dtype=np.int64))
        f.create_dataset(D_RNG, data=np.asarray(ckpt.state.rng_state, dtype=np.uint64))
        f.create_dataset(D_METRICS, data=json.dumps(ckpt.metrics), dtype=h5py.string_dtype("utf-8"))
        f.flush()
        f.attrs[A_CONTENT] = content_sha256(f)
        f.flush()
        return [raw_extent(f[D_W_IN]), raw_extent(f[D_W_OUT])]


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint files in ``directory``, oldest first (by round in the name)."""
    paths = [p for p in glob.glob(os.path.join(directory, "ckpt-*.h5")) if NAME_RE.match(os.path.basename(p))]
    return sorted(paths)


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def load(path: str, *, verify: bool = True) -> Checkpoint:
    """Read a checkpoint, checking its seal, format, version and (with ``verify``) the
    content checksum. Opens read-only, so it works while a run is writing newer
    checkpoints. A checkpoint without a seal (written before mpidwe had one) is still read,
    but HDF5 is then not protected from its damage."""
    if not os.path.exists(path):
        raise InputError(f"checkpoint not found: {path}")
    check_seal(path, "checkpoint")      # from the raw bytes, before HDF5 parses anything
    try:
        f = h5py.File(path, "r", locking=False)
    except OSError:
        raise unreadable(path, "checkpoint") from None
    try:
        with f:
            version = check_format(f.attrs, path, FORMAT, FORMAT_VERSION, "checkpoint", OLDER_VERSIONS)
            if verify and version >= 2 and content_sha256(f) != _str(f.attrs[A_CONTENT]):
                raise InputError(f"{path} is damaged: content checksum mismatch")
            w_in, w_out = f[D_W_IN][:], f[D_W_OUT][:]
            words = [_str(w) for w in f[D_WORDS][:]]
            if verify and params_sha256(w_in, w_out) != _str(f.attrs[A_CHECKSUM]):
                raise InputError(f"{path} is damaged: parameter checksum mismatch")
            if vocab_sha256(words) != _str(f.attrs[A_VOCAB_SHA]):
                raise InputError(f"{path} is damaged: vocabulary checksum mismatch")
            metrics_raw = f[D_METRICS][()]
            state = TrainingState(w_in=w_in, w_out=w_out,
                                  progress=Progress(**json.loads(_str(f.attrs[A_PROGRESS]))),
                                  rng_state=f[D_RNG][:], history=json.loads(_str(metrics_raw)))
            return Checkpoint(
                state=state, words=words, counts=f[D_COUNTS][:],
                config=json.loads(_str(f.attrs[A_CONFIG])), corpus_id=_str(f.attrs[A_CORPUS_ID]),
                corpus_path=_str(f.attrs[A_CORPUS_PATH]), path=path,
                created=_str(f.attrs[A_CREATED]), tool_version=_str(f.attrs[A_TOOL_VERSION]),
                complete=bool(f.attrs.get(A_COMPLETE, False)))
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise InputError(f"{path} is damaged: {e}") from None


def latest_valid(directory: str, warn=None) -> Checkpoint | None:
    """The newest checkpoint in ``directory`` that loads and verifies; damaged ones are
    skipped with a warning."""
    for path in reversed(list_checkpoints(directory)):
        try:
            return load(path)
        except InputError as e:
            if warn:
                warn(f"warning: skipping damaged checkpoint: {e}")
    return None
