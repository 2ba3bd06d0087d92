"""``python -m mpidwe.preprocess``: raw text -> versioned HDF5 corpus, over P ranks.

1. rank 0 checks the inputs, sizes them and splits their bytes into P ranges at
   whitespace (text.find_boundaries); everyone gets the same plan;
2. pass 1: every rank counts the tokens of its range; counts are summed on rank 0, which
   fixes the vocabulary (count descending, ties by word) and broadcasts it;
3. pass 2: every rank maps its tokens to ids and finds its line starts; an exclusive
   prefix sum of the ranks' kept tokens and sentence counts (the sentences cut lines every
   --sentence-length tokens, also across a rank boundary) places each rank's slice;
4. rank 0 creates the corpus under a temporary name with the token ids and sentence
   starts allocated; every rank writes its slices straight into the file's bytes (h5py
   here has no parallel HDF5, and needs none for this: the datasets are contiguous and
   their offsets known); rank 0 reads them back once for the corpus id, seals, fsyncs
   and renames the file into place. The result does not depend on P.

Temporary files (the raw token ids between the passes, the corpus before its rename,
the copy of standard input) sit beside the output, named ``.OUT.KIND-TAG`` with TAG = rank 0's host, pid and
start time. A run removes its own on any failure and on SIGTERM/SIGINT (exit 128 + signal),
and at its start those that killed runs to the same output left (``_remove_leftovers``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import itertools
import json
import os
import re
import signal
import socket
import stat
import sys
import time
from typing import Callable, Iterator

import numpy as np

from ..version import __version__
from ..io import corpus as corpus_io
from ..dist.comm import Comm, run_main
from ..core.config import PreprocessConfig, parse_command, to_json
from ..core.errors import InputError
from ..io.fsutil import DirLock, fsync_dir, reason
from ..io.text import (ScanStats, TextOptions, close_or_fail, describe_source, find_boundaries, scan_rank,
    write_or_fail)
from .scan import RankScan
from .tokens import TokenTable

PROG = "python -m mpidwe.preprocess"
FLUSH_TOKENS = 1 << 20
ENGINES = ("compiled", "python")   # run(engine=): numba kernels (default), or the readable reference


def build_vocab(counts: dict[bytes, int], min_count: int, max_vocab: int | None):
    """Kept words (count >= min_count, at most max_vocab), count descending, ties by word
    (UTF-8 byte order, which is code point order)."""
    kept = sorted(((w, c) for w, c in counts.items() if c >= min_count), key=lambda wc: (-wc[1], wc[0]))
    if max_vocab is not None:
        kept = kept[:max_vocab]
    return [w for w, _ in kept], np.array([c for _, c in kept], dtype=np.int64)


def hold_out(words: list[bytes], counts: np.ndarray, path: str):
    """The vocabulary without the words of the file ``path`` (whitespace-separated, UTF-8):
    their tokens are then dropped as a rare word's are."""
    try:
        with open(path, "rb") as fh:
            drop = set(fh.read().split())
    except OSError as e:
        raise InputError(f"cannot read --hold-out file {path}: {reason(e)}") from None
    keep = [i for i, w in enumerate(words) if w not in drop]
    return [words[i] for i in keep], counts[np.asarray(keep, dtype=np.int64)]


def grow_vocab(old_words: list[bytes], old_counts: np.ndarray, seen, min_count: int,
               max_vocab: int | None):
    """The vocabulary of a corpus grown by a new segment (``--append``). ``seen``: (word,
    count) of every distinct token of the new text. Old words keep their ids and gain the
    new counts (whatever those are); a word the corpus does not hold gets an id after them
    when its count *in the new text* reaches ``min_count`` (the old text's occurrences of a
    word below the threshold were dropped and never stored), count descending, ties by
    word, while ``max_vocab`` (the whole vocabulary's bound) leaves room."""
    index = {w: i for i, w in enumerate(old_words)}
    counts = np.asarray(old_counts, dtype=np.int64).copy()
    fresh = []
    for w, c in seen:
        i = index.get(w)
        if i is not None:
            counts[i] += int(c)
        elif c >= min_count:
            fresh.append((w, int(c)))
    fresh.sort(key=lambda wc: (-wc[1], wc[0]))
    if max_vocab is not None:
        fresh = fresh[:max(0, max_vocab - len(old_words))]
    return (list(old_words) + [w for w, _ in fresh],
            np.concatenate((counts, np.array([c for _, c in fresh], dtype=np.int64))))


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


