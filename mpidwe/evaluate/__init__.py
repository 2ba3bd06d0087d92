"""Evaluation: arrays in, dicts out. No MPI, no HDF5 (callers load the vectors)."""

from .analogy import evaluate_analogies, read_analogies
from .similarity import evaluate_similarity, read_similarity

__all__ = ["evaluate_analogies", "read_analogies", "evaluate_similarity", "read_similarity"]
