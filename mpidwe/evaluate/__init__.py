"""Evaluation: similarity and analogies (arrays in, dicts out), PIP loss (pip.py) against a
cached SPPMI-SVD reference (sppmi.py, cache file in refcache.py), word2vec I/O (vectors.py)
and the ``python -m mpidwe.evaluate`` command (cli.py)."""

from .analogy import evaluate_analogies, read_analogies
from .similarity import evaluate_similarity, read_similarity

__all__ = ["evaluate_analogies", "read_analogies", "evaluate_similarity", "read_similarity"]
