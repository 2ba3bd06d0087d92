"""``python -m mpidwe.preprocess``: raw text -> versioned HDF5 corpus, over P ranks.

1. rank 0 checks the inputs, sizes them and splits their bytes into P ranges at
   whitespace (text.find_boundaries); everyone gets the same plan;
2. pass 1: every rank counts the tokens of its range; counts are summed on rank 0, which
   fixes the vocabulary (count descending, ties by word) and broadcasts it;
3. pass 2: every rank maps its tokens to ids and streams them, with its line starts,
   into its own part file (h5py here has no parallel HDF5);
4. rank 0 stitches the parts, in rank order, into a temporary file, cuts lines into
   sentences, fsyncs and renames it into place. The result does not depend on P.

Temporary files (part files, the stitched corpus before its rename, the copy of standard
input) sit beside the output, named ``.OUT.KIND-TAG`` with TAG = rank 0's host, pid and
start time. A run removes its own on any failure and on SIGTERM/SIGINT (exit 128 + signal),
and at its start those that killed runs to the same output left (``_remove_leftovers``).
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import itertools
import json
import os
import re
import shutil
import signal
import socket
import sys
import time

import numpy as np

from . import __version__
from . import corpus as corpus_io
from .comm import Comm, run_main
from .config import PreprocessConfig, parse_command, to_json
from .errors import InputError
from .fsutil import DirLock, fsync_dir
from .text import ScanStats, TextOptions, describe_source, find_boundaries, scan_rank

PROG = "python -m mpidwe.preprocess"
FLUSH_TOKENS = 1 << 20


def build_vocab(counts: dict[bytes, int], min_count: int, max_vocab: int | None):
    """Kept words (count >= min_count, at most max_vocab), count descending, ties by word
    (UTF-8 byte order, which is code point order)."""
    kept = sorted(((w, c) for w, c in counts.items() if c >= min_count), key=lambda wc: (-wc[1], wc[0]))
    if max_vocab is not None:
        kept = kept[:max_vocab]
    return [w for w, _ in kept], np.array([c for _, c in kept], dtype=np.int64)


def count_tokens(sources, lo, hi, opts) -> tuple[collections.Counter, ScanStats]:
    counter: collections.Counter = collections.Counter()
    stats = ScanStats()
    for toks, _ in scan_rank(sources, lo, hi, opts, stats):
        counter.update(toks)
    return counter, stats


def merge_counts(gathered) -> tuple[collections.Counter, ScanStats]:
    """The token counts and scan statistics of all ranks, summed in rank order."""
    total: collections.Counter = collections.Counter()
    totals = ScanStats()
    for c, s in gathered:
        total.update(c)
        totals.raw_tokens += s.raw_tokens
        totals.invalid_utf8 += s.invalid_utf8
        totals.doc_lines += s.doc_lines
    return total, totals


def write_ids(sources, lo, hi, opts, lookup: dict[bytes, int], part: corpus_io.PartWriter) -> int:
    """Pass 2: this rank's token ids and line starts into its part file. Returns tokens kept."""
    stats = ScanStats()
    ids: list[np.ndarray] = []
    lines: list[int] = []
    pending, kept = 0, 0
    get = lookup.get
    for toks, newline in scan_rank(sources, lo, hi, opts, stats):
        if toks:
            arr = np.fromiter(map(get, toks, itertools.repeat(-1, len(toks))), dtype=np.int64, count=len(toks))
            arr = arr[arr >= 0]
            ids.append(arr)
            pending += len(arr)
            kept += len(arr)
        if newline:
            lines.append(kept)  # the next line starts at this kept-token index
        if pending >= FLUSH_TOKENS:
            part.append_tokens(np.concatenate(ids))
            part.append_line_starts(np.array(lines, dtype=np.int64))
            ids, lines, pending = [], [], 0
    if ids:
        part.append_tokens(np.concatenate(ids))
    part.append_line_starts(np.array(lines, dtype=np.int64))
    return kept


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _check_output(cfg: PreprocessConfig) -> None:
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
    if os.path.exists(out) and not cfg.force:
        raise InputError(f"output exists: {out} (use --force to overwrite)")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError(f"output directory does not exist: {parent}")
    if not os.access(parent, os.W_OK):
        raise InputError(f"output directory is not writable: {parent}")


# ------------------------------------------------------------------ temporary files
OTHER_HOST_STALE_S = 24 * 3600   # a file of another host untouched this long is a leftover


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def _tmp_path(output: str, kind: str, tag: str) -> str:
    """``.OUT.KIND-TAG`` beside the output; KIND is partN, tmp or stdin."""
    head, name = os.path.split(os.path.abspath(output))
    return os.path.join(head, f".{name}.{kind}-{tag}" + (".h5" if kind.startswith("part") else ""))


