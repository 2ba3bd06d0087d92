"""``run``: one preprocess run as named steps over one state (``RunState``), every rank
making the same collectives in the same order:

    plan_ranges -> count_tokens_of_ranks -> fix_vocabulary -> map_ids -> place_slices
    -> create_file -> write_slices -> digest_chunks -> seal_and_rename

A step that fails with a user error on any rank (an ``InputError``: bad input, a full
disk) fails on every rank at the same collective (``Comm.agree``), and ``_locked_run``
removes the run's temporary files on every rank; nothing is written under the output's
name until the last step renames the sealed file into place.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import time

import numpy as np

from ..core.config import PreprocessConfig, to_json
from ..core.errors import InputError
from ..parallel import deathwatch
from ..parallel.comm import Comm
from ..io import corpus as corpus_io
from ..io.fsutil import file_sha256, fsync_dir, reason, write_target
from ..io.text import Piece, ScanStats, Source, TextOptions
from ..version import __version__
from .inputs import checked_inputs, plan_inputs
from .output import appended_config, died_marker, disk_full, lock_output, start_run
from .passes import (CompiledCount, IdSpool, RankIds, count_compiled, count_tokens, final_ids,
    final_ids_compiled)
from .tempfiles import TempPaths, remove_quietly
from .vocab import choose_vocabulary, merge_counts, merge_tables

ENGINES = ("compiled", "python")   # run(engine=): numba kernels (default), or the readable reference


@dataclasses.dataclass
class Layout:
    """Where the new text goes in the corpus file (rank 0 decides; every rank gets it)."""

    offsets: tuple[int, int]   # file offsets of the token ids' and the sentence starts' raw data
    old_tokens: int            # tokens, sentences and words of the corpus appended to (0 if none)
    old_sentences: int
    old_vocab: int
    segments: int              # segments of the new corpus


@dataclasses.dataclass
class RunState:
    """One run on one rank, filled in step by step. Fields marked "rank 0" are None on the
    other ranks."""

    cfg: PreprocessConfig
    compiled: bool                  # the numba engine, else the readable Python one
    paths: TempPaths
    t0: float                       # time.perf_counter() at the start, for the summary
    # plan_ranges
    sources: list[Source] | None = None
    opts: TextOptions | None = None
    pieces: list[Piece] | None = None   # what this rank reads
    # count_tokens_of_ranks
    counted: CompiledCount | None = None   # the compiled engine's pass 1, for its pass 2
    total: object = None            # rank 0: the merged counts (TokenTable or Counter) until fix_vocabulary
    totals: ScanStats | None = None  # rank 0: the summed scan statistics
    raw_types: int | None = None    # rank 0: distinct tokens
    # fix_vocabulary
    words: list[bytes] | None = None
    counts: np.ndarray | None = None
    # map_ids
    ids: RankIds | None = None
    # place_slices
    kept: list[tuple[int, int | None]] | None = None   # every rank's (kept tokens, last line start)
    sentences: np.ndarray | None = None                # this rank's sentence starts (slice indices)
    n_sentences: list[int] | None = None               # every rank's sentence count
    # create_file
    base: corpus_io.Corpus | None = None   # rank 0, --append: the corpus grown
    layout: Layout | None = None
    # digest_chunks
    digests: tuple[np.ndarray, np.ndarray] | None = None   # rank 0: every chunk's (tokens, sentences)


def run(cfg: PreprocessConfig, comm: Comm, *, log=print, engine: str = "compiled") -> dict:
    """Preprocess ``cfg.inputs`` into ``cfg.output`` on every rank of ``comm``. ``engine``:
    ``compiled`` (numba; the default) or ``python`` (the readable reference, slow), which
    write the same corpus."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}")
    # a folder or a glob pattern stands for its files, in name order; each once, none binary
    cfg = comm.on_root(lambda: dataclasses.replace(cfg, inputs=checked_inputs(cfg.inputs, cfg.allow_duplicate)))
    if cfg.append:
        cfg = comm.on_root(appended_config, cfg)
    # a symlinked output (or --append corpus) is written through: its target is replaced
    cfg = comm.on_root(lambda: dataclasses.replace(cfg, output=write_target(cfg.output),
                                                   append=cfg.append and write_target(cfg.append)))
    lock = comm.on_root(lock_output, cfg, log, broadcast=False)
    try:
        return _locked_run(cfg, comm, log, engine)
    finally:
        if lock is not None:
            lock.release()


