"""``--init-from``: a new run whose parameters start from a trained model, matched by word.

Only for the stores that hold whole matrices (the configuration refuses it with --store
sharded): rank 0 reads the model, copies the rows of the words it knows into the fresh
parameters, and broadcasts them.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from ..core.config import TrainConfig
from ..core.errors import InputError
from ..parallel.comm import Comm
from ..io import checkpoint
from ..io.corpus import Corpus
from .plan import Plan
from .resume import RESUME_DEFAULTS


def _init_checkpoint(path: str, log, corpus_path: str = "") -> checkpoint.Checkpoint:
    """--init-from: a checkpoint, or a run directory (its newest valid checkpoint)."""
    if corpus_path and os.path.realpath(path) == os.path.realpath(corpus_path):
        # said before HDF5 opens it a second time (it refuses a file this process holds open)
        raise InputError(f"--init-from {path} is the corpus, not a checkpoint (give a run directory or "
                         f"a checkpoint, RUN_DIR/checkpoints/ckpt-*.h5)")
    if os.path.isdir(path):
        folder = os.path.join(path, "checkpoints") if os.path.isdir(os.path.join(path, "checkpoints")) else path
        ck = checkpoint.latest_valid(folder, warn=log)
        if ck is None:
            raise InputError(f"--init-from {path}: no valid checkpoint in {folder}")
        return ck
    if not os.path.exists(path):
        raise InputError(f"--init-from {path}: no such checkpoint or run directory")
    return checkpoint.load(path)


def carried_rows(old_words: list[str], new_words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(new ids, old ids) of the words both vocabularies hold."""
    old_index = {w: i for i, w in enumerate(old_words)}
    pairs = [(i, old_index[w]) for i, w in enumerate(new_words) if w in old_index]
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    new_ids, old_ids = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    return new_ids, old_ids


def warm_start(cfg: TrainConfig, plan: Plan, comm: Comm, corpus: Corpus, state: checkpoint.TrainingState,
               log) -> Plan:
    """--init-from: a new run whose parameters start from a trained model. The rows of words
    the model knows are copied (both matrices, matched by the word itself, so a grown corpus or
    another corpus both work); the other rows keep the fresh initialisation. Progress, the
    learning-rate schedule and the RNG streams are the new run's own. Any rank count works:
    rank 0 reads the model and broadcasts the result."""
    def build():
        ck = _init_checkpoint(cfg.init_from, log, corpus.path)
        if ck.w_in.shape[1] != cfg.dim:
            raise InputError(f"--init-from {ck.path}: its vectors have {ck.w_in.shape[1]} dimensions, "
                             f"--dim is {cfg.dim}")
        new_ids, old_ids = carried_rows(ck.words, corpus.words)
        if len(new_ids) == 0:
            raise InputError(f"--init-from {ck.path}: it shares no word with {corpus.path}")
        state.w_in[new_ids] = ck.w_in[old_ids]
        if cfg.loss == "ns" and ck.config.get("loss", "ns") == "ns":   # HS output rows are tree nodes
            state.w_out[new_ids] = ck.w_out[old_ids]
        same_buckets = all(ck.config.get(k, RESUME_DEFAULTS[k]) == getattr(cfg, k)
                           for k in ("subwords", "minn", "maxn", "buckets"))
        if cfg.subwords and same_buckets:          # the n-gram rows mean the same in both runs
            state.w_in[corpus.n_words:] = ck.w_in[len(ck.words):]
        info = {"path": ck.path, "corpus_id": ck.corpus_id, "words_done": ck.progress.words_done,
                "rows_carried": int(len(new_ids)), "rows_new": int(corpus.n_words - len(new_ids))}
        if log:
            log(f"warm start from {ck.path}: {len(new_ids):,} of {corpus.n_words:,} words carried over, "
                f"{corpus.n_words - len(new_ids):,} new")
        return info

    info = comm.on_root(build)
    comm.bcast_array_(state.w_in)
    comm.bcast_array_(state.w_out)
    return dataclasses.replace(plan, resolved=dict(plan.resolved, init_from=info))
