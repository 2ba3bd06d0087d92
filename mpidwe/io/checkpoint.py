"""The only module that reads or writes checkpoints (HDF5). Layout: docs/hdf5-format.md.

A checkpoint holds the complete training state at a sync point (when every rank holds the
same parameters): both matrices, the vocabulary, the full configuration, global progress,
every rank's position and RNG state, and the metrics history. It is written by rank 0
under a temporary name, flushed and fsynced, then renamed, so a crash at any moment
leaves the previous checkpoint intact. This module takes no Comm: the trainer decides who
writes and when.
"""

from __future__ import annotations

import contextlib
import datetime
import glob
import hashlib
import json
import os
import re
from dataclasses import dataclass, field

import h5py
import numpy as np

from ..version import __version__
from ..core.errors import InputError
from .formats import (SEAL_SIZE, check_format, check_seal, check_shape, check_stored, raw_extent, seal,
                      unreadable)
from .digests import _str, content_sha256, params_sha256, streamed_sha256, vocab_sha256
from .fsutil import atomic_path, reason

FORMAT = "mpidwe-checkpoint"
FORMAT_VERSION = 3          # 3: params/w_in may hold more rows than words (--subwords buckets)
PLAIN_VERSION = 2           # 2: content_sha256 covers every dataset and attribute; still written
                            #    where the input matrix holds only the words
SHARDED_VERSION = 4         # 4: the parameters live in part files (--store sharded), joined by
                            #    virtual datasets
READ_VERSIONS = (1, 2, 4)   # besides FORMAT_VERSION; 1: only the parameters and the vocabulary
                            #    were checksummed
PART_FORMAT = "mpidwe-checkpoint-part"
PART_VERSION = 1
A_STORE = "store"
A_PARTS = "parts"
A_RANK = "rank"
A_WORLD = "world_size"
A_VOCAB_SIZE = "vocab_size"

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
PART_RE = re.compile(r"^ckpt-(\d{9})\.part-(\d{5})-of-(\d{5})\.h5$")
RANK_RE = re.compile(r"^ckpt-(\d{9})\.rank-(\d{5})-of-(\d{5})\.h5$")   # io/rankstate.py


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
    parts: list[dict] = field(default_factory=list)   # a sharded checkpoint's part files
    format_version: int = 0        # the file's own, as read (0: not read from a file)

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


def checkpoint_name(round_: int) -> str:
    return f"ckpt-{round_:09d}.h5"


