"""The Python API: ``mpidwe.load(path)`` and ``mpidwe.fit(**options)`` (reference: docs/api.md).

``load`` reads what training leaves behind (a run directory, a checkpoint, a word2vec text or
binary file) into a :class:`WordVectors`, which answers the questions gensim's
``KeyedVectors`` answers (``most_similar``, ``similarity``, ``[word]``, the two benchmark
evaluations) and converts to one (``to_gensim``). ``fit`` trains from Python on this process
(or on every rank of an ``mpiexec`` job) with the options of ``python -m mpidwe.train``.

This module reads no file itself: checkpoints through checkpoint.py, word2vec files through
evaluate/vectors.py, the corpus's counts through corpus.py. The heavy imports (h5py, torch,
scipy) happen inside the functions that need them, so ``import mpidwe`` stays fast.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from .core.errors import InputError

MATRICES = ("input", "output", "sum")

_log = logging.getLogger("mpidwe")


class WordVectors:
    """Words and their vectors, with gensim-style queries.

    ``words`` (list of str, most frequent first for mpidwe's own files), ``vectors`` (float32,
    one row per word), ``counts`` (int64 corpus counts, or None where the source has none, as a
    word2vec file), ``path`` (what was loaded), ``checkpoint`` (the
    :class:`mpidwe.io.checkpoint.Checkpoint` it came from, with configuration, progress and
    metrics; None for a word2vec file or a :func:`fit` result), ``run_dir`` (the run directory
    when known), ``matrix`` (input, output or sum) and ``result`` (the ``RunResult`` of
    :func:`fit`, else None). Unit-length rows, used by every cosine query, are computed on the
    first query and kept."""

    def __init__(self, words, vectors, counts=None, *, path: str | None = None, checkpoint=None,
                 run_dir: str | None = None, matrix: str = "input", result=None, oov=None):
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise ValueError(f"{len(words)} words for vectors of shape {vectors.shape}")
        if counts is not None and len(counts) != len(words):
            raise ValueError(f"{len(words)} words but {len(counts)} counts")
        self.words = list(words)
        self.vectors = vectors
        self.counts = None if counts is None else np.asarray(counts, dtype=np.int64)
        self.path, self.checkpoint, self.run_dir = path, checkpoint, run_dir
        self.matrix, self.result = matrix, result
        # a model for words outside the vocabulary (``.kind``, ``.vector(word)``), or None
        self.oov = oov
        self._index: dict[str, int] | None = None
        self._unit: np.ndarray | None = None

    # ---------------------------------------------------------------- lookups
    @property
    def index(self) -> dict[str, int]:
        """word -> row (gensim's ``key_to_index``); built on first use."""
        if self._index is None:
            self._index = {w: i for i, w in enumerate(self.words)}
        return self._index

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @property
    def unit(self) -> np.ndarray:
        """The rows scaled to unit length (a zero row stays zero; a row with a nan or inf
        scores -inf in queries); computed once."""
        if self._unit is None:
            norms = np.linalg.norm(self.vectors, axis=1, keepdims=True)
            with np.errstate(invalid="ignore"):
                self._unit = self.vectors / np.maximum(norms, 1e-12)
        return self._unit

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word) -> bool:
        return word in self.index

    def __iter__(self):
        return iter(self.words)

    def __getitem__(self, word: str) -> np.ndarray:
        """The vector of ``word`` (a row of ``vectors``, not a copy); for a word outside the
        vocabulary, the OOV model's vector (:meth:`vector`)."""
        if self.oov is not None and isinstance(word, str) and word not in self.index:
            return self.vector(word)
        return self.vectors[self.row(word)]

    def vector(self, word: str) -> np.ndarray:
        """The word's vector: its row, or for a word outside the vocabulary the vector the
        checkpoint's OOV model gives it (subword n-grams); a KeyError without one."""
        i = self.index.get(word) if isinstance(word, str) else None
        if i is not None:
            return self.vectors[i]
        if self.oov is None:
            self.row(word)                 # raises the KeyError that names the word
        return np.asarray(self.oov.vector(word), dtype=np.float32)

    def _unit_of(self, word: str) -> tuple[np.ndarray, int | None]:
        """(unit vector, row or None for an OOV word) of a query word."""
        i = self.index.get(word) if isinstance(word, str) else None
        if i is not None:
            return self.unit[i], i
        v = self.vector(word)
        return v / max(float(np.linalg.norm(v)), 1e-12), None

    def row(self, word: str) -> int:
        """The row of ``word``; a KeyError naming it when it is not in the vocabulary."""
        try:
            return self.index[word]
        except (KeyError, TypeError):
            hint = "" if self.oov is not None else "; these vectors have no model for words outside the vocabulary"
            raise KeyError(f"word not in vocabulary: {word!r} ({len(self):,} words in "
                           f"{self.path or 'these vectors'}{hint})") from None

    def __repr__(self) -> str:
        src = f", from {self.path!r}" if self.path else ""
        return f"<WordVectors: {len(self):,} words x {self.dim}, {self.matrix} matrix{src}>"

    # ---------------------------------------------------------------- queries
    def most_similar(self, positive=None, negative=None, topn: int | None = 10):
        """The ``topn`` words closest by cosine to the normalised sum of the unit vectors of
        the ``positive`` words minus those of the ``negative`` words (3CosAdd, as gensim's
        ``KeyedVectors.most_similar``), excluding the query words: a list of
        ``(word, cosine)``, best first. ``positive`` and ``negative`` are a word or a list of
        words; ``most_similar(positive=["king", "woman"], negative=["man"])`` answers
        man:king :: woman:?. ``topn=None`` returns the cosine of every word (an array in
        vocabulary order, query words included). An unknown word is a KeyError."""
        positive = [positive] if isinstance(positive, str) else list(positive or [])
        negative = [negative] if isinstance(negative, str) else list(negative or [])
        if not positive and not negative:
            raise ValueError("most_similar needs at least one positive or negative word")
        if topn is not None and topn < 1:
            return []
        looked = [self._unit_of(w) for w in positive + negative]
        rows = [i for _, i in looked if i is not None]
        weights = np.array([1.0] * len(positive) + [-1.0] * len(negative), dtype=np.float32)
        query = weights @ np.stack([u for u, _ in looked])
        query /= max(float(np.linalg.norm(query)), 1e-12)
        scores = self.unit @ query
        scores[~np.isfinite(scores)] = -np.inf
        if topn is None:
            return scores
        exclude = set(rows)
        k = min(topn + len(exclude), len(scores))
        best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.words[i], float(scores[i])) for i in best if i not in exclude][:topn]

    def similarity(self, w1: str, w2: str) -> float:
        """Cosine similarity of two words (an OOV word through the OOV model, if any)."""
        return float(self._unit_of(w1)[0] @ self._unit_of(w2)[0])

    # ---------------------------------------------------------------- benchmarks
    def evaluate_word_pairs(self, path: str):
        """Word similarity on a ``word1 word2 score`` file (tab or space separated, ``#``
        comments), as gensim's method of this name: ``(pearson, spearman, oov_ratio)`` where
        ``pearson`` and ``spearman`` are ``(correlation, p-value)`` over the pairs whose two
        words are known (looked up as given, then lowercased) and ``oov_ratio`` is the percent
        of pairs left out. The Spearman correlation is the one ``python -m mpidwe.evaluate``
        reports. Correlations are nan when fewer than two pairs are covered."""
        from scipy.stats import pearsonr, spearmanr

        from .evaluate.similarity import evaluate_similarity, read_similarity

        pairs = read_similarity(path)
        report = evaluate_similarity(self.vectors, self.index, pairs)
        cos, human = [], []
        for a, b, s in pairs:  # the pairs evaluate_similarity counts as covered, in order
            ia = self.index.get(a, self.index.get(a.lower()))
            ib = self.index.get(b, self.index.get(b.lower()))
            if ia is not None and ib is not None:
                c = float(self.unit[ia] @ self.unit[ib])
                if np.isfinite(c):
                    cos.append(c)
                    human.append(s)
        oov = 100.0 * (1 - report["coverage"])
        if len(cos) < 2:
            return (float("nan"), float("nan")), (float("nan"), float("nan")), oov
        pr = pearsonr(cos, human)
        rho = report["spearman"] if report["spearman"] is not None else float("nan")
        return (float(pr[0]), float(pr[1])), (rho, float(spearmanr(cos, human)[1])), oov

    def evaluate_word_analogies(self, path: str, *, restrict_vocab: int = 30000, method: str = "add"):
        """Analogy accuracy on a ``questions-words.txt`` style file, as gensim's method of this
        name: ``(accuracy, report)``. The answer is searched among the ``restrict_vocab`` most
        frequent words, excluding the three question words (3CosAdd; ``method="mul"`` for
        3CosMul); a question with a word outside them is not counted. ``report`` is the dict
        ``python -m mpidwe.evaluate --json`` prints: coverage, correct, semantic/syntactic
        and per-section counts. ``accuracy`` is None when no question is covered."""
        from .evaluate.analogy import evaluate_analogies, read_analogies

        report = evaluate_analogies(self.vectors, self.index, read_analogies(path),
                                    restrict_vocab=restrict_vocab, method=method)
        return report["accuracy"], report

    # ---------------------------------------------------------------- conversions
    def save_word2vec_format(self, path: str, *, binary: bool = False) -> None:
        """Write word2vec text (default, as gensim) or binary, atomically. Whitespace inside a
        word is written as a ``\\uXXXX`` escape (docs/api.md)."""
        from .io.vectors import write_word2vec

        write_word2vec(path, self.words, self.vectors, binary=binary)

    def to_gensim(self):
        """A ``gensim.models.KeyedVectors`` with the same words, vectors (copied) and, where
        known, counts (its ``get_vecattr(word, "count")``)."""
        try:
            from gensim.models import KeyedVectors
        except ImportError:
            raise ImportError("WordVectors.to_gensim() needs gensim, which is not installed "
                              "(pip install gensim)") from None
        # filled as gensim's own load_word2vec_format fills it (its add_vectors is a Python
        # loop per word, and mishandles extras in gensim 4.3-4.4)
        kv = KeyedVectors(self.dim, count=len(self), dtype=np.float32)
        kv.vectors[:] = self.vectors
        kv.index_to_key = list(self.words)
        kv.key_to_index = dict(self.index)
        if self.counts is not None:
            kv.allocate_vecattrs(["count"], [np.int64])
            kv.expandos["count"][:] = self.counts
        return kv