@dataclasses.dataclass
class RankIds:
    """One rank's pass 2: how many tokens it keeps, its line starts (kept indices within its
    slice, ascending), and its final ids as a stream of int32 blocks (called once per write)."""
    kept: int
    line_starts: np.ndarray
    blocks: Callable[[], Iterator[np.ndarray]]


def final_ids(sources, lo, hi, opts, lookup: dict[bytes, int], spool: "IdSpool") -> RankIds:
    """Pass 2 of the Python engine: this rank's final ids (out-of-vocabulary tokens dropped)
    into ``spool``, and its line starts."""
    stats = ScanStats()
    lines: list[int] = []
    get = lookup.get
    for toks, newline in scan_rank(sources, lo, hi, opts, stats):
        if toks:
            arr = np.fromiter(map(get, toks, itertools.repeat(-1, len(toks))), dtype=np.int64, count=len(toks))
            spool.write(arr[arr >= 0].astype(np.int32))
        if newline:
            lines.append(spool.n)  # the next line starts at this kept-token index
    spool.close()
    return RankIds(spool.n, np.array(lines, dtype=np.int64), lambda: spool.chunks(FLUSH_TOKENS))


# ----------------------------------------------------------- the compiled path
class IdSpool:
    """One rank's raw token ids between its two passes: int32 in a file beside the output,
    so that pass 2 reads 4 bytes a token instead of decompressing and tokenizing again."""

    def __init__(self, path: str):
        self.path = path
        self.n = 0
        try:
            self._fh = open(path, "xb")
        except OSError as e:
            raise InputError(f"cannot write {path}: {reason(e)}") from None

    def write(self, ids: np.ndarray) -> None:
        write_or_fail(self._fh, memoryview(ids), self.path)
        self.n += len(ids)

    def close(self) -> None:
        if not self._fh.closed:
            close_or_fail(self._fh, self.path)

    def chunks(self, items: int):
        with open(self.path, "rb") as fh:
            while True:
                a = np.fromfile(fh, dtype=np.int32, count=items)
                if not len(a):
                    return
                yield a


def count_compiled(sources, lo, hi, opts, spool: IdSpool):
    """Pass 1 with the compiled tokenizer: raw token ids into ``spool``. Returns the
    RankScan (line ends, stats, sizes of unsized sources), the table of this rank's
    distinct tokens after lowercasing (with counts), and raw id -> id in that table."""
    scan = RankScan(opts, spool.write)
    scan.scan(sources, lo, hi)
    spool.close()
    table, raw_to_type = scan.canonical()
    return scan, table, raw_to_type


def merge_tables(gathered) -> tuple[TokenTable, ScanStats]:
    """The distinct tokens of all ranks with summed counts, and the summed statistics."""
    total = TokenTable()
    totals = ScanStats()
    for (arena, starts, lens, counts), s in gathered:
        ids = total.add_all(arena, starts, lens)
        total.counts[ids] += counts      # the ids of one rank's tokens are distinct
        totals.raw_tokens += s.raw_tokens
        totals.invalid_utf8 += s.invalid_utf8
        totals.doc_lines += s.doc_lines
    return total, totals


def build_vocab_from_table(table: TokenTable, min_count: int, max_vocab: int | None):
    """build_vocab over a TokenTable: the same words in the same order."""
    counts = table.counts[: len(table)]
    kept = np.flatnonzero(counts >= min_count)
    words = table.words(kept)
    by_word = sorted(range(len(kept)), key=words.__getitem__)
    order = np.asarray(by_word, dtype=np.int64)
    if len(order):
        order = order[np.argsort(-counts[kept[order]], kind="stable")]
    if max_vocab is not None:
        order = order[:max_vocab]
    return [words[i] for i in order.tolist()], counts[kept[order]].astype(np.int64)


