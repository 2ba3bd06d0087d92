"""One bucket of the block store (``--store blocks --kernel torch``) as batched tensor
operations: the torch kernel's batch loop (torch_kernel._train_skipgram) over a bucket's
pairs instead of a block of text.

The bucket's pairs (pairs.py: input rows of this rank's block, output rows of the block it
holds) come in runs of one centre; as the numba bucket kernel, a run of at most
``2 x window`` pairs shares one draw of noise words (``--shared-negatives``, else every pair
draws its own), drawn from the held block's piece only (its unigram^0.75 alias table). A run
is a layout row of up to 2 x window context slots; its learning rate is the schedule's at
its first pair (pairs.Span). Rows train ``batch_size`` at a time from one snapshot, with the
torch kernel's duplicate divisor.

The store's arrays stay the record: on the CPU the tensors share their memory; on a device
(CUDA) the input block and the held rows go up before the bucket, and the input block and the
held piece's rows (contiguous: slot order) come back after it (the ring sends host rows). Randomness: a ``torch.Generator`` seeded from ``rng_state[0]``,
which is advanced to the next bucket's seed on the host (batch.next_seed); the numbers
differ from the numba kernel's.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .batch import SEED_MASK, batch_size_of, next_seed
from .pairs import Noise, Span
from .torch_kernel import DeviceTables, Layout, _targets, _train_skipgram, duplicate_loads


# Copy the rows to the "device" and back on the CPU too (the tests' view of the device path).
STAGE_ON_CPU = False


def runs(out: np.ndarray, longest: int) -> np.ndarray:
    """Where each run of one output row starts (at most ``longest`` pairs a run): int64
    starts, then len(out)."""
    n = len(out)
    new = np.ones(n, bool)
    new[1:] = out[1:] != out[:-1]
    first = np.flatnonzero(new)
    length = np.diff(np.append(first, n))
    # a run longer than ``longest`` is cut every ``longest`` pairs
    pieces = -(-length // longest)
    starts = np.repeat(first, pieces) + longest * (np.arange(pieces.sum()) - np.repeat(np.cumsum(pieces) - pieces, pieces))
    return np.append(starts, n).astype(np.int64)


def bucket_layout(inp: np.ndarray, out: np.ndarray, noise: Noise, sched: Span, gen, device, batch_rows: int
                  ) -> Layout:
    """The bucket's layout on ``device``: a row per run (pairs.py's runs of a centre, or
    every pair with ``noise.shared`` off), its contexts, the centre and its noise words."""
    longest = max(noise.group, 1) if noise.shared else 1
    starts = runs(out, longest)
    rows, n = len(starts) - 1, len(out)
    width = int(np.diff(starts).max())
    slot = np.arange(n) - np.repeat(starts[:-1], np.diff(starts))
    row = np.repeat(np.arange(rows), np.diff(starts))
    contexts = np.zeros((rows, width), np.int64)
    ok = np.zeros((rows, width), np.float32)
    contexts[row, slot] = inp
    ok[row, slot] = 1.0
    first = starts[:-1]
    lr = np.maximum(sched.lr_min, sched.lr0 * (1.0 - (sched.done0 + sched.span * first / max(n, 1)) / sched.total))
    lo, m = noise.lo, noise.n
    piece = DeviceTables(np.zeros(0, np.float32), noise.table[lo:lo + m], device)   # the held piece's alias table
    members = torch.as_tensor(noise.members[lo:lo + m].astype(np.int64), device=device)
    negs = members[piece.draw_negatives((rows, noise.negative), gen)]
    centres = torch.as_tensor(out[first].astype(np.int64), device=device)
    targets, target_ok = _targets(centres, negs)
    ok_t = torch.as_tensor(ok, device=device)
    return Layout(torch.as_tensor(contexts, device=device), ok_t, targets, target_ok,
                  torch.as_tensor(lr.astype(np.float32), device=device), ok_t.sum(), batch_rows)


def train_bucket_torch(rows: tuple, pairs: tuple, noise: Noise, sched: Span, rng_state: np.ndarray, args,
                       device: str, parts: int = 1) -> tuple[float, int]:
    """Train one bucket in place: ``rows`` = (w_in, w_out), the rank's input block and the
    held rows (numpy, the store's record); ``pairs`` = (inp, out), its pairs as rows of
    those. ``parts``: the groups the output rows are split into
    (blocks x pieces): a bucket's rows come from that much smaller a set, so a batch of the
    torch kernel's size would hold each row that many times more often (and its duplicate
    divisor would slow it down that much); a batch is that many times smaller. Returns (loss
    sum, examples)."""
    (w_in, w_out), (inp, out) = rows, pairs
    if len(inp) == 0:
        return 0.0, 0
    seed = int(rng_state[0])
    rng_state[0] = next_seed(seed)
    dev = torch.device(device)
    gen = torch.Generator(device=dev).manual_seed(seed & SEED_MASK)
    on_host = dev.type == "cpu" and not STAGE_ON_CPU
    t_in = torch.from_numpy(w_in) if on_host else torch.from_numpy(w_in).to(dev, copy=True)
    t_out = torch.from_numpy(w_out) if on_host else torch.from_numpy(w_out).to(dev, copy=True)
    batch = max(1, batch_size_of(args) * (2 * args.window if not noise.shared else 1) // max(parts, 1))
    layout = bucket_layout(inp, out, noise, sched, gen, dev, batch)
    _, _, in_load, out_load = duplicate_loads(layout, max(len(w_in), len(w_out)), w_in.shape[1], args.duplicate_steps)
    losses = _train_skipgram(t_in, t_out, layout, in_load, out_load, args.duplicate_steps is None)
    if not on_host:     # back to the record: the input block, and the held piece's rows only (with
        # --ring-overlap the other piece may be on the wire from the ring thread meanwhile)
        held = noise.members[noise.lo:noise.lo + noise.n]
        a, b = int(held.min()), int(held.max()) + 1
        w_in[:] = t_in.cpu().numpy()
        w_out[a:b] = t_out[a:b].cpu().numpy()
    *batch_losses, examples = torch.stack([*losses, layout.n_examples.to(torch.float32)]).tolist()
    return math.fsum(batch_losses), int(examples)