# -------------------------------------------------------------------- loading
def read_checkpoint(path: str, warn=None, params: bool = True):
    """The :class:`mpidwe.io.checkpoint.Checkpoint` at ``path``, or, for a run directory (or its
    ``checkpoints`` folder), its newest checkpoint that loads and verifies; damaged ones are
    skipped with a warning passed to ``warn``. Loaded (and checksummed) once. ``params=False``
    leaves the matrices unread (checkpoint.load)."""
    from .io import checkpoint

    if not os.path.isdir(path):
        return checkpoint.load(path, params=params)
    sub = os.path.join(path, "checkpoints")
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


def _check_matrix(matrix: str) -> None:
    if matrix not in MATRICES:
        raise ValueError(f"matrix must be one of {', '.join(MATRICES)}, got {matrix!r}")


def load(path, *, matrix: str = "input", warn=None) -> WordVectors:
    """Word vectors from a run directory (its newest valid checkpoint), a checkpoint file, or a
    word2vec text or binary file (told apart by content, not by name).

    ``matrix``: ``input`` (the word vectors; default), ``output`` (the context vectors) or
    ``sum`` (both added, sometimes better on similarity); a word2vec file holds one matrix,
    so only ``input`` is accepted for it. ``warn`` receives a line for each damaged
    checkpoint skipped in a run directory (default: the ``mpidwe`` logger). A file that
    cannot be read raises :class:`mpidwe.core.errors.InputError` with a one-line message."""
    _check_matrix(matrix)
    path = os.fspath(path)
    kind = kind_of(path)
    if kind == "word2vec":
        if matrix != "input":
            raise InputError(f"{path} is a word2vec file, which holds only the input vectors (the "
                             f"{matrix} matrix needs a checkpoint or a run directory)")
        from .io.vectors import read_word2vec

        words, vectors = read_word2vec(path)
        return WordVectors(words, vectors, None, path=path, matrix=matrix)
    ck = read_checkpoint(path, warn=warn or _log.warning)
    run_dir = path if kind == "run" else _run_dir_of(ck.path)
    oov = oov_model(ck.config, ck.words, ck.w_in, ck, matrix)
    vectors = _matrix(ck, matrix, oov.word_vectors() if isinstance(oov, SubwordOOV) else None)
    return WordVectors(ck.words, vectors, ck.counts, path=path, checkpoint=ck,
                       run_dir=run_dir, matrix=matrix, oov=oov)