def _leftover_writer(output: str, name: str):
    """(host or None, pid, time or None) of the run that made ``name``, if it is a
    temporary file of a preprocess run to ``output``; None otherwise. Besides today's names,
    those of earlier versions: ``.OUT.partN-PID-TIME.h5`` and ``OUT.tmp-PID-TIME`` (no host),
    and atomic_path's ``.OUT.tmp-PID``."""
    base = os.path.basename(output)
    m = re.fullmatch(r"\.?" + re.escape(base) + r"\.(part\d+|tmp|stdin)-(.+?)(\.h5)?", name)
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
    (a stitch or a pass never leaves its files alone that long). A file that survives is
    harmless: every run writes under its own tag."""
    if host is None or host == _host():
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


def _remove_leftovers(cfg: PreprocessConfig) -> list[str]:
    """Remove the temporary files that killed runs to ``cfg.output`` left beside it (never
    an input, whatever its name). Returns their names."""
    head = os.path.dirname(os.path.abspath(cfg.output))
    inputs = {os.path.realpath(p) for p in cfg.inputs if p != "-"}
    removed = []
    for name in sorted(os.listdir(head)):
        writer = _leftover_writer(cfg.output, name)
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


def _remove(paths) -> None:
    """Delete what exists of ``paths`` (None entries skipped); never raises, as it runs while
    a run ends or fails, and must not hide why."""
    for p in paths:
        if p:
            with contextlib.suppress(OSError):
                os.unlink(p)


def _start(cfg: PreprocessConfig, log) -> str:
    """Rank 0, before anything is written: check the output, remove what killed runs to it
    left, and return this run's tag."""
    _check_output(cfg)
    removed = _remove_leftovers(cfg)
    if removed and log:
        log(f"note: removed {len(removed)} temporary file(s) left by killed runs to {cfg.output}: "
            + ", ".join(removed[:4]) + (", ..." if len(removed) > 4 else ""))
    return f"{_host()}-{os.getpid()}-{int(time.time())}"


def _spool_stdin(path: str) -> str:
    """Standard input reaches rank 0 only: copy it to ``path``, a file beside the output
    (``run`` removes it, whatever happens)."""
    with open(path, "xb") as fh:
        shutil.copyfileobj(sys.stdin.buffer, fh, 1 << 20)
    return path


def _lock_output(cfg: PreprocessConfig, log) -> DirLock | None:
    """Rank 0 holds ``.OUT.lock`` beside the output for the whole run, so a second run to the
    same output is refused instead of one silently overwriting the other (its "exists"
    check only sees the output once it is finished). No folder: _start says so."""
    folder = os.path.dirname(os.path.abspath(cfg.output))
    if not os.path.isdir(folder):
        return None
    lock = DirLock(folder, "preprocess run", name=f".{os.path.basename(cfg.output)}.lock")
    lock.target = cfg.output
    return lock.acquire(warn=log)


def run(cfg: PreprocessConfig, comm: Comm, *, log=print) -> dict:
    """Preprocess ``cfg.inputs`` into ``cfg.output`` on every rank of ``comm``."""
    lock = comm.on_root(_lock_output, cfg, log, broadcast=False)
    try:
        return _locked_run(cfg, comm, log)
    finally:
        if lock is not None:
            lock.release()


def _locked_run(cfg: PreprocessConfig, comm: Comm, log) -> dict:
    t0 = time.perf_counter()
    tag = comm.on_root(_start, cfg, log)
    part_paths = [_tmp_path(cfg.output, f"part{r}", tag) for r in range(comm.size)]
    part_path = part_paths[comm.rank]
    tmp = _tmp_path(cfg.output, "tmp", tag)
    spool = _tmp_path(cfg.output, "stdin", tag) if comm.is_root and "-" in cfg.inputs else None
    try:
        summary = _run(cfg, comm, t0, part_paths, tmp, spool)
    except BaseException:
        # A failure, or SIGTERM/SIGINT (Interrupted): the job ends on every rank, and a rank
        # may be killed by the abort before it cleans up, so each rank removes every
        # temporary file of this run that it can see, the other ranks' part files included.
        _remove(part_paths + [tmp, spool])
        raise
    finally:
        _remove([part_path, spool])
    if summary is not None and log:
        log(f"wrote {summary['output']}: {summary['vocab']:,} words, {summary['kept_tokens']:,} of "
            f"{summary['raw_tokens']:,} tokens kept, {summary['sentences']:,} sentences "
            f"({summary['ranks']} rank(s), {summary['seconds']} s)")
        if summary["invalid_utf8_sequences"]:
            log(f"note: {summary['invalid_utf8_sequences']} invalid UTF-8 sequence(s) replaced by U+FFFD")
    return summary or {}