def final_ids_compiled(spool: IdSpool, remap: np.ndarray, line_ends: np.ndarray) -> RankIds:
    """Pass 2 of the compiled engine over the spooled raw ids: ``remap`` gives each raw id's
    final id (-1: dropped). One read of the spool finds the kept count and the line starts
    (kept indices); the final ids are remapped again as they are written (a few ms per
    million tokens, and nothing held in memory)."""
    from ..kernels.tokenize import remap_and_count_lines

    base = kept = j = found = 0
    lines = np.empty(len(line_ends), dtype=np.int64)     # every chunk fills the next of its slots
    for raw in itertools.chain(spool.chunks(FLUSH_TOKENS), [np.zeros(0, dtype=np.int32)]):
        k, j, nl = remap_and_count_lines(raw, remap, line_ends, j, base, kept, lines[found:])
        found += nl
        base += len(raw)
        kept += k

    def blocks():
        none = np.zeros(0, dtype=np.int64)
        for raw in spool.chunks(FLUSH_TOKENS):
            k, _, _ = remap_and_count_lines(raw, remap, none, 0, 0, 0, none)
            yield raw[:k]

    return RankIds(kept, lines[:found], blocks)


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
    if os.path.exists(out) and not cfg.force and not cfg.append:
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


def _is_stream(path: str) -> bool:
    """A pipe, FIFO, socket or device (``<(zcat ...)``, /dev/stdin): it can be read once,
    from the start, and has no size; read like standard input."""
    try:
        mode = os.stat(path).st_mode
    except OSError:          # describe_source says what is wrong with it
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _spool_stream(fh, path: str, what: str) -> str:
    """A stream reaches rank 0 only: copy it to ``path``, a new file beside the output
    (``run`` removes it, whatever happens)."""
    try:
        out = open(path, "xb")
    except OSError as e:
        raise InputError(f"cannot write {path}: {reason(e)}") from None
    try:
        while True:
            try:
                chunk = fh.read(1 << 20)
            except OSError as e:
                raise InputError(f"cannot read {what}: {reason(e)}") from None
            if not chunk:
                break
            write_or_fail(out, chunk, path)
    finally:
        close_or_fail(out, path)
    return path


def _spool_input(p: str, path: str) -> str:
    if p == "-":
        return _spool_stream(sys.stdin.buffer, path, "standard input")
    try:
        fh = open(p, "rb")
    except OSError as e:
        raise InputError(f"cannot read {p}: {reason(e)}") from None
    with fh:
        return _spool_stream(fh, path, p)


def _lock_output(cfg: PreprocessConfig, log) -> DirLock | None:
    """Rank 0 holds ``.OUT.lock`` beside the output for the whole run, so a second run to the
    same output is refused instead of one silently overwriting the other (its "exists"
    check only sees the output once it is finished). No folder: _start says so. A lock
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
INHERITED_OPTIONS = ("normalize", "lowercase", "strip_doc_tags", "sentence_length", "min_count", "max_vocab")


def appended_config(cfg: PreprocessConfig) -> PreprocessConfig:
    """Rank 0, ``--append``: the configuration that grows ``cfg.append`` in place, with the
    corpus's own text options and thresholds (a value given that differs from both the
    default and the corpus's is refused: the new text would be tokenised otherwise)."""
    path = cfg.append
    if not os.path.isfile(path):
        raise InputError(f"--append {path}: no such corpus" + (" (a folder)" if os.path.isdir(path) else ""))
    with corpus_io.Corpus(path) as c:
        stored = c.attrs.get(corpus_io.A_OPTIONS) or {}
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


