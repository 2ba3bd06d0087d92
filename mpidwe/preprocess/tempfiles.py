"""The temporary files of a run, and those that killed runs left.

A run's temporary files sit beside the output, named ``.OUT.KIND-TAG`` with TAG = rank 0's
host, pid and start time (``tmp_path``, ``TempPaths``). A run removes its own on any
failure and on SIGTERM/SIGINT, and at its start those that killed runs to the same output
left (``remove_leftovers``): only once their writer is known to be gone (``_why_stale``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import time

OTHER_HOST_STALE_S = 24 * 3600   # a file of another host untouched this long is a leftover


def host_name() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def tmp_path(output: str, kind: str, tag: str) -> str:
    """``.OUT.KIND-TAG`` beside the output; KIND is idsN (rank N's token ids between the passes),
    tmp, stdin, pipeN (a copy of input N, a stream) or plainN (input N decompressed); earlier
    versions also wrote partN (``_leftover_writer`` still recognises them)."""
    head, name = os.path.split(os.path.abspath(output))
    return os.path.join(head, f".{name}.{kind}-{tag}")


def _leftover_writer(output: str, name: str):
    """(host or None, pid, time or None) of the run that made ``name``, if it is a
    temporary file of a preprocess run to ``output``; None otherwise. Besides today's names,
    those of earlier versions: ``.OUT.partN-PID-TIME.h5`` and ``OUT.tmp-PID-TIME`` (no host),
    and atomic_path's ``.OUT.tmp-PID``."""
    base = os.path.basename(output)
    m = re.fullmatch(r"\.?" + re.escape(base) + r"\.(part\d+|tmp|stdin|pipe\d+|plain\d+|ids\d+)-(.+?)(\.h5)?", name)
    if m is None or (m.group(1).startswith("part") != bool(m.group(3))) or \
            (not name.startswith(".") and m.group(1) != "tmp"):
        return None
    rest = m.group(2)
    if (t := re.fullmatch(r"(?:(.+)-)?(\d+)-(\d+)", rest)) is not None:
        return t.group(1), int(t.group(2)), int(t.group(3))
    if m.group(1) == "tmp" and re.fullmatch(r"\d+", rest):
        return None, int(rest), None
    return None


def _process_start(pid: int) -> float | None:
    """When process ``pid`` of this host started (Linux /proc), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as fh:
            btime = next(int(ln.split()[1]) for ln in fh if ln.startswith(b"btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _why_stale(path: str, host: str | None, pid: int, made: int | None) -> str | None:
    """Why a temporary file can be removed, or None while the run that writes it may be alive.

    Without a lock on the output, another preprocess run to the same output may be running
    right now, so a file is only removed when its writer is known to be gone: the pid in its
    name (rank 0's; names without a host are taken to be of this host) is no process of this
    host, or is a process that started after the file was named (the pid was reused), or is
    this process, which is only starting its run. The processes of another host cannot be
    checked from here: its files are removed only once untouched for OTHER_HOST_STALE_S
    (a pass never leaves its files alone that long). A file that survives is
    harmless: every run writes under its own tag."""
    if host is None or host == host_name():
        if pid == os.getpid():
            return "written by an earlier run of this process"
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return f"pid {pid} is gone"
        except PermissionError:  # alive, another user's
            pass
        started = _process_start(pid)
        if made is not None and started is not None and started > made + 2:
            return f"pid {pid} is another process now"
        return None
    try:
        age = time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return None
    return f"untouched for {age / 3600:.0f} h" if age > OTHER_HOST_STALE_S else None


def remove_leftovers(output: str, inputs) -> list[str]:
    """Remove the temporary files that killed runs to ``output`` left beside it (never one of
    ``inputs``, whatever its name). Returns their names."""
    head = os.path.dirname(os.path.abspath(output))
    inputs = {os.path.realpath(p) for p in inputs if p != "-"}
    removed = []
    for name in sorted(os.listdir(head)):
        writer = _leftover_writer(output, name)
        path = os.path.join(head, name)
        if writer is None or os.path.realpath(path) in inputs or not os.path.isfile(path):
            continue
        if _why_stale(path, *writer) is not None:
            try:
                os.unlink(path)
            except OSError:  # gone meanwhile, or another user's: harmless, this run has its own tag
                continue
            removed.append(name)
    return removed


def remove_quietly(paths) -> None:
    """Delete what exists of ``paths`` (None entries skipped); never raises, as it runs while
    a run ends or fails, and must not hide why."""
    for p in paths:
        if p:
            with contextlib.suppress(OSError):
                os.unlink(p)


@dataclasses.dataclass(frozen=True)
class TempPaths:
    """The temporary files of one run, as every rank names them."""

    ids: list[str]       # rank r's raw token ids between the passes
    corpus: str          # the corpus before its rename
    spools: list[str]    # rank 0 only: copies of streams (one slot per input), then plain copies of inputs

    @classmethod
    def of_run(cls, output: str, inputs, tag: str, ranks: int, is_root: bool) -> "TempPaths":
        spools = [tmp_path(output, "stdin" if p == "-" else f"pipe{i}", tag) for i, p in enumerate(inputs)] \
            + [tmp_path(output, f"plain{i}", tag) for i in range(len(inputs))] if is_root else []
        return cls([tmp_path(output, f"ids{r}", tag) for r in range(ranks)], tmp_path(output, "tmp", tag), spools)

    def of_rank(self, rank: int) -> list[str]:
        """The files that ``rank`` writes (rank 0: with the spools)."""
        return [self.ids[rank]] + self.spools

    def every(self) -> list[str]:
        """Every file of the run this rank knows of (the other ranks' spools of ids included)."""
        return self.ids + [self.corpus] + self.spools
