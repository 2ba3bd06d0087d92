"""Which rows a block will touch, known before it is trained (the sharded store's pull list).

Every random draw of the SGNS kernels depends only on the block's tokens, the keep
probabilities, the negative-sampling table and the RNG states, never on the parameters
(common.py: subsampling uniforms, the shrunk window, the noise words, in that order). So a
pass that makes exactly the kernel's draws, without any arithmetic on vectors, learns every
row the kernel will read or write, and leaves the RNG states where training leaves them:

* ``mark_in[w] = 1`` for every token of the block (their input rows are contexts; the
  kernel looks up the keep probability of every token, kept or not);
* ``mark_out[w] = 1`` for every noise word drawn and kept (a draw equal to the centre is
  dropped, as in the kernel); the tokens' output rows (centres) are in the working set as
  token rows already.

The same split into thread chunks as ``cpu.train_block`` (common.split_sentences), each
with its own ``rng_state`` entry, so the plan holds for any ``threads``: Hogwild makes the
values nondeterministic, never the draws. tests/test_store.py checks the plan against the
rows the kernel marks as touched.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .common import split_sentences
from .cpu import CBOW, SKIPGRAM, SKIPGRAM_SHARED, _below, _draw_negative, _lcg, _longest_sentence, _subsample


@njit(nogil=True, cache=True)
def _plan_chunk(mode, tokens, sent_starts, s_lo, s_hi, keep_prob, neg_table, rng_state, tid,
                window, negative, mark_in, mark_out):
    n_tokens = tokens.shape[0]
    n_starts = sent_starts.shape[0]
    longest = _longest_sentence(sent_starts, s_lo, s_hi, n_tokens)
    kept = np.empty(longest, np.int64)
    raw_pos = np.empty(longest, np.int64)        # the kernel's learning-rate positions: unused here
    state = rng_state[tid]
    for si in range(s_lo, s_hi):
        beg = sent_starts[si]
        end = sent_starts[si + 1] if si + 1 < n_starts else n_tokens
        for i in range(beg, end):
            mark_in[tokens[i]] = 1
        n, state = _subsample(tokens, beg, end, keep_prob, state, kept, raw_pos, 0)
        for pos in range(n):
            center = kept[pos]
            state = _lcg(state)
            reach = window - _below(state, window)
            lo = max(pos - reach, 0)
            hi = min(pos + reach, n - 1)
            if mode == SKIPGRAM:
                draws = negative * (hi - lo)          # one set per context
            elif hi > lo:
                draws = negative                      # one set per centre with a context
            else:
                draws = 0
            for _ in range(draws):
                state = _lcg(state)
                target = _draw_negative(state, neg_table)
                if target != center:
                    mark_out[target] = 1
    rng_state[tid] = state


def mode_of(model: str, shared_negatives: bool) -> int:
    return CBOW if model == "cbow" else (SKIPGRAM_SHARED if shared_negatives else SKIPGRAM)


def plan_block(tokens: np.ndarray, sent_starts: np.ndarray, rng_state: np.ndarray, mark_in: np.ndarray,
               mark_out: np.ndarray, args) -> None:
    """Mark the rows ``cpu.train_block`` with the same arguments would touch (global ids:
    ``mark_in`` the tokens, ``mark_out`` the noise words) and advance ``rng_state`` exactly
    as training would. ``args``: a KernelArgs with the global keep_prob and neg_table."""
    model, window, negative, threads, shared_negatives = (args.model, args.window, args.negative, args.threads,
                                                           args.shared_negatives)
    keep_prob, neg_table = args.keep_prob, args.neg_table
    if len(tokens) == 0:
        return
    mode = mode_of(model, shared_negatives)
    bounds = split_sentences(sent_starts, len(tokens), threads)
    for t in range(threads):
        _plan_chunk(mode, tokens, sent_starts, bounds[t], bounds[t + 1], keep_prob, neg_table, rng_state,
                    t, window, negative, mark_in, mark_out)
