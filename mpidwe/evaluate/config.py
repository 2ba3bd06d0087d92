"""``python -m mpidwe.evaluate`` options: a frozen dataclass in the style of mpidwe.core.config."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.config import opt
from ..core.errors import ConfigError


@dataclass(frozen=True)
class EvaluateConfig:
    """``python -m mpidwe.evaluate``: score word vectors on similarity, analogy and PIP loss."""

    vectors: str = opt("", "word vectors: word2vec text or binary file (as word2vec, gensim or "
                       "mpidwe.train write them)", positional=True)
    similarity: tuple[str, ...] = opt((), "word-similarity files (word1 word2 score per line, e.g. "
                                      "WS-353); Spearman correlation with the cosine similarity")
    analogy: tuple[str, ...] = opt((), "analogy files (Google questions-words.txt format)")
    analogy_method: str = opt("add", "analogy scoring: 3CosAdd, 3CosMul or both",
                              choices=["add", "mul", "both"])
    restrict_vocab: int = opt(30000, "analogy answers are searched among this many first "
                              "(most frequent) words; questions using other words are not covered")
    pip_reference: str | None = opt(None, "HDF5 corpus (from mpidwe.preprocess): report the PIP loss "
                                    "against the SPPMI embedding of this corpus (computed once, "
                                    "cached beside it in CORPUS.sppmi.h5)")
    pip_top_n: int = opt(30000, "PIP over this many most frequent corpus words")
    pip_dim: int | None = opt(None, "dimension of the SPPMI reference; it must equal the vectors' "
                              "dimension (vectors of another dimension are refused); none: the vectors'")
    pip_alpha: float = opt(0.5, "reference = U_d S_d^alpha of the SPPMI matrix")
    window: int = opt(5, "window radius of the reference co-occurrence counts (use the training --window)")
    negative: int = opt(5, "the reference is max(PMI - log k, 0) with k = this (use the training --negative)")
    pip_cache: bool = opt(True, "read and write the reference cache beside the corpus")
    json: bool = opt(False, "print the results as one JSON object (for scripts)")
    oov: bool = opt(False, "answer similarity pairs with words outside the vocabulary instead of skipping "
                    "them, from the OOV model of VECTORS (a run directory or checkpoint trained with "
                    "--subwords)")

    def __post_init__(self):
        if not self.vectors:
            raise ConfigError("no vectors file given")
        if not (self.similarity or self.analogy or self.pip_reference):
            raise ConfigError("nothing to evaluate: give --similarity, --analogy and/or --pip-reference")
        for name in ("restrict_vocab", "pip_top_n", "window", "negative"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be > 0, got {getattr(self, name)}")
        if self.pip_dim is not None and self.pip_dim <= 0:
            raise ConfigError(f"--pip-dim must be > 0, got {self.pip_dim}")
        if not (math.isfinite(self.pip_alpha) and self.pip_alpha >= 0):
            raise ConfigError(f"--pip-alpha must be >= 0, got {self.pip_alpha}")
