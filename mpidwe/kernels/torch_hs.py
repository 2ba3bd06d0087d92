"""Hierarchical softmax as batched tensor operations (the torch kernel's HS, for a GPU).

The same ``train_block`` as kernels/torch_kernel.py with the Huffman tree ``hs = (codes,
points, lengths)`` required (kernels/__init__.py): every example walks its centre's path
instead of scoring a positive and noise words. Randomness comes from a ``torch.Generator``
seeded with ``rng_state[0]`` (subsampling and shrunk windows only: HS draws no noise), and
the next seed is written back, so a resumed run continues the same stream. Examples are
trained ``batch_size`` at a time from one parameter snapshot (summed with ``index_add_``);
a node scored beyond +-6 gets no update, as in word2vec.c and gensim.

Kept apart from torch_kernel.py so that the negative-sampling path there stays as it is;
the window and subsampling helpers are small and repeated here for the same reason.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .common import MAX_EXP, check_block, check_hs, learning_rate

SEED_MASK = (1 << 63) - 1
BATCH_SIZE = 4096            # examples per batch


def train_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args):
    """Train one block in place with hierarchical softmax; returns (loss_sum, n_examples,
    words_processed). ``args.negative``, ``neg_table`` and ``shared_negatives`` are not used;
    ``args.batch_size`` counts examples (None: BATCH_SIZE)."""
    if args.hs is None:
        raise ValueError("kernels.torch_hs trains hierarchical softmax: give hs=(codes, points, lengths)")
    check_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args)
    a = args
    hs, keep_prob, model, window = a.hs, a.keep_prob, a.model, a.window
    batch_size = BATCH_SIZE if a.batch_size is None else a.batch_size
    lr0, lr_min, words_done, words_scale, words_total = a.lr0, a.lr_min, a.words_done, a.words_scale, a.words_total
    codes, points, lengths = check_hs(hs, w_in.shape[0])
    w_in, w_out = _tensor(w_in), _tensor(w_out)
    touched_in, touched_out = _tensor(touched_in), _tensor(touched_out)
    device = w_in.device
    n_tokens = len(tokens)
    if n_tokens == 0:
        return 0.0, 0, 0
    gen = torch.Generator(device=device).manual_seed(int(rng_state[0]) & SEED_MASK)
    tree = Tree(codes, points, lengths, device)
    tokens = torch.as_tensor(np.asarray(tokens), device=device).long()
    kept, sentence, raw_pos = _subsample(tokens, sent_starts, keep_prob, gen)
    reach = window - torch.randint(0, window, (len(kept),), generator=gen, device=device)
    windows = _cbow_windows if model == "cbow" else _skipgram_pairs
    center, contexts = windows(kept, sentence, reach, window)
    progress = raw_pos[center]
    loss_sum, n_examples = 0.0, len(center)
    for lo in range(0, n_examples, batch_size):
        hi = min(lo + batch_size, n_examples)
        lr = learning_rate(lr0, lr_min, words_done, words_scale, int(progress[lo]), words_total)
        loss_sum += _hs_step((w_in, w_out, touched_in, touched_out), kept[center[lo:hi]], contexts[lo:hi], tree,
                             lr, cbow=model == "cbow")
    rng_state[0] = int(torch.randint(0, SEED_MASK, (1,), generator=gen, device=device))
    return loss_sum, n_examples, n_tokens


class Tree:
    """The Huffman tables on the device, with the mask of each word's real path nodes."""

    def __init__(self, codes, points, lengths, device):
        self.points = torch.as_tensor(points, device=device).long()
        self.labels = 1.0 - torch.as_tensor(codes, device=device).float()
        steps = torch.arange(self.points.shape[1], device=device)
        self.mask = steps[None, :] < torch.as_tensor(lengths, device=device).long()[:, None]


def _hs_step(params, centers, contexts, tree, lr, cbow):
    """A batch: h (a context row, or CBOW's mean of the context rows) walks each centre's
    path; out_node += g h and the context row(s) += sum_node g out_node. ``params``:
    (w_in, w_out, touched_in, touched_out)."""
    w_in, w_out, touched_in, touched_out = params
    if cbow:
        present = contexts >= 0
        rows = w_in[contexts.clamp(min=0)] * present.unsqueeze(2)
        h = rows.sum(1) / present.sum(1, keepdim=True).to(rows.dtype)
    else:
        h = w_in[contexts]
    nodes, labels, mask = tree.points[centers], tree.labels[centers], tree.mask[centers]
    outputs = w_out[nodes]                                            # [b, L, dim]
    scores = torch.bmm(outputs, h.unsqueeze(2)).squeeze(2)            # [b, L]
    live = mask & (scores.abs() < MAX_EXP)
    g = (labels - torch.sigmoid(scores)) * lr * live.to(scores.dtype)
    # -log P(label): softplus(-s) for label 1, softplus(s) for label 0
    loss = float((F.softplus(torch.where(labels > 0, -scores, scores)) * mask.to(scores.dtype)).sum())
    grad_h = torch.bmm(g.unsqueeze(1), outputs).squeeze(1)
    dim = w_out.shape[1]
    w_out.index_add_(0, nodes[mask], (g.unsqueeze(2) * h.unsqueeze(1))[mask].reshape(-1, dim))
    touched_out[nodes[mask]] = 1
    if cbow:
        ids = contexts[present]
        w_in.index_add_(0, ids, grad_h.unsqueeze(1).expand(-1, contexts.shape[1], -1)[present])
    else:
        ids = contexts
        w_in.index_add_(0, ids, grad_h)
    touched_in[ids] = 1
    return loss


def _tensor(x):
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(x)


def _subsample(tokens, sent_starts, keep_prob, gen):
    """Kept ids, their sentence numbers and raw offsets (word2vec's per-occurrence drop)."""
    device = tokens.device
    n = len(tokens)
    starts = torch.as_tensor(np.asarray(sent_starts), device=device).long()
    lengths = torch.diff(starts, append=torch.tensor([n], device=device))
    sentence = torch.repeat_interleave(torch.arange(len(starts), device=device), lengths)
    keep = torch.as_tensor(np.asarray(keep_prob), device=device).float()[tokens]
    mask = torch.rand(n, generator=gen, device=device) <= keep
    return tokens[mask], sentence[mask], torch.arange(n, device=device)[mask]


def _skipgram_pairs(kept, sentence, reach, window):
    """(centre position, context id) of every pair in a shrunk window inside a sentence,
    in corpus order of the centre."""
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
    """Per centre with a context: its position and a [2*window] row of context ids (-1: none)."""
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