def save(directory: str, ckpt: Checkpoint, *, keep: int = 3, parts: list[dict] | None = None) -> str:
    """Write ``ckpt`` atomically into ``directory``; keep the newest ``keep`` files.
    ``parts`` (a sharded run): the part files every owner wrote with :func:`save_part`, in
    rank order; the checkpoint then holds no parameters of its own but virtual datasets
    that join the parts' rows, and ``ckpt.w_in``/``w_out`` are not read."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, checkpoint_name(ckpt.progress.round))
    try:
        _write(path, ckpt, parts)
    except OSError as e:   # a full or failing disk: atomic_path has removed the partial file
        raise InputError(f"cannot write checkpoint {path}: {reason(e)}; the earlier checkpoints "
                         f"are kept") from None
    # checkpoints newer than this one (damaged ones a resume skipped: the damage may pass, a
    # network filesystem's) are kept; of this one and the older, the newest ``keep``
    older = [p for p in list_checkpoints(directory) if _round_of(p) <= ckpt.progress.round]
    for old in older[:-keep] if keep > 0 else []:
        os.unlink(old)
        if os.path.exists(char_model_path(old)):     # of no use without its checkpoint
            os.unlink(char_model_path(old))
    remove_stale_parts(directory)
    return path


def _round_of(path: str) -> int:
    return int(NAME_RE.match(os.path.basename(path)).group(1))


def _write_sealed(path: str, fill) -> None:
    """Write the HDF5 file ``path`` atomically and sealed: ``fill(f)`` writes the open file
    (made with the seal's user block) and returns the byte ranges the seal leaves out; the
    file is then sealed, and atomic_path fsyncs it before the rename. Every sealed file of
    this module and io/charfile.py (checkpoint, part, character model) is written through here."""
    with atomic_path(path) as tmp:
        with h5py.File(tmp, "w", userblock_size=SEAL_SIZE) as f:
            skip = fill(f)
            f.flush()
        seal(tmp, skip)


def _write(path: str, ckpt: Checkpoint, parts: list[dict] | None = None) -> None:
    _write_sealed(path, lambda f: _write_hdf5(f, ckpt) if parts is None else _write_sharded(f, ckpt, parts))


def _write_hdf5(f: h5py.File, ckpt: Checkpoint) -> list[tuple[int, int]]:
    """The HDF5 part; returns the byte ranges of the two matrices, which the seal leaves
    out (the parameter and content checksums cover them when the file is read)."""
    # version 3 only where a version-2 reader would misread the file (extra input rows)
    _write_attrs(f, ckpt, FORMAT_VERSION if len(ckpt.w_in) != len(ckpt.words) else PLAIN_VERSION)
    f.attrs[A_CHECKSUM] = params_sha256(ckpt.w_in, ckpt.w_out)
    f.create_dataset(D_W_IN, data=ckpt.w_in)
    f.create_dataset(D_W_OUT, data=ckpt.w_out)
    _write_small(f, ckpt)
    f.flush()
    f.attrs[A_CONTENT] = content_sha256(f)
    f.flush()
    return [raw_extent(f[D_W_IN]), raw_extent(f[D_W_OUT])]


def _write_attrs(f: h5py.File, ckpt: Checkpoint, version: int) -> None:
    f.attrs[A_FORMAT] = FORMAT
    f.attrs[A_VERSION] = version
    f.attrs[A_TOOL_VERSION] = __version__
    f.attrs[A_CREATED] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    f.attrs[A_CONFIG] = json.dumps(ckpt.config, sort_keys=True)
    f.attrs[A_CORPUS_ID] = ckpt.corpus_id
    f.attrs[A_CORPUS_PATH] = ckpt.corpus_path
    f.attrs[A_VOCAB_SHA] = vocab_sha256(ckpt.words)
    f.attrs[A_PROGRESS] = json.dumps(ckpt.progress.__dict__, sort_keys=True)
    f.attrs[A_COMPLETE] = bool(ckpt.complete)


def _write_small(f: h5py.File, ckpt: Checkpoint) -> None:
    f.create_dataset(D_WORDS, data=np.array(ckpt.words, dtype=object), dtype=h5py.string_dtype("utf-8"))
    f.create_dataset(D_COUNTS, data=np.asarray(ckpt.counts, dtype=np.int64))
    f.create_dataset(D_RNG, data=np.asarray(ckpt.state.rng_state, dtype=np.uint64))
    f.create_dataset(D_METRICS, data=json.dumps(ckpt.metrics), dtype=h5py.string_dtype("utf-8"))


def parts_sha256(parts: list[dict]) -> str:
    """The parameter checksum of a sharded checkpoint: over its parts' own checksums."""
    return hashlib.sha256("\n".join(p["params_sha256"] for p in parts).encode()).hexdigest()


def _write_sharded(f: h5py.File, ckpt: Checkpoint, parts: list[dict]) -> list[tuple[int, int]]:
    """A sharded checkpoint: everything but the parameters, which are virtual datasets over
    the part files beside it. Rank r's part holds the global rows r, r + P, ...; the virtual
    dataset has shape [ceil(V / P), P, d] with global row w at [w // P, w % P], so each part
    maps to one plain block [:rows, r, :] (HDF5 builds a strided [V, d] mapping row by row:
    minutes for 2M rows) and row order is a reshape to [ceil(V / P) x P, d]."""
    world = len(parts)
    vocab, dim = len(ckpt.words), int(parts[0]["dim"])
    per = -(-vocab // world)
    _write_attrs(f, ckpt, SHARDED_VERSION)
    f.attrs[A_STORE] = "sharded"
    f.attrs[A_PARTS] = json.dumps(parts, sort_keys=True)
    f.attrs[A_CHECKSUM] = parts_sha256(parts)
    for name in (D_W_IN, D_W_OUT):
        layout = h5py.VirtualLayout(shape=(per, world, dim), dtype=np.float32)
        for r, part in enumerate(parts):
            if part["rows"]:
                layout[:part["rows"], r, :] = h5py.VirtualSource(part["file"], name, shape=(part["rows"], dim))
        f.create_virtual_dataset(name, layout, fillvalue=np.nan)
    _write_small(f, ckpt)
    f.flush()
    f.attrs[A_CONTENT] = content_sha256(f)
    f.flush()
    return []


def part_name(round_: int, rank: int, world: int) -> str:
    return f"ckpt-{round_:09d}.part-{rank:05d}-of-{world:05d}.h5"


def save_part(directory: str, round_: int, rank: int, world: int, vocab_size: int,
              w_in: np.ndarray, w_out: np.ndarray) -> dict:
    """One owner's rows (global rows rank, rank + P, ...) of a sharded checkpoint, written
    atomically and sealed; returns the entry the checkpoint lists for it."""
    os.makedirs(directory, exist_ok=True)
    name = part_name(round_, rank, world)
    path = os.path.join(directory, name)
    digest = params_sha256(w_in, w_out)
    def fill(f):
        f.attrs[A_FORMAT] = PART_FORMAT
        f.attrs[A_VERSION] = PART_VERSION
        f.attrs[A_RANK] = rank
        f.attrs[A_WORLD] = world
        f.attrs[A_VOCAB_SIZE] = vocab_size
        f.attrs[A_CHECKSUM] = digest
        f.create_dataset(D_W_IN, data=w_in)
        f.create_dataset(D_W_OUT, data=w_out)
        f.flush()
        return [raw_extent(f[D_W_IN]), raw_extent(f[D_W_OUT])]

    try:
        _write_sealed(path, fill)
    except OSError as e:
        raise InputError(f"cannot write checkpoint part {path}: {reason(e)}; the earlier checkpoints "
                         f"are kept") from None
    return {"file": name, "rank": rank, "rows": int(len(w_in)), "dim": int(w_in.shape[1]),
            "params_sha256": digest}


def load_part(directory: str, part: dict, verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The rows of one part file (checked: seal, format, the checksum the checkpoint lists)."""
    path = os.path.join(directory, part["file"])
    if not os.path.exists(path):
        raise InputError(f"checkpoint part {path} is missing")
    check_seal(path, "checkpoint part")
    try:
        with h5py.File(path, "r", locking=False) as f:
            check_format(f.attrs, path, PART_FORMAT, PART_VERSION, "checkpoint part")
            check_stored(f, path, "checkpoint part")
            for name in (D_W_IN, D_W_OUT):
                check_shape(path, name, f[name].shape, (int(part["rows"]), int(part["dim"])), "f", f[name].dtype)
            w_in, w_out = f[D_W_IN][:], f[D_W_OUT][:]
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise InputError(f"checkpoint part {path} is damaged: {e}") from None
    if verify and params_sha256(w_in, w_out) != part["params_sha256"]:
        raise InputError(f"checkpoint part {path} is damaged: parameter checksum mismatch")
    return w_in, w_out


def _open_parts(path: str, parts: list[dict], stack: contextlib.ExitStack) -> list:
    """The part files of the sharded checkpoint ``path``, open for reading, each checked
    (present, format, shapes against the part list); :func:`load` checked their checksums.
    The readers read a sharded checkpoint's rows through these, never through its virtual
    datasets, whose mapping no checksum covers."""
    files = []
    for part in parts:
        p = os.path.join(os.path.dirname(path), part["file"])
        if not os.path.exists(p):
            raise InputError(f"checkpoint part {p} is missing")
        try:
            f = stack.enter_context(h5py.File(p, "r", locking=False))
            check_format(f.attrs, p, PART_FORMAT, PART_VERSION, "checkpoint part")
            for name in (D_W_IN, D_W_OUT):
                check_shape(p, name, f[name].shape, (int(part["rows"]), int(part["dim"])), "f", f[name].dtype)
        except InputError:
            raise
        except (OSError, KeyError, ValueError, TypeError) as e:
            raise InputError(f"checkpoint part {p} is damaged: {e}") from None
        files.append(f)
    return files


def _parts_range(files: list, name: str, a: int, b: int) -> np.ndarray:
    """Global rows [a, b) of matrix ``name`` from the open part files (part r of P holds the
    global rows r, r + P, ...)."""
    world = len(files)
    out = np.empty((b - a, files[0][name].shape[1]), dtype=np.float32)
    for r, f in enumerate(files):
        i0, i1 = max(0, -(-(a - r) // world)), max(0, -(-(b - r) // world))
        if i1 > i0:
            out[i0 * world + r - a::world] = f[name][i0:i1]
    return out


def read_rows(path: str, parts: list[dict], vocab: int, rank: int, world: int,
              piece_rows: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
    """The rows rank ``rank`` of ``world`` owns (global rows rank, rank + P, ...) of the
    checkpoint at ``path`` (``parts``: its part list, empty for a replicated one), without
    reading the whole model: its own part when the checkpoint was written by as many
    owners, else pieces of ``piece_rows`` rows of the part files or the plain matrices."""
    if parts and len(parts) == world:
        return load_part(os.path.dirname(path), parts[rank])
    rows = []
    try:
        with contextlib.ExitStack() as stack:
            if parts:
                files = _open_parts(path, parts, stack)
                piece = lambda name, a, b: _parts_range(files, name, a, b)
            else:
                f = stack.enter_context(h5py.File(path, "r", locking=False))
                piece = lambda name, a, b: f[name][a:b]
            for name in (D_W_IN, D_W_OUT):
                dim = int(parts[0]["dim"]) if parts else f[name].shape[-1]
                out = np.empty((max(0, (vocab - rank + world - 1) // world), dim), dtype=np.float32)
                for a in range(0, vocab, piece_rows):
                    first = (rank - a) % world
                    got = piece(name, a, min(vocab, a + piece_rows))[first::world]
                    k = (a + first - rank) // world
                    out[k:k + len(got)] = got
                rows.append(out)
    except (OSError, KeyError, ValueError) as e:
        raise InputError(f"{path} is damaged: {e}") from None
    return rows[0], rows[1]


def iter_rows(ck: Checkpoint, piece_rows: int = 1 << 16):
    """(first row, w_in rows, w_out rows) pieces of a checkpoint's matrices, in row order:
    a sharded checkpoint is exported from its part files without ever holding the whole model."""
    if ck.w_in is not None:
        for a in range(0, len(ck.w_in), piece_rows):
            yield a, ck.w_in[a:a + piece_rows], ck.w_out[a:a + piece_rows]
        return
    vocab = len(ck.words)
    with contextlib.ExitStack() as stack:
        files = _open_parts(ck.path, ck.parts, stack)
        for a in range(0, vocab, piece_rows):
            b = min(vocab, a + piece_rows)
            yield a, _parts_range(files, D_W_IN, a, b), _parts_range(files, D_W_OUT, a, b)


def check_parts(f: h5py.File, path: str, parts: list[dict], round_: int, vocab: int, dim: int) -> None:
    """A sharded checkpoint's part list names only the files its writer makes (rank r of P:
    ``part_name(round, r, P)`` beside it, with the rows r, r + P, ...; never an absolute or
    ``../`` path), and its virtual datasets map exactly those files: an edited mapping or
    name would read another file's rows."""
    world = len(parts)
    for r, part in enumerate(parts):
        want = {"file": part_name(round_, r, world), "rank": r, "rows": max(0, -(-(vocab - r) // world)), "dim": dim}
        if (not isinstance(part, dict) or any(part.get(k) != v for k, v in want.items())
                or not isinstance(part.get("params_sha256"), str)):
            raise InputError(f"{path} is damaged: its part list names {json.dumps(part)[:120]}, where its writer "
                             f"makes {want['file']} ({want['rows']} rows of {dim})")
    for name in (D_W_IN, D_W_OUT):
        d = f[name]
        want = sorted((p["file"], name, ((0, r, 0), (p["rows"] - 1, r, dim - 1)), p["rows"] * dim)
                      for r, p in enumerate(parts) if p["rows"])
        got = []
        if d.is_virtual:
            plist = d.id.get_create_plist()
            for i in range(plist.get_virtual_count()):
                space = plist.get_virtual_vspace(i)
                got.append((plist.get_virtual_filename(i), plist.get_virtual_dsetname(i),
                            space.get_select_bounds(), space.get_select_npoints()))
        if sorted(got) != want:
            raise InputError(f"{path} is damaged: its virtual dataset /{name} does not map the part files "
                             f"its part list names")


def remove_stale_parts(directory: str, orphans: bool = False) -> list[str]:
    """Delete part files whose checkpoint is gone (deleted by ``keep``, or never written: a
    crash between the parts and the checkpoint). Parts of rounds newer than every checkpoint
    may be the ones being written right now, and are kept unless ``orphans`` (at the start
    of a run, which holds the run directory's lock: no rank of another run writes there)."""
    kept = {_round_of(p) for p in list_checkpoints(directory)}
    newest = max(kept, default=-1)
    gone = []
    for p in glob.glob(os.path.join(directory, "ckpt-*.part-*.h5")) + glob.glob(os.path.join(directory, "ckpt-*.rank-*.h5")):
        m = PART_RE.match(os.path.basename(p)) or RANK_RE.match(os.path.basename(p))
        if m and int(m.group(1)) not in kept and (orphans or int(m.group(1)) <= newest):
            try:
                os.unlink(p)
                gone.append(p)
            except FileNotFoundError:
                pass
    return gone


LIVE = "current"      # a --follow run directory's link to its newest trained step (train/follow.py)


def run_checkpoints(path: str) -> str:
    """The checkpoints folder of run directory ``path``: its own ``checkpoints``, or, for a
    ``--follow`` run (which trains in ``steps/NNNN`` and has none of its own), that of the
    step its ``current`` link names: the live model."""
    own = os.path.join(path, "checkpoints")
    live = os.path.join(path, LIVE, "checkpoints")
    return live if not os.path.isdir(own) and os.path.isdir(live) else own


def check_not_source(output: str, source: str) -> None:
    """Refuse an output (``inspect export``/``plot``, even with --force) that is the file read
    (``source``), in its run's checkpoints folder, or any HDF5 file (a checkpoint, a part of
    one, a character model, a corpus)."""
    from .formats import is_hdf5

    out, src = os.path.realpath(output), os.path.realpath(source)
    if os.path.isdir(src):
        folder = src if list_checkpoints(src) else os.path.realpath(run_checkpoints(src))
    else:
        folder = os.path.dirname(src) if os.path.basename(os.path.dirname(src)) == "checkpoints" else None
    why = ("it is the file this command reads" if out == src else
           f"it is in the checkpoints folder of {source}" if os.path.dirname(out) == folder else
           "it is an HDF5 file (a checkpoint, a part of one, a character model or a corpus)" if is_hdf5(out)
           else None)
    if why:
        raise InputError(f"cannot write {output}: {why}; choose another output")


def list_checkpoints(directory: str) -> list[str]:
    """Checkpoint files in ``directory``, oldest first (by round in the name)."""
    paths = [p for p in glob.glob(os.path.join(directory, "ckpt-*.h5")) if NAME_RE.match(os.path.basename(p))]
    return sorted(paths)


def _check_shapes(f: h5py.File, path: str) -> None:
    """Every dataset's shape and type against the header (vocabulary size, dimension, ranks,
    parts), before any is read: a crafted shape is one line, not a huge allocation."""
    check_stored(f, path, "checkpoint")
    for name in (D_WORDS, D_COUNTS, D_W_IN, D_W_OUT, D_RNG, D_METRICS):
        if name not in f:
            raise InputError(f"{path} is damaged: dataset /{name} is missing")
    vocab = int(f[D_WORDS].shape[0]) if f[D_WORDS].ndim == 1 else -1
    config = json.loads(_str(f.attrs[A_CONFIG]))
    dim = int(config.get("dim", f[D_W_OUT].shape[-1] if f[D_W_OUT].ndim else 0))
    parts = json.loads(_str(f.attrs[A_PARTS])) if A_PARTS in f.attrs else []
    world = int(json.loads(_str(f.attrs[A_PROGRESS])).get("world_size", 0))
    rows_in = vocab + (int(config.get("buckets", 0)) if config.get("subwords") else 0)
    if parts:
        matrices = (((-(-vocab // len(parts)), len(parts), dim),) * 2)
    else:
        matrices = (((rows_in if f[D_W_IN].shape[:1] == (rows_in,) else vocab), dim), (vocab, dim))
    for name, expected, kinds in ((D_WORDS, (None,), "O"), (D_COUNTS, (vocab,), "iu"),
                                  (D_W_IN, matrices[0], "f"), (D_W_OUT, matrices[1], "f"),
                                  (D_RNG, (world, None), "u"), (D_METRICS, (), "O")):
        check_shape(path, name, f[name].shape, expected, kinds, f[name].dtype)


def load(path: str, *, verify: bool = True, params: bool = True) -> Checkpoint:
    """Read a checkpoint, checking its seal, format, version and (with ``verify``) the
    content checksum. Opens read-only, so it works while a run is writing newer
    checkpoints. A checkpoint without a seal (written before mpidwe had one) is still read,
    but HDF5 is then not protected from its damage. A sharded checkpoint's parts are
    checked one at a time (each part's seal and checksum); ``params=False`` leaves the
    matrices unread (None), for a model larger than this process may hold."""
    if not os.path.exists(path):
        raise InputError(f"checkpoint not found: {path}")
    check_seal(path, "checkpoint")      # from the raw bytes, before HDF5 parses anything
    try:
        f = h5py.File(path, "r", locking=False)
    except OSError:
        raise unreadable(path, "checkpoint") from None
    try:
        with f:
            version = check_format(f.attrs, path, FORMAT, FORMAT_VERSION, "checkpoint", READ_VERSIONS)
            _check_shapes(f, path)
            if verify and version >= 2 and content_sha256(f) != _str(f.attrs[A_CONTENT]):
                raise InputError(f"{path} is damaged: content checksum mismatch")
            parts = json.loads(_str(f.attrs[A_PARTS])) if A_PARTS in f.attrs else []
            if parts and parts_sha256(parts) != _str(f.attrs[A_CHECKSUM]):
                raise InputError(f"{path} is damaged: parameter checksum mismatch")
            words = [_str(w) for w in f[D_WORDS][:]]
            progress = Progress(**json.loads(_str(f.attrs[A_PROGRESS])))
            if parts:
                check_parts(f, path, parts, progress.round, len(words), int(f[D_W_IN].shape[-1]))
                w_in, w_out = _load_parts(path, parts, len(words), verify, params)
            else:
                w_in, w_out = (f[D_W_IN][:], f[D_W_OUT][:]) if params else (None, None)
            if verify and not params and not parts and streamed_sha256(f, (D_W_IN, D_W_OUT)) != _str(f.attrs[A_CHECKSUM]):
                raise InputError(f"{path} is damaged: parameter checksum mismatch")
            if verify and params and not parts and params_sha256(w_in, w_out) != _str(f.attrs[A_CHECKSUM]):
                raise InputError(f"{path} is damaged: parameter checksum mismatch")
            if vocab_sha256(words) != _str(f.attrs[A_VOCAB_SHA]):
                raise InputError(f"{path} is damaged: vocabulary checksum mismatch")
            metrics_raw = f[D_METRICS][()]
            state = TrainingState(w_in=w_in, w_out=w_out, progress=progress,
                                  rng_state=f[D_RNG][:], history=json.loads(_str(metrics_raw)))
            return Checkpoint(
                state=state, words=words, counts=f[D_COUNTS][:],
                config=json.loads(_str(f.attrs[A_CONFIG])), corpus_id=_str(f.attrs[A_CORPUS_ID]),
                corpus_path=_str(f.attrs[A_CORPUS_PATH]), path=path,
                created=_str(f.attrs[A_CREATED]), tool_version=_str(f.attrs[A_TOOL_VERSION]),
                complete=bool(f.attrs.get(A_COMPLETE, False)), parts=parts,
                format_version=version)
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise InputError(f"{path} is damaged: {e}") from None


def _load_parts(path: str, parts: list[dict], vocab: int, verify: bool, params: bool):
    """A sharded checkpoint's matrices, joined from its part files (each checked, its
    checksum with ``verify``); (None, None) without ``params``."""
    world, dim = len(parts), int(parts[0]["dim"])
    w_in, w_out = (np.empty((vocab, dim), dtype=np.float32) for _ in range(2)) if params else (None, None)
    for r, part in enumerate(parts if verify or params else []):
        a, b = load_part(os.path.dirname(path), part, verify)
        if params:
            w_in[r::world], w_out[r::world] = a, b
    return w_in, w_out


# ------------------------------------------------------------ the character generator's place
def char_model_path(ckpt_path: str) -> str:
    """Where the character generator fitted to a checkpoint lives: beside it,
    ``ckpt-NNNNNNNNN.chars.h5`` (which list_checkpoints does not count as a checkpoint; the
    file itself: io/charfile.py)."""
    base = os.path.basename(ckpt_path)
    stem = base[:-3] if base.endswith(".h5") else base
    return os.path.join(os.path.dirname(os.path.abspath(ckpt_path)), stem + ".chars.h5")


def latest_valid(directory: str, warn=None, params: bool = True) -> Checkpoint | None:
    """The newest checkpoint in ``directory`` that loads and verifies; damaged ones are
    skipped with a warning. ``params=False``: as :func:`load`."""
    for path in reversed(list_checkpoints(directory)):
        try:
            return load(path, params=params)
        except InputError as e:
            if warn:
                warn(f"warning: skipping damaged checkpoint: {e}")
    return None
