"""Words and their vectors with gensim's questions (``most_similar``, ``similarity``, the two
benchmark evaluations), and the models that answer for words outside the vocabulary.

Arrays in, answers out: what :func:`mpidwe.load` and :func:`mpidwe.fit` return.
"""

from __future__ import annotations

import os

import numpy as np

from ..core.errors import InputError


MATRICES = ("input", "output", "sum")


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

        from .similarity import evaluate_similarity, read_similarity

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
        from .analogy import evaluate_analogies, read_analogies

        report = evaluate_analogies(self.vectors, self.index, read_analogies(path),
                                    restrict_vocab=restrict_vocab, method=method)
        return report["accuracy"], report

    # ---------------------------------------------------------------- conversions
    def save_word2vec_format(self, path: str, *, binary: bool = False) -> None:
        """Write word2vec text (default, as gensim) or binary, atomically. Whitespace inside a
        word is written as a ``\\uXXXX`` escape (docs/api.md)."""
        from ..io.vectors import write_word2vec

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


def check_matrix(matrix: str) -> None:
    if matrix not in MATRICES:
        raise ValueError(f"matrix must be one of {', '.join(MATRICES)}, got {matrix!r}")


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
        from ..core.subwords import build_table

        return SubwordOOV(build_table(list(words), config["minn"], config["maxn"], config["buckets"]), w_in)
    if ck is not None and ck.path:
        from ..io.checkpoint import load_char_model

        stored = load_char_model(ck)
        if stored is not None and stored[2] == matrix:
            from ..core.charmodel import CharModel

            meta, params, _ = stored
            try:
                return CharModel.from_state(meta, params)
            except (KeyError, TypeError, ValueError, RuntimeError) as e:   # shapes or names that do not fit
                raise InputError(f"{ck.path}: its character model does not fit this mpidwe: "
                                 f"{str(e).splitlines()[0]}") from None
    return None
