"""SGNS / CBOW as batched tensor operations, for a GPU (runs on the CPU too, slowly).

Same ``train_block`` as the other kernels (see kernels/__init__.py), with two differences:

* randomness comes from a ``torch.Generator`` seeded with ``rng_state[0]``; the next seed is
  written back, so a resumed run continues the same stream, but the numbers differ from
  the LCG kernels;
* examples are trained ``batch_size`` at a time from the same parameter snapshot: the
  gradients of a batch are summed with ``index_add_`` (a word seen twice in a batch gets
  both updates). Keep the batch small next to the vocabulary; the learning rate follows
  global progress batch by batch.

``w_in``/``w_out`` may be torch tensors (on any device) or numpy arrays (CPU, shared, so the
caller sees the updates); ``touched_in``/``touched_out`` likewise. ``threads`` is ignored:
torch's own thread settings apply.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .common import check_block, learning_rate

SEED_MASK = (1 << 63) - 1


def train_block(w_in, w_out, tokens, sent_starts, keep_prob, neg_table, rng_state, *,
                model="skipgram", window=5, negative=5, lr0=0.025, lr_min=0.0001,
                words_done=0, words_scale=1.0, words_total, touched_in, touched_out,
                threads=1, shared_negatives=False, batch_size=4096):
    """Train one block in place; returns (loss_sum, n_examples, words_processed)."""
    check_block(w_in, w_out, tokens, sent_starts, keep_prob, neg_table, rng_state,
                touched_in, touched_out, model=model, window=window, negative=negative,
                words_total=words_total, threads=1, shared_negatives=shared_negatives,
                is_numpy=False)
    w_in, w_out = _tensor(w_in), _tensor(w_out)
    touched_in, touched_out = _tensor(touched_in), _tensor(touched_out)
    device = w_in.device
    gen = torch.Generator(device=device).manual_seed(int(rng_state[0]) & SEED_MASK)
    tokens = torch.as_tensor(np.asarray(tokens), device=device).long()
    n_tokens = len(tokens)
    if n_tokens == 0:
        return 0.0, 0, 0
    sampler = _AliasSampler(neg_table, device)

    kept, sentence, raw_pos = _subsample(tokens, sent_starts, keep_prob, gen)
    reach = window - torch.randint(0, window, (len(kept),), generator=gen, device=device)
    if model == "cbow":
        center, contexts = _cbow_windows(kept, sentence, reach, window)
        step = _cbow_step
    else:
        center, contexts = _skipgram_pairs(kept, sentence, reach, window)
        step = _skipgram_step
    progress = raw_pos[center]            # raw words done when an example is reached

    loss_sum, n_examples = 0.0, len(center)
    for lo in range(0, n_examples, batch_size):
        hi = min(lo + batch_size, n_examples)
        lr = learning_rate(lr0, lr_min, words_done, words_scale, int(progress[lo]), words_total)
        centers = kept[center[lo:hi]]
        negs = sampler.draw((hi - lo, negative), gen)
        loss_sum += step(w_in, w_out, centers, contexts[lo:hi], negs, lr, touched_in, touched_out)
    rng_state[0] = int(torch.randint(0, SEED_MASK, (1,), generator=gen, device=device))
    return loss_sum, n_examples, n_tokens


def _tensor(x):
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x)


class _AliasSampler:
    """vocab.negative_table's alias table as tensors: bucket uniform, then a biased coin."""

    def __init__(self, table, device):
        table = torch.as_tensor(np.asarray(table).astype(np.int64), device=device)
        self.keep = table[:, 0].double() / 2.0**32
        self.alias = table[:, 1]

    def draw(self, shape, gen):
        bucket = torch.randint(0, len(self.alias), shape, generator=gen, device=self.alias.device)
        coin = torch.rand(shape, generator=gen, device=self.alias.device, dtype=torch.float64)
        return torch.where(coin < self.keep[bucket], bucket, self.alias[bucket])


def _subsample(tokens, sent_starts, keep_prob, gen):
    """Kept ids, their sentence numbers and raw offsets (word2vec's per-occurrence drop)."""
    device = tokens.device
    n = len(tokens)
    starts = torch.as_tensor(np.asarray(sent_starts), device=device).long()
    lengths = torch.diff(starts, append=torch.tensor([n], device=device))
    sentence = torch.repeat_interleave(torch.arange(len(starts), device=device), lengths)
    keep = torch.as_tensor(np.asarray(keep_prob), device=device).float()[tokens]
    mask = torch.rand(n, generator=gen, device=device) <= keep
    raw_pos = torch.arange(n, device=device)[mask]
    return tokens[mask], sentence[mask], raw_pos