class SubwordOOV:
    """fastText's answer for any word: the mean of its rows (own and n-gram), n-grams only
    for a word outside the vocabulary."""

    kind = "subwords"

    def __init__(self, table, w_in):
        self.table, self.w_in = table, w_in

    def word_vectors(self) -> np.ndarray:
        return self.table.word_vectors(self.w_in)

    def vector(self, word: str) -> np.ndarray:
        return self.table.vector(self.w_in, word)


def oov_model(config: dict, words, w_in, ck=None, matrix: str = "input"):
    """The OOV model of a checkpoint, or None: its subwords (from its configuration and input
    rows), else the character generator fitted to its ``matrix`` vectors and stored beside
    ``ck`` (``python -m mpidwe.inspect RUN fit-chars``; checkpoint.load_char_model)."""
    if config.get("subwords"):
        from .core.subwords import build_table

        return SubwordOOV(build_table(list(words), config["minn"], config["maxn"], config["buckets"]), w_in)
    if ck is not None and ck.path:
        from .io.checkpoint import load_char_model

        stored = load_char_model(ck)
        if stored is not None and stored[2] == matrix:
            from .core.charmodel import CharModel

            meta, params, _ = stored
            try:
                return CharModel.from_state(meta, params)
            except (KeyError, TypeError, ValueError, RuntimeError) as e:   # shapes or names that do not fit
                raise InputError(f"{ck.path}: its character model does not fit this mpidwe: "
                                 f"{str(e).splitlines()[0]}") from None
    return None


