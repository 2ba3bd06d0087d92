"""word2vec's random draws, compiled: the LCG, subsampling, the shrunk window and the noise words.

The contract (which bits decide what, in which order) is in common.py; the numba kernel
(chunk.py) and the planner (plan.py) both draw through these functions, which is what lets
the planner know beforehand every row the kernel will touch.
"""

from __future__ import annotations

import numpy as np
from llvmlite import binding, ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from .common import LCG_INCREMENT, LCG_MULTIPLIER

_A = np.uint64(LCG_MULTIPLIER)
_C = np.uint64(LCG_INCREMENT)
_S32 = np.uint64(32)
_S40 = np.uint64(40)
_LOW32 = np.uint64(0xFFFFFFFF)
# The prefetch intrinsic is named after its pointer type: opaque `ptr` from LLVM 17 on.
_PREFETCH = "llvm.prefetch.p0" if binding.llvm_version_info >= (17,) else "llvm.prefetch.p0i8"


@njit(inline="always")
def lcg(state):
    return state * _A + _C


@njit(inline="always")
def below(state, n):
    """An integer in [0, n) from the high 32 bits (multiply-shift: no division)."""
    return np.int64(((state >> _S32) * np.uint64(n)) >> _S32)


@njit(inline="always")
def uniform(state):
    return np.float32(state >> _S40) * np.float32(1.0 / 16777216.0)


@njit(inline="always")
def draw_negative(state, table):
    """Alias draw: bucket from the high bits of (state >> 32) * V, coin from its low bits."""
    scaled = (state >> _S32) * np.uint64(table.shape[0])
    bucket = np.int64(scaled >> _S32)
    if np.uint32(scaled & _LOW32) < table[bucket, 0]:
        return bucket
    return np.int64(table[bucket, 1])


@intrinsic
def prefetch_row(typingctx, matrix, row):
    """Hint the cache to fetch every 64-byte line of matrix[row]; results do not change."""
    def codegen(context, builder, sig, args):
        mty = sig.args[0]
        mat = context.make_array(mty)(context, builder, args[0])
        row_i = context.cast(builder, args[1], sig.args[1], types.intp)
        zero = context.get_constant(types.intp, 0)
        ptr = cgutils.get_item_pointer(context, builder, mty, mat, [row_i, zero])
        base = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [base.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH)
        row_bytes = builder.mul(builder.extract_value(mat.shape, 1),
                                context.get_constant(types.intp, mty.dtype.bitwidth // 8))
        with cgutils.for_range_slice(builder, zero, row_bytes,
                                     context.get_constant(types.intp, 64)) as (offset, _):
            # (read, highest locality, data cache)
            builder.call(fn, [builder.gep(base, [offset]), ir.Constant(i32, 0),
                              ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(matrix, row), codegen


def slot_of(slots, word):
    """The row of a drawn word: the word itself, or (the sharded store's working set)
    ``slots[word]``. Chosen when compiling, by whether ``slots`` is None."""


@overload(slot_of)
def _slot_of(slots, word):
    if isinstance(slots, types.NoneType):
        return lambda slots, word: word
    return lambda slots, word: np.int64(slots[word])


@njit(inline="always")
def draw_negatives(state, skip, targets, negs, w_out):
    """Draw ``targets.negative`` noise words from ``targets.neg_table``, dropping any equal to
    ``skip`` (as word2vec), and start fetching their output rows. Returns (state, how many
    were kept in negs)."""
    kept = 0
    for _ in range(targets.negative):
        state = lcg(state)
        target = slot_of(targets.neg_slots, draw_negative(state, targets.neg_table))
        if target != skip:
            negs[kept] = target
            kept += 1
            prefetch_row(w_out, target)
    return state, kept


# ------------------------------------------------------------------ sentences and windows
@njit(inline="always")
def sentence(chunk, si):
    """[beg, end) of sentence si of the block (the last one runs to the block's end)."""
    end = chunk.sent_starts[si + 1] if si + 1 < chunk.sent_starts.shape[0] else chunk.tokens.shape[0]
    return chunk.sent_starts[si], end


@njit(inline="always")
def longest_sentence(chunk):
    """Tokens in the longest sentence of the chunk: the size of its buffers."""
    longest = 0
    for si in range(chunk.s_lo, chunk.s_hi):
        beg, end = sentence(chunk, si)
        longest = max(longest, end - beg)
    return longest


@njit(inline="always")
def subsample(tokens, beg, end, keep_prob, state, kept, raw_pos, raw_base):
    """Drop frequent words per occurrence (one draw only for words with keep < 1).
    kept[:n] are the surviving ids, raw_pos[:n] their raw offsets in this chunk."""
    n = 0
    for i in range(beg, end):
        word = tokens[i]
        keep = keep_prob[word]
        if keep < 1.0:
            state = lcg(state)
            if uniform(state) > keep:
                continue
        kept[n] = word
        raw_pos[n] = raw_base + i - beg
        n += 1
    return n, state


@njit(inline="always")
def shrunk_window(state, window, pos, n):
    """word2vec's shrunk window around kept position pos of n: (state, lo, hi), contexts
    are the positions [lo, hi] other than pos."""
    state = lcg(state)
    reach = window - below(state, window)
    return state, max(pos - reach, 0), min(pos + reach, n - 1)
