"""What every SGNS kernel shares: the random-number contract, the sigmoid table, the
learning-rate schedule and the checks on a block's arguments.

The numba kernel (cpu.py) and the readable reference (reference.py) both follow the
contract written here, which is what lets a test demand that they agree update for update.
"""

from __future__ import annotations

import numpy as np

MODELS = ("skipgram", "cbow")

# word2vec's 64-bit linear congruential generator: state = state * A + C (mod 2**64).
LCG_MULTIPLIER = 25214903917
LCG_INCREMENT = 11
# Only the high bits of an LCG are good, so every draw reads them: an integer below n is
# ((state >> 32) * n) >> 32 and a uniform float is (state >> 40) / 2**24.
# (word2vec itself uses `state % n` and the low 16 bits, whose period is tiny.)
# A negative is an alias-table draw: scaled = (state >> 32) * V, bucket = scaled >> 32, and
# the word is bucket if (scaled & 0xFFFFFFFF) < table[bucket, 0], else table[bucket, 1].
#
# Order of draws, sentence by sentence:
#   1. subsampling: one uniform per token whose keep probability is < 1, in token order;
#   2. per kept position, in order: one `below(window)` for the shrunk window, then
#      skip-gram: per context (left to right) `negative` noise draws;
#      shared negatives / CBOW: `negative` noise draws once, only if the window has a context;
#      hierarchical softmax (``hs``): no noise draws at all (the centre's Huffman path instead).

# word2vec's sigmoid table: 1000 bins on [-6, 6); scores beyond +-6 get the saturated
# gradient (label - 1 or label - 0) exactly like word2vec.c.
MAX_EXP = 6.0
SIGMOID_TABLE_SIZE = 1000
SIGMOID_BIN_SCALE = SIGMOID_TABLE_SIZE / MAX_EXP / 2

# The learning rate is recomputed after this many raw words, as in word2vec.
LR_REFRESH_WORDS = 10_000


def sigmoid_tables() -> tuple[np.ndarray, np.ndarray]:
    """(sigmoid, loss): sigmoid[i] = sigma(x_i) and loss[label, i] = -log P(label | x_i) at the
    bin starts x_i = (2 i / 1000 - 1) * 6; one table lookup gives both gradient and loss."""
    x = (np.arange(SIGMOID_TABLE_SIZE) / SIGMOID_TABLE_SIZE * 2 - 1) * MAX_EXP
    sigmoid = (np.exp(x) / (np.exp(x) + 1)).astype(np.float32)
    loss = np.stack([np.logaddexp(0.0, x), np.logaddexp(0.0, -x)]).astype(np.float32)
    return sigmoid, loss


def learning_rate(lr0: float, lr_min: float, words_done: float, words_scale: float,
                  local_words: float, words_total: float) -> float:
    """Linear decay with GLOBAL progress: this block has done ``local_words`` raw words, and
    ``words_scale`` says how many ranks progress at the same pace."""
    progress = (words_done + words_scale * local_words) / words_total
    return max(lr_min, lr0 * (1.0 - progress))


def split_sentences(sent_starts: np.ndarray, n_tokens: int, threads: int) -> np.ndarray:
    """Sentence boundaries of ``threads`` contiguous chunks with about equal token counts:
    chunk t is sentences [bounds[t], bounds[t+1])."""
    targets = np.arange(threads + 1, dtype=np.int64) * n_tokens // threads
    bounds = np.searchsorted(sent_starts, targets, side="left").astype(np.int64)
    bounds[0], bounds[-1] = 0, len(sent_starts)
    return bounds


def check_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args) -> None:
    """Refuse arguments that would make a lock-free kernel write out of bounds or silently
    train on copies; cheap next to training (one pass over the block's ids). Numpy
    parameters get their dtypes and layout checked too (the torch kernels take tensors).

    With ``args.neg_slots`` (the sharded store's working set, mpidwe/parallel/rows.py) the matrices
    hold only the block's rows: ``w_in`` the block's token rows (slots [0, T)), ``w_out`` those
    and then the rows only negatives reach (slots [T, W)); ``tokens`` are slots,
    ``keep_prob`` and ``touched_in`` have T entries, ``touched_out`` W, and ``neg_table``
    stays the global [V, 2] table whose draws ``neg_slots`` (int32 [V]) maps to slots."""
    _check_settings(args)
    vocab, rows_in, n_out, n_table = _check_shapes(w_in, w_out, args)
    if len(rng_state) < args.threads:
        raise ValueError(f"rng_state has {len(rng_state)} entries for {args.threads} threads")
    for name, arr, n in (("keep_prob", args.keep_prob, vocab), ("neg_table", args.neg_table, n_table),
                         ("touched_in", touched_in, rows_in), ("touched_out", touched_out, n_out)):
        if len(arr) != n:
            raise ValueError(f"{name} has {len(arr)} rows for a vocabulary of {n}")
    if isinstance(w_in, np.ndarray):
        _check_numpy_dtypes(w_in=w_in, w_out=w_out, tokens=tokens, sent_starts=sent_starts,
                            keep_prob=args.keep_prob, neg_table=args.neg_table, rng_state=rng_state,
                            touched_in=touched_in, touched_out=touched_out)
    n = len(tokens)
    if len(sent_starts):
        starts = np.asarray(sent_starts)
        if starts[0] != 0 or starts[-1] > n or np.any(np.diff(starts) < 0):
            raise ValueError("sent_starts must start at 0, be non-decreasing and stay <= len(tokens)")
    elif n:
        raise ValueError("tokens given without sent_starts")
    if n and isinstance(tokens, np.ndarray) and (tokens.min() < 0 or tokens.max() >= vocab):
        raise ValueError(f"token ids must be in [0, {vocab})")