def _skipgram_pairs(kept, sentence, reach, window):
    """(centre position, context id) for every pair inside a shrunk window and a sentence,
    in corpus order of the centre (as word2vec visits them)."""
    n = len(kept)
    pos = torch.arange(n, device=kept.device)
    centers, contexts = [], []
    for offset in range(1, window + 1):
        for sign in (-1, 1):
            other = pos + sign * offset
            inside = (other >= 0) & (other < n)
            c, o = pos[inside], other[inside]
            ok = (sentence[o] == sentence[c]) & (reach[c] >= offset)
            centers.append(c[ok])
            contexts.append(kept[o[ok]])
    center, context = torch.cat(centers), torch.cat(contexts)
    order = torch.sort(center, stable=True).indices
    return center[order], context[order]


def _cbow_windows(kept, sentence, reach, window):
    """Per centre with at least one context: its position and a [2*window] row of context
    ids, -1 where the window has no word."""
    n = len(kept)
    pos = torch.arange(n, device=kept.device)
    offsets = torch.cat((torch.arange(-window, 0), torch.arange(1, window + 1))).to(kept.device)
    other = pos[:, None] + offsets[None, :]
    ok = (other >= 0) & (other < n) & (offsets.abs()[None, :] <= reach[:, None])
    clamped = other.clamp(0, n - 1)
    ok &= sentence[clamped] == sentence[:, None]
    contexts = torch.where(ok, kept[clamped], torch.full_like(clamped, -1))
    has = ok.any(dim=1)
    return pos[has], contexts[has]


def _scores_and_grads(h, outputs, negs_valid, lr):
    """Scores of h against [positive, negatives] rows; g = (label - sigmoid) * lr, zero for
    dropped negatives; loss = -log sigma(pos) - sum log sigma(-neg)."""
    scores = torch.bmm(outputs, h.unsqueeze(2)).squeeze(2)           # [b, 1 + K]
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1.0
    valid = torch.cat((torch.ones_like(negs_valid[:, :1]), negs_valid), dim=1).to(scores.dtype)
    g = (labels - torch.sigmoid(scores)) * lr * valid
    loss = (F.softplus(-scores[:, 0]).sum() + (F.softplus(scores[:, 1:]) * valid[:, 1:]).sum())
    return g, float(loss)


def _apply_outputs(w_out, targets, g, h, touched_out, valid):
    """out_j += g_j h for every (example, target); duplicates add up."""
    dim = w_out.shape[1]
    w_out.index_add_(0, targets.reshape(-1), (g.unsqueeze(2) * h.unsqueeze(1)).reshape(-1, dim))
    touched_out[targets[valid]] = 1


def _skipgram_step(w_in, w_out, centers, contexts, negs, lr, touched_in, touched_out):
    """A batch of word2vec skip-gram pairs: the context's input row predicts the centre."""
    negs_valid = negs != centers[:, None]
    targets = torch.cat((centers[:, None], negs), dim=1)
    valid = torch.cat((torch.ones_like(negs_valid[:, :1]), negs_valid), dim=1)
    h = w_in[contexts]
    outputs = w_out[targets]
    g, loss = _scores_and_grads(h, outputs, negs_valid, lr)
    grad_h = torch.bmm(g.unsqueeze(1), outputs).squeeze(1)
    _apply_outputs(w_out, targets, g, h, touched_out, valid)
    w_in.index_add_(0, contexts, grad_h)
    touched_in[contexts] = 1
    return loss


def _cbow_step(w_in, w_out, centers, contexts, negs, lr, touched_in, touched_out):
    """A batch of CBOW centres: the mean context row predicts the centre; each context row
    receives the whole input gradient (word2vec's cbow_mean=1)."""
    present = contexts >= 0
    rows = w_in[contexts.clamp(min=0)] * present.unsqueeze(2)
    h = rows.sum(1) / present.sum(1, keepdim=True).to(rows.dtype)
    negs_valid = negs != centers[:, None]
    targets = torch.cat((centers[:, None], negs), dim=1)
    valid = torch.cat((torch.ones_like(negs_valid[:, :1]), negs_valid), dim=1)
    outputs = w_out[targets]
    g, loss = _scores_and_grads(h, outputs, negs_valid, lr)
    grad_h = torch.bmm(g.unsqueeze(1), outputs).squeeze(1)
    _apply_outputs(w_out, targets, g, h, touched_out, valid)
    ctx_ids = contexts[present]
    per_ctx = grad_h.unsqueeze(1).expand(-1, contexts.shape[1], -1)[present]
    w_in.index_add_(0, ctx_ids, per_ctx)
    touched_in[ctx_ids] = 1
    return loss
