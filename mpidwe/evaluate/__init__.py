"""Evaluation, arrays in and dicts out: similarity and analogies, PIP loss (pip.py) against an
SPPMI-SVD reference (sppmi.py; its cache file is io/refcache.py), the evaluation run during
training (suite.py), ``WordVectors`` (wordvectors.py) and the ``python -m mpidwe.evaluate``
command (cli.py)."""

from .analogy import evaluate_analogies, read_analogies
from .similarity import evaluate_similarity, read_similarity

__all__ = ["evaluate_analogies", "read_analogies", "evaluate_similarity", "read_similarity"]
