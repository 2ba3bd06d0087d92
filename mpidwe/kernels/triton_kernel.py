"""Skip-gram with shared negatives as one fused Triton launch per batch of windows (opt-in,
``--kernel triton``; for CUDA, and tested on CPU tensors under ``TRITON_INTERPRET=1``).

Same ``train_block`` as the other kernels (see kernels/__init__.py). The block is laid out
once on the host in numpy, compactly (CSR): kept centre words in corpus order, each with the
context ids its shrunk window really holds (``ptr[c]:ptr[c+1]`` of one flat array, no
zero-weight slots) and its ``1 + negative`` output ids (the centre, then its negatives; a
negative equal to the centre is dropped, as word2vec). Then every batch of ``batch_size``
centres is one launch of :func:`_window_step`, one program per centre, which does what
``reference.skipgram_window_shared`` does for one window: the scores of every (context,
output) pair from the rows as they were before the window (word2vec's sigmoid and loss
tables, saturated beyond +-6), the output rows' summed updates, then the context rows'.
The rows stay in registers between the two passes; each is read once and written back once
with atomic adds (Hogwild between the windows of a launch, as BlazingText; the interpreter
runs the programs one after another, so there it is exactly the reference's sequential
order). No duplicate-update divisor: rows move as in the numba kernel's Hogwild threads.

Memory traffic per kept centre with ``n`` contexts (docs/benchmarks.md): each context row
read and atomically added once (``3 n D`` floats: read, then read-modify-write), each output
row likewise (``3 (1 + K) D``), the ids and the per-pair gradients (``(1 + K)`` floats per
pair, written then read: the second pass), no [B, M, D] intermediate.

Randomness: a numpy PCG64 generator seeded with ``rng_state[0]``; the next block's seed is
derived on the host (splitmix64, as the torch kernel), so resume is exact.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .common import LR_REFRESH_WORDS, MAX_EXP, SIGMOID_BIN_SCALE, SIGMOID_TABLE_SIZE, check_block, sigmoid_tables
from .batch import SEED_MASK, batch_size_of, next_seed

try:
    import triton
    import triton.language as tl
except ImportError:          # the kernel refuses to run; the rest of mpidwe does not need it
    triton = tl = None


def available() -> bool:
    return triton is not None


class Layout:
    """One block, compactly: centre c has contexts ``contexts[ptr[c]:ptr[c+1]]`` (at least
    one) and outputs ``targets[c]`` (the centre, then the negatives; ``target_ok`` 0 for a
    negative equal to the centre), learning rate ``lr[c]``."""

    def __init__(self, ptr, contexts, targets, target_ok, lr):
        self.ptr, self.contexts, self.targets, self.target_ok, self.lr = ptr, contexts, targets, target_ok, lr

    @property
    def n_centres(self) -> int:
        return len(self.lr)

    @property
    def n_pairs(self) -> int:
        return int(self.ptr[-1])


def host_layout(tokens, sent_starts, seed: int, args) -> tuple[Layout, int]:
    """(the block's compact layout, raw tokens): subsampling, the shrunk windows, the
    negatives and each centre's learning rate, drawn from ``seed`` on the host."""
    rng = np.random.Generator(np.random.PCG64(seed))
    tokens = np.asarray(tokens)
    n = len(tokens)
    window, negative = args.window, args.negative
    sentence = np.zeros(n, dtype=np.int64)
    sentence[np.asarray(sent_starts)[1:]] += 1
    sentence = np.cumsum(sentence)
    keep = rng.random(n) <= np.asarray(args.keep_prob)[tokens]
    raw_pos = np.flatnonzero(keep)
    kept, sentence = tokens[raw_pos].astype(np.int64), sentence[raw_pos]
    k = len(kept)
    reach = window - rng.integers(0, window, k)
    offsets = np.concatenate((np.arange(-window, 0), np.arange(1, window + 1)))
    other = np.arange(k)[:, None] + offsets[None, :]                    # [k, 2W]
    clamped = np.clip(other, 0, max(k - 1, 0))
    ok = (other == clamped) & (np.abs(offsets)[None, :] <= reach[:, None])
    if k:
        ok &= sentence[clamped] == sentence[:, None]
    counts = ok.sum(1)
    has = counts > 0                                                     # a centre needs a context
    ptr = np.zeros(int(has.sum()) + 1, dtype=np.int64)
    np.cumsum(counts[has], out=ptr[1:])
    contexts = kept[clamped[has][ok[has]]]                               # row-major: each centre's, in order
    table = np.asarray(args.neg_table)
    bucket = rng.integers(0, len(table), (k, negative))
    coin = rng.random((k, negative)) * 2.0**32
    negs = np.where(coin < table[bucket, 0], bucket, table[bucket, 1]).astype(np.int64)
    centres = kept[has]
    targets = np.concatenate((centres[:, None], negs[has]), axis=1)
    target_ok = (targets != centres[:, None]).astype(np.float32)
    target_ok[:, 0] = 1.0
    step = args.lr0 * args.words_scale * LR_REFRESH_WORDS / args.words_total
    first = args.lr0 * (1.0 - args.words_done / args.words_total)
    lr = np.maximum(args.lr_min, first - step * (raw_pos[has] // LR_REFRESH_WORDS)).astype(np.float32)
    return Layout(ptr, contexts, targets, target_ok, lr), n


TABLE = SIGMOID_TABLE_SIZE
if triton is not None:
    BIN_SCALE_C = tl.constexpr(SIGMOID_BIN_SCALE)
    TABLE_C = tl.constexpr(SIGMOID_TABLE_SIZE)
    LIMIT_C = tl.constexpr(MAX_EXP)

    @triton.jit
    def _window_step(w_in, w_out, ints, floats, scratch, first, n, dims: tl.constexpr):
        """One window per program. ``ints``: [ptr (n + 1) | targets (n K1) | contexts],
        ``floats``: [lr (n) | target_ok (n K1) | sigmoid table | loss table],
        ``scratch``: [losses (n) | per-pair gradients (BK each)]; ``dims``: (D, K1, BD, BK)."""
        D: tl.constexpr = dims[0]
        K1: tl.constexpr = dims[1]
        BD: tl.constexpr = dims[2]
        BK: tl.constexpr = dims[3]
        c = first + tl.program_id(0)
        start = tl.load(ints + c)
        end = tl.load(ints + c + 1)
        targets = ints + n + 1
        contexts = targets + n * K1
        rate = tl.load(floats + c)
        sigmoid = floats + n + n * K1
        grads = scratch + n
        d = tl.arange(0, BD)
        k = tl.arange(0, BK)
        dm = d < D
        km = k < K1
        tgt = tl.load(targets + c * K1 + k, mask=km, other=0)
        weight = tl.load(floats + n + c * K1 + k, mask=km, other=0.0)
        label = (k == 0).to(tl.float32)
        rows = tl.load(w_out + tgt[:, None] * D + d[None, :], mask=km[:, None] & dm[None, :], other=0.0)
        out_grad = tl.zeros((BK, BD), dtype=tl.float32)
        loss = 0.0
        for j in range(start, end):                 # pass 1: scores from the rows before the window
            ctx = tl.load(contexts + j)
            h = tl.load(w_in + ctx * D + d, mask=dm, other=0.0)
            score = tl.sum(rows * h[None, :], axis=1)
            i = tl.minimum(tl.maximum(((score + LIMIT_C) * BIN_SCALE_C).to(tl.int32), 0), TABLE_C - 1)
            inside = (score < LIMIT_C) & (score > -LIMIT_C)
            sig = tl.where(inside, tl.load(sigmoid + i), tl.where(score >= LIMIT_C, 1.0, 0.0))
            table_loss = tl.load(sigmoid + TABLE_C + (k == 0).to(tl.int32) * TABLE_C + i)
            sat_loss = tl.where((score >= LIMIT_C) & (k != 0), score,
                                tl.where((score <= -LIMIT_C) & (k == 0), -score, 0.0))
            loss += tl.sum(tl.where(inside, table_loss, sat_loss) * weight, axis=0)
            g = (label - sig) * rate * weight
            tl.store(grads + j * BK + k, g, mask=km)
            out_grad += g[:, None] * h[None, :]
        tl.atomic_add(w_out + tgt[:, None] * D + d[None, :], out_grad, mask=km[:, None] & dm[None, :])
        for j in range(start, end):                 # pass 2: the context rows, from the same output rows
            ctx = tl.load(contexts + j)
            g = tl.load(grads + j * BK + k, mask=km, other=0.0)
            tl.atomic_add(w_in + ctx * D + d, tl.sum(g[:, None] * rows, axis=0), mask=dm)
        tl.store(scratch + c, loss)


def step_batches(w_in, w_out, layout: Layout, batch_size: int) -> torch.Tensor:
    """Train a laid-out block on ``w_in``/``w_out`` (torch tensors, same device): one launch
    per ``batch_size`` centres. Returns the per-centre losses (a device tensor)."""
    if triton is None:
        raise RuntimeError("--kernel triton needs the triton package (pip install triton)")
    device = w_in.device
    dim = w_in.shape[1]
    n, k1 = layout.targets.shape
    sigmoid, loss = sigmoid_tables()
    ints = np.concatenate((layout.ptr, layout.targets.reshape(-1), layout.contexts)).astype(np.int64)
    floats = np.concatenate((layout.lr, layout.target_ok.reshape(-1), sigmoid, loss.reshape(-1))).astype(np.float32)
    ints, floats = torch.from_numpy(ints).to(device), torch.from_numpy(floats).to(device)
    bk = triton.next_power_of_2(k1)
    scratch = torch.zeros(n + max(layout.n_pairs, 1) * bk, dtype=torch.float32, device=device)
    dims = (dim, k1, triton.next_power_of_2(dim), bk)
    for first in range(0, n, batch_size):
        _window_step[(min(batch_size, n - first),)](w_in, w_out, ints, floats, scratch, first, n, dims)
    return scratch[:n]


def train_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args):
    """Train one block in place; returns (loss_sum, n_examples, words_processed). Skip-gram
    with shared negatives (negative sampling) only; ``args.batch_size`` as the torch kernel."""
    check_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args)
    if args.model != "skipgram" or not args.shared_negatives or args.hs is not None or args.subwords is not None:
        raise ValueError("the triton kernel trains skip-gram with shared negatives (negative sampling) only")
    as_tensor = (lambda x: x if isinstance(x, torch.Tensor) else torch.from_numpy(x))
    w_in, w_out = as_tensor(w_in), as_tensor(w_out)
    touched_in, touched_out = as_tensor(touched_in), as_tensor(touched_out)
    seed = int(rng_state[0])
    rng_state[0] = next_seed(seed)
    layout, n_tokens = host_layout(tokens, sent_starts, seed & SEED_MASK, args)
    if layout.n_centres == 0:
        return 0.0, 0, n_tokens
    losses = step_batches(w_in, w_out, layout, batch_size_of(args))
    device = w_in.device
    touched_in.index_fill_(0, torch.from_numpy(layout.contexts).to(device), 1)
    touched_out.index_fill_(0, torch.from_numpy(layout.targets.reshape(-1)).to(device), 1)
    return math.fsum([float(losses.double().sum())]), layout.n_pairs, n_tokens
