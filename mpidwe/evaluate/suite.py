"""Evaluation during training: the headline numbers of the run's word vectors.

Rank 0 builds an :class:`Evaluator` once (it reads the evaluation files and holds the
SPPMI reference) and calls it with the vectors of its words; it returns a flat dict
(``sim:FILE``, ``analogy:FILE``, ``pip``, ``pip_normalized``) for metrics.jsonl; FILE is the
file's base name, or where two files share one, the trailing folders that tell them apart
(``analogy:en/questions.txt``, ``analogy:de/questions.txt``).
"""

from __future__ import annotations

import os

import numpy as np

from ..core.config import TrainConfig


class Evaluator:
    """Rank 0's evaluation during training over ``words`` (the whole vocabulary, or the rows
    :func:`evaluation_ids` picks); returns a flat dict of headline numbers."""

    def __init__(self, cfg: TrainConfig, words: list[str], reference=None):
        from .analogy import read_analogies
        from .similarity import read_similarity

        self.cfg, self.reference = cfg, reference
        self.index = {w: i for i, w in enumerate(words)}
        self.sim = list(zip(file_labels(cfg.eval_sim), map(read_similarity, cfg.eval_sim)))
        self.ana = list(zip(file_labels(cfg.eval_analogy), map(read_analogies, cfg.eval_analogy)))

    def __call__(self, vectors: np.ndarray) -> dict:
        from .analogy import evaluate_analogies
        from .similarity import evaluate_similarity

        out = {}
        for label, pairs in self.sim:
            r = evaluate_similarity(vectors, self.index, pairs)
            out[f"sim:{label}"] = r["spearman"]
        for label, sections in self.ana:
            r = evaluate_analogies(vectors, self.index, sections, restrict_vocab=self.cfg.eval_restrict_vocab)
            out[f"analogy:{label}"] = r["accuracy"]
        if self.reference is not None:
            from .pip import pip_report

            # the reference rows are the corpus's most frequent words, in vocabulary order
            n = len(self.reference.words)
            r = pip_report(vectors[:n], self.reference.vectors)
            out["pip"], out["pip_normalized"] = r["pip"], r["normalized"]
        return out


def file_labels(paths) -> list[str]:
    """Each file's name in the metrics keys: its base name, or where files share one, as many
    trailing path parts as tell it from the others (the same file twice is refused earlier,
    by TrainConfig)."""
    parts = [os.path.normpath(os.path.abspath(p)).split(os.sep) for p in paths]
    labels = []
    for p in parts:
        k = 1
        while k < len(p) and sum(q[-k:] == p[-k:] for q in parts) > 1:
            k += 1
        labels.append("/".join(p[-k:]))
    return labels


def evaluation_ids(cfg: TrainConfig, words: list[str]) -> np.ndarray:
    """Ids of the most frequent ``eval_restrict_vocab`` words and of every word (as written
    or lowercased) the evaluation files name, in vocabulary order: the rows an evaluation
    reads (the analogy search space and the PIP reference are the most frequent words), for
    a store that does not hold the whole matrix on rank 0."""
    wanted: set[str] = set()
    for path in (*cfg.eval_sim, *cfg.eval_analogy):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for token in fh.read().split():
                    wanted.update((token, token.lower()))
        except OSError:
            pass                     # Evaluator reports the unreadable file
    top = min(len(words), cfg.eval_restrict_vocab)
    extra = [i for i in range(top, len(words)) if words[i] in wanted]
    return np.concatenate((np.arange(top, dtype=np.int64), np.array(extra, dtype=np.int64)))
