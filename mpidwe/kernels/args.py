"""What a kernel call needs besides the parameters and the block: one frozen value.

Every backend's entry point has the same shape::

    loss_sum, n_examples, words = train_block(w_in, w_out, tokens, sent_starts, rng_state,
                                              touched_in, touched_out, args)

``args`` is built once per run from the configuration and the plan (mpidwe.train.plan);
between pieces only the point of the learning-rate schedule moves (:meth:`KernelArgs.at`),
and the sharded store swaps in a round's working-set tables (:meth:`KernelArgs.on_slots`).
The fields are described in kernels/__init__.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class KernelArgs:
    keep_prob: Any                 # float32 [V] keep probabilities (numpy, or a torch tensor)
    neg_table: Any                 # uint32 [V, 2] alias table of unigram^0.75
    words_total: float             # global raw words of the whole run (the schedule's end)
    model: str = "skipgram"
    window: int = 5
    negative: int = 5
    lr0: float = 0.025
    lr_min: float = 0.0001
    threads: int = 1
    shared_negatives: bool = False
    hs: tuple | None = None        # (codes, points, lengths): hierarchical softmax
    subwords: tuple | None = None  # (ptr, ids): fastText's input rows per word
    neg_slots: np.ndarray | None = None   # the sharded store's global id -> working-set slot
    batch_size: int | None = None  # torch kernels: centre words (or examples, HS) per batch
    duplicate_steps: float | None = None  # torch kernel: None is the adaptive divisor
    tables: Any = None             # torch kernel: keep_prob and neg_table on the device (DeviceTables)
    fused: bool = False            # device store: train through kernels/triton_kernel.py (--kernel triton)
    words_done: float = 0.0        # global words done when this call starts
    words_scale: float = 1.0       # global words one of this call's words stands for

    def at(self, words_done: float, words_scale: float) -> "KernelArgs":
        """The same arguments at another point of the learning-rate schedule."""
        return dataclasses.replace(self, words_done=float(words_done), words_scale=float(words_scale))

    def on_slots(self, keep_prob: np.ndarray, neg_slots: np.ndarray) -> "KernelArgs":
        """The arguments for a working set (the sharded store): its tokens' keep
        probabilities, and the map from a noise draw's global id to its slot."""
        return dataclasses.replace(self, keep_prob=keep_prob, neg_slots=neg_slots)
