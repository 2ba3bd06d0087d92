"""How many centre words a torch or triton batch trains, and the seed of the next block:
what the batched kernels (torch_kernel.py, triton_kernel.py) share."""

from __future__ import annotations

SEED_MASK = (1 << 63) - 1
MASK64 = (1 << 64) - 1

# Centre words (windows) per batch at most: large enough that a block of 1M words is a few
# dozen batches (launches), small enough to keep the update sums stable (docs/lab/benchmarks.md).
BATCH_SIZE = 8192
# ... and at least (a smaller corpus would only pay more launches for no measured gain).
MIN_BATCH_SIZE = 1024
# A run needs some sequential steps per rank to learn: the adaptive batch is the largest power
# of two <= BATCH_SIZE with at least this many raw words per rank and run behind each centre
# slot of a batch (measured on the 1M-token demo at 2 epochs and text8, docs/lab/benchmarks.md).
WORDS_PER_BATCH_SLOT = 350
# ... and at most this many centre words per unit of the local learning rate (s x --lr): the
# windows of a batch read the rows as they were before it (the fused kernel adds its updates
# atomically, Hogwild), so a row that n of its centres update moves about n steps at once, and
# n grows with the batch. At the rates several ranks train at, the smaller the batch the
# better the torch kernel scores (8 ranks on enwiki, 4 x --lr: 8.2% analogy at
# 4,096 centres, 9.2% at 2,048, 10.4% at 1,024; one rank 12.1%), so rate x batch stays at one
# rank's default (8,192 centres at 0.025): 2,048 at 4 x, 1,024 at 8 x. (The batch alone does
# not keep the fused kernel stable there: that is its duplicate cap, triton_kernel.py;
# docs/lab/sync-modes.md, "The fused kernel at several ranks, on a GPU".)
RATE_BATCH = BATCH_SIZE * 0.025
# The rate bound's floor (a --lr far above word2vec's still gets batches of some size).
MIN_RATE_BATCH = 128


def next_seed(seed: int) -> int:
    """splitmix64: the seed of the next block's generator, computed on the host."""
    z = (int(seed) + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _power_of_two_below(x: float) -> int:
    return 1 << (max(1, int(x)).bit_length() - 1)


def adaptive_batch_size(words_total: float, words_scale: float = 1.0, rate: float = 0.025) -> int:
    """Centre words per batch for a run of ``words_total`` raw words over ``words_scale``
    ranks at the local learning rate ``rate``: the largest power of two <= BATCH_SIZE (and
    >= MIN_BATCH_SIZE) that leaves WORDS_PER_BATCH_SLOT raw words per rank and run per centre
    of a batch, so that a small corpus still gets a few hundred sequential steps (numba's
    quality) and a large one the fewest launches; and at most RATE_BATCH / ``rate`` (at least
    MIN_RATE_BATCH), so that a higher rate (several ranks' s x --lr) races no more than one
    rank's default."""
    per_rank = float(words_total) / max(float(words_scale), 1.0)
    fit = min(BATCH_SIZE, max(MIN_BATCH_SIZE, _power_of_two_below(per_rank // WORDS_PER_BATCH_SLOT)))
    by_rate = max(MIN_RATE_BATCH, _power_of_two_below(RATE_BATCH / max(float(rate), 1e-12) * (1 + 1e-9)))
    return int(min(fit, by_rate))


def batch_size_of(args) -> int:
    """``args.batch_size``, or the adaptive one where it is None or 0 (the default)."""
    if args.batch_size:
        return int(args.batch_size)
    return adaptive_batch_size(args.words_total, args.words_scale, args.lr0)