def _run_dir_of(ckpt_path: str) -> str | None:
    folder = os.path.dirname(os.path.abspath(ckpt_path))
    return os.path.dirname(folder) if os.path.basename(folder) == "checkpoints" else None


# -------------------------------------------------------------------- training
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

    ``matrix`` picks the returned vectors (input, output or sum); ``log`` receives the
    command's log lines (rank 0; None for none). The result has ``run_dir`` and ``result``
    (the ``RunResult``: metrics history, seconds, words, the checkpoint written, and
    ``stopped``, true when SIGTERM/SIGUSR1 stopped training early after a checkpoint).

    Named ``fit`` rather than ``train``: ``mpidwe.train`` is the module behind
    ``python -m mpidwe.train``, and Python sets a package's attribute to a submodule whenever
    that submodule is imported, so a function of that name would be replaced by the module
    as soon as anything (this function included) imported it."""
    _check_matrix(matrix)
    from . import train as train_module
    from .dist.comm import Comm
    from .core.config import TrainConfig, from_mapping, to_dict

    cfg = from_mapping(TrainConfig, options, source="mpidwe.fit() arguments")
    if cfg.follow:
        from .core.errors import ConfigError

        raise ConfigError("follow= watches a folder until stopped and returns no vectors; run python -m "
                          "mpidwe.train --follow DIR, then mpidwe.load(RUN_DIR/steps/NNNN)")
    if matrix != "input" and cfg.loss == "hs":
        raise InputError("a run trained with hierarchical softmax has word vectors in its input matrix only "
                         "(its output rows are Huffman-tree nodes)")
    result = train_module.run(cfg, Comm.world(), log=log)
    counts = _corpus_counts(cfg.corpus or os.path.join(train_module.DEMO_DIR, "corpus.h5"), len(result.words))
    oov = oov_model(to_dict(cfg), result.words, result.w_in)
    w_in = oov.word_vectors() if isinstance(oov, SubwordOOV) else result.w_in
    w = {"input": w_in, "output": result.w_out}.get(matrix)
    if w is None:
        w = w_in + result.w_out
    return WordVectors(result.words, w, counts, path=cfg.out, run_dir=cfg.out, matrix=matrix, result=result,
                       oov=oov)


def _corpus_counts(path: str, n_words: int):
    from .io.corpus import Corpus

    with Corpus(path) as corpus:
        counts = corpus.counts
    return counts if len(counts) == n_words else None
