"""Words and their vectors with gensim's questions (``most_similar``, ``similarity``, the two
benchmark evaluations), and the models that answer for words outside the vocabulary.

Arrays in, answers out: what :func:`mpidwe.load` and :func:`mpidwe.fit` return.
"""

from __future__ import annotations

import logging
import numbers
import os

import numpy as np

from ..core.errors import InputError


MATRICES = ("input", "output", "sum")


_log = logging.getLogger("mpidwe")


def _as_list(value) -> list:
    """One query term or several, as gensim's ``_ensure_list``: a word, a row number or one
    vector is one term; a 2-D array is one term per row; anything else iterable, its items."""
    if value is None:
        return []
    if isinstance(value, (str, numbers.Integral)) or (isinstance(value, np.ndarray) and value.ndim == 1):
        return [value]
    if isinstance(value, np.ndarray) and value.ndim == 2:
        return list(value)
    try:
        return list(value)
    except TypeError:
        raise TypeError(f"expected words, row numbers or vectors, got {value!r} "
                        f"({type(value).__name__})") from None


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
        self.norms: np.ndarray | None = None     # each row's length, after fill_norms (gensim's)

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
    def vector_size(self) -> int:
        """The vector dimension (gensim's name for :attr:`dim`)."""
        return self.dim

    def fill_norms(self, force: bool = False) -> None:
        """Set :attr:`norms`, each row's length, unless set already (``force``: again), as gensim."""
        if self.norms is None or force:
            self.norms = np.linalg.norm(self.vectors, axis=1)

    def get_normed_vectors(self) -> np.ndarray:
        """A copy of the rows scaled to unit length (gensim's; a zero row stays zero here)."""
        return self.unit.copy()

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
        vocabulary, the OOV model's vector (:meth:`vector`); an int is a row number, as in gensim."""
        if self.oov is not None and isinstance(word, str) and word not in self.index:
            return self.vector(word)
        return self.vectors[self.get_index(word)]

    # gensim's KeyedVectors names for the same things
    @property
    def key_to_index(self) -> dict[str, int]:
        """word -> row (the same dict as :attr:`index`)."""
        return self.index

    @property
    def index_to_key(self) -> list[str]:
        """The words in row order (the same list as :attr:`words`)."""
        return self.words

    def has_index_for(self, key) -> bool:
        return isinstance(key, str) and key in self.index

    def get_index(self, key) -> int:
        """The row of a word, or an int row number itself (as gensim); a KeyError naming it."""
        if isinstance(key, numbers.Integral) and not isinstance(key, bool):
            if 0 <= key < len(self):
                return int(key)
            raise KeyError(f"row {key} is out of range ({len(self):,} words)")
        return self.row(key)

    def get_vector(self, key, norm: bool = False) -> np.ndarray:
        """The vector of a word or row number (:meth:`vector`); ``norm=True``: scaled to unit
        length (gensim's ``get_vector(key, norm=True)``)."""
        v = self.vector(key) if isinstance(key, str) else self.vectors[self.get_index(key)]
        return v / max(float(np.linalg.norm(v)), 1e-12) if norm else v

    def vector(self, word: str) -> np.ndarray:
        """The word's vector: its row, or for a word outside the vocabulary the vector the
        checkpoint's OOV model gives it (subword n-grams); a KeyError without one."""
        i = self.index.get(word) if isinstance(word, str) else None
        if i is not None:
            return self.vectors[i]
        if self.oov is None:
            self.row(word)                 # raises the KeyError that names the word
        return np.asarray(self.oov.vector(word), dtype=np.float32)

    def row(self, word: str) -> int:
        """The row of ``word``; a KeyError naming it when it is not in the vocabulary."""
        try:
            return self.index[word]
        except (KeyError, TypeError):
            hint = "" if self.oov is not None else "; these vectors have no model for words outside the vocabulary"
            raise KeyError(f"word not in vocabulary: {word!r} ({len(self):,} words in "
                           f"{self.path or 'these vectors'}{hint}){self.case_hint([word])}") from None

    def case_hint(self, words) -> str:
        """``; did you mean 'king'?`` for the words outside the vocabulary whose lowercase form
        is in it (the hint python -m mpidwe.inspect gives), else an empty string."""
        known = [w.lower() for w in words if isinstance(w, str) and w not in self and w.lower() != w
                 and w.lower() in self]
        return f"; did you mean {', '.join(map(repr, known))}? (the vocabulary is lowercase)" if known else ""

    def __repr__(self) -> str:
        src = f", from {self.path!r}" if self.path else ""
        return f"<WordVectors: {len(self):,} words x {self.dim}, {self.matrix} matrix{src}>"

    # ---------------------------------------------------------------- queries
    def _term(self, term, who: str) -> tuple[np.ndarray, int | None, bool]:
        """One query term: (vector, its row or None, whether the vector is a unit one). A
        word or row number gives its unit vector (an unknown word: the OOV model's, or a
        KeyError); a vector of ``dim`` numbers is taken as it is (as gensim). A row that is
        not finite (nan or inf: a diverged or damaged model) is refused, never used."""
        if isinstance(term, np.ndarray) or (isinstance(term, (list, tuple)) and term
                                            and all(isinstance(x, numbers.Real) for x in term)):
            v = np.asarray(term, dtype=np.float32)
            if v.shape != (self.dim,):
                raise ValueError(f"{who}: a query vector must have {self.dim} numbers (these vectors' "
                                 f"dimension), got shape {v.shape}")
            if not np.all(np.isfinite(v)):
                raise ValueError(f"{who}: the query vector has nan or inf values")
            return v, None, False
        if isinstance(term, bool) or not isinstance(term, (str, numbers.Integral)):
            raise TypeError(f"{who}: a query is a word, a row number or a vector of {self.dim} numbers, "
                            f"got {term!r} ({type(term).__name__})")
        if isinstance(term, str) and term not in self.index and self.oov is not None:
            v = np.asarray(self.oov.vector(term), dtype=np.float32)
            return v / max(float(np.linalg.norm(v)), 1e-12), None, True
        i = self.get_index(term)
        if not np.all(np.isfinite(self.vectors[i])):
            raise InputError(f"the vector of {self.words[i]!r} (row {i}) has nan or inf values (a diverged or "
                             f"damaged model), so it cannot be queried")
        return self.unit[i], i, True

    def _terms(self, positive, negative, who: str):
        """The weighted terms of a query: [(vector, row, unit, weight)]; a (term, weight)
        pair sets the weight (as gensim); positive terms weigh 1, negative -1 by default."""
        out = []
        for items, sign in ((_as_list(positive), 1.0), (_as_list(negative), -1.0)):
            for item in items:
                weight = sign
                if (isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], numbers.Real)
                        and not isinstance(item[0], numbers.Real)):
                    item, weight = item
                out.append((*self._term(item, who), float(weight)))
        if not out:
            raise ValueError(f"{who} needs at least one positive or negative word")
        return out

    def _scores(self, query: np.ndarray, restrict_vocab: int | None) -> np.ndarray:
        """Cosine of every row (of the first ``restrict_vocab``) with a unit ``query``; rows
        that are not finite score -inf."""
        unit = self.unit if restrict_vocab is None else self.unit[:max(0, int(restrict_vocab))]
        scores = unit @ query
        scores[~np.isfinite(scores)] = -np.inf
        return scores

    def _best(self, scores: np.ndarray, exclude: set, topn: int) -> list[tuple[str, float]]:
        """The ``topn`` best finite scores, rows in ``exclude`` left out."""
        k = min(topn + len(exclude), len(scores))
        best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self.words[i], float(scores[i])) for i in best
                if i not in exclude and np.isfinite(scores[i])][:topn]

    def most_similar(self, positive=None, negative=None, topn: int | None = 10, restrict_vocab: int | None = None):
        """The ``topn`` words closest by cosine to the normalised weighted sum of the unit
        vectors of the ``positive`` words minus those of the ``negative`` words (3CosAdd, as
        gensim's ``KeyedVectors.most_similar``), excluding the query words: a list of
        ``(word, cosine)``, best first. ``positive`` and ``negative`` take a word, a row
        number, a vector, a ``(term, weight)`` pair or a list of them;
        ``most_similar(positive=["king", "woman"], negative=["man"])`` answers man:king ::
        woman:?. ``restrict_vocab``: search only the first (most frequent) that many words.
        ``topn=None`` returns the cosine of every word (an array in vocabulary order, query
        words included, -inf for a row that is not finite). An unknown word is a KeyError;
        a word whose row is not finite is refused, and such rows are never answers."""
        if topn is not None and topn < 1:
            return []
        terms = self._terms(positive, negative, "most_similar")
        query = np.stack([w * v for v, _, _, w in terms]).sum(axis=0, dtype=np.float32)
        query /= max(float(np.linalg.norm(query)), 1e-12)
        scores = self._scores(query, restrict_vocab)
        if topn is None:
            return scores
        return self._best(scores, {i for _, i, _, _ in terms if i is not None}, topn)

    def most_similar_cosmul(self, positive=None, negative=None, topn: int | None = 10,
                            restrict_vocab: int | None = None):
        """3CosMul (Levy and Goldberg 2014, gensim's ``most_similar_cosmul``): the words that
        maximise the product of the cosines (shifted to [0, 1]) with the ``positive`` terms
        over the product with the ``negative`` ones (+ 1e-6); the same terms as
        :meth:`most_similar`, the query words excluded."""
        if topn is not None and topn < 1:
            return []
        terms = self._terms(positive, negative, "most_similar_cosmul")
        if not any(w > 0 for *_, w in terms):
            raise ValueError("most_similar_cosmul needs at least one positive word")
        unit = self.unit if restrict_vocab is None else self.unit[:max(0, int(restrict_vocab))]
        with np.errstate(invalid="ignore"):
            shifted = [(1 + unit @ v) / 2 for v, *_ in terms]
            pos = np.prod([d for d, (*_, w) in zip(shifted, terms) if w > 0], axis=0)
            neg = np.prod([d for d, (*_, w) in zip(shifted, terms) if w < 0], axis=0)
            scores = pos / (neg + 0.000001)
        scores[~np.isfinite(scores)] = -np.inf
        if topn is None:
            return scores
        return self._best(scores, {i for _, i, _, _ in terms if i is not None}, topn)

    def _unit_term(self, term, who: str) -> np.ndarray:
        v, _, is_unit = self._term(term, who)
        return v if is_unit else v / max(float(np.linalg.norm(v)), 1e-12)

    def similarity(self, w1, w2) -> float:
        """Cosine similarity of two words (an OOV word through the OOV model, if any), row
        numbers or vectors."""
        return float(self._unit_term(w1, "similarity") @ self._unit_term(w2, "similarity"))

    def distance(self, w1, w2) -> float:
        """1 - cosine similarity (gensim's ``distance``)."""
        return 1.0 - self.similarity(w1, w2)

    def distances(self, word_or_vector, other_words=()) -> np.ndarray:
        """1 - cosine similarity of a word or vector with every word, or with ``other_words``
        (an array in their order, as gensim; nan for a row that is not finite)."""
        v = self._unit_term(word_or_vector, "distances")
        rows = self.unit if not other_words else self.unit[[self.get_index(w) for w in other_words]]
        return 1 - rows @ v

    def closer_than(self, key1, key2) -> list[str]:
        """The words closer to ``key1`` than ``key2`` is (gensim's ``closer_than``)."""
        d = self.distances(key1)
        i, j = self.get_index(key1), self.get_index(key2)
        return [self.words[k] for k in np.flatnonzero(d < d[j]) if k != i]

    def rank(self, key1, key2) -> int:
        """The rank of ``key2`` among the neighbours of ``key1`` (1: the nearest; gensim's ``rank``)."""
        return len(self.closer_than(key1, key2)) + 1

    def words_closer_than(self, word1, word2) -> list[str]:
        """gensim 3's name of :meth:`closer_than`."""
        return self.closer_than(word1, word2)

    def n_similarity(self, ws1, ws2) -> float:
        """Cosine of the means of two sets of words' vectors (gensim's ``n_similarity``: the raw
        vectors averaged, then compared). An unknown word is a KeyError here (gensim leaves it
        out); an empty set is a ZeroDivisionError, as gensim."""
        ws1, ws2 = list(ws1), list(ws2)
        if not (ws1 and ws2):
            raise ZeroDivisionError("n_similarity: at least one of the lists of words is empty")
        means = [np.mean([self.vector(w) if isinstance(w, str) else self.vectors[self.get_index(w)] for w in ws],
                         axis=0) for ws in (ws1, ws2)]
        a, b = (m / max(float(np.linalg.norm(m)), 1e-12) for m in means)
        return float(a @ b)

    def most_similar_to_given(self, key1, keys_list):
        """The word of ``keys_list`` most similar to ``key1`` (gensim's; the first on a tie)."""
        keys_list = list(keys_list)
        if not keys_list:
            raise ValueError("most_similar_to_given: keys_list is empty")
        return keys_list[int(np.argmax([self.similarity(key1, k) for k in keys_list]))]

    def doesnt_match(self, words) -> str:
        """The word furthest from the mean of the others' unit vectors (gensim's
        ``doesnt_match``); words without a vector are left out with a warning, as gensim does."""
        words = _as_list(words)
        used = [w for w in words if w in self or (self.oov is not None and isinstance(w, str))]
        if len(used) != len(words):
            _log.warning("doesnt_match: not in the vocabulary, left out: %s",
                         ", ".join(repr(w) for w in words if w not in used))
        if not used:
            raise ValueError("doesnt_match: none of the words is in the vocabulary")
        vectors = np.stack([self._unit_term(w, "doesnt_match") for w in used]).astype(np.float32)
        mean = vectors.mean(axis=0)
        mean /= max(float(np.linalg.norm(mean)), 1e-12)
        return sorted(zip((vectors @ mean).tolist(), used))[0][1]

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

    def save(self, path) -> None:
        """Write the words and vectors as word2vec binary (exact float32, atomically);
        :meth:`load`, :func:`mpidwe.load` and gensim's ``load_word2vec_format(path,
        binary=True)`` read it. Counts and the OOV model are not kept (a checkpoint keeps them)."""
        self.save_word2vec_format(os.fspath(path), binary=True)

    def save_fasttext(self, path) -> None:
        """Write fastText's model file (.bin) of a ``--subwords`` checkpoint's vectors (the input
        matrix): fastText's ``load_model`` and gensim's ``load_facebook_model`` /
        ``load_facebook_vectors`` read it and answer unseen words as :attr:`oov` does
        (io/fasttext.py). Vectors without such a checkpoint are refused (InputError)."""
        from ..io.fasttext import write_checkpoint

        write_checkpoint(os.fspath(path), self.checkpoint, source=self.path or "these vectors", matrix=self.matrix)

    @classmethod
    def load(cls, path) -> "WordVectors":
        """Words and vectors from a word2vec text or binary file (:meth:`save`'s); a checkpoint
        or a run directory: :func:`mpidwe.load`."""
        from ..io.vectors import read_word2vec

        path = os.fspath(path)
        words, vectors = read_word2vec(path)
        return cls(words, vectors, path=path)

    def add_vectors(self, keys, weights, extras=None, replace: bool = False) -> None:
        """Add words and their vectors, as gensim's ``add_vectors``: a word and one vector, or
        lists of both; a word already present keeps its vector unless ``replace``. ``extras``:
        ``{"count": [...]}``, the new words' counts (0 without it, where counts are kept)."""
        if isinstance(keys, str):
            keys, weights = [keys], np.reshape(weights, (1, -1))
        keys, weights = list(keys), np.asarray(weights, dtype=np.float32)
        if weights.shape != (len(keys), self.dim):
            raise ValueError(f"add_vectors: {len(keys)} words need a ({len(keys)}, {self.dim}) array, got "
                             f"shape {weights.shape}")
        extras = dict(extras or {})
        counts = np.asarray(extras.pop("count", np.zeros(len(keys))), dtype=np.int64)
        if extras or counts.shape != (len(keys),):
            raise ValueError(f"add_vectors: extras takes one count per word, got {sorted(extras) or counts.shape}")
        new, old = {}, {}                            # word -> its position in keys (the last one given)
        for j, key in enumerate(keys):
            if not isinstance(key, str) or not key:
                raise TypeError(f"add_vectors: a word is a non-empty str, got {key!r}")
            (old if key in self.index else new)[key] = j
        rows = list(new.values())
        self.vectors = np.vstack([self.vectors, weights[rows]])     # a new array: a checkpoint's stays as it is
        if replace:
            self.vectors[[self.index[k] for k in old]] = weights[list(old.values())]
        for key in new:
            self.index[key] = len(self.words)
            self.words.append(key)
        if self.counts is not None:
            self.counts = np.concatenate([self.counts, counts[rows]])
        self._unit = self.norms = None

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
    ``ck`` (``python -m mpidwe.inspect RUN fit-chars``; charfile.load_char_model)."""
    if config.get("subwords"):
        from ..core.subwords import build_table

        return SubwordOOV(build_table(list(words), config["minn"], config["maxn"], config["buckets"]), w_in)
    if ck is not None and ck.path:
        from ..io.charfile import load_char_model

        stored = load_char_model(ck)
        if stored is not None and stored.matrix == matrix:
            from ..core.charmodel import CharModel, check_state

            try:
                check_state(stored.meta, stored.params, int(np.shape(w_in)[1]))
            except ValueError as e:
                raise InputError(f"{stored.path} is damaged: {e}") from None
            try:
                return CharModel.from_state(stored.meta, stored.params)
            except (KeyError, TypeError, ValueError, RuntimeError) as e:   # shapes or names that do not fit
                raise InputError(f"{ck.path}: its character model does not fit this mpidwe: "
                                 f"{str(e).splitlines()[0]}") from None
    return None
