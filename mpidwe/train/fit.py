"""``mpidwe.fit(**options)`` (also ``mpidwe.train(**options)``): train from Python and get
the vectors back as a :class:`~mpidwe.evaluate.wordvectors.WordVectors`."""

from __future__ import annotations

import os

from ..core.config import TrainConfig, from_mapping, to_dict
from ..core.errors import ConfigError, InputError
from ..dist.comm import Comm
from ..evaluate.wordvectors import SubwordOOV, WordVectors, check_matrix, oov_model
from ..io.corpus import Corpus
from .runner import DEMO_DIR, run


# -------------------------------------------------------------------- training
def fit(*, matrix: str = "input", log=print, **options) -> WordVectors:
    """``mpidwe.fit``: see its docstring in mpidwe/api.py."""
    check_matrix(matrix)

    cfg = from_mapping(TrainConfig, options, source="mpidwe.fit() arguments")
    if cfg.follow:
        raise ConfigError("follow= watches a folder until stopped and returns no vectors; run python -m "
                          "mpidwe.train --follow DIR, then mpidwe.load(RUN_DIR/steps/NNNN)")
    if matrix != "input" and cfg.loss == "hs":
        raise InputError("a run trained with hierarchical softmax has word vectors in its input matrix only "
                         "(its output rows are Huffman-tree nodes)")
    result = run(cfg, Comm.world(), log=log)
    counts = _corpus_counts(cfg.corpus or os.path.join(DEMO_DIR, "corpus.h5"), len(result.words))
    oov = oov_model(to_dict(cfg), result.words, result.w_in)
    w_in = oov.word_vectors() if isinstance(oov, SubwordOOV) else result.w_in
    w = {"input": w_in, "output": result.w_out}.get(matrix)
    if w is None:
        w = w_in + result.w_out
    return WordVectors(result.words, w, counts, path=cfg.out, run_dir=cfg.out, matrix=matrix, result=result,
                       oov=oov)


def _corpus_counts(path: str, n_words: int):
    with Corpus(path) as corpus:
        counts = corpus.counts
    return counts if len(counts) == n_words else None