def _locked_run(cfg: PreprocessConfig, comm: Comm, log, engine: str) -> dict:
    t0 = time.perf_counter()
    tag = comm.on_root(start_run, cfg, log)      # rank 0 also clears an old rank-died marker
    # a rank killed by a signal cannot say so: its watcher names it (as training's do)
    deathwatch.start(os.path.dirname(os.path.abspath(cfg.output)), comm.rank, comm.size,
                     hint="; rerun the same command", name=died_marker(cfg))
    paths = TempPaths.of_run(cfg.output, cfg.inputs, tag, comm.size, comm.is_root)
    try:
        summary = run_steps(RunState(cfg, engine == "compiled", paths, t0), comm)
    except BaseException:
        # A failure, or SIGTERM/SIGINT (Interrupted): the job ends on every rank, and a rank
        # may be killed by the abort before it cleans up, so each rank removes every
        # temporary file of this run that it can see, the other ranks' spools included.
        remove_quietly(paths.every())
        raise
    finally:
        remove_quietly(paths.of_rank(comm.rank))
    if summary is not None and log:
        _log_summary(summary, cfg, log)
    return summary or {}


def _log_summary(summary: dict, cfg: PreprocessConfig, log) -> None:
    grown = (f" (segment {summary['segments'] - 1} appended: {summary['new_words']:,} new words)"
             if cfg.append else "")
    log(f"wrote {summary['output']}{grown}: {summary['vocab']:,} words, {summary['kept_tokens']:,} of "
        f"{summary['raw_tokens']:,} tokens kept, {summary['sentences']:,} sentences "
        f"({summary['ranks']} rank(s), {summary['seconds']} s)")
    if summary["invalid_utf8_sequences"]:
        log(f"note: {summary['invalid_utf8_sequences']} invalid UTF-8 sequence(s) replaced by U+FFFD")


def run_steps(st: RunState, comm: Comm) -> dict | None:
    """The two passes and the in-place write; the summary on rank 0, None elsewhere."""
    plan_ranges(st, comm)
    count_tokens_of_ranks(st, comm)     # pass 1
    fix_vocabulary(st, comm)
    map_ids(st, comm)                   # pass 2
    place_slices(st, comm)
    # rank 0 opens the corpus it grows inside the all-ranks error path: a failure there (the
    # file gone or damaged since pass 1) stops every rank with one line, not an aborted job
    st.base = comm.on_root(corpus_io.Corpus, st.cfg.append, broadcast=False) if st.cfg.append else None
    try:
        create_file(st, comm)
        write_slices(st, comm)
        digest_chunks(st, comm)
        return seal_and_rename(st, comm)
    finally:
        if st.base is not None:
            st.base.close()


# ---------------------------------------------------------------------------- steps
def plan_ranges(st: RunState, comm: Comm) -> None:
    """Rank 0 copies streams to files, sizes the inputs and gives every rank its pieces:
    whole compressed files, or byte ranges cut at whitespace (inputs.plan_inputs); every
    rank gets the plan."""
    cfg = st.cfg
    st.sources, pieces = comm.on_root(plan_inputs, cfg.inputs, st.paths.spools, st.compiled, comm.size)
    st.opts = TextOptions(cfg.normalize, cfg.lowercase, cfg.strip_doc_tags, cfg.block_bytes)
    st.pieces = pieces[comm.rank]


def count_tokens_of_ranks(st: RunState, comm: Comm) -> None:
    """Pass 1: every rank counts the tokens of its range; rank 0 merges the counts."""
    if st.compiled:
        st.counted = comm.agree(count_compiled, st.sources, st.pieces, st.opts, st.paths.ids[comm.rank])
        gathered = comm.gather((st.counted.table.arrays(), st.counted.scan.stats, st.counted.scan.sizes))
        if comm.is_root:
            for g in gathered:           # the sizes of the sources read whole, by whichever rank
                for i, size in g[2].items():
                    st.sources[i] = dataclasses.replace(st.sources[i], size=size)
            st.total, st.totals = merge_tables([g[:2] for g in gathered])
    else:
        counter, stats = comm.agree(count_tokens, st.sources, st.pieces, st.opts)
        gathered = comm.gather((counter, stats))
        del counter
        if comm.is_root:
            st.total, st.totals = merge_counts(gathered)
    st.raw_types = None if st.total is None else len(st.total)  # rank 0's, for its summary


def fix_vocabulary(st: RunState, comm: Comm) -> None:
    """Rank 0 fixes the vocabulary (count descending, ties by word) and broadcasts it. A
    corpus grown (--append) is verified first, every rank its share of the chunks: a
    damaged corpus is never carried into a new one."""
    if st.cfg.append:
        comm.agree(_verify_base, st.cfg.append, comm.rank, comm.size)
    st.words, st.counts = comm.on_root(_vocabulary, st)
    st.total = None


