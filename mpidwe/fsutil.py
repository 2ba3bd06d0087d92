"""Crash-safe writes, the one way every mpidwe output file is written: a temporary name
beside the target, flush and fsync, ``os.replace`` over the target, fsync of the directory.
A crash at any moment leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import os
from typing import IO, Iterator


def fsync_path(path: str) -> None:
    """fsync a file or a directory by name."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """Make a rename of ``path`` durable by syncing the directory that holds it."""
    fsync_path(os.path.dirname(os.path.abspath(path)) or ".")


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path`` for a writer that opens files by name (h5py);
    when the block ends normally, the file is fsynced and renamed over ``path``."""
    head, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(head, f".{name}.tmp-{os.getpid()}")
    try:
        yield tmp
        fsync_path(tmp)
        os.replace(tmp, path)
        fsync_dir(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """``open(path, mode)`` that only replaces ``path`` once everything was written."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
