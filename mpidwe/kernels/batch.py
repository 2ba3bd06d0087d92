"""How many centre words a torch or triton batch trains, and the seed of the next block:
what the batched kernels (torch_kernel.py, triton_kernel.py) share."""

from __future__ import annotations

SEED_MASK = (1 << 63) - 1
MASK64 = (1 << 64) - 1

# Centre words (windows) per batch at most: large enough that a block of 1M words is a few
# dozen batches (launches), small enough to keep the update sums stable (docs/benchmarks.md).
BATCH_SIZE = 8192
# ... and at least (a smaller corpus would only pay more launches for no measured gain).
MIN_BATCH_SIZE = 1024
# A run needs some sequential steps per rank to learn: the adaptive batch is the largest power
# of two <= BATCH_SIZE with at least this many raw words per rank and run behind each centre
# slot of a batch (measured on the 1M-token demo at 2 epochs and text8, docs/benchmarks.md).
WORDS_PER_BATCH_SLOT = 350


def next_seed(seed: int) -> int:
    """splitmix64: the seed of the next block's generator, computed on the host."""
    z = (int(seed) + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def adaptive_batch_size(words_total: float, words_scale: float = 1.0) -> int:
    """Centre words per batch for a run of ``words_total`` raw words over ``words_scale``
    ranks: the largest power of two <= BATCH_SIZE (and >= MIN_BATCH_SIZE) that leaves
    WORDS_PER_BATCH_SLOT raw words per rank and run per centre of a batch, so that a small
    corpus still gets a few hundred sequential steps (numba's quality) and a large one the
    fewest launches."""
    per_rank = float(words_total) / max(float(words_scale), 1.0)
    fit = max(1, int(per_rank // WORDS_PER_BATCH_SLOT))
    return int(min(BATCH_SIZE, max(MIN_BATCH_SIZE, 1 << (fit.bit_length() - 1))))


def batch_size_of(args) -> int:
    """``args.batch_size``, or the adaptive one where it is None or 0 (the default)."""
    if args.batch_size:
        return int(args.batch_size)
    return adaptive_batch_size(args.words_total, args.words_scale)
