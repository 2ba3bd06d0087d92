"""``mpidwe.preprocess(*inputs, **options)``: preprocess from Python, as the command does."""

from __future__ import annotations

import os

from ..core.config import PreprocessConfig, from_mapping, keyword_message
from ..core.errors import MpidweError
from ..parallel.comm import Comm
from .pipeline import run

PATH_OPTIONS = ("output", "append", "hold_out")


def preprocess(*inputs, log=print, **options) -> str:
    """Raw text files (``str`` or ``pathlib.Path``; ``.gz``, ``.bz2``) -> an HDF5 corpus for
    ``mpidwe.train``; returns the corpus's path. ``options`` are the command's flags with
    ``_`` for ``-`` (``output="corpus.h5"``, ``min_count=5``, ``normalize="text8"``, ...;
    ``python -m mpidwe.preprocess --help``), checked as strictly as ``mpidwe.train``'s; an
    error is one line naming the keyword. Runs in this process, or on every rank of an
    ``mpiexec`` job; ``log`` receives rank 0's lines (None for none)."""
    options = dict(options, inputs=[os.fspath(p) for p in inputs] + list(options.get("inputs", ())))
    for key in PATH_OPTIONS:
        if isinstance(options.get(key), os.PathLike):
            options[key] = os.fspath(options[key])
    try:
        cfg = from_mapping(PreprocessConfig, options, source="mpidwe.preprocess() arguments")
        comm = Comm.world()
        run(cfg, comm, log=log if comm.is_root else None)
    except MpidweError as e:      # the command's messages, in the words of this call
        e.args = (keyword_message(PreprocessConfig, str(e)),)
        raise
    return cfg.output