def _run(cfg: PreprocessConfig, comm: Comm, t0: float, part_paths: list[str], tmp: str,
         spool: str | None) -> dict | None:
    """The two passes and the stitch; the summary on rank 0, None elsewhere."""
    def plan():
        paths = list(cfg.inputs)
        if "-" in paths:
            paths[paths.index("-")] = _spool_stdin(spool)
        sources = [describe_source(p) for p in paths]
        if sum(s.size for s in sources) == 0:
            raise InputError("input is empty (0 bytes)")
        return sources, find_boundaries(sources, comm.size)

    sources, bounds = comm.on_root(plan)
    opts = TextOptions(cfg.normalize, cfg.lowercase, cfg.strip_doc_tags, cfg.block_bytes)
    lo, hi = bounds[comm.rank], bounds[comm.rank + 1]

    # pass 1: count
    counter, stats = comm.agree(count_tokens, sources, lo, hi, opts)
    gathered = comm.gather((counter, stats))
    del counter
    total, totals = merge_counts(gathered) if comm.is_root else (None, None)
    del gathered

    def fix_vocab(total, totals):
        if totals.raw_tokens == 0:
            raise InputError("input has no tokens (only blanks, tags or nothing)")
        words, counts = build_vocab(total, cfg.min_count, cfg.max_vocab)
        if not words:
            raise InputError(f"no word occurs at least --min-count={cfg.min_count} times "
                             f"({totals.raw_tokens} tokens, {len(total)} distinct)")
        return words, counts

    words, counts = comm.on_root(fix_vocab, total, totals)
    raw_types = None if total is None else len(total)  # rank 0's, for its summary
    del total
    lookup = {w: i for i, w in enumerate(words)}

    # pass 2: ids into per-rank part files
    def write_part():
        part = corpus_io.PartWriter(part_paths[comm.rank])
        try:
            write_ids(sources, lo, hi, opts, lookup, part)
        finally:
            part.close()

    comm.agree(write_part)

    def stitch():
        try:
            attrs = {
                corpus_io.A_TOOL_VERSION: __version__,
                corpus_io.A_CREATED: datetime.datetime.now(datetime.timezone.utc).isoformat(),
                corpus_io.A_OPTIONS: to_json(cfg),
                corpus_io.A_INPUTS: json.dumps([
                    {"path": p, "bytes": s.file_bytes, "uncompressed_bytes": s.size,
                     "compression": s.compression}
                    for p, s in zip(cfg.inputs, sources)]),
                corpus_io.A_RAW_TOKENS: totals.raw_tokens,
                corpus_io.A_KEPT_TOKENS: int(counts.sum()),
                corpus_io.A_INVALID_UTF8: totals.invalid_utf8,
                corpus_io.A_DOC_LINES: totals.doc_lines,
                corpus_io.A_RANKS: comm.size,
            }
            corpus_id = corpus_io.stitch_parts(
                part_paths, tmp, words=[w.decode("utf-8") for w in words], counts=counts,
                attrs=attrs, sentence_length=cfg.sentence_length)
            os.replace(tmp, cfg.output)
            fsync_dir(cfg.output)
        finally:
            _remove([tmp])
        with corpus_io.Corpus(cfg.output) as c:
            n_sent = c.n_sentences
        return {
            "output": cfg.output, "ranks": comm.size, "raw_tokens": totals.raw_tokens,
            "kept_tokens": int(counts.sum()), "raw_types": raw_types, "vocab": len(words),
            "sentences": n_sent, "invalid_utf8_sequences": totals.invalid_utf8,
            "doc_tag_lines_dropped": totals.doc_lines, "corpus_id": corpus_id,
            "seconds": round(time.perf_counter() - t0, 2),
        }

    return comm.on_root(stitch, broadcast=False)


