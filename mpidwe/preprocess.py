"""``python -m mpidwe.preprocess``: raw text -> versioned HDF5 corpus, over P ranks.

1. rank 0 checks the inputs, sizes them and splits their bytes into P ranges at
   whitespace (text.find_boundaries); everyone gets the same plan;
2. pass 1: every rank counts the tokens of its range; counts are summed on rank 0, which
   fixes the vocabulary (count descending, ties by word) and broadcasts it;
3. pass 2: every rank maps its tokens to ids and streams them, with its line starts,
   into its own part file (h5py here has no parallel HDF5);
4. rank 0 stitches the parts, in rank order, into a temporary file, cuts lines into
   sentences, fsyncs and renames it into place. The result does not depend on P.
"""

from __future__ import annotations

import collections
import datetime
import itertools
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from . import __version__
from . import corpus as corpus_io
from .comm import Comm, run_main
from .config import PreprocessConfig, parse_command, to_json
from .errors import InputError
from .fsutil import fsync_dir
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


def _check_output(cfg: PreprocessConfig) -> None:
    out = cfg.output
    if os.path.isdir(out):
        raise InputError(f"output is a directory: {out}")
    if os.path.exists(out) and not cfg.force:
        raise InputError(f"output exists: {out} (use --force to overwrite)")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise InputError(f"output directory does not exist: {parent}")
    if not os.access(parent, os.W_OK):
        raise InputError(f"output directory is not writable: {parent}")


def _spool_stdin(out: str) -> str:
    """Standard input reaches rank 0 only: copy it to a file beside the output."""
    fd, path = tempfile.mkstemp(prefix=".mpidwe-stdin-", dir=os.path.dirname(os.path.abspath(out)))
    with os.fdopen(fd, "wb") as fh:
        shutil.copyfileobj(sys.stdin.buffer, fh, 1 << 20)
    return path


def run(cfg: PreprocessConfig, comm: Comm, *, log=print) -> dict:
    """Preprocess ``cfg.inputs`` into ``cfg.output`` on every rank of ``comm``."""
    t0 = time.perf_counter()
    comm.on_root(_check_output, cfg, broadcast=False)
    spooled = None
    try:
        def plan():
            nonlocal spooled
            paths = list(cfg.inputs)
            if "-" in paths:
                spooled = _spool_stdin(cfg.output)
                paths[paths.index("-")] = spooled
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
        out_dir = os.path.dirname(os.path.abspath(cfg.output))
        tag = comm.bcast(f"{os.getpid()}-{int(time.time())}")
        part_path = os.path.join(out_dir, f".{os.path.basename(cfg.output)}.part{comm.rank}-{tag}.h5")
        part_paths = [os.path.join(out_dir, f".{os.path.basename(cfg.output)}.part{r}-{tag}.h5")
                      for r in range(comm.size)]
        try:
            def write_part():
                part = corpus_io.PartWriter(part_path)
                try:
                    write_ids(sources, lo, hi, opts, lookup, part)
                finally:
                    part.close()

            comm.agree(write_part)

            def stitch():
                tmp = cfg.output + f".tmp-{tag}"
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
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                with corpus_io.Corpus(cfg.output) as c:
                    n_sent = c.n_sentences
                return {
                    "output": cfg.output, "ranks": comm.size, "raw_tokens": totals.raw_tokens,
                    "kept_tokens": int(counts.sum()), "raw_types": raw_types, "vocab": len(words),
                    "sentences": n_sent, "invalid_utf8_sequences": totals.invalid_utf8,
                    "doc_tag_lines_dropped": totals.doc_lines, "corpus_id": corpus_id,
                    "seconds": round(time.perf_counter() - t0, 2),
                }

            summary = comm.on_root(stitch, broadcast=False)
        finally:
            if os.path.exists(part_path):
                os.unlink(part_path)
        if summary is not None and log:
            log(f"wrote {summary['output']}: {summary['vocab']:,} words, {summary['kept_tokens']:,} of "
                f"{summary['raw_tokens']:,} tokens kept, {summary['sentences']:,} sentences "
                f"({summary['ranks']} rank(s), {summary['seconds']} s)")
            if summary["invalid_utf8_sequences"]:
                log(f"note: {summary['invalid_utf8_sequences']} invalid UTF-8 sequence(s) replaced by U+FFFD")
        return summary or {}
    finally:
        if spooled and os.path.exists(spooled):
            os.unlink(spooled)


def _body(argv, comm: Comm) -> int:
    cfg = comm.agree(parse_command, PreprocessConfig, argv, prog=PROG,
                     description="Turn raw text into an mpidwe HDF5 corpus (vocabulary + token ids).")
    run(cfg, comm, log=print if comm.is_root else None)
    return 0


def main(argv=None) -> int:
    return run_main(PROG, _body, argv)


if __name__ == "__main__":
    sys.exit(main())
