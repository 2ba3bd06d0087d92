"""Rank 0's plan of the inputs: streams (standard input, pipes, FIFOs) copied to files, the
inputs sized (a compressed input decompressed once, to a plain copy when several ranks read
it), and their bytes split into one range a rank at whitespace (io.text.find_boundaries)."""

from __future__ import annotations

import os
import stat
import sys

from ..core.errors import InputError
from ..io.fsutil import reason
from ..io.text import Boundary, Source, close_or_fail, describe_source, find_boundaries, write_or_fail


def plan_inputs(inputs, spools: list[str], compiled: bool, ranks: int) -> tuple[list[Source], list[Boundary]]:
    """Rank 0: the sources of ``inputs`` and the ``ranks + 1`` boundaries of their byte
    ranges. ``spools``: the temporary paths for copies of streams (one slot per input), then
    for plain copies of compressed inputs. The compiled engine on one rank streams a
    compressed input once (its size then None until it is read); several ranks read a
    plain copy of it."""
    n_in = len(inputs)
    sources = []
    for i, p in enumerate(inputs):
        if p == "-" or _is_stream(p):
            p = _spool_input(p, spools[i])
        # one rank streams a compressed input once; several read a plain copy of it
        sources.append(describe_source(p, sized=not compiled or ranks > 1,
                                       spool=spools[n_in + i] if compiled and ranks > 1 else None))
    if all(s.size is not None for s in sources) and sum(s.size for s in sources) == 0:
        raise InputError("input is empty (0 bytes)")
    return sources, find_boundaries(sources, ranks)


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
