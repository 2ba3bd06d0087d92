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

The same split into thread chunks as ``cpu.train_block`` (chunk.chunks), each
with its own ``rng_state`` entry, so the plan holds for any ``threads``: Hogwild makes the
values nondeterministic, never the draws. tests/test_store.py checks the plan against the
rows the kernel marks as touched. Negative sampling on words only (the sharded store's case).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .cache import stamp_sources
from .chunk import SKIPGRAM, chunks, mode_of, targets_of
from .sampling import draw_negative, lcg, longest_sentence, sentence, shrunk_window, subsample


@njit(nogil=True, cache=True)
def _plan_chunk(mode, chunk, targets, marks):
    """The draws of the chunk function (chunk.py) over one chunk, marking ``marks`` = (mark_in, mark_out)."""
    mark_in, mark_out = marks
    longest = longest_sentence(chunk)
    kept = np.empty(longest, np.int64)
    raw_pos = np.empty(longest, np.int64)        # the kernel's learning-rate positions: unused here
    state = chunk.rng_state[chunk.tid]
    for si in range(chunk.s_lo, chunk.s_hi):
        beg, end = sentence(chunk, si)
        for i in range(beg, end):
            mark_in[chunk.tokens[i]] = 1
        n, state = subsample(chunk.tokens, beg, end, chunk.keep_prob, state, kept, raw_pos, 0)
        for pos in range(n):
            center = kept[pos]
            state, lo, hi = shrunk_window(state, chunk.window, pos, n)
            if mode == SKIPGRAM:
                draws = targets.negative * (hi - lo)      # one set per context
            elif hi > lo:
                draws = targets.negative                  # one set per centre with a context
            else:
                draws = 0
            for _ in range(draws):
                state = lcg(state)
                target = draw_negative(state, targets.neg_table)
                if target != center:
                    mark_out[target] = 1
    chunk.rng_state[chunk.tid] = state


stamp_sources(_plan_chunk)


def plan_block(tokens: np.ndarray, sent_starts: np.ndarray, rng_state: np.ndarray, mark_in: np.ndarray,
               mark_out: np.ndarray, args) -> None:
    """Mark the rows ``cpu.train_block`` with the same arguments would touch (global ids:
    ``mark_in`` the tokens, ``mark_out`` the noise words) and advance ``rng_state`` exactly
    as training would. ``args``: a KernelArgs with the global keep_prob and neg_table."""
    if args.hs is not None or args.subwords is not None:
        raise ValueError("the planner knows the rows of negative sampling on words only")
    if len(tokens) == 0:
        return
    mode, targets = mode_of(args), targets_of(args, len(args.neg_table))
    for chunk in chunks(tokens, sent_starts, rng_state, args):
        _plan_chunk(mode, chunk, targets, (mark_in, mark_out))
