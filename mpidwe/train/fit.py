"""``mpidwe.fit(**options)`` (also ``mpidwe.train(**options)``): train from Python and get
the vectors back as a :class:`~mpidwe.evaluate.wordvectors.WordVectors`."""

from __future__ import annotations

import os

from ..core.config import TrainConfig, from_mapping, keyword_message, to_dict
from ..core.errors import ConfigError, InputError, MpidweError
from ..parallel.comm import Comm
from ..evaluate.wordvectors import SubwordOOV, WordVectors, check_matrix, oov_model
from ..io.corpus import Corpus
from ..io.formats import HDF5_SIGNATURE, SEAL_MAGIC
from .keywords import Keywords, text_config, translate
from .rundir import _check_run_dir
from .runner import DEMO_DIR, run

# the options that name one file or folder, and those that name several
PATH_OPTIONS = ("corpus", "corpus_file", "out", "resume", "init_from", "follow")
PATH_LIST_OPTIONS = ("eval_sim", "eval_analogy")


# -------------------------------------------------------------------- training
def fit(*, matrix: str = "input", log=print, **options) -> WordVectors:
    """``mpidwe.train`` / ``mpidwe.fit``: see its docstring in mpidwe/api.py."""
    check_matrix(matrix)
    try:
        return _fit(matrix, log, translate(plain_paths(options)))
    except MpidweError as e:      # the command's messages, in the words of this call
        e.args = (keyword_message(TrainConfig, str(e)),)
        raise


def _fit(matrix: str, log, kw: Keywords) -> WordVectors:
    options = kw.train
    cfg = from_mapping(TrainConfig, options, source="mpidwe.train() arguments")
    if cfg.follow:
        raise ConfigError("follow= watches a folder until stopped and returns no vectors; run python -m "
                          "mpidwe.train --follow DIR, then mpidwe.load(RUN_DIR/steps/NNNN)")
    if matrix != "input" and cfg.loss == "hs":
        raise InputError("a run trained with hierarchical softmax has word vectors in its input matrix only "
                         "(its output rows are Huffman-tree nodes)")
    comm = Comm.world()
    if kw.sentences is not None or (cfg.corpus and is_text(cfg.corpus)):
        comm.on_root(_check_run_dir, cfg, False, broadcast=False)   # OUT/corpus.h5 of a run stays as it is
    if kw.sentences is not None:
        corpus = corpus_from_sentences(kw.sentences, cfg.out, kw.text, comm, log)
    elif cfg.corpus and is_text(cfg.corpus):
        corpus = corpus_from_text(cfg.corpus, cfg.out, comm, log, kw.text)
    elif kw.text:
        raise ConfigError(f"{', '.join(kw.text)} build a corpus from text (sentences=, corpus_file= or corpus= a "
                          f"text file); {cfg.corpus or 'the demo corpus'} is preprocessed already, with its "
                          f"vocabulary fixed (mpidwe.preprocess(text, min_count=...) builds another)")
    else:
        corpus = None
    if corpus is not None:
        options = dict(options, corpus=corpus)
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


def corpus_from_text(text: str, out: str, comm: Comm, log, options: dict | None = None) -> str:
    """``corpus=`` a text file (as gensim's ``corpus_file``): preprocessed into
    ``OUT/corpus.h5`` with ``options`` (min_count, normalize, ...: keywords.TEXT_OPTIONS) over
    the defaults; without options the corpus made before is used again while it is newer
    than the text. Returns its path. Text that looks like it wants normalising (markup,
    mixed case) and is given none gets a hint on ``log``."""
    from ..io.text import markup_signs
    from ..preprocess import run as preprocess

    options = options or {}
    target = os.path.join(out, "corpus.h5")
    if comm.is_root and log and not {"lowercase", "normalize", "strip_doc_tags"} & set(options):
        signs = markup_signs(text)
        if signs:
            log(f"hint: {text} has {' and '.join(signs)}; mpidwe.train keeps every token as written "
                f"({'The and the are two words' if 'mixed case' in signs else '<doc tags become words'}): "
                f"pass {_fix(signs)}, or normalize='none' to keep it as it is")
    fresh = comm.bcast(not options and os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(text)
                       if comm.is_root else None)
    if not fresh:
        if comm.is_root:
            os.makedirs(out, exist_ok=True)
        preprocess(text_config(options, inputs=(text,), output=target, force=True), comm,
                   log=log if comm.is_root else None)
    return target


def _fix(signs: list[str]) -> str:
    fixes = (["strip_doc_tags=True"] if "doc tags" in signs else []) + (
        ["lowercase=True (or normalize='text8': lowercase, a-z only)"] if "mixed case" in signs else [])
    return " and ".join(fixes)


def corpus_from_sentences(sentences, out: str, options: dict, comm: Comm, log) -> str:
    """gensim's ``sentences=``: an iterable of token lists (rank 0's is read), written one
    sentence a line to a temporary text file beside the run and preprocessed with
    ``options`` into ``OUT/corpus.h5``; the text file is removed. Returns the corpus's path."""
    text = os.path.join(out, f".sentences-{os.getpid()}.txt")
    error = None
    if comm.is_root:
        try:
            os.makedirs(out, exist_ok=True)
            write_sentences(sentences, text)
        except (ConfigError, OSError) as e:
            error = str(e) if isinstance(e, ConfigError) else f"cannot write {text}: {e.strerror}"
    error = comm.bcast(error if comm.is_root else None)
    if error:
        raise ConfigError(error)
    try:
        target = os.path.join(out, "corpus.h5")
        from ..preprocess import run as preprocess

        preprocess(text_config(options, inputs=(text,), output=target, force=True), comm,
                   log=log if comm.is_root else None)
        return target
    finally:
        if comm.is_root and os.path.exists(text):
            os.remove(text)


def write_sentences(sentences, path: str) -> None:
    """Token lists as text, one a line; a token that is not a string or holds whitespace (it
    would be split into several words) is a ConfigError, and the file is removed."""
    if isinstance(sentences, (str, bytes)) or not hasattr(sentences, "__iter__"):
        raise ConfigError(f"sentences must be an iterable of token lists (as gensim's), got "
                          f"{type(sentences).__name__}; a text file is corpus_file=")
    try:
        with open(path, "w", encoding="utf-8") as fh:
            for n, sentence in enumerate(sentences):
                if isinstance(sentence, (str, bytes)) or not hasattr(sentence, "__iter__"):
                    raise ConfigError(f"sentences[{n}] is {type(sentence).__name__}, not a list of tokens "
                                      f"(split it: text.split())")
                tokens = list(sentence)
                for t in tokens:
                    if not isinstance(t, str) or not t or len(t.split()) != 1:
                        raise ConfigError(f"sentences[{n}] holds the token {t!r}: tokens are non-empty strings "
                                          f"without whitespace")
                if tokens:
                    fh.write(" ".join(tokens) + "\n")
    except BaseException:
        os.remove(path)
        raise


def _corpus_counts(path: str, n_words: int):
    with Corpus(path) as corpus:
        counts = corpus.counts
    return counts if len(counts) == n_words else None
