"""Rank 0's plan of the inputs: the inputs named (a folder or a glob pattern stands for its
files), streams (standard input, pipes, FIFOs) copied to files, the inputs sized, and
their bytes given to the ranks, one run of pieces a rank (io.text.Piece).

Two plans. When there are at least as many compressed inputs as ranks (a dump in
shards), no input is decompressed before pass 1: each compressed file is read whole by
one rank, which decompresses it as it tokenizes, and the inputs, in order, are cut into
runs of about equal expected size (io.text.split_pieces). Otherwise (and for the Python
engine) every input is sized first, a compressed input decompressed once to a plain copy
when several ranks read it, and the byte space is cut into equal ranges at whitespace
(io.text.find_boundaries). Either way the corpus is the same: it depends on the inputs'
order, never on where the ranks' pieces end."""

from __future__ import annotations

import glob
import os
import stat
import sys

from ..core.errors import InputError
from ..io.fsutil import reason
from ..io.text import (Piece, Source, binary_reason, close_or_fail, describe_source, estimated_size,
    find_boundaries, pieces_between, split_pieces, write_or_fail)

_GLOB_CHARS = "*?["


def expand_inputs(inputs) -> tuple[str, ...]:
    """The input files that ``inputs`` names, in order: a folder stands for the files in it
    (not those whose name starts with a dot, nor subfolders), a pattern with ``*``, ``?``
    or ``[`` that is no existing path for the paths it matches; both in name order (byte
    order: name shards with zero-padded numbers). A folder without files or a pattern that
    matches nothing is an error."""
    out: list[str] = []
    for p in inputs:
        if p != "-" and os.path.isdir(p):
            names = sorted(n for n in os.listdir(p) if not n.startswith(".") and
                           not os.path.isdir(os.path.join(p, n)))
            if not names:
                raise InputError(f"input directory {p} holds no files")
            out.extend(os.path.join(p, n) for n in names)
        elif p != "-" and any(c in p for c in _GLOB_CHARS) and not os.path.lexists(p):
            found = sorted(m for m in glob.glob(p) if not os.path.isdir(m))
            if not found:
                raise InputError(f"no input file matches {p}")
            out.extend(found)
        else:
            out.append(p)
    return tuple(out)


def checked_inputs(inputs, allow_duplicate: bool = False) -> tuple[str, ...]:
    """Rank 0, before anything is written: the input files (``expand_inputs``), each named
    once (``refuse_repeated``), none of them binary (``refuse_binary``; a stream is judged
    once copied, in ``plan_inputs``)."""
    files = expand_inputs(inputs)
    if "-" in files and _under_hydra():
        raise InputError("standard input (-) under MPICH's mpiexec: its launcher ends the job when a rank reads "
                         "a stream slower than it arrives; write the text to a file, or to a named pipe "
                         "(mkfifo), and give that (or run preprocess - without mpiexec)")
    refuse_repeated(files, allow_duplicate)
    for p in files:
        if p != "-" and os.path.isfile(p):
            refuse_binary(p, p)
    return files


def _under_hydra() -> bool:
    """Whether MPICH's launcher (Hydra; Intel MPI's too) started this process: it forwards
    standard input to rank 0 with no buffer of its own beyond the pipe, and kills the job
    ("process reading stdin too slowly") as soon as the rank falls behind, at any rank count.
    Hydra gives its ranks MPI_LOCALNRANKS; Open MPI's mpirun and srun do not."""
    env = os.environ
    return "MPI_LOCALNRANKS" in env and "OMPI_COMM_WORLD_SIZE" not in env


def refuse_repeated(inputs, allow_duplicate: bool = False) -> None:
    """Refuse a file named twice (another spelling, a symlink or a hard link of it included):
    its text would count twice. ``--append --allow-duplicate`` takes it, as it takes a text
    the corpus already holds."""
    if allow_duplicate:
        return
    seen: dict[tuple[int, int], str] = {}
    for p in inputs:
        if p == "-":
            continue
        try:
            st = os.stat(p)
        except OSError:      # describe_source says what is wrong with it
            continue
        if not stat.S_ISREG(st.st_mode):
            continue         # a stream is read once, whatever its name
        if (st.st_dev, st.st_ino) in seen:
            raise InputError(f"input {p} is named twice (also as {seen[st.st_dev, st.st_ino]}); its text "
                             f"would count twice: name it once")
        seen[st.st_dev, st.st_ino] = p


def refuse_binary(path: str, name: str) -> None:
    """Refuse an input that is not text (io.text.binary_reason: NUL bytes, or mostly invalid
    UTF-8), by the rule that ``train --follow`` rejects such a file with: its junk words would
    enter the vocabulary."""
    why = binary_reason(path)
    if why is not None:
        raise InputError(f"input {name} is not text: {why}")


def whole_files(inputs, compiled: bool, ranks: int) -> bool:
    """Whether compressed inputs are read whole, each by one rank (see the module's
    docstring): the compiled engine on several ranks, with at least as many compressed
    inputs as ranks."""
    if not compiled or ranks == 1:
        return False
    from ..io.text import detect_compression

    n = 0
    for p in inputs:
        if p != "-" and os.path.isfile(p):
            try:
                n += detect_compression(p) != "none"
            except OSError:      # describe_source says what is wrong with it
                return False
    return n >= ranks


def plan_inputs(inputs, spools: list[str], compiled: bool, ranks: int) -> tuple[list[Source], list[list[Piece]]]:
    """Rank 0: the sources of ``inputs`` and every rank's pieces. ``spools``: the temporary
    paths for copies of streams (one slot per input), then for plain copies of compressed
    inputs. The compiled engine on one rank streams a compressed input once (its size then
    None until it is read); several ranks read a plain copy of it, unless compressed
    inputs are read whole (``whole_files``)."""
    n_in = len(inputs)
    whole = whole_files(inputs, compiled, ranks)
    sources = []
    for i, p in enumerate(inputs):
        if p == "-" or _is_stream(p):
            refuse_binary(_spool_input(p, spools[i]), "standard input" if p == "-" else p)
            p = spools[i]
        # one rank streams a compressed input once; several read a plain copy of it
        copy = compiled and ranks > 1 and not whole
        sources.append(describe_source(p, sized=not compiled or copy, spool=spools[n_in + i] if copy else None))
    if all(s.size is not None for s in sources) and sum(s.size for s in sources) == 0:
        raise InputError("input is empty (0 bytes)")
    if whole:
        return sources, split_pieces(sources, [estimated_size(s) for s in sources], ranks)
    bounds = find_boundaries(sources, ranks)
    return sources, [pieces_between(sources, bounds[r], bounds[r + 1]) for r in range(ranks)]


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
    (the run removes it, whatever happens)."""
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
