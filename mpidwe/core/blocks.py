"""Block-partitioned training (``--store blocks``): the arithmetic, no I/O, no MPI.

The vocabulary is split into P blocks of about equal frequency mass (snake order over the
counts). Rank r owns the input rows of block r for the whole run. A round is one pass of a
ring: in step k every rank r holds output block ``(r + shifts[k]) mod P``, trains the pairs
whose input word is in its block and whose output word is in the held block, with noise
words drawn from the held block only, and then hands the block on. Every row has exactly
one writer at a time, so ranks never combine copies (docs/lab/blocks.md).

``shifts`` is a permutation of 0..P-1 drawn per round from (seed, round): the same on every
rank, different per pass (a fixed order overfits, as PyTorch-BigGraph found).

With ``--ring-overlap`` an output block is two pieces (halves of about equal count mass,
snake order again): a step trains the bucket's pairs of piece 0 with noise words from piece
0, hands piece 0 on while it trains piece 1 the same way, and so on, so one half travels
while the other trains. Each piece has one writer at a time, as each block had.
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


def snake_pieces(counts: np.ndarray, block_of: np.ndarray, pieces: int) -> np.ndarray:
    """int32 [V]: each word's piece (0 .. pieces - 1) of its block: the block's words by
    descending count (ties by id) dealt snake-wise as snake_blocks deals the vocabulary, so
    the pieces of a block hold about the same count mass and the same number of words."""
    n = len(block_of)
    if pieces <= 1 or n == 0:
        return np.zeros(n, dtype=np.int32)
    counts = np.asarray(counts)
    order = np.lexsort((np.arange(n), -counts.astype(np.float64), block_of))
    blocks = np.asarray(block_of)[order]
    first = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
    start = np.repeat(first, np.diff(np.r_[first, n]))
    lap, pos = np.divmod(np.arange(n) - start, pieces)
    piece = np.empty(n, dtype=np.int32)
    piece[order] = np.where(lap % 2 == 0, pos, pieces - 1 - pos)
    return piece


def piece_members(block_of: np.ndarray, piece_of: np.ndarray, parts: int, pieces: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The output matrix's slot order when blocks travel in ``pieces`` pieces: (members int32
    [V], offsets int64 [P x pieces + 1]): piece h of block b holds the words
    members[offsets[b x pieces + h]:offsets[b x pieces + h + 1]], by id, so block b is
    offsets[b x pieces]:offsets[(b + 1) x pieces], its pieces one after another (one piece:
    block_members)."""
    group = np.asarray(block_of, dtype=np.int64) * pieces + piece_of
    members = np.argsort(group, kind="stable").astype(np.int32)
    offsets = np.zeros(parts * pieces + 1, dtype=np.int64)
    np.cumsum(np.bincount(group, minlength=parts * pieces), out=offsets[1:])
    return members, offsets


def block_noise_tables(counts: np.ndarray, members: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """uint32 [V, 2]: per block (or piece: any ``offsets``), the alias table of unigram^0.75
    restricted to its words (core/vocab.negative_table), stacked in member order; column 1 is
    an index into the block's members. A draw from block b (kernels/pairs.py) never leaves it."""
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


# --store blocks, --wire auto: the ring's blocks travel as int8 rows (with error feedback)
# from this many ranks on, where the ring's bytes per word grow with P (16 and 32 ranks kept
# one process's quality on enwiki-64M with them: docs/lab/blocks.md), as float32 below
BLOCK_INT8_MIN_RANKS = 16
# ... but as int16 rows, which need no error feedback, where int8's residuals would take this
# many bytes a rank as float32 (V x d x 4: 671k words at d = 100), so that a rank's memory
# stays about 2 V d / P (docs/lab/blocks.md, "Memory per rank")
BLOCK_INT16_FROM_BYTES = 256 * 2 ** 20


def block_wire(cfg, world_size: int, vocab: int, dim: int) -> str:
    """--store blocks: the ring's encoding of the output blocks (--wire; bf16, int8 and int4
    keep error feedback: parallel/blocks.py): auto fp32 below BLOCK_INT8_MIN_RANKS ranks,
    int8 from there, int16 for a vocabulary whose int8 residuals would take
    BLOCK_INT16_FROM_BYTES or more."""
    if cfg.wire != "auto":
        return cfg.wire
    if world_size < BLOCK_INT8_MIN_RANKS:
        return "fp32"
    return "int16" if vocab * dim * 4 >= BLOCK_INT16_FROM_BYTES else "int8"


# --ring-overlap auto: halves where the pass's latency steps stay within this many per million
# words a rank trains (issue 42's budget: the halves double the ring's messages)
BLOCK_OVERLAP_STEPS_PER_MILLION = 150


def ring_pieces(option: str, world_size: int, pass_words: int) -> int:
    """--store blocks: the pieces an output block travels in (``pass_words``: a pass's words
    per rank): 2 for --ring-overlap on, or auto where a pass's latency steps with halves (the
    routing's P - 1 and log2 P, 2 (P - 1) + 1 hand-offs and the round's few collectives:
    about 3 P + 8) stay within BLOCK_OVERLAP_STEPS_PER_MILLION per million words a rank
    trains; 1 otherwise (and on one rank, which has no ring)."""
    if world_size <= 1 or option == "off":
        return 1
    if option == "on":
        return 2
    return 2 if (3 * world_size + 8) * 1e6 <= BLOCK_OVERLAP_STEPS_PER_MILLION * max(pass_words, 1) else 1