def run(cfg: PreprocessConfig, comm: Comm, *, log=print, engine: str = "compiled") -> dict:
    """Preprocess ``cfg.inputs`` into ``cfg.output`` on every rank of ``comm``. ``engine``:
    ``compiled`` (numba; the default) or ``python`` (the readable reference, slow), which
    write the same corpus."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}")
    if cfg.append:
        cfg = comm.on_root(appended_config, cfg)
    lock = comm.on_root(_lock_output, cfg, log, broadcast=False)
    try:
        return _locked_run(cfg, comm, log, engine)
    finally:
        if lock is not None:
            lock.release()


def _locked_run(cfg: PreprocessConfig, comm: Comm, log, engine: str) -> dict:
    t0 = time.perf_counter()
    tag = comm.on_root(_start, cfg, log)
    id_paths = [_tmp_path(cfg.output, f"ids{r}", tag) for r in range(comm.size)]
    tmp = _tmp_path(cfg.output, "tmp", tag)
    # rank 0's copies of streams (standard input, pipes) and plain copies of compressed inputs
    spools = [_tmp_path(cfg.output, "stdin" if p == "-" else f"pipe{i}", tag) for i, p in enumerate(cfg.inputs)] \
        + [_tmp_path(cfg.output, f"plain{i}", tag) for i in range(len(cfg.inputs))] if comm.is_root else []
    mine = [id_paths[comm.rank]] + spools
    try:
        summary = _run(cfg, comm, t0, id_paths, tmp, spools, engine)
    except BaseException:
        # A failure, or SIGTERM/SIGINT (Interrupted): the job ends on every rank, and a rank
        # may be killed by the abort before it cleans up, so each rank removes every
        # temporary file of this run that it can see, the other ranks' spools included.
        _remove(id_paths + [tmp] + spools)
        raise
    finally:
        _remove(mine)
    if summary is not None and log:
        grown = (f" (segment {summary['segments'] - 1} appended: {summary['new_words']:,} new words)"
                 if cfg.append else "")
        log(f"wrote {summary['output']}{grown}: {summary['vocab']:,} words, {summary['kept_tokens']:,} of "
            f"{summary['raw_tokens']:,} tokens kept, {summary['sentences']:,} sentences "
            f"({summary['ranks']} rank(s), {summary['seconds']} s)")
        if summary["invalid_utf8_sequences"]:
            log(f"note: {summary['invalid_utf8_sequences']} invalid UTF-8 sequence(s) replaced by U+FFFD")
    return summary or {}


_H5_WRITE_FAILED = False   # an HDF5 write failed in this process: see main()


def _disk_full(what: str, e: Exception) -> InputError:
    """A failed write of an HDF5 file (a full disk, a quota) as one line. h5py reports it as
    OSError or RuntimeError ("Can't flush cache"), with HDF5's whole error record as text."""
    global _H5_WRITE_FAILED
    _H5_WRITE_FAILED = True
    why = reason(e) if isinstance(e, OSError) else reason(OSError(str(e)))
    return InputError(f"cannot write {what}: {why}")


