"""Skip-gram with shared negatives as one fused Triton launch per batch of windows (opt-in,
``--kernel triton``; for CUDA, and tested on CPU tensors under ``TRITON_INTERPRET=1``).

Same ``train_block`` as the other kernels (see kernels/__init__.py). The block is laid out
on the device by the torch kernel's own code (``torch_kernel.prepare_block``: subsampling,
the shrunk windows, the negatives and each centre's learning rate, from the same
``torch.Generator`` stream, so both kernels draw the same examples for a seed): every kept
centre word is a row of ``2 * window`` context slots with 0/1 weights and ``1 + negative``
output ids (the centre, then its negatives; a negative equal to the centre has weight 0, as
word2vec drops it). No host numpy, no boolean-mask index: a block's reads are its kept-word
count and, at the end, its loss and example count, as the torch kernel's.

Then every batch of ``batch_size`` centres is one launch of :func:`_window_step`, one program
per centre, which does what ``reference.skipgram_window_shared`` does for one window: the
scores of every (context, output) pair from the rows as they were before the window
(word2vec's sigmoid and loss tables, saturated beyond +-6), the output rows' summed updates,
then the context rows'. A slot of weight 0 (beyond the shrunk window, the sentence or the
block) is skipped: no row is read or written for it. The output rows and the per-slot
gradients stay in registers between the two passes; each row is read once and written back
once with an atomic add (Hogwild between the windows of a launch, as BlazingText; the
interpreter runs the programs one after another, so there it is exactly the reference's
sequential order). Above a local rate of UNCAPPED_MAX_RATE (several ranks train at s x
--lr) the launch's duplicate updates are capped as the torch kernel caps a batch's: a row
that ``n`` slots of the launch update (all from about one snapshot) has each update divided
by ``max(1, n lr sigma'(0) mean|partner row|^2 / STABILITY)``, the partner norms those of
the window's own rows (its contexts for an output row, its outputs for a context row); the
counts ``n`` come from one sort per block. Without it the launches diverged from a rate of
0.07 on (enwiki); at or below 0.05 the kernel runs uncapped, as numba's Hogwild threads.

Memory traffic per kept centre with ``n`` contexts (docs/lab/benchmarks.md): each context row
read and atomically added once (``3 n D`` floats: read, then read-modify-write), each output
row likewise (``3 (1 + K) D``), the slot ids and weights (``2 window`` of each) and the output
ids, which a block packs into one id and one weight tensor (two copies per block); no
[B, M, D] intermediate and no per-pair scratch.

Randomness: the torch kernel's (a ``torch.Generator`` seeded with ``rng_state[0]``; the next
block's seed derived on the host, splitmix64), so resume is exact.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .common import MAX_EXP, SIGMOID_BIN_SCALE, SIGMOID_TABLE_SIZE, check_block, sigmoid_tables
from .batch import batch_size_of
from .torch_kernel import STABILITY, Layout, block_slots, duplicate_counts, mark_touched, prepare_block, slot_ids

try:
    import triton
    import triton.language as tl
except ImportError:          # the kernel refuses to run; the rest of mpidwe does not need it
    triton = tl = None


def available() -> bool:
    return triton is not None


if triton is not None:
    BIN_SCALE_C = tl.constexpr(SIGMOID_BIN_SCALE)
    TABLE_C = tl.constexpr(SIGMOID_TABLE_SIZE)
    LIMIT_C = tl.constexpr(MAX_EXP)

    @triton.jit
    def _window_step(w_in, w_out, ids, weights, tables, losses, first, dims: tl.constexpr):
        """One window per program: centre ``first + program_id``. ``ids``: [n, M + K1], a row's
        context ids then output ids; ``weights``: [n, M + K1 + 1], their 0/1 weights then the
        centre's learning rate, and when capped [n, 2 (M + K1) + 1], then per slot the
        duplicate cap's load before the partner norm (n lr sigma'(0) / STABILITY, n: the slots
        of the launch that update the same row); ``tables``: [sigmoid | loss(label 0) |
        loss(label 1)]; ``losses``: [n] out. ``dims``: (D, M, K1, BD, BM, BK, CAPPED):
        uncapped, the cap's code is compiled out."""
        D: tl.constexpr = dims[0]
        M: tl.constexpr = dims[1]
        K1: tl.constexpr = dims[2]
        BD: tl.constexpr = dims[3]
        BM: tl.constexpr = dims[4]
        BK: tl.constexpr = dims[5]
        capped: tl.constexpr = dims[6]
        c = first + tl.program_id(0)
        contexts = ids + c * (M + K1)               # this centre's row of each
        targets = contexts + M
        slot_ok = weights + c * (M + K1 + 1 + capped * (M + K1))
        target_ok = slot_ok + M
        slot_load = target_ok + K1 + 1
        d = tl.arange(0, BD)
        k = tl.arange(0, BK)
        m = tl.arange(0, BM)
        dm = d < D
        km = k < K1
        ok = tl.load(slot_ok + m, mask=m < M, other=0.0)
        loss = tl.sum(ok, axis=0) * 0.0             # a float32 scalar, carried through the branches
        if tl.sum(ok, axis=0) > 0:                  # a centre with no context trains nothing
            rate = tl.load(target_ok + K1)
            tgt = tl.load(targets + k, mask=km, other=0)
            weight = tl.load(target_ok + k, mask=km, other=0.0)
            label = (k == 0).to(tl.float32)
            rows = tl.load(w_out + tgt[:, None] * D + d[None, :], mask=km[:, None] & dm[None, :], other=0.0)
            out_grad = tl.zeros((BK, BD), dtype=tl.float32)
            grads = tl.zeros((BM, BK), dtype=tl.float32)     # per slot, kept in registers for pass 2
            h_square = loss                         # the contexts' summed squared norms
            for j in range(M):                      # pass 1: scores from the rows before the window
                if tl.load(slot_ok + j) > 0:
                    ctx = tl.load(contexts + j)
                    h = tl.load(w_in + ctx * D + d, mask=dm, other=0.0)
                    if capped:
                        h_square += tl.sum(h * h, axis=0)
                    score = tl.sum(rows * h[None, :], axis=1)
                    i = tl.minimum(tl.maximum(((score + LIMIT_C) * BIN_SCALE_C).to(tl.int32), 0), TABLE_C - 1)
                    inside = (score < LIMIT_C) & (score > -LIMIT_C)
                    sig = tl.where(inside, tl.load(tables + i), tl.where(score >= LIMIT_C, 1.0, 0.0))
                    table_loss = tl.load(tables + TABLE_C + (k == 0).to(tl.int32) * TABLE_C + i)
                    sat_loss = tl.where((score >= LIMIT_C) & (k != 0), score,
                                        tl.where((score <= -LIMIT_C) & (k == 0), -score, 0.0))
                    loss += tl.sum(tl.where(inside, table_loss, sat_loss) * weight, axis=0)
                    g = (label - sig) * rate * weight
                    grads = tl.where(m[:, None] == j, g[None, :], grads)
                    out_grad += g[:, None] * h[None, :]
            # the duplicate cap (the torch kernel's): a row n slots of the launch update moves
            # n steps from one snapshot, so each update is divided by max(1, its load times
            # the mean squared norm of the rows it pairs with)
            o_square = loss
            if capped:
                out_load = tl.load(slot_load + M + k, mask=km, other=0.0) * (h_square / tl.sum(ok, axis=0))
                out_grad = out_grad / tl.maximum(out_load, 1.0)[:, None]
                o_square = (tl.sum(tl.sum(rows * rows, axis=1) * weight, axis=0)
                            / tl.maximum(tl.sum(weight, axis=0), 1.0))
            tl.atomic_add(w_out + tgt[:, None] * D + d[None, :], out_grad, mask=km[:, None] & dm[None, :])
            for j in range(M):                      # pass 2: the context rows, from the same output rows
                if tl.load(slot_ok + j) > 0:
                    ctx = tl.load(contexts + j)
                    g = tl.sum(tl.where(m[:, None] == j, grads, 0.0), axis=0)
                    update = tl.sum(g[:, None] * rows, axis=0)
                    if capped:
                        update = update / tl.maximum(tl.load(slot_load + j) * o_square, 1.0)
                    tl.atomic_add(w_in + ctx * D + d, update, mask=dm)
        tl.store(losses + c, loss)


