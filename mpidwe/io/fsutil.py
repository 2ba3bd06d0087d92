"""Crash-safe writes, the one way every mpidwe output file is written: a temporary name
beside the target, flush and fsync, ``os.replace`` over the target, fsync of the directory.
A crash at any moment leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import contextlib
import hashlib
import os
from typing import IO, Iterator


def reason(e: OSError) -> str:
    """One line for an OSError, also for h5py's, whose text spans lines and names errno."""
    import re

    if e.errno:
        return os.strerror(e.errno)
    m = re.search(r"error message = '([^']*)'", str(e)) or re.search(r"errno = (\d+)", str(e))
    if m:
        return os.strerror(int(m.group(1))) if m.group(1).isdigit() else m.group(1)
    return str(e).splitlines()[0] if str(e) else type(e).__name__


_DIGESTS: dict[tuple, str] = {}


def file_sha256(path: str, nbytes: int | None = None) -> str:
    """SHA-256 of a file's bytes (its first ``nbytes``: the part a reader took of a file that
    grew since), remembered for as long as its size and modification time stay the same."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, nbytes)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        left = st.st_size if nbytes is None else nbytes
        with open(path, "rb") as fh:
            while left > 0 and (block := fh.read(min(1 << 20, left))):
                h.update(block)
                left -= len(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


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


def write_target(path: str) -> str:
    """The file that a write to ``path`` replaces: a symlink's target (resolved, through every
    link), so that the rename of a new file replaces the target and the link stays a link."""
    return os.path.realpath(path) if os.path.islink(path) else path


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path`` (a symlink's target: ``write_target``) for a
    writer that opens files by name (h5py); when the block ends normally, the file is
    fsynced and renamed over it."""
    path = write_target(path)
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


class DirLock:
    """One writer per folder: ``DIR/.mpidwe.lock``, created with O_CREAT | O_EXCL, which is
    atomic on the shared filesystems clusters use (NFS v3+, Lustre, GPFS), unlike flock()
    on some NFS mounts. It holds the holder's host, pid, Slurm job id and start time, and a
    heartbeat thread touches it every ``beat`` seconds. A lock is stale, and taken over,
    when its holder is a dead process on this host, the same Slurm job (a requeued run), or
    silent for ``stale_after`` seconds (a node that died)."""

    NAME = ".mpidwe.lock"

    def __init__(self, directory: str, what: str, *, name: str = NAME, beat: float = 30.0,
                 stale_after: float = 300.0):
        import socket

        self.path = os.path.join(directory, name)
        self.target = None           # what the message names as locked (default: the folder)
        self.what, self.beat, self.stale_after = what, beat, stale_after
        self.me = {"host": socket.gethostname(), "pid": os.getpid(),
                   "slurm_job": os.environ.get("SLURM_JOB_ID", ""), "since": _now()}
        self._stop = None

    def acquire(self, warn=None) -> "DirLock":
        import json
        import threading

        from ..core.errors import InputError

        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                why = self._stale(holder)
                if why is None:
                    raise InputError(
                        f"{self.target or os.path.dirname(self.path)} is in use by another {self.what} (host "
                        f"{holder.get('host', '?')}, pid {holder.get('pid', '?')}, since {holder.get('since', '?')}); "
                        f"wait for it, or if it is gone remove {self.path}") from None
                if warn:
                    warn(f"warning: taking over the lock of {os.path.dirname(self.path)}: {why}")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(self.me))
                fh.flush()
                os.fsync(fh.fileno())
            self._stop = threading.Event()
            threading.Thread(target=self._heartbeat, name="mpidwe-lock", daemon=True).start()
            return self
        raise InputError(f"could not take the lock {self.path}: another process keeps re-creating it")

    def release(self) -> None:
        if self._stop is None:
            return
        self._stop.set()
        if self._holder().get("pid") == self.me["pid"] and self._holder().get("host") == self.me["host"]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self._stop = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.beat):
            with contextlib.suppress(OSError):
                os.utime(self.path)

    def _holder(self) -> dict:
        import json

        try:
            with open(self.path, encoding="utf-8") as fh:
                return json.loads(fh.read() or "{}")
        except (OSError, ValueError):
            return {}

    def _stale(self, holder: dict) -> str | None:
        """Why the lock can be taken over, or None while its holder may be alive."""
        import time

        if holder.get("host") == self.me["host"] and isinstance(holder.get("pid"), int):
            try:
                os.kill(holder["pid"], 0)
            except ProcessLookupError:
                return f"its holder (pid {holder['pid']} on this host) is gone"
            except PermissionError:
                pass
        if holder.get("slurm_job") and holder.get("slurm_job") == self.me["slurm_job"]:
            return f"it belongs to an earlier run of this Slurm job ({self.me['slurm_job']})"
        try:
            age = time.time() - os.stat(self.path).st_mtime
        except FileNotFoundError:
            return "it is gone"
        if age > self.stale_after:
            return f"its holder has not touched it for {age:.0f} s"
        return None


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def remove_leftovers(directory: str) -> list[str]:
    """Delete the temporary files atomic_path left in ``directory`` when a writer was
    killed (``.NAME.tmp-PID``). Only call it while holding the folder's DirLock, so no
    live writer's file is taken."""
    import re

    pattern = re.compile(r"^\..+\.tmp-\d+$")
    removed = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    for name in names:
        if pattern.match(name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))
                removed.append(name)
    return removed