def _run(cfg: PreprocessConfig, comm: Comm, t0: float, id_paths: list[str],
         tmp: str, spools: list[str], engine: str) -> dict | None:
    """The two passes and the in-place write; the summary on rank 0, None elsewhere."""
    compiled = engine == "compiled"
    n_in = len(cfg.inputs)

    def plan():
        sources = []
        for i, p in enumerate(cfg.inputs):
            if p == "-" or _is_stream(p):
                p = _spool_input(p, spools[i])
            # one rank streams a compressed input once; several read a plain copy of it
            sources.append(describe_source(p, sized=not compiled or comm.size > 1,
                                           spool=spools[n_in + i] if compiled and comm.size > 1 else None))
        if all(s.size is not None for s in sources) and sum(s.size for s in sources) == 0:
            raise InputError("input is empty (0 bytes)")
        return sources, find_boundaries(sources, comm.size)

    sources, bounds = comm.on_root(plan)
    opts = TextOptions(cfg.normalize, cfg.lowercase, cfg.strip_doc_tags, cfg.block_bytes)
    lo, hi = bounds[comm.rank], bounds[comm.rank + 1]

    # pass 1: count
    if compiled:
        def count():
            spool = IdSpool(id_paths[comm.rank])
            try:
                scan, table, raw_to_type = count_compiled(sources, lo, hi, opts, spool)
            finally:
                spool.close()
            return spool, scan, table, raw_to_type

        spool, scan, table, raw_to_type = comm.agree(count)
        gathered = comm.gather((table.arrays(), scan.stats, scan.sizes))
        if comm.is_root:
            for i, size in gathered[0][2].items():    # sources streamed by the one rank
                sources[i] = dataclasses.replace(sources[i], size=size)
            total, totals = merge_tables([g[:2] for g in gathered])
            raw_types = len(total)
        else:
            total = totals = raw_types = None
    else:
        counter, stats = comm.agree(count_tokens, sources, lo, hi, opts)
        gathered = comm.gather((counter, stats))
        del counter
        total, totals = merge_counts(gathered) if comm.is_root else (None, None)
        raw_types = None if total is None else len(total)  # rank 0's, for its summary
    del gathered

    def fix_vocab(total, totals):
        if sum(s.size for s in sources) == 0:
            raise InputError("input is empty (0 bytes)")
        if totals.raw_tokens == 0:
            raise InputError("input has no tokens (only blanks, tags or nothing)")
        if cfg.append:     # the corpus's vocabulary, extended
            seen = zip(total.words(), total.counts[: len(total)].tolist()) if compiled else total.items()
            with corpus_io.Corpus(cfg.append) as base:
                base.verify()      # never carry a damaged corpus into a new one
                old = [w.encode("utf-8") for w in base.words]
                return grow_vocab(old, base.counts, seen, cfg.min_count, cfg.max_vocab)
        if compiled:
            words, counts = build_vocab_from_table(total, cfg.min_count, cfg.max_vocab)
        else:
            words, counts = build_vocab(total, cfg.min_count, cfg.max_vocab)
        if cfg.hold_out:
            words, counts = hold_out(words, counts, cfg.hold_out)
        if not words:
            raise InputError(f"no word occurs at least --min-count={cfg.min_count} times "
                             f"({totals.raw_tokens} tokens, {len(total)} distinct)")
        return words, counts

    words, counts = comm.on_root(fix_vocab, total, totals)
    del total

    # pass 2: every rank's final ids and line starts, then their place in the corpus
    def ids():
        if compiled:
            vocab = TokenTable.from_words(words)
            final = vocab.lookup_all(*table.arrays()[:3])
            line_ends = np.concatenate(scan.line_ends) if scan.line_ends else np.zeros(0, dtype=np.int64)
            return final_ids_compiled(spool, final[raw_to_type], line_ends)
        return final_ids(sources, lo, hi, opts, {w: i for i, w in enumerate(words)}, IdSpool(id_paths[comm.rank]))

    mine = comm.agree(ids)
    last = int(mine.line_starts[-1]) if len(mine.line_starts) else None
    kept = comm.allgather((mine.kept, last))
    carry = corpus_io.sentence_carries([k for k, _ in kept], [t for _, t in kept])[comm.rank]
    sentences = corpus_io.sentence_starts(mine.line_starts, carry, mine.kept, cfg.sentence_length)
    n_sentences = comm.allgather(len(sentences))
    base = corpus_io.Corpus(cfg.append) if cfg.append and comm.is_root else None

    def create():
        old_tokens, old_sentences = (base.total_tokens, base.total_sentences) if base is not None else (0, 0)
        inputs = [{"path": p, "bytes": s.file_bytes, "uncompressed_bytes": s.size, "compression": s.compression}
                  for p, s in zip(cfg.inputs, sources)]
        created = datetime.datetime.now(datetime.timezone.utc).isoformat()
        old = base.attrs if base is not None else {}
        new_tokens = sum(k for k, _ in kept)
        segment = {"inputs": inputs, corpus_io.A_RAW_TOKENS: totals.raw_tokens,
                   corpus_io.A_KEPT_TOKENS: new_tokens, "new_words": len(words) - (base.n_words if base is not None else 0),
                   corpus_io.A_CREATED: created, corpus_io.A_RANKS: comm.size,
                   "parent_corpus_id": old.get(corpus_io.A_CORPUS_ID)}
        attrs = {
            corpus_io.A_TOOL_VERSION: __version__,
            corpus_io.A_CREATED: old.get(corpus_io.A_CREATED, created),
            corpus_io.A_OPTIONS: json.dumps(old[corpus_io.A_OPTIONS]) if old.get(corpus_io.A_OPTIONS)
            else to_json(cfg),
            corpus_io.A_INPUTS: json.dumps(old.get(corpus_io.A_INPUTS, []) + inputs),
            corpus_io.A_RAW_TOKENS: old.get(corpus_io.A_RAW_TOKENS, 0) + totals.raw_tokens,
            corpus_io.A_KEPT_TOKENS: int(counts.sum()),
            corpus_io.A_INVALID_UTF8: old.get(corpus_io.A_INVALID_UTF8, 0) + totals.invalid_utf8,
            corpus_io.A_DOC_LINES: old.get(corpus_io.A_DOC_LINES, 0) + totals.doc_lines,
            corpus_io.A_RANKS: comm.size,
        }
        if old_tokens + new_tokens != int(counts.sum()):   # both count the same tokens: a bug, not bad input
            raise RuntimeError(f"kept tokens: the vocabulary counts {int(counts.sum())}, "
                               f"the ranks wrote {old_tokens + new_tokens}")
        try:
            offsets = corpus_io.create_corpus(
                tmp, words=[w.decode("utf-8") for w in words], counts=counts, attrs=attrs,
                n_tokens=old_tokens + new_tokens, n_sentences=old_sentences + sum(n_sentences),
                segment_info=segment, base=base)
        except (OSError, RuntimeError) as e:
            raise _disk_full(cfg.output, e) from None
        segments = len(base.segment_table) + 1 if base is not None else 1
        return offsets, old_tokens, old_sentences, base.n_words if base is not None else 0, segments

    try:
        offsets, old_tokens, old_sentences, old_vocab, n_segments = comm.on_root(create)
        token_start = old_tokens + sum(k for k, _ in kept[:comm.rank])
        sentence_start = old_sentences + sum(n_sentences[:comm.rank])

        def write():
            try:
                corpus_io.write_slice(tmp, offsets, token_start, mine.blocks(),
                                      sentence_start, [sentences + token_start])
            except OSError as e:
                raise _disk_full(cfg.output, e) from None

        comm.agree(write)

        def finish():
            try:
                corpus_id = corpus_io.finish_corpus(tmp)
                if base is not None:
                    base.close()
                os.replace(tmp, cfg.output)    # a reader of the old corpus keeps reading the old file
                fsync_dir(cfg.output)
            except (OSError, RuntimeError) as e:
                raise _disk_full(cfg.output, e) from None
            return {
                "output": cfg.output, "ranks": comm.size, "raw_tokens": totals.raw_tokens,
                "kept_tokens": int(counts.sum()) - old_tokens, "raw_types": raw_types, "vocab": len(words),
                "sentences": old_sentences + sum(n_sentences), "invalid_utf8_sequences": totals.invalid_utf8,
                "doc_tag_lines_dropped": totals.doc_lines, "corpus_id": corpus_id,
                "segments": n_segments, "new_words": len(words) - old_vocab,
                "seconds": round(time.perf_counter() - t0, 2),
            }

        return comm.on_root(finish, broadcast=False)
    finally:
        if base is not None:
            base.close()


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
        # rank removed the temporary file this one was writing): the stop is what to report
        return _interrupted(Interrupted(signals.got), comm)
    finally:
        signals.armed = False  # done (or stopping): a late signal changes nothing
    return 0


