"""``--store blocks``: block-partitioned skip-gram, every row with one writer at a time.

Rank r owns the input rows of vocabulary block r (core/blocks.py) for the whole run; the
output blocks travel round a ring. A round is one pass: every rank makes the skip-gram pairs
of its words, sends each pair to the rank that owns its input word (one all-to-all of ids),
sorts what it received by the output word's block, and then trains P steps, in step k the
bucket of the output block it holds then, with noise words from that block only, and hands
the block on (one message each way). No rank ever combines copies of a row, so there is no
combining rule, no learning-rate scaling and nothing that grows with the rank count but the
ring's bytes (docs/lab/blocks.md).

Every rank keeps both full matrices (the replicated store's memory); only its input block
and the output block it holds are current. :meth:`BlockStore.flush` makes every rank's copy
current (before an evaluation, a checkpoint or the export), so checkpoints are the
replicated store's and resume on any rank count re-plans the blocks.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable

import numpy as np

from ..core.config import block_wire
from ..core.errors import InputError
from ..core.blocks import block_members, block_noise_tables, handoff, held_block, ring_shifts, snake_blocks
from ..kernels.args import KernelArgs
from ..kernels.pairs import Noise, Span, by_threads, partition, piece_pairs, train_bucket
from ..kernels.rows import Params
from .comm import Comm
from .replicated import fresh_params, read_params, save_on_root, write_on_root
from .store import Store, StoreSetup, SyncStats, Trained, Work
from .wire import decode, encode, row_bytes


class BlockStore(Store):
    """Input block ``comm.rank`` and one travelling output block per rank (module docstring)."""

    fresh_params = staticmethod(fresh_params)
    read_params = staticmethod(read_params)

    def __init__(self, comm: Comm, w_in: np.ndarray, w_out: np.ndarray, setup: StoreSetup):
        if setup.counts is None:
            raise ValueError("the block store needs the vocabulary's counts")
        p = comm.size
        self.comm, self.w_in, self.w_out, self.seed = comm, w_in, w_out, setup.cfg.seed
        self.threads = setup.threads
        self.block_of = snake_blocks(setup.counts, p)
        self.members, self.offsets = block_members(self.block_of, p)
        self.noise = block_noise_tables(setup.counts, self.members, self.offsets)
        # the output matrix the kernel trains, in block order: block b is rows
        # offsets[b]:offsets[b + 1], so the ring sends and receives a block in place; a word's
        # row there is position[word] (the pairs carry it), and w_out is the record in word order
        self.position = np.empty(len(self.members), np.int32)
        self.position[self.members] = np.arange(len(self.members), dtype=np.int32)
        self.slot_block = self.block_of[self.members]          # the block of each row of out_rows
        self.slots = np.arange(len(self.members), dtype=np.int32)
        self.out_rows = w_out[self.members]
        # the kernel's rows (its touched marks are not read: every pass moves whole blocks)
        self.rows_ = Params(w_in, self.out_rows, np.zeros(len(w_in), np.uint8), np.zeros(len(w_out), np.uint8))
        # how output blocks travel; a lossy wire's residuals per row (error feedback), in block order
        self.wire = block_wire(setup.cfg, p)
        self.residual = None if self.wire == "fp32" or p == 1 else np.zeros_like(self.out_rows)
        # the shift of the output block this rank holds (core.blocks.ring_shifts: a pass starts
        # and ends at 0, also a resumed one); None: every rank's copy is current (the run's end)
        self.held: int | None = 0
        self.dirty = False
        self.biggest = 0.0
        self.stats = SyncStats()
        self.route_bytes = 0
        self.ring_bytes = 0
        self.pairs = 0

    def noise_of(self, b: int, args: KernelArgs) -> Noise:
        """Noise words from block ``b`` only (as rows of out_rows); with shared negatives one
        draw per run of a centre's pairs (at most a window's contexts)."""
        lo, hi = self.span(b)
        return Noise(self.noise, self.slots, lo, hi - lo, int(args.negative), bool(args.shared_negatives),
                     2 * int(args.window))

    def block(self, b: int) -> np.ndarray:
        """The word ids of block ``b``."""
        return self.members[self.offsets[b]:self.offsets[b + 1]]

    def span(self, b: int) -> tuple[int, int]:
        """Block ``b``'s rows [lo, hi) of out_rows."""
        return int(self.offsets[b]), int(self.offsets[b + 1])

    # ---------------------------------------------------------------- a round: one pass
    def train(self, work: Work, ahead: Work | None, rng: np.ndarray, args: KernelArgs,
              on_piece: Callable[[int], None] | None = None) -> Trained:
        t0 = time.perf_counter()
        made, words = [], 0
        for tokens, starts in work.pieces:
            made.append(piece_pairs(tokens, starts, args.keep_prob, args.window, self.position, rng, self.threads))
            words += len(tokens)
        inp = np.concatenate([m[0] for m in made]) if made else np.zeros(0, np.int32)
        out = np.concatenate([m[1] for m in made]) if made else np.zeros(0, np.int32)
        compute = time.perf_counter() - t0
        got = self.route(inp, out)
        t1 = time.perf_counter()
        inp, out = np.empty(len(got), np.int32), np.empty(len(got), np.int32)
        starts = partition(got[:, 0], got[:, 1], self.slot_block, True, self.comm.size, inp, out, self.threads)
        compute += time.perf_counter() - t1
        loss, examples, trained = 0.0, 0, 0.0
        # global words of the pass: every rank trains about as many as this one (work.scale)
        span = args.words_scale * words / self.comm.size
        for k, shift in enumerate(ring_shifts(self.seed, int(args.words_done), self.comm.size)):
            self.move_to(int(shift))
            j = held_block(self.comm.rank, int(shift), self.comm.size)
            a, b = starts[j], starts[j + 1]
            t2 = time.perf_counter()
            l_, n = train_bucket(self.rows_, inp[a:b], out[a:b], self.noise_of(j, args),
                                 Span(args.lr0, args.lr_min, args.words_done + span * k, span, args.words_total),
                                 rng, self.threads)
            compute += time.perf_counter() - t2
            loss, examples = loss + l_, examples + n
            if on_piece is not None:
                on_piece(words * (k + 1) // self.comm.size - int(trained))
                trained = words * (k + 1) // self.comm.size
        self.pairs += examples
        self.dirty = True
        self.biggest = self.probe()
        return Trained(words, loss, examples, compute)

    def route(self, inp: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Every pair to the rank that owns its input word (one all-to-all of int32 ids):
        int32 [n, 2] (input, output), senders in rank order, each in its own order."""
        with self.accounted() as sent:
            send = np.empty((len(inp), 2), np.int32)
            starts = partition(inp, out, self.block_of, False, self.comm.size, send[:, 0], send[:, 1], self.threads)
            got, _ = self.comm.alltoallv(send, np.diff(starts))
        self.route_bytes += sent()
        return got

    def move_to(self, shift: int) -> None:
        """Hand the held output block on and take the one held at ``shift`` (the ring step):
        one message each way, sent from and received into out_rows in place (fp32)."""
        p, rank = self.comm.size, self.comm.rank
        if self.held is None or self.held == shift or p == 1:
            self.held = shift
            return
        with self.accounted() as sent:
            self.hand_on(*handoff(rank, self.held, shift, p), self.span(held_block(rank, self.held, p)),
                         self.span(held_block(rank, shift, p)))
        self.held = shift
        self.ring_bytes += sent()

    def hand_on(self, dest: int, source: int, mine: tuple[int, int], theirs: tuple[int, int]) -> None:
        """Send out_rows[mine] to ``dest`` while receiving out_rows[theirs] from ``source``."""
        (lo, hi), (lo2, hi2) = mine, theirs
        if self.wire == "fp32":
            self.comm.sendrecv_(self.out_rows[lo:hi], dest, self.out_rows[lo2:hi2], source)
            return
        dim = self.out_rows.shape[1]
        got = np.empty((hi2 - lo2, row_bytes(self.wire, dim)), np.uint8)
        self.comm.sendrecv_(self.encoded(lo, hi), dest, got, source)
        rows = self.out_rows[lo2:hi2]

        def unpack(a: int, b: int) -> None:
            rows[a:b] = decode(got[a:b], self.wire, dim)

        self.by_rows(hi2 - lo2, unpack)

    def encoded(self, lo: int, hi: int) -> np.ndarray:
        """Rows [lo, hi) of out_rows as a lossy --wire sends them, by row ranges on the rank's
        threads; what rounding left out is kept and added the next time this rank sends the
        row (error feedback)."""
        dim = self.out_rows.shape[1]
        data = np.empty((hi - lo, row_bytes(self.wire, dim)), np.uint8)

        def work(a: int, b: int) -> None:
            rows = self.out_rows[lo + a:lo + b] + self.residual[lo + a:lo + b]
            data[a:b] = encode(rows, self.wire)
            self.residual[lo + a:lo + b] = rows - decode(data[a:b], self.wire, dim)

        self.by_rows(hi - lo, work)
        return data

    def by_rows(self, n: int, work) -> None:
        """``work(a, b)`` over row ranges covering [0, n), one per thread."""
        cuts = np.linspace(0, n, self.threads + 1).astype(np.int64)
        by_threads(lambda t: work(int(cuts[t]), int(cuts[t + 1])), self.threads if n >= 1024 else 1)

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
        rows = [self.w_in[self.block(self.comm.rank)]]
        if self.held is not None:
            lo, hi = self.span(held_block(self.comm.rank, self.held, self.comm.size))
            rows.append(self.out_rows[lo:hi])
        biggest = max(float(np.abs(r).max()) if r.size else 0.0 for r in rows)
        return biggest if np.isfinite(biggest) else float("inf")

    def sync(self, rnd: int) -> float:
        """Nothing to combine: a pass leaves every row with its one writer."""
        self.stats.syncs += 1
        return self.biggest

    # ---------------------------------------------------------------- the whole model
    def flush(self) -> None:
        """Rank 0's copy of both matrices made current (for an evaluation, a checkpoint or the
        export): each rank gives it its input block and the output block it holds (one
        gather); the other ranks' copies stay as they are (only their own blocks are read)."""
        if self.dirty and self.comm.size > 1:
            self.collect(everyone=False)
        elif self.dirty:
            self.w_out[self.members] = self.out_rows
        self.dirty = False

    def save_exact(self, directory: str, round_: int) -> None:
        """A stop checkpoint drops the lossy ring's residuals (as every checkpoint does);
        each rank keeps them beside it, so a resume on as many ranks goes on exactly."""
        if self.residual is not None:
            from ..io import rankstate

            self.comm.agree(rankstate.save_rank_state, directory, round_, self.comm.rank, self.comm.size,
                            {"ring_residual": self.residual})

    def restore_exact(self, directory: str, round_: int) -> bool:
        if self.residual is None:
            return False
        from ..io import rankstate

        try:
            state = rankstate.load_rank_state(directory, round_, self.comm.rank, self.comm.size)
            if state is not None and state.get("ring_residual", np.zeros(0)).shape != self.residual.shape:
                raise InputError(f"the rank state of round {round_} does not fit this run's ring")
        except InputError as e:
            print(f"warning: {e}; resuming from the checkpoint (not bit-identical)", flush=True)
            state = None
        if self.comm.allreduce_scalar(float(state is not None), "min") == 0:
            return False
        np.copyto(self.residual, state["ring_residual"])
        return True

    def host(self) -> None:
        """At the end of a run every rank's copy made current (one allgather), so that every
        rank returns the trained model."""
        if self.comm.size > 1 and self.held is not None:
            self.collect(everyone=True)
        elif self.comm.size == 1:
            self.w_out[self.members] = self.out_rows

    def collect(self, everyone: bool) -> None:
        """Every rank's input block and held output block into rank 0's copy (``everyone``:
        into every rank's): w_in and w_out, the record in word order."""
        p, rank, dim = self.comm.size, self.comm.rank, self.w_in.shape[1]
        held = held_block(rank, self.held, p)
        with self.accounted():          # the packing and unpacking count as the store's array work
            mine = np.zeros((2, int(np.diff(self.offsets).max()), dim), np.float32)
            ids_in, (lo, hi) = self.block(rank), self.span(held)
            mine[0, :len(ids_in)] = self.w_in[ids_in]
            mine[1, :hi - lo] = self.out_rows[lo:hi]
            every = self.comm.allgather_array(mine) if everyone else self.comm.gather_array(mine)
            holders = self.comm.allgather(held) if everyone else self.comm.gather(held)
            if every is not None:
                for r in range(p):
                    ids_in, (lo, hi) = self.block(r), self.span(holders[r])
                    self.w_in[ids_in] = every[r, 0, :len(ids_in)]
                    self.out_rows[lo:hi] = every[r, 1, :hi - lo]
                self.w_out[self.members] = self.out_rows
        if everyone:
            self.held = None

    def rows(self, ids: np.ndarray | None) -> np.ndarray | None:
        self.flush()
        if not self.comm.is_root:
            return None
        return self.w_in if ids is None else self.w_in[ids]

    def save(self, directory: str, ck, keep: int) -> str | None:
        self.flush()
        if self.residual is not None:       # a run resumed from this checkpoint starts without them
            self.residual[:] = 0
        return save_on_root(self.comm, directory, ck, keep)

    def write_vectors(self, path: str, words: list[str], vectors_of: Callable) -> str | None:
        self.flush()
        return write_on_root(self.comm, path, words, lambda: vectors_of(self.w_in))

    def report(self) -> dict:
        return {"block_pairs": int(self.pairs), "block_route_bytes": int(self.route_bytes),
                "block_ring_bytes": int(self.ring_bytes)}

    def settings(self) -> dict:
        return {"blocks": self.comm.size, "block_wire": self.wire}

