"""Block-partitioned training (``--store blocks``): the arithmetic, no I/O, no MPI.

The vocabulary is split into P blocks of about equal frequency mass (snake order over the
counts). Rank r owns the input rows of block r for the whole run. A round is one pass of a
ring: in step k every rank r holds output block ``(r + shifts[k]) mod P``, trains the pairs
whose input word is in its block and whose output word is in the held block, with noise
words drawn from the held block only, and then hands the block on. Every row has exactly
one writer at a time, so ranks never combine copies (docs/lab/blocks.md).

``shifts`` is a permutation of 0..P-1 drawn per round from (seed, round): the same on every
rank, different per pass (a fixed order overfits, as PyTorch-BigGraph found).
"""

from __future__ import annotations

import numpy as np

from .vocab import negative_table


def snake_blocks(counts: np.ndarray, parts: int) -> np.ndarray:
    """int32 [V]: each word's block. Words by descending count (ties by id) are dealt to the
    blocks 0, 1, ..., P-1, P-1, ..., 0, 0, 1, ... so every block gets about the same count
    mass and the same number of words."""
    counts = np.asarray(counts)
    order = np.lexsort((np.arange(len(counts)), -counts.astype(np.float64)))
    rank_of = np.empty(len(counts), dtype=np.int64)
    rank_of[order] = np.arange(len(counts))
    lap, pos = np.divmod(rank_of, parts)
    return np.where(lap % 2 == 0, pos, parts - 1 - pos).astype(np.int32)


def block_members(block_of: np.ndarray, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """(members int32 [V], offsets int64 [P + 1]): block b's words are
    members[offsets[b]:offsets[b + 1]], by id."""
    members = np.argsort(block_of, kind="stable").astype(np.int32)
    offsets = np.zeros(parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(block_of, minlength=parts), out=offsets[1:])
    return members, offsets


def block_noise_tables(counts: np.ndarray, members: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """uint32 [V, 2]: per block, the alias table of unigram^0.75 restricted to its words
    (core/vocab.negative_table), stacked in member order; column 1 is an index into the
    block's members. A draw from block b (kernels/pairs.py) never leaves it."""
    table = np.empty((len(members), 2), dtype=np.uint32)
    for b in range(len(offsets) - 1):
        lo, hi = int(offsets[b]), int(offsets[b + 1])
        if hi > lo:
            table[lo:hi] = negative_table(np.asarray(counts)[members[lo:hi]])
    return table


def ring_shifts(seed: int, round_index: int, parts: int) -> np.ndarray:
    """int64 [P]: in step k of round ``round_index`` rank r holds output block
    (r + shifts[k]) mod P. A permutation, so every (input, output) bucket is trained once per
    round; the same on every rank and on resume (it depends on the seed and round alone). The
    steps before the last come in a random order and the last is shift 0: every pass ends
    (and starts from) each rank holding the output block of its own number, so a run resumed
    from a checkpoint hands the blocks on exactly as the run it continues did."""
    order = 1 + np.random.default_rng([seed, 0xB10C, round_index]).permutation(max(parts - 1, 0))
    return np.concatenate((order, [0])).astype(np.int64)


def held_block(rank: int, shift: int, parts: int) -> int:
    """The output block ``rank`` holds at ``shift``."""
    return (rank + shift) % parts


def handoff(rank: int, before: int, after: int, parts: int) -> tuple[int, int]:
    """Going from shift ``before`` to ``after``: (the rank this rank sends its held block to,
    the rank it receives its next block from). The same rank on both sides when no block
    moves."""
    return (rank + before - after) % parts, (rank + after - before) % parts