_TABLES = {}


def _device_tables(device) -> torch.Tensor:
    """word2vec's sigmoid and loss tables on ``device``, uploaded once per device."""
    if device not in _TABLES:
        sigmoid, loss = sigmoid_tables()
        _TABLES[device] = torch.from_numpy(np.concatenate((sigmoid, loss.reshape(-1)))).to(device)
    return _TABLES[device]


def launch(kernel, grid, *args):
    """One launch of a Triton kernel (the place benchmarks/gpu_dispatch.py counts them)."""
    kernel[grid](*args)


# The highest local rate (s x --lr) at which the launches train without the duplicate cap:
# on enwiki (an H200, 2026-11-27) one rank trained at 0.025 and 0.05 without it and reached
# NaN in its first round at 0.07 and 0.1 (0.1 even at 256 centres a launch; it trained at 32),
# as did 8 and 16 ranks at the rule's 4 x and 8 x; with the cap one rank at 0.1, and 8 and 16
# ranks at the defaults, train (docs/lab/sync-modes.md, "The fused kernel at several ranks, on a
# GPU"). Up to this rate the kernel runs uncapped, as measured (the cap cost one rank 1
# analogy point at 0.025).
UNCAPPED_MAX_RATE = 0.05


def duplicate_loads(layout: Layout, batch_size: int, vocab: int) -> torch.Tensor:
    """Per slot (contexts, then outputs), the duplicate cap's load before the partner norm:
    n x the centre's rate x sigma'(0) / STABILITY, n the slots of its launch (``batch_size``
    centres) that update the same row (the torch kernel's counts: one sort per block)."""
    n = duplicate_counts(*block_slots(layout, batch_size, vocab), 2 * vocab)
    return n * (layout.lr[:, None] * (0.25 / STABILITY))


