"""Name the rank that died without a word.

A rank killed by SIGKILL (``kill -9``, the out-of-memory killer, a batch system's hard
limit) cannot say anything, and the MPI launcher then kills the other ranks just as
silently: MPICH reports only a PID, Open MPI a node. So each rank of a multi-rank job starts
a tiny watcher process (:func:`start`), which holds the reading end of a pipe from its rank:

- a rank that ends through Python (success, a clean error, SIGTERM) writes ``ok`` at exit
  (``atexit``) and its watcher says nothing;
- a rank that aborts the job on purpose (:func:`claim`, called by ``Comm.abort`` after its
  one-line error) first takes the marker file, so no watcher blames anyone else;
- a rank that vanishes closes the pipe without ``ok``: its watcher tries to create the marker
  file (``O_CREAT | O_EXCL``, in the run directory, so on a shared filesystem exactly one
  watcher of the job wins) and, if it wins, prints one line naming the rank, its PID and host.

The rank that died first wins the race: the launcher needs milliseconds to notice and kill
the others, while the first watcher sees its pipe close at once. Where the marker folder is
not shared between hosts, more than one line may appear; the first one names the rank that
died first. The marker is removed when the next run in the same directory starts.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys

MARKER = ".mpidwe-rank-died"

# The watcher: no imports beyond os/sys, so it costs a few milliseconds and a few MB.
_WATCHER = r"""
import os, sys
who, marker, hint = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    said = sys.stdin.buffer.read()
except BaseException:
    said = b""
if said.endswith(b"ok"):
    sys.exit(0)
try:
    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, who.encode() + b"\n")
    os.close(fd)
except FileExistsError:
    sys.exit(0)          # another rank already explained the end of the job
except OSError:
    pass                 # no shared folder to agree in: say it anyway
sys.stderr.write("mpidwe: error: %s died without an error message (killed by a signal: kill -9, "
                 "the out-of-memory killer or the batch system's limit); the job is ended%s\n" % (who, hint))
sys.stderr.flush()
"""

_active: "Watcher | None" = None


class Watcher:
    def __init__(self, proc: subprocess.Popen, marker: str):
        self.proc, self.marker = proc, marker

    def disarm(self) -> None:
        """This rank ends through Python: its watcher stays quiet."""
        try:
            self.proc.stdin.write(b"ok")
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass


def marker_path(folder: str) -> str:
    return os.path.join(folder, MARKER)


def start(folder: str, rank: int, size: int, *, hint: str = "", name: str = MARKER) -> Watcher | None:
    """Watch this rank (every rank of a job of ``size`` > 1 calls it, after rank 0 has
    removed an old marker with :func:`clear`). ``name``: the marker's file name in
    ``folder`` (a folder that several jobs share, as a corpus's, needs one per output)."""
    global _active
    if size <= 1 or _active is not None:
        return _active
    who = f"rank {rank} of {size} (pid {os.getpid()} on {socket.gethostname()})"
    marker = os.path.join(folder, name)
    try:
        proc = subprocess.Popen([sys.executable, "-S", "-c", _WATCHER, who, marker, hint],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True,
                                start_new_session=True)   # outside the launcher's process group
    except OSError:
        return None     # no watcher is no reason to fail a job
    _active = Watcher(proc, marker)
    atexit.register(_active.disarm)
    return _active


def stand_down() -> None:
    """This rank ends because MPI failed under it (most likely a peer died): it neither
    blames anyone nor claims the end of the job, so the dead peer's watcher names it. A
    later :func:`claim` does nothing."""
    global _active
    w, _active = _active, None
    if w is not None:
        w.disarm()


def disarm() -> None:
    """This rank ends now without Python's exit handlers (``os._exit``): keep its watcher quiet."""
    if _active is not None:
        _active.disarm()


def claim() -> None:
    """This rank is about to abort the job after saying why: the others' watchers must not
    blame a rank the launcher kills in the clean-up."""
    w = _active
    if w is None:
        return
    try:
        os.close(os.open(w.marker, os.O_CREAT | os.O_WRONLY, 0o644))
    except OSError:
        pass
    w.disarm()


def clear(folder: str, name: str = MARKER) -> None:
    """Rank 0, before the ranks start their watchers: the marker of an earlier job goes."""
    try:
        os.unlink(os.path.join(folder, name))
    except FileNotFoundError:
        pass