def _check_settings(args) -> None:
    negative = 0 if args.hs is not None else args.negative
    if args.model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {args.model!r}")
    if args.shared_negatives and args.model != "skipgram":
        raise ValueError("shared_negatives applies to skipgram only")
    if args.window < 1 or negative < 0 or args.threads < 1:
        raise ValueError(f"need window >= 1, negative >= 0, threads >= 1 "
                         f"(got {args.window}, {negative}, {args.threads})")
    if args.words_total <= 0:
        raise ValueError(f"words_total must be > 0, got {args.words_total}")
    if args.subwords is not None and args.neg_slots is not None:
        raise ValueError("the sharded store's working set (neg_slots) does not take subwords")


def _check_shapes(w_in, w_out, args) -> tuple[int, int, int, int]:
    """(vocabulary of the tokens, rows of w_in, rows of w_out, rows of neg_table)."""
    neg_slots = args.neg_slots
    if neg_slots is not None:
        vocab, dim = w_in.shape
        if w_out.shape[1] != dim or w_out.shape[0] < vocab:
            raise ValueError(f"w_out shape {tuple(w_out.shape)} cannot hold the working set of w_in "
                             f"{(vocab, dim)}")
        if not (isinstance(neg_slots, np.ndarray) and neg_slots.dtype == np.int32 and neg_slots.ndim == 1):
            raise TypeError("neg_slots must be a 1-D numpy int32 array")
        return vocab, vocab, w_out.shape[0], len(neg_slots)
    vocab, dim = w_out.shape
    if args.subwords is None and tuple(w_in.shape) != (vocab, dim):
        raise ValueError(f"w_out shape {tuple(w_out.shape)} != w_in shape {tuple(w_in.shape)}")
    if args.subwords is not None:
        check_subwords(args.subwords, vocab, w_in.shape[0])
        if w_in.shape[1] != dim:
            raise ValueError(f"w_in has {w_in.shape[1]} columns, w_out {dim}")
    return vocab, w_in.shape[0], vocab, vocab


def check_subwords(subwords, vocab: int, rows_in: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' ``subwords`` argument, (ptr int64 [V + 1], ids int32) from
    mpidwe.core.subwords.build_table: word w's input rows are ids[ptr[w]:ptr[w + 1]]."""
    ptr, ids = subwords
    if not (isinstance(ptr, np.ndarray) and ptr.dtype == np.int64 and isinstance(ids, np.ndarray)
            and ids.dtype == np.int32 and ptr.ndim == ids.ndim == 1):
        raise TypeError("subwords must be (ptr int64 [V + 1], ids int32) numpy arrays")
    if len(ptr) != vocab + 1 or ptr[0] != 0 or ptr[-1] != len(ids) or np.any(np.diff(ptr) < 1):
        raise ValueError(f"subwords ptr must hold {vocab + 1} increasing offsets into ids, every word "
                         f"with at least one row")
    if len(ids) and (ids.min() < 0 or ids.max() >= rows_in):
        raise ValueError(f"subword rows must be in [0, {rows_in})")
    return ptr, ids


def check_hs(hs, vocab: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernels' ``hs`` argument, (codes uint8 [V, L], points int32 [V, L], lengths int32
    [V]) from mpidwe.core.huffman, checked so that no path can index outside the output matrix."""
    codes, points, lengths = hs
    for name, arr, dtype, ndim in (("codes", codes, np.uint8, 2), ("points", points, np.int32, 2),
                                   ("lengths", lengths, np.int32, 1)):
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != ndim:
            raise TypeError(f"hs {name} must be a {ndim}-d numpy {np.dtype(dtype).name} array")
        if len(arr) != vocab:
            raise ValueError(f"hs {name} has {len(arr)} rows for a vocabulary of {vocab}")
    if codes.shape != points.shape or not codes.flags.c_contiguous or not points.flags.c_contiguous:
        raise ValueError("hs codes and points must be C-contiguous arrays of the same shape")
    if vocab and (lengths.min() < 1 or lengths.max() > points.shape[1]
                  or points.min() < 0 or points.max() > vocab - 2):
        raise ValueError(f"hs paths must have 1..{points.shape[1]} nodes in [0, {vocab - 1})")
    return codes, points, lengths


_DTYPES = {"w_in": np.float32, "w_out": np.float32, "tokens": np.int32, "sent_starts": np.int64,
           "keep_prob": np.float32, "neg_table": np.uint32, "rng_state": np.uint64,
           "touched_in": np.uint8, "touched_out": np.uint8}

_NDIM = {"w_in": 2, "w_out": 2, "neg_table": 2}


def _check_numpy_dtypes(**arrays) -> None:
    for name, arr in arrays.items():
        if not isinstance(arr, np.ndarray) or arr.dtype != _DTYPES[name]:
            got = getattr(arr, "dtype", type(arr).__name__)
            raise TypeError(f"{name} must be a numpy {np.dtype(_DTYPES[name]).name} array, got {got}")
        if arr.ndim != _NDIM.get(name, 1):
            raise ValueError(f"{name} must have {_NDIM.get(name, 1)} dimension(s), got {arr.ndim}")
        if not (arr.flags.c_contiguous and arr.flags.aligned and arr.flags.writeable):
            raise ValueError(f"{name} must be C-contiguous, aligned and writeable")
