"""The output of a run: the checks before anything is written, the lock that keeps a second
run to the same output away, the configuration that grows a corpus (``--append``), and a
failed HDF5 write as one line."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from ..core.config import PreprocessConfig
from ..core.errors import InputError
from ..parallel import deathwatch
from ..io import corpus as corpus_io
from ..io.fsutil import DirLock, file_sha256, reason
from .tempfiles import host_name, remove_leftovers


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def check_output(cfg: PreprocessConfig) -> None:
    out = cfg.output
    # before anything else, --force included: the rename at the end would replace the text
    # by its own corpus. Real paths catch another spelling and a symlink on either side,
    # samefile a hard link.
    out_real = os.path.realpath(out)
    for p in cfg.inputs:
        if p != "-" and (os.path.realpath(p) == out_real or _same_file(p, out)):
            raise InputError(f"output {out} is also an input ({p}); choose another --output")
    if os.path.isdir(out):
        raise InputError(f"output is a directory: {out}")
    if os.path.exists(out) and not cfg.force and not cfg.append:
        raise InputError(f"output exists: {out} (use --force to overwrite)")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError(f"output directory does not exist: {parent}")
    if not os.access(parent, os.W_OK):
        raise InputError(f"output directory is not writable: {parent}")


def died_marker(cfg: PreprocessConfig) -> str:
    """The name, beside the output, of the file the watcher of a rank killed by a signal
    claims (parallel/deathwatch.py): one per output, so runs to other outputs are not confused."""
    return f".{os.path.basename(cfg.output)}.rank-died"


def start_run(cfg: PreprocessConfig, log) -> str:
    """Rank 0, before anything is written: check the output, remove what killed runs to it
    left (their rank-died marker too), and return this run's tag."""
    check_output(cfg)
    deathwatch.clear(os.path.dirname(os.path.abspath(cfg.output)), died_marker(cfg))
    removed = remove_leftovers(cfg.output, cfg.inputs)
    if removed and log:
        log(f"note: removed {len(removed)} temporary file(s) left by killed runs to {cfg.output}: "
            + ", ".join(removed[:4]) + (", ..." if len(removed) > 4 else ""))
    return f"{host_name()}-{os.getpid()}-{int(time.time())}"


def lock_output(cfg: PreprocessConfig, log) -> DirLock | None:
    """Rank 0 holds ``.OUT.lock`` beside the output for the whole run, so a second run to the
    same output is refused instead of one silently overwriting the other (its "exists"
    check only sees the output once it is finished). No folder: start_run says so. A lock
    that cannot be written (a full disk) is one line, and no lock file is left."""
    folder = os.path.dirname(os.path.abspath(cfg.output))
    if not os.path.isdir(folder):
        return None
    lock = DirLock(folder, "preprocess run", name=f".{os.path.basename(cfg.output)}.lock")
    lock.target = cfg.output
    try:
        return lock.acquire(warn=log)
    except OSError as e:
        # O_EXCL created it and the write of its holder failed: it is ours, half written
        with contextlib.suppress(OSError):
            if os.path.getsize(lock.path) == 0 or lock._holder().get("pid") == os.getpid():
                os.unlink(lock.path)
        raise InputError(f"cannot write {lock.path}: {reason(e)}") from None


# what a corpus fixes for every text appended to it (stored in its options attribute)
INHERITED_OPTIONS = ("normalize", "lowercase", "strip_doc_tags", "sentence_length", "min_count", "max_vocab",
                     "max_word_bytes")


def appended_config(cfg: PreprocessConfig) -> PreprocessConfig:
    """Rank 0, ``--append``: the configuration that grows ``cfg.append`` in place, with the
    corpus's own text options and thresholds (a value given that differs from both the
    default and the corpus's is refused: the new text would be tokenised otherwise)."""
    path = cfg.append
    if not os.path.isfile(path):
        raise InputError(f"--append {path}: no such corpus" + (" (a folder)" if os.path.isdir(path) else ""))
    with corpus_io.Corpus(path) as c:
        stored = c.attrs.get(corpus_io.A_OPTIONS) or {}
        if not cfg.allow_duplicate:
            refuse_duplicates(cfg.inputs, c.segment_info, path)
    defaults = PreprocessConfig(inputs=cfg.inputs)
    keep = {}
    for name in INHERITED_OPTIONS:
        if name not in stored:
            continue
        given, default = getattr(cfg, name), getattr(defaults, name)
        if given != default and given != stored[name]:
            raise InputError(f"--append {path}: --{name.replace('_', '-')} is {given!r} but the corpus was made "
                             f"with {stored[name]!r}; appended text takes the corpus's own options")
        keep[name] = stored[name]
    return dataclasses.replace(cfg, output=path, force=False, **keep)


def refuse_duplicates(inputs, segments: list[dict], corpus: str) -> None:
    """Refuse an input the corpus already holds: one recorded with the same SHA-256, or, for
    an input recorded without one (older corpora), the same real path and size."""
    for p in inputs:
        if p == "-" or not os.path.isfile(p):
            continue                  # a stream has no identity; a missing file is said later
        digest, size, real = file_sha256(p), os.path.getsize(p), os.path.realpath(p)
        for k, seg in enumerate(segments):
            for old in seg.get("inputs") or []:
                same = (old.get("sha256") == digest if old.get("sha256")
                        else os.path.realpath(str(old.get("path", ""))) == real and old.get("bytes") == size)
                if same:
                    raise InputError(f"input {p} is already in {corpus}: segment {k} holds {old.get('path')} "
                                     f"with the same content ({size:,} bytes); append it again with "
                                     f"--allow-duplicate")


_H5_WRITE_FAILED = False   # an HDF5 write failed in this process: see cli.main()


def disk_full(what: str, e: Exception) -> InputError:
    """A failed write of an HDF5 file (a full disk, a quota) as one line. h5py reports it as
    OSError or RuntimeError ("Can't flush cache"), with HDF5's whole error record as text."""
    global _H5_WRITE_FAILED
    _H5_WRITE_FAILED = True
    why = reason(e) if isinstance(e, OSError) else reason(OSError(str(e)))
    return InputError(f"cannot write {what}: {why}")


def h5_write_failed() -> bool:
    """Whether an HDF5 write failed in this process (``disk_full`` made its error)."""
    return _H5_WRITE_FAILED