# ------------------------------------------------------------------------- signals
class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException (like KeyboardInterrupt), so that no
    ``except Exception`` on the way, nor ``Comm.agree``, takes it for a failure of the step
    it interrupted: it unwinds ``run`` (which removes the run's temporary files) up to
    ``_body``."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum     # what the shell reports for a process killed by it
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class _Signals:
    """Turns the first SIGTERM or SIGINT into ``Interrupted`` in the main thread; later ones
    are ignored while the run cleans up, and all are once the output is in place.

    Python runs the handler between two bytecodes of whatever the main thread executes,
    and two places there cannot take an exception: h5py runs Python callbacks for HDF5
    (type conversion, logging) and turns an exception in them into an unrelated HDF5 error
    (seen: "TypeError: Operation not defined for data type class", exit 1), and a weakref
    callback or ``__del__`` (h5py releasing an object) only prints it and goes on. So the
    handler does not raise while any h5py frame is on the stack, and an exception that went
    unraisable is noted; either way the process signals itself again 10 ms later, until
    the handler lands in ordinary code."""

    SIGNALS = ("SIGTERM", "SIGINT")
    RETRY_S = 0.01

    def __init__(self):
        import h5py

        self.armed = True
        self.got = self.fired = None    # a signal arrived / was raised as Interrupted
        self.comm: Comm | None = None   # set once the job's communicator exists
        self._old, self._again, self._pending = {}, None, False
        self._h5py = os.path.dirname(os.path.abspath(h5py.__file__)) + os.sep

    def __enter__(self):
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                sig = getattr(signal, name)
                self._old[sig] = signal.signal(sig, self._handle)
        if self._old:
            self._old_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def _handle(self, signum, frame):
        if not self.armed or self.fired is not None:
            return
        self.got = self.got or signum
        f = frame
        while f is not None:
            if f.f_code.co_filename.startswith(self._h5py):
                self._later(signum)
                return
            f = f.f_back
        self.fired = signum
        raise Interrupted(signum)

    def _later(self, signum: int) -> None:
        """The signal again in RETRY_S (from a thread: signalled from the handler or the
        hook, Python would run the handler at once, in the same place)."""
        import threading

        if not self._pending:
            self._pending = True
            self._again = threading.Timer(self.RETRY_S, self._signal_again, (signum,))
            self._again.daemon = True
            self._again.start()

    def _signal_again(self, signum: int) -> None:
        self._pending = False   # first: the handler may run, and defer again, before kill returns
        os.kill(os.getpid(), signum)

    def _unraisable(self, u):
        if isinstance(u.exc_value, Interrupted):
            self.fired = None
            self._later(u.exc_value.signum)
            return
        self._old_hook(u)

    def __exit__(self, *exc):
        if self._again is not None:
            self._again.cancel()
            self._again.join()
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self._old:
            sys.unraisablehook = self._old_hook


# A launcher (mpiexec, srun, scancel) signals every rank at once: rank 0 reports and aborts
# the job right away; any other rank waits this long first, so that it only reports (and
# aborts) when it alone got the signal, and the operator sees one line either way.
OTHER_RANK_REPORT_DELAY_S = 2.0


def _interrupted(e: Interrupted, comm: Comm | None) -> int:
    msg = f"{e}; this run's temporary files were removed"
    if comm is None or comm.size == 1:
        # comm is None while MPI starts: then every rank of a job has the signal; rank 0 says so
        if comm is not None or os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == "0":
            print(f"{PROG}: error: {msg}", file=sys.stderr, flush=True)
        return e.exit_code
    if not comm.is_root:
        time.sleep(OTHER_RANK_REPORT_DELAY_S)
    where = "" if comm.is_root else f" (rank {comm.rank})"
    print(f"{PROG}: error{where}: {msg}", file=sys.stderr, flush=True)
    comm.abort(e.exit_code)
    return e.exit_code


def _body(argv, comm: Comm, signals: _Signals) -> int:
    signals.comm = comm
    try:
        cfg = comm.agree(parse_command, PreprocessConfig, argv, prog=PROG,
                         description="Turn raw text into an mpidwe HDF5 corpus (vocabulary + token ids).")
        run(cfg, comm, log=print if comm.is_root else None)
    except Interrupted as e:
        return _interrupted(e, comm)
    except Exception:
        if signals.got is None:
            raise
        # a failure caused by the stop while the signal waited for h5py to return (another
        # rank removed the part file this one was creating): the stop is what to report
        return _interrupted(Interrupted(signals.got), comm)
    finally:
        signals.armed = False  # done (or stopping): a late signal changes nothing
    return 0


def main(argv=None) -> int:
    with _Signals() as signals:
        try:
            return run_main(PROG, lambda a, c: _body(a, c, signals), argv)
        except Interrupted as e:  # while MPI was starting: nothing was written yet
            return _interrupted(e, signals.comm)


if __name__ == "__main__":
    sys.exit(main())
