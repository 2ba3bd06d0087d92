"""SGNS / CBOW as batched tensor operations, for a GPU (runs on the CPU too, slowly).

Same ``train_block`` as the other kernels (see kernels/__init__.py). It is written for a
GPU's two costs, kernel launches and host synchronisation (docs/lab/benchmarks.md has the
counts and the roofline):

* a block is laid out once, in fixed-shape tensors: every kept centre word is a row of
  ``2 * window`` context slots (weight 0 where the shrunk window, the sentence or the block
  has no word) and ``1 + negative`` output rows (the centre, then its negatives). No
  boolean-mask indexing: subsampling compacts the kept words with a scatter, and the only
  device-to-host reads of a block are its kept-word count and, at the end, its loss and
  example count (one read each);
* the learning rate of every centre is computed on the device from global progress
  (refreshed every 10,000 raw words, as word2vec), and the loss is summed on the device;
* ``shared_negatives=True`` (pWord2Vec / BlazingText): one draw of negatives per centre
  serves its whole window, so a batch is a batched [contexts x (1 + negative)] matrix
  product. ``False`` gives every (context, centre) pair its own negatives (word2vec);
* examples are trained ``batch_size`` centre words at a time from the same parameter
  snapshot, and the updates of a batch are summed with ``index_add_``. A row that a batch
  updates ``n`` times (a frequent word, a popular negative) has its summed update divided
  by ``max(1, n lr sigma'(0) mean|partner row|^2 / STABILITY)`` (the partner rows' squared
  norm measured per batch from the rows it gathered): all ``n`` updates come from one
  snapshot, and without that large batches diverge (docs/lab/benchmarks.md). The counts ``n``
  are computed once per block (a sort). ``duplicate_steps=m`` gives a fixed divisor
  ``max(1, n / m)`` instead, ``float('inf')`` none.

Randomness comes from a ``torch.Generator`` seeded with ``rng_state[0]``; the seed of the
next block is derived from it on the host (splitmix64), so a resumed run continues the same
stream without reading the device. The numbers differ from the LCG kernels.

``w_in``/``w_out`` may be torch tensors (on any device) or numpy arrays (CPU, shared, so the
caller sees the updates); ``touched_in``/``touched_out`` likewise. ``keep_prob``/``neg_table``
may be given once as :class:`DeviceTables` (``tables=``) instead of being uploaded per
block. ``threads`` is ignored: torch's own thread settings apply.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from .batch import BATCH_SIZE, MIN_BATCH_SIZE, SEED_MASK, adaptive_batch_size, batch_size_of, next_seed  # noqa: F401
from .common import LR_REFRESH_WORDS, check_block

# A row updated n times in one batch moves by the sum of its updates / max(1, n / this).
DUPLICATE_STEPS = None      # None: the adaptive divisor below
# The adaptive cap: a row's summed update is scaled so that lr x (its updates in the batch) x
# sigma'(0) x (mean squared norm of the rows it pairs with) stays below this (see
# duplicate_caps).
STABILITY = 0.5


class DeviceTables:
    """The keep probabilities and the negative-sampling alias table, on the device once."""

    def __init__(self, keep_prob, neg_table, device):
        self.device = torch.device(device)
        self.keep = torch.as_tensor(np.asarray(keep_prob, dtype=np.float32)).to(self.device)
        table = np.asarray(neg_table).astype(np.int64)
        # bucket b keeps itself when a uniform < table[b, 0] / 2**32, else gives table[b, 1]
        self.threshold = torch.as_tensor(table[:, 0] / 2.0**32).to(self.device)
        self.alias = torch.as_tensor(table[:, 1]).to(self.device)

    def draw_negatives(self, shape, gen):
        bucket = torch.randint(0, len(self.alias), shape, generator=gen, device=self.device)
        coin = torch.rand(shape, generator=gen, device=self.device, dtype=torch.float64)
        return torch.where(coin < self.threshold[bucket], bucket, self.alias[bucket])


@dataclass
class Layout:
    """One block's examples in batch order, every tensor with ``rows`` rows: a row is a
    centre word (skip-gram with shared negatives, CBOW) or one (context, centre) pair
    (skip-gram with per-pair negatives)."""

    contexts: torch.Tensor     # [rows, M] int64 input rows (any valid id where ``ok`` is 0)
    ok: torch.Tensor           # [rows, M] float32 1 where the slot holds a context
    targets: torch.Tensor      # [rows, 1 + K] int64: the centre, then the negatives
    target_ok: torch.Tensor    # [rows, 1 + K] float32 0 for a negative equal to the centre
    lr: torch.Tensor           # [rows] float32 learning rate of the row's centre
    n_examples: torch.Tensor   # 0-dim: skip-gram pairs, or CBOW centres with a context
    batch_rows: int            # rows per batch


def train_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args):
    """Train one block in place; returns (loss_sum, n_examples, words_processed).
    ``args.batch_size``: centre words per batch (None or 0: :func:`adaptive_batch_size` of
    the run's words per rank); ``args.duplicate_steps``:
    None (adaptive), a fixed cap, or ``float('inf')`` (duplicate updates summed unscaled):
    see the module docstring. ``args.tables``: keep_prob and neg_table on the device."""
    check_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args)
    a = args
    duplicate_steps, model = a.duplicate_steps, a.model
    n_tokens = len(tokens)
    w_in, w_out = _tensor(w_in), _tensor(w_out)
    touched_in, touched_out = _tensor(touched_in), _tensor(touched_out)
    layout = prepare_block(tokens, sent_starts, rng_state, w_in.device, args)
    if layout is None:
        return 0.0, 0, n_tokens
    vocab = w_in.shape[0]
    ids, ok, in_load, out_load = duplicate_loads(layout, vocab, w_in.shape[1], duplicate_steps, model)
    train = _train_cbow if model == "cbow" else _train_skipgram
    losses = train(w_in, w_out, layout, in_load, out_load, duplicate_steps is None)
    mark_touched((touched_in, touched_out), ids, ok)
    # the block's one late read: every batch's loss and the example count, summed on the host
    *batch_losses, n_examples = torch.stack([*losses, layout.n_examples.to(torch.float32)]).tolist()
    return math.fsum(batch_losses), int(n_examples), n_tokens


def duplicate_loads(layout: Layout, vocab: int, dim: int, duplicate_steps, model: str = "skipgram"):
    """(slot ids, their weights, input loads, output loads) of a layout whose input and output
    rows number at most ``vocab`` each: what the batch loops divide duplicate updates by
    (_divisors; the module docstring)."""
    # every slot of a row, input then output ids (output ids offset by V: one id space)
    ids, ok, batch = block_slots(layout, layout.batch_rows, vocab)
    if duplicate_steps is None:     # adaptive: n lr sigma'(0) |partner|^2 / STABILITY, per batch
        n = duplicate_counts(ids, ok, batch, 2 * vocab)
        load = n * (layout.lr[:, None] * (0.25 * dim / STABILITY))
    else:
        load = duplicate_scale(ids, ok, batch, 2 * vocab, duplicate_steps).reciprocal_()
    in_load, out_load = load.split([layout.ok.shape[1], layout.target_ok.shape[1]], 1)
    if duplicate_steps is None:     # per slot over its batch's partner entries: a batch needs |partner|^2, no mean
        rows_here = (len(layout.lr) - batch * layout.batch_rows).clamp_(max=layout.batch_rows)[:, None]
        partners_out = 1 if model == "cbow" else layout.ok.shape[1]    # CBOW: the mean h
        in_load = in_load / (rows_here * (layout.target_ok.shape[1] * dim))
        out_load = out_load / (rows_here * (partners_out * dim))
    return ids, ok, in_load, out_load


def _tensor(x):
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x)


def prepare_block(tokens, sent_starts, rng_state, device, args) -> Layout | None:
    """A block's layout on ``device`` (None for a block with no kept word): the generator
    seeded from ``rng_state[0]`` (advanced to the next block's seed on the host), subsampling,
    each centre's learning rate, then :func:`lay_out`. Shared by the fused kernel."""
    batch_size = batch_size_of(args)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(tokens) == 0:
        return None
    tables = args.tables if args.tables is not None else DeviceTables(args.keep_prob, args.neg_table, device)
    seed = int(rng_state[0])
    rng_state[0] = next_seed(seed)
    gen = torch.Generator(device=device).manual_seed(seed & SEED_MASK)
    tokens = torch.as_tensor(np.asarray(tokens)).to(device).long()
    starts = torch.as_tensor(np.asarray(sent_starts)).to(device)
    kept, raw_pos, sentence = subsample(tokens, starts, tables.keep, gen)
    if len(kept) == 0:
        return None
    lr = centre_learning_rates(raw_pos, args.lr0, args.lr_min, args.words_done, args.words_scale, args.words_total)
    return lay_out(kept, sentence, lr, tables, gen, args)


# ------------------------------------------------------------------ laying out a block
def subsample(tokens, starts, keep, gen):
    """(kept ids, their raw offsets, their sentence numbers): word2vec's per-occurrence drop,
    compacted with a scatter (a boolean-mask index would read its size on the host)."""
    n = len(tokens)
    device = tokens.device
    marks = torch.zeros(n, dtype=torch.int64, device=device)
    marks[starts] = 1
    sentence = marks.cumsum_(0)
    mask = torch.rand(n, generator=gen, device=device) <= keep[tokens]
    slot = mask.cumsum(0)
    n_kept = int(slot[-1])                   # the block's one early read
    where = torch.where(mask, slot - 1, n)   # dropped words all go to the spare slot n
    raw_pos = torch.empty(n + 1, dtype=torch.int64, device=device)
    raw_pos.scatter_(0, where, torch.arange(n, device=device))
    raw_pos = raw_pos[:n_kept]
    return tokens[raw_pos], raw_pos, sentence[raw_pos]


def centre_learning_rates(raw_pos, lr0, lr_min, words_done, words_scale, words_total):
    """max(lr_min, lr0 (1 - (words_done + scale * local) / total)), local = the raw words
    of the block before the centre, rounded down to a multiple of 10,000 (word2vec)."""
    step = lr0 * words_scale * LR_REFRESH_WORDS / words_total
    first = lr0 * (1.0 - words_done / words_total)
    refreshes = torch.div(raw_pos, LR_REFRESH_WORDS, rounding_mode="floor")
    return (refreshes * -step + first).clamp_(min=lr_min).float()


def lay_out(kept, sentence, lr, tables, gen, args) -> Layout:
    """Every kept centre's window (``2 * window`` slots, shrunk at random as word2vec) and
    output rows, in corpus order; ``args`` (a KernelArgs) gives the model, window, negatives
    and batch size."""
    model, window, negative, shared_negatives = args.model, args.window, args.negative, args.shared_negatives
    batch_size = batch_size_of(args)
    n = len(kept)
    device = kept.device
    reach = window - torch.randint(0, window, (n, 1), generator=gen, device=device)
    offsets = _offsets(window, device)
    other = torch.arange(n, device=device)[:, None] + offsets
    clamped = other.clamp(0, n - 1)
    ok = (other == clamped) & (offsets.abs() <= reach) & (sentence[clamped] == sentence[:, None])
    contexts = kept[clamped]
    ok = ok.float()
    m = 2 * window
    if model == "skipgram" and not shared_negatives:
        # one row per (centre, context slot): its own negatives
        negs = tables.draw_negatives((n * m, negative), gen)
        centres = kept.repeat_interleave(m, output_size=n * m)
        return Layout(contexts.reshape(-1, 1), ok.reshape(-1, 1), *_targets(centres, negs),
                      lr.repeat_interleave(m, output_size=n * m), ok.sum(), batch_size * m)
    negs = tables.draw_negatives((n, negative), gen)
    targets, target_ok = _targets(kept, negs)
    has = ok.amax(1)
    target_ok = target_ok * has[:, None]        # no context: no example (nor a duplicate or a touched row)
    if model == "cbow":
        return Layout(contexts, ok, targets, target_ok, lr, has.sum(), batch_size)
    return Layout(contexts, ok, targets, target_ok, lr, ok.sum(), batch_size)


@functools.lru_cache(maxsize=16)
def _offsets(window, device):
    return torch.cat((torch.arange(-window, 0), torch.arange(1, window + 1))).to(device)


@functools.lru_cache(maxsize=16)
def _label(k1, device):
    """Labels of the output rows: 1 for the centre, 0 for the negatives."""
    return torch.cat((torch.ones(1, device=device), torch.zeros(k1 - 1, device=device)))


def _targets(centres, negs):
    targets = torch.cat((centres[:, None], negs), dim=1)
    return targets, (targets != centres[:, None]).float().index_fill_(1, _zero(centres), 1.0)


def _zero(like):
    return torch.zeros(1, dtype=torch.int64, device=like.device)


def slot_ids(layout: Layout, vocab: int):
    """Every slot of a block in one id space (its context ids, then its output ids + V) and
    their 0/1 weights (a centre without context has none on its outputs: lay_out)."""
    return torch.cat((layout.contexts, layout.targets + vocab), 1), torch.cat((layout.ok, layout.target_ok), 1)


def block_slots(layout: Layout, batch_rows: int, vocab: int):
    """:func:`slot_ids`, and each row's batch number (``batch_rows`` rows a batch)."""
    ids, ok = slot_ids(layout, vocab)
    batch = torch.div(torch.arange(len(layout.lr), device=ids.device), batch_rows, rounding_mode="floor")
    return ids, ok, batch


def duplicate_counts(ids, ok, batch, vocab):
    """Per slot, how many slots of its batch (``batch``: the batch number of each row) update
    the same row; slots with ``ok`` 0 do not count. One sort for the whole block."""
    key = torch.where(ok > 0, batch[:, None] * vocab + ids, -1).reshape(-1)
    ordered = torch.sort(key).values
    n = torch.searchsorted(ordered, key, right=True) - torch.searchsorted(ordered, key)
    return n.reshape(ids.shape).float()


def duplicate_scale(ids, ok, batch, vocab, duplicate_steps):
    """A fixed cap: 1 / max(1, n / duplicate_steps) per slot (n: duplicate_counts)."""
    if duplicate_steps == float("inf"):
        return torch.ones_like(ok)
    n = duplicate_counts(ids, ok, batch, vocab)
    return (n / duplicate_steps).clamp_(min=1.0).reciprocal_()


def mark_touched(touched, ids, ok) -> None:
    """touched[i][id - i V] = 1 for every slot with ``ok`` set (no boolean-mask index)."""
    vocab = len(touched[0])
    seen = torch.zeros(len(touched) * vocab, dtype=ok.dtype, device=ok.device)
    seen.index_add_(0, ids.reshape(-1), ok.reshape(-1))
    for mask, hit in zip(touched, (seen > 0).view(len(touched), vocab)):
        mask.masked_fill_(hit, 1)


# ------------------------------------------------------------------ the batch loops
def _batches(batch_rows, *tensors):
    """The tensors split into batches of ``batch_rows`` layout rows, zipped per batch. Each
    is shaped once per block, so a batch costs no reshaping: a tensor with one row per
    layout row, or a pair (flat tensor, entries per layout row)."""
    return zip(*(t[0].split(batch_rows * t[1]) if isinstance(t, tuple) else t.split(batch_rows)
                 for t in tensors))


def _divisors(load_in, load_out, h, o, adaptive):
    """What a batch divides its duplicate updates by: max(1, load), the load times the summed
    squares of the partner rows when adaptive (the load already holds 1 / their entries, so
    n lr sigma'(0) mean|partner|^2 / STABILITY). The sum of squares is one reduction
    (``vector_norm``), not a squared copy of the gathered rows."""
    if adaptive:
        load_in = load_in * torch.linalg.vector_norm(o).square_()
        load_out = load_out * torch.linalg.vector_norm(h).square_()
    return load_in.clamp(min=1.0), load_out.clamp(min=1.0)


def _train_skipgram(w_in, w_out, layout, in_load, out_load, adaptive):
    """Each row: its context rows H [M, D] predict its outputs O [1 + K, D]:
    G = (label - sigma(H O^T)) * lr, H += G O, O += G^T H, from the batch's snapshot (the
    per-row duplicate scales multiply the small G, not the [B, M, D] products). Returns
    the batches' losses (0-dim tensors).

    What does not depend on the parameters is made once per block, not per batch: the
    labels' expansion, the slot weights (context ok x output ok, 0 or 1) and the weights
    times the learning rate ((x w) lr = x (w lr) exactly, as w is 0 or 1); a batch costs
    25 dispatched ops."""
    dim = w_in.shape[1]
    rows, m = layout.contexts.shape
    label = _label(layout.targets.shape[1], w_in.device).expand(rows, m, -1)
    weight = layout.ok[:, :, None] * layout.target_ok[:, None, :]       # [rows, M, 1+K]
    weight_lr = weight * layout.lr[:, None, None]
    losses = []
    for ctx, ctx_flat, tgt, tgt_flat, l_in, l_out, lab, w, w_lr in _batches(
            layout.batch_rows, layout.contexts, (layout.contexts.reshape(-1), m), layout.targets,
            (layout.targets.reshape(-1), layout.targets.shape[1]), in_load[:, :, None], out_load[:, None, :],
            label, weight, weight_lr):
        h = w_in[ctx]                                    # [B, M, D]
        o = w_out[tgt]                                   # [B, 1+K, D]
        d_in, d_out = _divisors(l_in, l_out, h, o, adaptive)
        scores = torch.bmm(h, o.mT)                      # [B, M, 1+K]
        losses.append(F.binary_cross_entropy_with_logits(scores, lab, w, reduction="sum"))
        g = (lab - scores.sigmoid_()).mul_(w_lr)
        grad_in = torch.bmm(g / d_in, o)
        grad_out = torch.bmm((g / d_out).mT, h)
        w_in.index_add_(0, ctx_flat, grad_in.view(-1, dim))
        w_out.index_add_(0, tgt_flat, grad_out.view(-1, dim))
    return losses


def _train_cbow(w_in, w_out, layout, in_load, out_load, adaptive):
    """Each row: the mean h of its context rows predicts its outputs O; every context row
    receives the whole input gradient (word2vec's cbow_mean=1). Returns the batches' losses."""
    dim = w_in.shape[1]
    rows, m = layout.contexts.shape
    k1 = layout.targets.shape[1]
    label = _label(k1, w_in.device).expand(rows, 1, -1)
    tok = layout.target_ok[:, None, :]
    tok_lr = tok * layout.lr[:, None, None]       # exact: tok is 0 or 1
    mean = (layout.ok / layout.ok.sum(1, keepdim=True).clamp_(min=1.0))[:, None, :]
    losses = []
    for ctx, ctx_flat, tgt, tgt_flat, ok, lab, tok, tok_lr, l_in, l_out, mean_w in _batches(
            layout.batch_rows, layout.contexts, (layout.contexts.reshape(-1), m), layout.targets,
            (layout.targets.reshape(-1), k1), layout.ok[:, :, None], label, tok, tok_lr,
            in_load[:, :, None], out_load[:, None, :], mean):
        h = torch.bmm(mean_w, w_in[ctx])                 # [B, 1, D]
        o = w_out[tgt]                                   # [B, 1+K, D]
        d_in, d_out = _divisors(l_in, l_out, h, o, adaptive)
        scores = torch.bmm(h, o.mT)                      # [B, 1, 1+K]
        losses.append(F.binary_cross_entropy_with_logits(scores, lab, tok, reduction="sum"))
        g = (lab - scores.sigmoid_()).mul_(tok_lr)
        grad_in = torch.bmm(ok / d_in, torch.bmm(g, o))  # [B, M, D]: h's gradient per context
        grad_out = torch.bmm((g / d_out).mT, h)
        w_in.index_add_(0, ctx_flat, grad_in.view(-1, dim))
        w_out.index_add_(0, tgt_flat, grad_out.view(-1, dim))
    return losses