def step_batches(w_in, w_out, layout: Layout, batch_size: int, capped: bool = True) -> torch.Tensor:
    """Train a laid-out block (skip-gram, shared negatives) on ``w_in``/``w_out`` (torch
    tensors on the layout's device): one launch per ``batch_size`` centres, with the
    duplicate cap where ``capped`` (else the cap's code is compiled out: the kernel as it was
    before the cap). Returns the per-centre losses (a device tensor)."""
    if triton is None:
        raise RuntimeError("--kernel triton needs the triton package (pip install triton)")
    n, m = layout.contexts.shape
    k1 = layout.targets.shape[1]
    losses = torch.zeros(n, dtype=torch.float32, device=w_in.device)
    dim = w_in.shape[1]
    dims = (dim, m, k1, triton.next_power_of_2(dim), triton.next_power_of_2(m), triton.next_power_of_2(k1),
            int(capped))
    tables = _device_tables(w_in.device)
    ids = torch.cat((layout.contexts, layout.targets), 1)
    loads = (duplicate_loads(layout, batch_size, w_in.shape[0]),) if capped else ()
    weights = torch.cat((layout.ok, layout.target_ok, layout.lr[:, None], *loads), 1)
    for first in range(0, n, batch_size):
        launch(_window_step, (min(batch_size, n - first),), w_in, w_out, ids, weights, tables, losses, first, dims)
    return losses


def train_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args):
    """Train one block in place; returns (loss_sum, n_examples, words_processed). Skip-gram
    with shared negatives (negative sampling) only; ``args.batch_size`` as the torch kernel."""
    check_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args)
    if args.model != "skipgram" or not args.shared_negatives or args.hs is not None or args.subwords is not None:
        raise ValueError("the triton kernel trains skip-gram with shared negatives (negative sampling) only")
    as_tensor = (lambda x: x if isinstance(x, torch.Tensor) else torch.from_numpy(x))
    w_in, w_out = as_tensor(w_in), as_tensor(w_out)
    touched_in, touched_out = as_tensor(touched_in), as_tensor(touched_out)
    n_tokens = len(tokens)
    layout = prepare_block(tokens, sent_starts, rng_state, w_in.device, args)
    if layout is None:
        return 0.0, 0, n_tokens
    losses = step_batches(w_in, w_out, layout, batch_size_of(args), capped=args.lr0 > UNCAPPED_MAX_RATE)
    mark_touched((touched_in, touched_out), *slot_ids(layout, w_in.shape[0]))
    # the block's one late read: the loss and the example count, summed on the device
    loss, n_examples = torch.stack((losses.double().sum(), layout.n_examples.double())).tolist()
    return math.fsum([loss]), int(n_examples), n_tokens