def _warm_up_in_background() -> None:
    """Import numba and pay its one-time set-up (about 0.35 s together) in a background
    thread, while MPI starts, rank 0 decompresses a gzip input for several ranks (which
    releases the GIL) and the other ranks wait for it, instead of inside the first call of
    the tokenizer. A kernel called before it ends waits for it (the import lock, numba's
    compiler lock); a failure here surfaces at that first call, as it would without it."""
    import threading

    def run():
        try:
            from ..kernels.tokenize import warm_up

            warm_up()
        except Exception:  # noqa: BLE001 - reported by the first real call
            pass

    threading.Thread(target=run, name="mpidwe-numba-warm-up", daemon=True).start()


def main(argv=None, *, as_command: bool = False) -> int:
    """The command. ``as_command`` (``python -m mpidwe.preprocess``, the ``mpidwe`` console
    script): this process is the command, so numba's set-up starts in the background at
    once (``_warm_up_in_background``), and after a failed HDF5 write the process ends without
    the interpreter's exit handlers: a file whose write failed (a full disk) stays open inside
    the HDF5 library, which flushes it again at interpreter exit and crashes (exit 139); the
    error was reported and every temporary file removed by then. (Ending every run that way
    would save the 0.2 s of the interpreter's teardown, but MPICH then SIGKILLs a rank that
    is still in MPI_Finalize in about one 8-rank run in ten, and Open MPI refuses a rank
    that skips MPI_Finalize.)"""
    if as_command:
        _warm_up_in_background()
    with _Signals() as signals:
        try:
            rc = run_main(PROG, lambda a, c: _body(a, c, signals), argv)
        except Interrupted as e:  # while MPI was starting: nothing was written yet
            return _interrupted(e, signals.comm)
    if _H5_WRITE_FAILED and as_command:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc
