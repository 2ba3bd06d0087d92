"""``mpidwe.fit(**options)`` (also ``mpidwe.train(**options)``): train from Python and get
the vectors back as a :class:`~mpidwe.evaluate.wordvectors.WordVectors`."""

from __future__ import annotations

import os

from ..core.config import PreprocessConfig, TrainConfig, from_mapping, keyword_message, to_dict
from ..core.errors import ConfigError, InputError, MpidweError
from ..parallel.comm import Comm
from ..evaluate.wordvectors import SubwordOOV, WordVectors, check_matrix, oov_model
from ..io.corpus import Corpus
from ..io.formats import HDF5_SIGNATURE, SEAL_MAGIC
from .runner import DEMO_DIR, run

# the options that name one file or folder, and those that name several
PATH_OPTIONS = ("corpus", "out", "resume", "init_from", "follow")
PATH_LIST_OPTIONS = ("eval_sim", "eval_analogy")


# -------------------------------------------------------------------- training
def fit(*, matrix: str = "input", log=print, **options) -> WordVectors:
    """``mpidwe.train`` / ``mpidwe.fit``: see its docstring in mpidwe/api.py."""
    check_matrix(matrix)
    try:
        return _fit(matrix, log, plain_paths(options))
    except MpidweError as e:      # the command's messages, in the words of this call
        e.args = (keyword_message(TrainConfig, str(e)),)
        raise


def _fit(matrix: str, log, options: dict) -> WordVectors:
    cfg = from_mapping(TrainConfig, options, source="mpidwe.train() arguments")
    if cfg.follow:
        raise ConfigError("follow= watches a folder until stopped and returns no vectors; run python -m "
                          "mpidwe.train --follow DIR, then mpidwe.load(RUN_DIR/steps/NNNN)")
    if matrix != "input" and cfg.loss == "hs":
        raise InputError("a run trained with hierarchical softmax has word vectors in its input matrix only "
                         "(its output rows are Huffman-tree nodes)")
    comm = Comm.world()
    if cfg.corpus and is_text(cfg.corpus):
        options = dict(options, corpus=corpus_from_text(cfg.corpus, cfg.out, comm, log))
        cfg = from_mapping(TrainConfig, options, source="mpidwe.train() arguments")
    result = run(cfg, comm, log=log, given=frozenset(options))
    config = result.config or to_dict(cfg)     # with the settings a resumed run took from its checkpoint
    counts = _corpus_counts(config.get("corpus") or os.path.join(DEMO_DIR, "corpus.h5"), len(result.words))
    oov = oov_model(config, result.words, result.w_in)
    w_in = oov.word_vectors() if isinstance(oov, SubwordOOV) else result.w_in
    w = {"input": w_in, "output": result.w_out}.get(matrix)
    if w is None:
        w = w_in + result.w_out
    return WordVectors(result.words, w, counts, path=cfg.out, run_dir=cfg.out, matrix=matrix, result=result,
                       oov=oov)


def plain_paths(options: dict) -> dict:
    """``options`` with every ``os.PathLike`` (a ``pathlib.Path``) as the ``str`` the
    configuration takes, as ``mpidwe.load`` takes both."""
    out = dict(options)
    for key in PATH_OPTIONS:
        if isinstance(out.get(key), os.PathLike):
            out[key] = os.fspath(out[key])
    for key in PATH_LIST_OPTIONS:
        if isinstance(out.get(key), (list, tuple)):
            out[key] = [os.fspath(p) if isinstance(p, os.PathLike) else p for p in out[key]]
    return out


def is_text(path: str) -> bool:
    """A file that is neither HDF5 nor sealed mpidwe HDF5: raw text for preprocessing."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(HDF5_SIGNATURE))
    except OSError:
        return False          # missing or unreadable: the corpus reader says so
    return head != HDF5_SIGNATURE and head != SEAL_MAGIC.encode()[:len(HDF5_SIGNATURE)]


def corpus_from_text(text: str, out: str, comm: Comm, log) -> str:
    """``corpus=`` a text file (as gensim's ``corpus_file``): preprocessed with the default
    options into ``OUT/corpus.h5``, kept and used again while it is newer than the text;
    returns its path."""
    from ..preprocess import run as preprocess

    target = os.path.join(out, "corpus.h5")
    fresh = comm.bcast(os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(text)
                       if comm.is_root else None)
    if not fresh:
        if comm.is_root:
            os.makedirs(out, exist_ok=True)
        preprocess(PreprocessConfig(inputs=(text,), output=target, force=True), comm,
                   log=log if comm.is_root else None)
    return target


def _corpus_counts(path: str, n_words: int):
    with Corpus(path) as corpus:
        counts = corpus.counts
    return counts if len(counts) == n_words else None