def _verify_base(path: str, rank: int, ranks: int) -> None:
    with corpus_io.Corpus(path) as base:
        base.verify(rank, ranks)


def _vocabulary(st: RunState):
    if sum(s.size for s in st.sources) == 0:
        raise InputError("input is empty (0 bytes)")
    if st.totals.raw_tokens == 0:
        raise InputError("input has no tokens (only blanks, tags or nothing)")
    return choose_vocabulary(st.cfg, st.total, st.totals)


def map_ids(st: RunState, comm: Comm) -> None:
    """Pass 2: every rank maps its tokens to their final ids and finds its line starts."""
    st.ids = comm.agree(_final_ids, st, comm.rank)
    st.counted = None


def _final_ids(st: RunState, rank: int) -> RankIds:
    if st.compiled:
        return final_ids_compiled(st.counted, st.words)
    lookup = {w: i for i, w in enumerate(st.words)}
    return final_ids(st.sources, st.pieces, st.opts, lookup, IdSpool(st.paths.ids[rank]))


def place_slices(st: RunState, comm: Comm) -> None:
    """Every rank's sentence starts (lines cut every --sentence-length kept tokens, also
    across a rank boundary) and the counts of every rank, which place its slices."""
    mine = st.ids
    last = int(mine.line_starts[-1]) if len(mine.line_starts) else None
    st.kept = comm.allgather((mine.kept, last))
    carry = corpus_io.sentence_carries([k for k, _ in st.kept], [t for _, t in st.kept])[comm.rank]
    st.sentences = corpus_io.sentence_starts(mine.line_starts, carry, mine.kept, st.cfg.sentence_length)
    st.n_sentences = comm.allgather(len(st.sentences))


def create_file(st: RunState, comm: Comm) -> None:
    """Rank 0 creates the corpus under its temporary name, with the vocabulary, the
    attributes and room for the token ids and sentence starts (and, with --append, the
    old segments copied); every rank gets the layout."""
    st.layout = comm.on_root(_create_corpus_file, st, comm.size)


def _create_corpus_file(st: RunState, ranks: int) -> Layout:
    base = st.base
    old_tokens, old_sentences = (base.total_tokens, base.total_sentences) if base is not None else (0, 0)
    new_tokens = sum(k for k, _ in st.kept)
    if old_tokens + new_tokens != int(st.counts.sum()):   # both count the same tokens: a bug, not bad input
        raise RuntimeError(f"kept tokens: the vocabulary counts {int(st.counts.sum())}, "
                           f"the ranks wrote {old_tokens + new_tokens}")
    if base is not None and new_tokens == 0:    # an empty segment would be "trained" on nothing
        raise InputError(f"input keeps no token: none of its {st.totals.raw_tokens:,} tokens is a word of the "
                         f"corpus or occurs --min-count={st.cfg.min_count} times; nothing appended")
    attrs, segment = _attributes(st, ranks)
    try:
        offsets = corpus_io.create_corpus(
            st.paths.corpus, words=[w.decode("utf-8") for w in st.words], counts=st.counts, attrs=attrs,
            n_tokens=old_tokens + new_tokens, n_sentences=old_sentences + sum(st.n_sentences),
            segment_info=segment, base=base)
    except (OSError, RuntimeError) as e:
        raise disk_full(st.cfg.output, e) from None
    if base is None:
        return Layout(offsets, 0, 0, 0, 1)
    return Layout(offsets, old_tokens, old_sentences, base.n_words, len(base.segment_table) + 1)


