"""``--store blocks``: block-partitioned skip-gram, every row with one writer at a time.

Rank r owns the input rows of vocabulary block r (core/blocks.py) for the whole run; the
output blocks travel round a ring. A round is one pass: every rank makes the skip-gram pairs
of its words, sends each pair to the rank that owns its input word (one all-to-all of ids),
sorts what it received by the output word's block, and then trains P steps, in step k the
bucket of the output block it holds then, with noise words from that block only, and hands
the block on (one message each way). No rank ever combines copies of a row, so there is no
combining rule, no learning-rate scaling and nothing that grows with the rank count but the
ring's bytes (docs/lab/blocks.md). With ``--ring-overlap`` a block travels in two halves: a
step trains the bucket's pairs of one half (noise words from that half) while the other half
travels, from a thread of its own on a communicator of its own (``launch``/``land``); the
numbers do not depend on the timing.

Memory: a rank holds only the rows it trains: its input block, the output block it holds
and one receive buffer for the ring's hand-off (about 3 V d / P floats, ``block_param_bytes``
in its metrics), plus, with ``--wire`` bf16, int8 or int4, the error feedback's residual of
every block it sends (every rank sends every block once a pass, so V x d floats, or V (d + 4)
bytes as int8 rows from CARRY_INT8_FROM_BYTES: the same numbers need them all); an int16 ring
(auto's choice for such vocabularies) keeps none. The vocabulary's own arrays (ids,
positions, noise tables) are about 32 bytes a word. Rank 0 holds whole matrices only for a moment: the input matrix from a flush (an
evaluation, a checkpoint, the export) until the next round, and the output matrix while it
writes a checkpoint. A fresh run makes only its rows of the replicated store's
initialisation (the same values, :func:`fresh_params`); a resume has rank 0 read the
checkpoint and send every rank its rows (:func:`read_params`); ``--init-from`` starts from
the whole matrices on every rank until the store has copied its rows. The checkpoints are the
replicated store's (so resume on any rank count re-plans the blocks), and at the end of a run
:meth:`BlockStore.host` gives every rank the whole trained model (what a run returns).
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable

import numpy as np

from ..core.errors import InputError
from ..core.blocks import (BLOCK_INT16_FROM_BYTES, block_members, block_noise_tables, block_wire, handoff,
                           held_block, piece_members, ring_shifts, snake_blocks, snake_pieces)
from ..kernels.args import KernelArgs
from ..kernels.pairs import Noise, Span, by_threads, partition, piece_pairs, place_rows, train_bucket
from ..kernels.rows import Params
from .comm import Comm
from . import replicated
from .replicated import save_on_root, write_on_root
from .sharded import init_rows
from .store import Store, StoreSetup, SyncStats, Trained, Work
from .wire import UNFED_WIRES, decode, encode, encode_carried, row_bytes


# ------------------------------------------------------------------ the rows a run starts from
def rank_blocks(counts: np.ndarray, world: int) -> tuple[np.ndarray, np.ndarray]:
    """(members, offsets) of the run's blocks (core.blocks.block_members over snake_blocks)."""
    return block_members(snake_blocks(counts, world), world)


def fresh_params(cfg, comm: Comm, vocab_size: int, counts=None) -> tuple[np.ndarray, np.ndarray]:
    """This rank's rows of the replicated store's initialisation, the same values: its input
    block's rows, generated piece by piece without the whole matrix (sharded.init_rows), and
    the zero rows of the output block it holds first (its own number's). ``counts`` None (a
    warm start, which writes the carried rows into them): the whole matrices, which every
    rank holds until the store has copied its rows."""
    if counts is None:
        return replicated.fresh_params(cfg, comm, vocab_size)
    members, offsets = rank_blocks(counts, comm.size)
    mine = members[offsets[comm.rank]:offsets[comm.rank + 1]]
    return init_rows(vocab_size, cfg.dim, cfg.seed, mine), np.zeros((len(mine), cfg.dim), np.float32)


