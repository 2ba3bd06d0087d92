"""The Python API: ``mpidwe.load(path)`` and ``mpidwe.fit(**options)`` (reference: docs/api.md).

``load`` reads what training leaves behind (a run directory, a checkpoint, a word2vec text or
binary file) into a :class:`WordVectors`, which answers the questions gensim's
``KeyedVectors`` answers (``most_similar``, ``similarity``, ``[word]``, the two benchmark
evaluations) and converts to one (``to_gensim``). ``fit`` trains from Python on this process
(or on every rank of an ``mpiexec`` job) with the options of ``python -m mpidwe.train``.

This module reads no file itself: checkpoints through io/checkpoint.py, word2vec files through
io/vectors.py; ``WordVectors`` lives in evaluate/wordvectors.py and ``fit`` in train/fit.py. The heavy imports (h5py, torch,
scipy) happen inside the functions that need them, so ``import mpidwe`` stays fast.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from .core.errors import InputError
from .evaluate.wordvectors import MATRICES, SubwordOOV, WordVectors, check_matrix, oov_model  # noqa: F401

_log = logging.getLogger("mpidwe")


# -------------------------------------------------------------------- loading
def read_checkpoint(path: str, warn=None, params: bool = True):
    """The :class:`mpidwe.io.checkpoint.Checkpoint` at ``path``, or, for a run directory (or its
    ``checkpoints`` folder), its newest checkpoint that loads and verifies; damaged ones are
    skipped with a warning passed to ``warn``. Loaded (and checksummed) once. ``params=False``
    leaves the matrices unread (checkpoint.load)."""
    from .io import checkpoint

    if not os.path.isdir(path):
        return checkpoint.load(path, params=params)
    sub = checkpoint.run_checkpoints(path)
    ckdir = sub if os.path.isdir(sub) else path
    if not checkpoint.list_checkpoints(ckdir):
        raise InputError(f"no checkpoint in {ckdir}")
    ck = checkpoint.latest_valid(ckdir, warn=warn, params=params)
    if ck is None:
        raise InputError(f"no valid checkpoint in {ckdir}")
    return ck


def kind_of(path: str) -> str:
    """``run`` (a folder), ``word2vec`` (a file whose first line is ``count dim``) or
    ``checkpoint`` (any other file: checkpoint.load, which knows that format, judges it and
    refuses anything else with one line)."""
    if os.path.isdir(path):
        return "run"
    if not os.path.exists(path):
        raise InputError(f"not found: {path} (expected a run directory, a checkpoint or a word2vec file)")
    try:
        with open(path, "rb") as fh:
            first = fh.read(256)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from None
    head = first.split(b"\n", 1)[0].split()
    if len(head) == 2 and all(x.isdigit() for x in head):
        return "word2vec"
    return "checkpoint"


def _matrix(ck, which: str, word_in: np.ndarray | None = None) -> np.ndarray:
    """The chosen matrix; ``word_in``: the words' input vectors where they are not ck.w_in's
    rows (--subwords: the mean of each word's rows)."""
    word_in = ck.w_in if word_in is None else word_in
    if which == "input":
        return word_in
    if ck.config.get("loss") == "hs":
        raise InputError(f"{ck.path} was trained with hierarchical softmax: its output rows are Huffman-tree "
                         f"nodes, not words, so only the input matrix holds word vectors")
    if which == "output":
        return ck.w_out
    return word_in + ck.w_out


def load(path, *, matrix: str = "input", warn=None) -> WordVectors:
    """Word vectors from a run directory (its newest valid checkpoint), a checkpoint file, or a
    word2vec text or binary file (told apart by content, not by name).

    ``matrix``: ``input`` (the word vectors; default), ``output`` (the context vectors) or
    ``sum`` (both added, sometimes better on similarity); a word2vec file holds one matrix,
    so only ``input`` is accepted for it. ``warn`` receives a line for each damaged
    checkpoint skipped in a run directory (default: the ``mpidwe`` logger). A file that
    cannot be read raises :class:`mpidwe.core.errors.InputError` with a one-line message."""
    check_matrix(matrix)
    path = os.fspath(path)
    kind = kind_of(path)
    if kind == "word2vec":
        if matrix != "input":
            raise InputError(f"{path} is a word2vec file, which holds only the input vectors (the "
                             f"{matrix} matrix needs a checkpoint or a run directory)")
        from .io.vectors import read_word2vec

        words, vectors = read_word2vec(path, warn or _log.warning)
        return WordVectors(words, vectors, None, path=path, matrix=matrix)
    ck = read_checkpoint(path, warn=warn or _log.warning)
    run_dir = path if kind == "run" else _run_dir_of(ck.path)
    oov = oov_model(ck.config, ck.words, ck.w_in, ck, matrix)
    vectors = _matrix(ck, matrix, oov.word_vectors() if isinstance(oov, SubwordOOV) else None)
    return WordVectors(ck.words, vectors, ck.counts, path=path, checkpoint=ck,
                       run_dir=run_dir, matrix=matrix, oov=oov)


def _run_dir_of(ckpt_path: str) -> str | None:
    folder = os.path.dirname(os.path.abspath(ckpt_path))
    return os.path.dirname(folder) if os.path.basename(folder) == "checkpoints" else None


def fit(*, matrix: str = "input", log=print, **options) -> WordVectors:
    """Train word vectors from Python and return them as :class:`WordVectors`.

    ``options`` are the fields of :class:`mpidwe.core.config.TrainConfig`, with the names of the
    command's flags (``corpus``, ``out``, ``dim``, ``window``, ``epochs``, ``threads``,
    ``progress``, ...; ``python -m mpidwe.train --help`` lists them with their defaults),
    checked as strictly as a ``--config`` file: an unknown name or a value of the wrong type
    is a :class:`mpidwe.core.errors.ConfigError`. Training runs in this process, without
    ``mpiexec``; in a script started by ``mpiexec -n P`` every rank trains its shard, and
    every rank gets the vectors. The run directory (``out``) holds what the command writes
    (config.json, metrics.jsonl, checkpoints, vectors.txt); ``mpidwe.load(out)`` reads it
    back.

    gensim's names are taken where they mean the same (``vector_size``, ``workers``,
    ``alpha``, ``sg``, ``hs``, ``min_count``, ``corpus_file``, ...: mpidwe/train/keywords.py)
    and refused with mpidwe's name otherwise; ``sentences=`` (an iterable of token lists) or
    a text ``corpus`` is preprocessed into ``OUT/corpus.h5`` with ``min_count``,
    ``max_vocab``, ``lowercase``, ``normalize`` and ``strip_doc_tags``.

    ``matrix`` picks the returned vectors (input, output or sum); ``log`` receives the
    command's log lines (rank 0; None for none). The result has ``run_dir`` and ``result``
    (the ``RunResult``: metrics history, seconds, words, the checkpoint written, and
    ``stopped``, true when SIGTERM/SIGUSR1 stopped training early after a checkpoint).

    Named ``fit`` rather than ``train``: ``mpidwe.train`` is the module behind
    ``python -m mpidwe.train``, and Python sets a package's attribute to a submodule whenever
    that submodule is imported, so a function of that name would be replaced by the module
    as soon as anything (this function included) imported it."""
    from .train.fit import fit as train_and_load

    return train_and_load(matrix=matrix, log=log, **options)