def _attributes(st: RunState, ranks: int) -> tuple[dict, dict]:
    """The corpus's attributes, and the description of the new segment (the whole corpus,
    unless --append grows one: then its attributes and this segment's sum up)."""
    cfg, totals, base = st.cfg, st.totals, st.base
    inputs = [{"path": p, "bytes": s.file_bytes, "uncompressed_bytes": s.size, "compression": s.compression}
              for p, s in zip(cfg.inputs, st.sources)]
    if base is not None:     # what a later --append compares its inputs with (a duplicate is refused)
        for entry, p in zip(inputs, cfg.inputs):
            if p != "-":
                entry["sha256"] = file_sha256(p, entry["bytes"])   # the bytes read, if it grew since
    created = datetime.datetime.now(datetime.timezone.utc).isoformat()
    old = base.attrs if base is not None else {}
    segment = {"inputs": inputs, corpus_io.A_RAW_TOKENS: totals.raw_tokens,
               corpus_io.A_KEPT_TOKENS: sum(k for k, _ in st.kept),
               "new_words": len(st.words) - (base.n_words if base is not None else 0),
               corpus_io.A_CREATED: created, corpus_io.A_RANKS: ranks,
               "parent_corpus_id": old.get(corpus_io.A_CORPUS_ID)}
    attrs = {
        corpus_io.A_TOOL_VERSION: __version__,
        corpus_io.A_CREATED: old.get(corpus_io.A_CREATED, created),
        corpus_io.A_OPTIONS: json.dumps(old[corpus_io.A_OPTIONS]) if old.get(corpus_io.A_OPTIONS)
        else to_json(cfg),
        corpus_io.A_INPUTS: json.dumps(old.get(corpus_io.A_INPUTS, []) + inputs),
        corpus_io.A_RAW_TOKENS: old.get(corpus_io.A_RAW_TOKENS, 0) + totals.raw_tokens,
        corpus_io.A_KEPT_TOKENS: int(st.counts.sum()),
        corpus_io.A_INVALID_UTF8: old.get(corpus_io.A_INVALID_UTF8, 0) + totals.invalid_utf8,
        corpus_io.A_DOC_LINES: old.get(corpus_io.A_DOC_LINES, 0) + totals.doc_lines,
        corpus_io.A_RANKS: ranks,
    }
    return attrs, segment


def write_slices(st: RunState, comm: Comm) -> None:
    """Every rank writes its token ids and sentence starts straight into the file's bytes
    (the datasets are contiguous and their offsets known: no parallel HDF5 needed)."""
    token_start = st.layout.old_tokens + sum(k for k, _ in st.kept[:comm.rank])
    sentence_start = st.layout.old_sentences + sum(st.n_sentences[:comm.rank])
    comm.agree(_write_slice, st, token_start, sentence_start)


def _write_slice(st: RunState, token_start: int, sentence_start: int) -> None:
    try:
        corpus_io.write_slice(st.paths.corpus, st.layout.offsets, token_start, st.ids.blocks(),
                              sentence_start, [st.sentences + token_start])
    except OSError as e:
        raise disk_full(st.cfg.output, e) from None


def digest_chunks(st: RunState, comm: Comm) -> None:
    """Every rank digests its share of the chunks of the written token ids and sentence
    starts (read back from the file, after every rank wrote), and rank 0 gathers them in
    order: the corpus id needs no pass over the whole corpus on one rank."""
    n_tokens = st.layout.old_tokens + sum(k for k, _ in st.kept)
    n_sentences = st.layout.old_sentences + sum(st.n_sentences)
    mine = comm.agree(_slice_digests, st, n_tokens, n_sentences, comm.rank, comm.size)
    every = comm.gather(mine)
    if comm.is_root:
        st.digests = tuple(np.concatenate([d[k] for d in every]) for k in (0, 1))


def _slice_digests(st: RunState, n_tokens: int, n_sentences: int, rank: int, ranks: int):
    try:
        return corpus_io.slice_digests(st.paths.corpus, st.layout.offsets, n_tokens, n_sentences, rank, ranks)
    except OSError as e:
        raise InputError(f"cannot read back {st.paths.corpus}: {reason(e)}") from None


def seal_and_rename(st: RunState, comm: Comm) -> dict | None:
    """Rank 0 stores the chunk digests and the corpus id they make, seals and fsyncs the
    file and renames it into place; its summary (None on the other ranks)."""
    return comm.on_root(_seal_and_rename, st, comm.size, broadcast=False)


def _seal_and_rename(st: RunState, ranks: int) -> dict:
    output = st.cfg.output
    try:
        corpus_id = corpus_io.finish_corpus(st.paths.corpus, *st.digests)
        if st.base is not None:
            st.base.close()
        os.replace(st.paths.corpus, output)    # a reader of the old corpus keeps reading the old file
        fsync_dir(output)
    except (OSError, RuntimeError) as e:
        raise disk_full(output, e) from None
    lay, totals = st.layout, st.totals
    return {
        "output": output, "ranks": ranks, "raw_tokens": totals.raw_tokens,
        "kept_tokens": int(st.counts.sum()) - lay.old_tokens, "raw_types": st.raw_types, "vocab": len(st.words),
        "sentences": lay.old_sentences + sum(st.n_sentences), "invalid_utf8_sequences": totals.invalid_utf8,
        "doc_tag_lines_dropped": totals.doc_lines, "corpus_id": corpus_id,
        "segments": lay.segments, "new_words": len(st.words) - lay.old_vocab,
        "seconds": round(time.perf_counter() - st.t0, 2),
    }