def read_params(found, where: dict, comm: Comm, cfg, vocab_size: int, counts=None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Rank 0 read the whole checkpoint (``found``: it holds both matrices until the run
    starts) and sends every rank its rows, one message a matrix: as :func:`fresh_params`.
    ``counts`` None: every rank receives the whole matrices (replicated.read_params)."""
    if counts is None:
        return replicated.read_params(found, where, comm, cfg, vocab_size)
    if comm.size == 1:
        return found.w_in, found.w_out
    members, offsets = rank_blocks(counts, comm.size)
    w_in = scatter_blocks(comm, found.w_in if comm.is_root else None, members, offsets, cfg.dim)
    w_out = scatter_blocks(comm, found.w_out if comm.is_root else None, members, offsets, cfg.dim)
    return w_in, w_out


def scatter_blocks(comm: Comm, whole: np.ndarray | None, members: np.ndarray, offsets: np.ndarray,
                   dim: int) -> np.ndarray:
    """Rank 0's ``whole`` matrix (word order): every rank gets the rows of its block, rank
    after rank."""
    def block(r: int) -> np.ndarray:
        return members[offsets[r]:offsets[r + 1]]

    nothing = np.empty((0, dim), np.float32)
    if not comm.is_root:
        return comm.sendrecv_(nothing, 0, np.empty((len(block(comm.rank)), dim), np.float32), 0)
    for r in range(1, comm.size):
        comm.sendrecv_(np.ascontiguousarray(whole[block(r)]), r, nothing, r)
    return np.ascontiguousarray(whole[block(0)])


# the rank-state key of the lossy ring's residuals (word order; the key of the block order
# they had before the pieces of --ring-overlap is not read: such a resume is not exact)
RESIDUAL_KEY = "ring_residual_by_word"
# how an int8 or int4 ring (--wire int8 or int4: auto sends int16 rows there) keeps its
# residuals where float32 ones (V x d per rank) would take this many bytes or more
# (BlockStore.carries_int8): a quarter of the memory, about a fifth more array work per
# hand-off (32 ranks on enwiki-64M, whose 58 MB stay float32)
CARRY_WIRE = "int8"
CARRY_INT8_FROM_BYTES = BLOCK_INT16_FROM_BYTES


class BlockStore(Store):
    """Input block ``comm.rank`` and one travelling output block per rank (module docstring)."""

    fresh_params = staticmethod(fresh_params)
    read_params = staticmethod(read_params)
    keeps_own_rows = True

    def __init__(self, comm: Comm, w_in: np.ndarray, w_out: np.ndarray, setup: StoreSetup):
        """``w_in``, ``w_out``: this rank's rows (:func:`fresh_params`, :func:`read_params`:
        its input block's and its own number's output block's), or the whole matrices in
        word order (a warm start), of which the store copies its rows (the caller drops
        them: Store.keeps_own_rows)."""
        if setup.counts is None:
            raise ValueError("the block store needs the vocabulary's counts")
        p, rank = comm.size, comm.rank
        self.comm, self.seed, self.threads = comm, setup.cfg.seed, setup.threads
        # --kernel torch: buckets train as the torch kernel's batches, on setup.device
        self.device = setup.device if setup.kernel == "torch" else None
        self.vocab, self.dim = setup.vocab_size, w_in.shape[1]
        self.ring_pieces = max(1, int(setup.ring_pieces)) if p > 1 else 1
        self.lay_out(setup.counts, p)
        most = int(np.diff(self.offsets).max()) if self.vocab else 0
        # this rank's rows, taken as they are (also the whole matrices where one block holds
        # every word: one rank), or the whole matrices (a warm start), copied from; the
        # output rows come by id (as the input rows) and go to slot order
        mine = self.block(rank)
        own = len(w_in) == len(w_out) == len(mine)
        if not own and not len(w_in) == len(w_out) == self.vocab:
            raise ValueError(f"rank {rank}'s block has {len(mine)} rows, its parameters {len(w_in)}")
        self.w_in = np.ascontiguousarray(w_in if own else w_in[mine])
        # the held output block (its first rows), and the ring's receive buffer
        held = self.out_block(rank)
        rows = np.ascontiguousarray(w_out[self.row_of[held]] if own else w_out[held])
        if own and self.ring_pieces == 1:
            rows = np.ascontiguousarray(w_out)           # the same order: no copy
        self.out_rows = rows if len(rows) == most else np.zeros((most, self.dim), np.float32)
        self.out_rows[:len(mine)] = rows
        self.spare = np.empty_like(self.out_rows) if p > 1 else None
        # the kernel's touched marks (not read: every pass moves whole blocks)
        self.touched = (np.zeros(len(self.w_in), np.uint8), np.zeros(most, np.uint8))
        # how output blocks travel; a lossy wire's residuals (error feedback) per block this
        # rank sends, each made when it first sends the block
        self.wire = block_wire(setup.cfg, p, self.vocab, self.dim)
        self.residual: list | None = None if self.wire in UNFED_WIRES or p == 1 else [None] * p
        if self.wire != "fp32" and p > 1 and self.size(0):   # load the wire's kernels now (a second or
            # so a process, the first time), not as array work of the first hand-off
            decode(self.encoded(np.zeros((1, self.dim), np.float32), 0, 0, 1, 1), self.wire, self.dim)
            if self.residual is not None:
                self.residual[0] = None
        # --ring-overlap: the hand-offs of pieces run in a thread of their own, on a
        # communicator of their own, while the next piece trains (without MPI_THREAD_MULTIPLE
        # they run in place: the same numbers, later)
        overlap = self.ring_pieces > 1 and comm.thread_multiple
        self.ring = comm.dup() if overlap else comm
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mpidwe-ring") if overlap else None
        # the shift of the output block this rank holds (core.blocks.ring_shifts: a pass starts
        # and ends at 0, also a resumed one)
        self.held = 0
        self.whole_in: np.ndarray | None = None     # rank 0, from a flush until the next round
        self.dirty = True
        self.biggest = 0.0
        self.stats = SyncStats()
        self.route_bytes = 0
        self.ring_bytes = 0
        self.ring_hidden_s = 0.0      # the hand-offs' communication seconds hidden behind training
        self.pairs = 0

    def lay_out(self, counts: np.ndarray, p: int) -> None:
        """The blocks (snake order over the counts) and where each word's rows are."""
        self.block_of = snake_blocks(counts, p)
        # the input rows of a block: its words by id; ``row_of`` maps a word to its row there
        self.members, self.offsets = block_members(self.block_of, p)
        self.row_of = np.empty(self.vocab, np.int32)
        self.row_of[self.members] = (np.arange(self.vocab) - self.offsets[self.block_of[self.members]]).astype(np.int32)
        # the output matrix in slot order: block b is slots offsets[b]:offsets[b + 1], its
        # pieces one after another (one piece, or --ring-overlap: two, which travel one at a
        # time: core.blocks.piece_members), each piece's words by id; a word's slot is
        # position[word], which the pairs carry, ``within`` maps a slot to its row in its
        # block (the rows of the held output block), ``slot_group`` to its (block, piece)
        piece_of = snake_pieces(counts, self.block_of, self.ring_pieces)
        self.out_members, self.piece_offsets = piece_members(self.block_of, piece_of, p, self.ring_pieces)
        self.noise = block_noise_tables(counts, self.out_members, self.piece_offsets)
        self.position = np.empty(self.vocab, np.int32)
        self.position[self.out_members] = np.arange(self.vocab, dtype=np.int32)
        slot_block = self.block_of[self.out_members]
        self.slot_group = (slot_block.astype(np.int64) * self.ring_pieces + piece_of[self.out_members]).astype(np.int32)
        self.within = (np.arange(self.vocab) - self.offsets[slot_block]).astype(np.int32)

    def noise_of(self, g: int, args: KernelArgs) -> Noise:
        """Noise words from group ``g`` (block g // pieces's piece g % pieces) only (as rows of
        the held block); with shared negatives one draw per run of a centre's pairs (at most a
        window's contexts)."""
        lo, hi = int(self.piece_offsets[g]), int(self.piece_offsets[g + 1])
        return Noise(self.noise, self.within, lo, hi - lo, int(args.negative), bool(args.shared_negatives),
                     2 * int(args.window))

    def block(self, b: int) -> np.ndarray:
        """The word ids of block ``b``, by id: its input rows' order."""
        return self.members[self.offsets[b]:self.offsets[b + 1]]

    def out_block(self, b: int) -> np.ndarray:
        """The word ids of block ``b`` in its output rows' order (its pieces one after another)."""
        return self.out_members[self.offsets[b]:self.offsets[b + 1]]

    def span(self, b: int) -> tuple[int, int]:
        """Block ``b``'s slots [lo, hi) of the output matrix in slot order."""
        return int(self.offsets[b]), int(self.offsets[b + 1])

    def piece_rows(self, b: int, h: int) -> tuple[int, int]:
        """Piece ``h`` of block ``b`` as rows [lo, hi) of the block."""
        g, base = b * self.ring_pieces + h, int(self.offsets[b])
        return int(self.piece_offsets[g]) - base, int(self.piece_offsets[g + 1]) - base

    def size(self, b: int) -> int:
        """Rows of block ``b``."""
        return int(self.offsets[b + 1] - self.offsets[b])

    # ---------------------------------------------------------------- a round: one pass
    def train(self, work: Work, ahead: Work | None, rng: np.ndarray, args: KernelArgs,
              on_piece: Callable[[int], None] | None = None) -> Trained:
        t0 = time.perf_counter()
        self.whole_in, self.dirty = None, True
        p, rank, parts = self.comm.size, self.comm.rank, self.ring_pieces
        shifts = [int(k) for k in ring_shifts(self.seed, int(args.words_done), p)]
        # the round's first hand-off (whole blocks) travels while this rank makes its pairs
        pending = self.launch(self.move_job(shifts[0])) if p > 1 else None
        made, words = [], 0
        for tokens, starts in work.pieces:
            made.append(piece_pairs(tokens, starts, args.keep_prob, args.window, self.position, rng, self.threads))
            words += len(tokens)
        inp = np.concatenate([m[0] for m in made]) if made else np.zeros(0, np.int32)
        out = np.concatenate([m[1] for m in made]) if made else np.zeros(0, np.int32)
        compute = time.perf_counter() - t0
        self.land(pending)
        got = self.route(inp, out)
        t1 = time.perf_counter()
        inp, out = np.empty(len(got), np.int32), np.empty(len(got), np.int32)
        starts = partition(got[:, 0], got[:, 1], self.slot_group, True, p * parts, inp, out, self.threads)
        inp, out = self.row_of[inp], self.within[out]       # rows of the input block, of the held block
        compute += time.perf_counter() - t1
        loss, examples, trained = 0.0, 0, 0.0
        # global words of the pass: every rank trains about as many as this one (work.scale)
        span = args.words_scale * words / p
        pending, pending_piece = None, -1
        for k, shift in enumerate(shifts):
            if k > 0:               # the block the last step's hand-offs bring
                self.out_rows, self.spare, self.held = self.spare, self.out_rows, shift
            j = held_block(rank, shift, p)
            a, b = starts[j * parts], starts[(j + 1) * parts]
            for h in range(parts):
                if pending_piece == h:          # this piece is still on its way
                    self.land(pending)
                    pending, pending_piece = None, -1
                lo, hi = starts[j * parts + h], starts[j * parts + h + 1]
                t2 = time.perf_counter()
                l_, n = self.train_bucket(inp[lo:hi], out[lo:hi], self.noise_of(j * parts + h, args),
                                          Span(args.lr0, args.lr_min,
                                               args.words_done + span * (k + (lo - a) / max(b - a, 1)),
                                               span * ((hi - lo) / max(b - a, 1)), args.words_total),
                                          rng, args)
                compute += time.perf_counter() - t2
                loss, examples = loss + l_, examples + n
                if k + 1 < p:               # hand this piece on while the next one trains
                    self.land(pending)
                    pending, pending_piece = self.launch(self.piece_job(shift, shifts[k + 1], h)), h
            if on_piece is not None:
                on_piece(words * (k + 1) // p - int(trained))
                trained = words * (k + 1) // p
        self.land(pending)
        self.pairs += examples
        self.biggest = self.probe()
        return Trained(words, loss, examples, compute)

    def train_bucket(self, inp: np.ndarray, out: np.ndarray, noise: Noise, sched: Span, rng: np.ndarray,
                     args: KernelArgs) -> tuple[float, int]:
        """One bucket's pairs (rows of the input block, of the held block): the numba
        kernel's pair updates on the rank's threads, or with --kernel torch the torch
        kernel's batches on its device (kernels/torch_pairs.py)."""
        if self.device is None:
            return train_bucket(Params(self.w_in, self.out_rows, *self.touched), inp, out, noise, sched, rng,
                                self.threads)
        from ..kernels.torch_pairs import train_bucket_torch

        return train_bucket_torch((self.w_in, self.out_rows), (inp, out), noise, sched, rng, args, self.device,
                                  self.comm.size * self.ring_pieces)

    def route(self, inp: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Every pair to the rank that owns its input word (one all-to-all of int32 ids):
        int32 [n, 2] (input, output), senders in rank order, each in its own order."""
        with self.accounted() as sent:
            send = np.empty((len(inp), 2), np.int32)
            starts = partition(inp, out, self.block_of, False, self.comm.size, send[:, 0], send[:, 1], self.threads)
            got, _ = self.comm.alltoallv(send, np.diff(starts))
        self.route_bytes += sent()
        return got

    # ---------------------------------------------------------------- the ring's hand-offs
    def launch(self, job: Callable[[], None]):
        """Start a hand-off: in the ring thread (--ring-overlap), else here and now. Returns
        what :meth:`land` takes."""
        def timed():
            c = self.ring.stats
            b, s, k, t = c.bytes_sent, c.seconds, c.steps, time.perf_counter()
            job()
            return c.bytes_sent - b, c.seconds - s, c.steps - k, time.perf_counter() - t

        if self._pool is None:
            return timed()
        return self._pool.submit(timed)

    def land(self, pending) -> None:
        """Wait for a hand-off :meth:`launch` started (None: none) and count it: its bytes and
        latency steps; as the store's seconds its array work (encoding, decoding: a core's
        time wherever it runs) and as communication only what this rank waited for (an error
        in the ring thread is raised here)."""
        if pending is None:
            return
        t = time.perf_counter()
        sent, comm_s, steps, busy = pending if isinstance(pending, tuple) else pending.result()
        waited = busy if isinstance(pending, tuple) else time.perf_counter() - t
        exposed = min(comm_s, waited)
        st = self.stats
        st.bytes_sent += sent
        st.steps += steps
        st.seconds += max(0.0, busy - comm_s) + exposed
        st.comm_seconds += exposed
        self.ring_bytes += sent
        self.ring_hidden_s += comm_s - exposed

    def move_job(self, shift: int) -> Callable[[], None]:
        """The hand-off of the whole held block, taking the one held at ``shift`` (a pass's
        first step; one message each way)."""
        p, rank, before = self.comm.size, self.comm.rank, self.held
        src, dst = self.out_rows, self.spare
        mine, theirs = held_block(rank, before, p), held_block(rank, shift, p)
        dest, source = handoff(rank, before, shift, p)

        def job() -> None:
            self.send_rows(src, mine, (0, self.size(mine)), dst, (0, self.size(theirs)), (dest, source))
            self.out_rows, self.spare, self.held = dst, src, shift

        return job

    def piece_job(self, before: int, after: int, h: int) -> Callable[[], None]:
        """The hand-off of piece ``h`` of the block held at shift ``before``, taking piece h of
        the one held at ``after`` into the receive buffer (one message each way)."""
        p, rank = self.comm.size, self.comm.rank
        mine, theirs = held_block(rank, before, p), held_block(rank, after, p)
        src, dst, peers = self.out_rows, self.spare, handoff(rank, before, after, p)
        return lambda: self.send_rows(src, mine, self.piece_rows(mine, h), dst, self.piece_rows(theirs, h), peers)

    def send_rows(self, src: np.ndarray, mine: int, sent: tuple[int, int], dst: np.ndarray, into: tuple[int, int],
                  peers: tuple[int, int]) -> None:
        """Send rows ``sent`` = [a, b) of block ``mine`` (held in ``src``) to rank peers[0]
        while receiving rows ``into`` = [c, d) of the next block from rank peers[1] into
        ``dst`` (on the ring's communicator; a lossy --wire encodes, with error feedback, and
        decodes; in the ring thread on one thread, as the training has the rank's)."""
        (a, b), (c, d), (dest, source) = sent, into, peers
        threads = 1 if self._pool is not None else self.threads
        if self.wire == "fp32":
            self.ring.sendrecv_(src[a:b], dest, dst[c:d], source)
            return
        got = np.empty((d - c, row_bytes(self.wire, self.dim)), np.uint8)
        self.ring.sendrecv_(self.encoded(src, mine, a, b, threads), dest, got, source)

        def unpack(x: int, y: int) -> None:
            dst[c + x:c + y] = decode(got[x:y], self.wire, self.dim)

        self.by_rows(d - c, unpack, threads)

    def encoded(self, src: np.ndarray, blk: int, a: int, b: int, threads: int) -> np.ndarray:
        """Rows [a, b) of block ``blk`` (held in ``src``) as a lossy --wire sends them, by row
        ranges; what rounding left out is kept and added the next time this rank sends those
        rows (error feedback): as float32 rows, or, for an int8 or int4 wire and a large
        vocabulary (:meth:`carries_int8`), as int8 rows (:data:`CARRY_WIRE`: a quarter of the
        memory; what that rounding leaves out, at most 1/254 of what the wire's did, is
        dropped). An int16 ring keeps nothing (its rounding is far below a pass's changes)."""
        if self.residual is None:
            data = np.empty((b - a, row_bytes(self.wire, self.dim)), np.uint8)

            def plain(x: int, y: int) -> None:
                data[x:y] = encode(src[a + x:a + y], self.wire)

            self.by_rows(b - a, plain, threads)
            return data
        carry = self.carries_int8()
        if self.residual[blk] is None:
            width = row_bytes(CARRY_WIRE, self.dim) if carry else self.dim
            self.residual[blk] = np.zeros((self.size(blk), width), np.uint8 if carry else np.float32)
        residual, data = self.residual[blk][a:b], np.empty((b - a, row_bytes(self.wire, self.dim)), np.uint8)

        def work(x: int, y: int) -> None:
            if carry and self.wire == "int8":      # the int4 branch's three passes' bits, in one
                data[x:y] = encode_carried(src[a + x:a + y], residual[x:y])
            elif carry:         # the wire's kernel adds what it carries and leaves what it rounds away
                left = decode(residual[x:y], CARRY_WIRE, self.dim)
                data[x:y] = encode(src[a + x:a + y], self.wire, feedback=(left, np.ones(y - x, np.uint8)))
                residual[x:y] = encode(left, CARRY_WIRE)
            else:
                rows = src[a + x:a + y] + residual[x:y]
                data[x:y] = encode(rows, self.wire)
                residual[x:y] = rows - decode(data[x:y], self.wire, self.dim)

        self.by_rows(b - a, work, threads)
        return data

    def by_rows(self, n: int, work, threads: int | None = None) -> None:
        """``work(a, b)`` over row ranges covering [0, n), one per thread (one range below
        1,024 rows)."""
        threads = (self.threads if threads is None else threads) if n >= 1024 else 1
        cuts = np.linspace(0, n, threads + 1).astype(np.int64)
        by_threads(lambda t: work(int(cuts[t]), int(cuts[t + 1])), threads)

    @contextmanager
    def accounted(self):
        """The block's seconds, communication seconds, bytes and latency steps go to the
        store's stats; yields a function that gives the bytes sent since the block began."""
        st, c = self.stats, self.comm.stats
        t, b, s, k = time.perf_counter(), c.bytes_sent, c.seconds, c.steps
        try:
            yield lambda: c.bytes_sent - b
        finally:
            st.seconds += time.perf_counter() - t
            st.comm_seconds += c.seconds - s
            st.bytes_sent += c.bytes_sent - b
            st.steps += c.steps - k

    def probe(self) -> float:
        """The largest |value| of this rank's current rows (inf for NaN): the guard's probe."""
        rows = (self.w_in, self.out_rows[:self.size(held_block(self.comm.rank, self.held, self.comm.size))])
        biggest = max(float(np.abs(r).max()) if r.size else 0.0 for r in rows)
        return biggest if np.isfinite(biggest) else float("inf")

    def sync(self, rnd: int) -> float:
        """Nothing to combine: a pass leaves every row with its one writer."""
        self.stats.syncs += 1
        return self.biggest

    # ---------------------------------------------------------------- the whole model
    def flush(self) -> None:
        """Rank 0 gets the whole input matrix (for an evaluation, a checkpoint or the export),
        and keeps it until the next round: every rank sends it its input block."""
        if self.dirty:
            self.whole_in = self.to_root(output=False)
            self.dirty = False

    def to_root(self, output: bool) -> np.ndarray | None:
        """Rank 0: the whole input matrix (``output``: the output matrix) in word order, made
        of every rank's input block (held output block), gathered in one Gatherv and put in
        word order in place (kernels.pairs.place_rows: no second V x d); None on the other
        ranks."""
        p, rank = self.comm.size, self.comm.rank

        def block_at(r: int) -> np.ndarray:       # the words of rank r's rows, in their order
            return self.out_block(held_block(r, self.held, p)) if output else self.block(r)

        mine = self.out_rows[:len(block_at(rank))] if output else self.w_in
        with self.accounted():          # the reordering counts as the store's array work
            whole = self.comm.gatherv_rows(mine, [len(block_at(r)) for r in range(p)])
            if whole is not None and p > 1:
                place_rows(whole, np.concatenate([block_at(r) for r in range(p)]).astype(np.int64))
        return whole

    def save_exact(self, directory: str, round_: int) -> None:
        """A stop checkpoint drops the lossy ring's residuals (as every checkpoint does);
        each rank keeps them beside it (V x d in word order), so a resume on as many ranks
        goes on exactly."""
        if self.residual is not None:
            from ..io import rankstate

            width, kind = self.residual_row()
            every = np.zeros((self.vocab, width), kind)
            for b, residual in enumerate(self.residual):
                if residual is not None:
                    every[self.out_block(b)] = residual
            self.comm.agree(rankstate.save_rank_state, directory, round_, self.comm.rank, self.comm.size,
                            {RESIDUAL_KEY: every})

    def carries_int8(self) -> bool:
        """Whether the lossy ring keeps its residuals as int8 rows: for an int8 or int4 wire
        where float32 residuals (V x d a rank) would take CARRY_INT8_FROM_BYTES or more (they
        cost about a fifth more array work a hand-off: docs/lab/blocks.md)."""
        return self.wire in ("int8", "int4") and self.vocab * self.dim * 4 >= CARRY_INT8_FROM_BYTES

    def residual_row(self) -> tuple:
        """(width, dtype) of a residual row: int8 rows' bytes, or d float32 values (encoded)."""
        return (row_bytes(CARRY_WIRE, self.dim), np.uint8) if self.carries_int8() else (self.dim, np.float32)

    def restore_exact(self, directory: str, round_: int) -> bool:
        if self.residual is None:
            return False
        from ..io import rankstate

        width, kind = self.residual_row()
        try:
            state = rankstate.load_rank_state(directory, round_, self.comm.rank, self.comm.size)
            got = None if state is None else state.get(RESIDUAL_KEY, np.zeros(0))
            if got is not None and (got.shape != (self.vocab, width) or got.dtype != kind):
                raise InputError(f"the rank state of round {round_} does not fit this run's ring")
        except InputError as e:
            print(f"warning: {e}; resuming from the checkpoint (not bit-identical)", flush=True)
            state = None
        if self.comm.allreduce_scalar(float(state is not None), "min") == 0:
            return False
        every = state[RESIDUAL_KEY]
        self.residual = [np.array(every[self.out_block(b)]) for b in range(self.comm.size)]
        return True

    def host(self) -> tuple[np.ndarray, np.ndarray]:
        """At the end of a run every rank gets the whole trained model (rank 0 gathers it, then
        broadcasts it), so that every rank returns it: (w_in, w_out) in word order."""
        self.flush()
        w_in, w_out = self.whole_in, self.to_root(output=True)
        if self.comm.size > 1:
            with self.accounted():
                if not self.comm.is_root:
                    w_in, w_out = (np.empty((self.vocab, self.dim), np.float32) for _ in range(2))
                self.comm.bcast_array_(w_in)
                self.comm.bcast_array_(w_out)
        self.whole_in, self.dirty = w_in, False      # the export that follows reads it, gathering nothing again
        return w_in, w_out

    def rows(self, ids: np.ndarray | None) -> np.ndarray | None:
        self.flush()
        if not self.comm.is_root:
            return None
        return self.whole_in if ids is None else self.whole_in[ids]

    def save(self, directory: str, ck, keep: int) -> str | None:
        """Rank 0 writes the replicated store's checkpoint from the whole matrices, which it
        holds while it writes (the output matrix only then)."""
        self.flush()
        w_out = self.to_root(output=True)
        if self.residual is not None:       # a run resumed from this checkpoint starts without them
            self.residual = [None] * self.comm.size
        if self.comm.is_root:
            ck = dataclasses.replace(ck, state=dataclasses.replace(ck.state, w_in=self.whole_in, w_out=w_out))
        return save_on_root(self.comm, directory, ck, keep)

    def write_vectors(self, path: str, words: list[str], vectors_of: Callable) -> str | None:
        self.flush()
        return write_on_root(self.comm, path, words, lambda: vectors_of(self.whole_in))

    def param_bytes(self) -> tuple[int, int]:
        """(bytes of the rows this rank trains: its input block, the held output block's
        buffer and the ring's receive buffer; bytes of the lossy ring's residuals)."""
        held = self.w_in.nbytes + self.out_rows.nbytes + (self.spare.nbytes if self.spare is not None else 0)
        return held, sum(r.nbytes for r in self.residual or () if r is not None)

    def report(self) -> dict:
        held, residual = self.param_bytes()
        return {"block_pairs": int(self.pairs), "block_route_bytes": int(self.route_bytes),
                "block_ring_bytes": int(self.ring_bytes), "block_param_bytes": held,
                "block_residual_bytes": residual, "block_ring_hidden_seconds": round(self.ring_hidden_s, 4)}

    def settings(self) -> dict:
        return {"blocks": self.comm.size, "block_wire": self.wire, "block_pieces": self.ring_pieces}

    def extra_comm_bytes(self) -> int:
        """The ring thread's bytes (--ring-overlap), sent on a communicator of its own."""
        return self.ring.stats.bytes_sent if self.ring is not self.comm else 0

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
            self.ring.free()
