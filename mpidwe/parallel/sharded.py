"""``--store sharded``: a model larger than one rank's memory (docs/lab/sync-modes.md, "Sharded store").

Each rank owns every P-th row of both matrices (parallel/rows.py) and nothing else. A sync
round is one block:

1. *plan*: the rank takes its words of the round and replays the kernel's random draws
   (kernels/plan.py) to learn every row the round will touch: its tokens, and the noise
   words drawn for it in advance. Those rows, mapped to dense slots, are the working set;
2. *pull*: it asks each owner for its rows of the working set (two ``Alltoallv``: the ids,
   then the rows) and keeps a copy as the round's base;
3. *train*: the numba kernel trains the working set in place, its tokens remapped to slots
   and its noise draws mapped through the same global -> slot table, so it makes exactly
   the draws and updates the replicated store makes on the full matrices;
4. *push*: the rows the kernel touched go back to their owners as changes (trained - base;
   two ``Alltoallv``), and each owner applies the replicated store's sparse rule to them
   (rule.apply_pushed): a row n ranks changed moves by the sum of the changes divided by
   max(s, n / 2). The result is bit-identical to ``--store replicated --sync sparse`` with
   one thread per rank, on any number of ranks.

Bulk-synchronous: every round trains on the rows as every push of the round before left
them. Pipelined (``--pipeline``), steps 1-2 of round k+1 run in a second thread
while round k trains, and after round k's push the owners send again the rows of that pull
which the push changed (``ShardStore.refresh``): the same rows, so the same model.
Checkpoints are one part file per owner plus the usual checkpoint file, whose parameters
are virtual datasets over the parts (docs/hdf5-format.md); evaluation gathers only the rows
it scores, and the final export streams the rows to rank 0 in pieces. No rank ever holds a
V x d matrix; the V-sized arrays it keeps are the vocabulary's (keep probabilities, the
negative table, the planner's marks and two slot maps: 19 bytes per word).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..core.config import TrainConfig
from ..core.errors import ConfigError, InputError
from ..io import checkpoint
from ..io.fsutil import reason
from ..io.vectors import write_word2vec_blocks
from ..kernels import cpu
from ..kernels.args import KernelArgs
from ..kernels.plan import plan_block
from .comm import Comm
from .rows import WorkingSet, group_by_owner, owned_ids, owned_in_range, working_set
from .rule import apply_pushed
from .store import Store, StoreSetup, SyncStats, Trained, Work, train_pieces

PIECE_ROWS = 8192           # rows per piece of the initialisation stream (bounds its temporaries)
EXPORT_ROWS = 1024          # rows per piece of the text export: its text is ~4x the rows' bytes, held ~4 times


# ------------------------------------------------------------------ the rows a rank owns
def init_rows(vocab_size: int, dim: int, seed: int, ids: np.ndarray, piece_rows: int = PIECE_ROWS) -> np.ndarray:
    """Rows ``ids`` (sorted, unique) of replicated.init_params(vocab_size, dim, seed)'s input
    matrix, bit for bit: the same generator runs over the whole matrix in pieces of rows, and
    only the rows asked for are kept (also the block store's, parallel/blocks.py)."""
    rng = np.random.default_rng(seed)
    ids = np.asarray(ids, dtype=np.int64)
    w_in = np.empty((len(ids), dim), dtype=np.float32)
    for a in range(0, vocab_size, piece_rows):
        b = min(vocab_size, a + piece_rows)
        block = rng.random((b - a, dim), dtype=np.float32)
        i0, i1 = np.searchsorted(ids, (a, b))
        w_in[i0:i1] = ((block[ids[i0:i1] - a] - 0.5) / dim).astype(np.float32)
    return w_in


def init_own_rows(vocab_size: int, dim: int, seed: int, rank: int, world: int,
                  piece_rows: int = PIECE_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """This rank's rows (rank, rank + P, ...) of replicated.init_params(vocab_size, dim, seed)."""
    w_in = init_rows(vocab_size, dim, seed, owned_ids(vocab_size, rank, world), piece_rows)
    return w_in, np.zeros_like(w_in)


# ------------------------------------------------------------------ the exchanges
@dataclass
class Request:
    """One pull, as both sides remember it for a refresh. Requester: it sent ``ids[order]``,
    ``counts[r]`` of them to rank r. Owner: it answered ``asked`` (local rows, requester
    after requester, ``asked_counts[r]`` for rank r)."""

    order: np.ndarray
    counts: np.ndarray
    asked: np.ndarray
    asked_counts: np.ndarray


def _starts(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)


class ShardStore:
    """One rank's rows of both matrices and the collectives that move them. Every method is
    a collective that all ranks call in the same order."""

    def __init__(self, comm: Comm, vocab_size: int, w_in: np.ndarray, w_out: np.ndarray, scale: int,
                 refreshes: bool = False):
        self.comm, self.vocab_size, self.scale = comm, vocab_size, int(scale)
        self.own = (w_in, w_out)
        self.dim = w_in.shape[1]
        self._pos = np.full(len(w_in), -1, dtype=np.int32)
        # the own rows the last push changed, per matrix: what a refresh sends again (only a
        # pipelined run refreshes)
        self._changed = (np.zeros(len(w_in), dtype=bool), np.zeros(len(w_in), dtype=bool)) if refreshes else None
        self.stats = SyncStats()
        self.rows_pulled = 0
        self.rows_pushed = 0
        self.rows_refreshed = 0

    def _pull(self, comm: Comm, ids: np.ndarray, mats: tuple[np.ndarray, ...]) -> tuple[np.ndarray, Request]:
        """Rows ``ids`` of the owners' ``mats`` (side by side), in the order of ``ids``."""
        p = comm.size
        order, counts = group_by_owner(ids, p)
        asked, asked_counts = comm.alltoallv(ids[order], counts)
        local = asked // p
        rows = mats[0][local] if len(mats) == 1 else np.concatenate([m[local] for m in mats], axis=1)
        got, _ = comm.alltoallv(rows, asked_counts, recv_counts=counts)
        out = np.empty_like(got)
        out[order] = got
        return out, Request(order, counts, local, asked_counts)

    def pull(self, ws: WorkingSet, comm: Comm | None = None) -> tuple[np.ndarray, np.ndarray, tuple[Request, Request]]:
        """The working set's rows: input rows of its tokens [T, d], output rows of all [W, d],
        and the two requests (tokens: both matrices; noise words: output only) for
        :meth:`refresh`. ``comm``: the prefetch thread's own communicator (default: the
        store's), which first waits for the other ranks asleep (Comm.barrier_sleeping); only
        the training thread's pulls count in the store's sync time."""
        ahead = comm is not None and comm is not self.comm
        comm = comm or self.comm
        t, c = time.perf_counter(), (comm.stats.seconds, comm.stats.steps)
        if ahead:
            comm.barrier_sleeping()
        d = self.dim
        both, tokens = self._pull(comm, ws.ids[:ws.n_in], self.own)
        only_out, noise = self._pull(comm, ws.ids[ws.n_in:], self.own[1:])
        ws_in = np.ascontiguousarray(both[:, :d])
        ws_out = np.empty((ws.size, d), dtype=np.float32)
        ws_out[:ws.n_in] = both[:, d:]
        ws_out[ws.n_in:] = only_out
        self.rows_pulled += ws.size + ws.n_in
        if not ahead:
            self._account(t, c, comm, self.stats)
        return ws_in, ws_out, (tokens, noise)

    def push(self, ws: WorkingSet, trained, base, touched) -> float:
        """Send the touched rows' changes (a world of one: the rows) to their owners, who
        apply them; returns the largest |value| written on any row this rank owns."""
        t, c = time.perf_counter(), (self.comm.stats.seconds, self.comm.stats.steps)
        p, biggest = self.comm.size, 0.0
        for m, (own, mat, b, mask) in enumerate(zip(self.own, trained, base, touched)):
            sel = np.flatnonzero(mask)
            rows = ws.ids[sel]
            values = mat[sel] if p == 1 else mat[sel] - b[sel]
            order, counts = group_by_owner(rows, p)
            got_rows, got_counts = self.comm.alltoallv(rows[order], counts)
            got_values, _ = self.comm.alltoallv(values[order], counts, recv_counts=got_counts)
            n = len(got_rows)
            self.rows_pushed += len(rows)
            scratch = (self._pos, np.empty((n, self.dim), np.float32), np.empty(n, np.int32), np.empty(n, np.int64))
            biggest = max(biggest, apply_pushed(own, got_rows // p, got_values, got_counts, self.scale, p == 1,
                                                scratch))
            if self._changed is not None:
                self._changed[m][:] = False
                self._changed[m][got_rows // p] = True
        self.stats.syncs += 1
        self._account(t, c, self.comm, self.stats)
        return float(biggest)

    def refresh(self, ws: WorkingSet, ws_in: np.ndarray, ws_out: np.ndarray, requests: tuple[Request, Request]
                ) -> None:
        """After a push: the rows of a working set pulled before it (the pipeline's prefetch)
        that the push changed, sent again by their owners with their current values, so the
        set holds exactly what a pull now would. Token rows travel with both matrices if
        either changed, noise rows with the output matrix."""
        t, c = time.perf_counter(), (self.comm.stats.seconds, self.comm.stats.steps)
        tokens, noise = requests
        self._refresh(tokens, self._changed[0] | self._changed[1], self.own, (ws_in, ws_out), 0)
        self._refresh(noise, self._changed[1], self.own[1:], (ws_out,), ws.n_in)
        self._account(t, c, self.comm, self.stats)

    def _refresh(self, req: Request, changed: np.ndarray, mats: tuple[np.ndarray, ...],
                 dest: tuple[np.ndarray, ...], first_slot: int) -> None:
        p, d = self.comm.size, self.dim
        # owner: the asked rows that changed, as positions within their requester's request
        hit = np.flatnonzero(changed[req.asked])
        requester = np.repeat(np.arange(p), req.asked_counts)[hit]
        positions = hit - _starts(req.asked_counts)[requester]
        counts = np.bincount(requester, minlength=p).astype(np.int64)
        local = req.asked[hit]
        rows = mats[0][local] if len(mats) == 1 else np.concatenate([m[local] for m in mats], axis=1)
        got_pos, got_counts = self.comm.alltoallv(positions, counts)
        got, _ = self.comm.alltoallv(rows, counts, recv_counts=got_counts)
        # requester: position j from owner o is the j-th id it sent o, at slot order[start_o + j]
        owner = np.repeat(np.arange(p), got_counts)
        slots = first_slot + req.order[_starts(req.counts)[owner] + got_pos]
        for k, m in enumerate(dest):
            m[slots] = got[:, k * d:(k + 1) * d]
        self.rows_refreshed += len(slots) * len(dest)

    @staticmethod
    def _account(t: float, c: tuple[float, int], comm: Comm, stats: SyncStats) -> None:
        """Since ``c``, ``comm``'s (seconds, steps) at ``t``."""
        stats.seconds += time.perf_counter() - t
        stats.comm_seconds += comm.stats.seconds - c[0]
        stats.steps += comm.stats.steps - c[1]

    def gather_rows(self, ids: np.ndarray, matrix: int = 0) -> np.ndarray | None:
        """Rank 0: rows ``ids`` (sorted, unique) of one matrix; None elsewhere."""
        p, r = self.comm.size, self.comm.rank
        mine = ids[ids % p == r]
        parts = self.comm.gather((mine, self.own[matrix][mine // p]))
        if not self.comm.is_root:
            return None
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        for got_ids, values in parts:
            out[np.searchsorted(ids, got_ids)] = values
        return out

    def row_blocks(self, matrix: int = 0, piece_rows: int = PIECE_ROWS):
        """Rank 0: the whole matrix in row order, ``piece_rows`` rows at a time (None on the
        other ranks, which must consume the generator as far: it is a collective)."""
        p, r = self.comm.size, self.comm.rank
        for a in range(0, self.vocab_size, piece_rows):
            if a:
                # flow control: without it the other ranks send piece after piece while rank 0
                # formats text, and MPI queues them all in rank 0's memory (measured: +300 MB
                # for a 413 MB matrix on 6 ranks); now they wait until it asks for the next
                self.comm.barrier()
            b = min(self.vocab_size, a + piece_rows)
            i0, i1 = owned_in_range(a, b, r, p)
            parts = self.comm.gather(self.own[matrix][i0:i1])
            if not self.comm.is_root:
                yield None
                continue
            block = np.empty((b - a, self.dim), dtype=np.float32)
            for owner, rows in enumerate(parts):
                block[(owner - a) % p::p] = rows
            yield block


# ------------------------------------------------------------------ the store
@dataclass
class Fetched:
    """A round planned and pulled: its words, its working set and that set's rows."""

    work: Work
    ws: WorkingSet
    rows: tuple[np.ndarray, np.ndarray]        # the working set's input and output rows
    requests: tuple[Request, Request]          # for ShardStore.refresh
    rng_after: np.ndarray             # the RNG states training the round ends with
    plan_s: float
    seconds: float                    # planning and pulling


def fresh_params(cfg: TrainConfig, comm: Comm, vocab_size: int, counts=None) -> tuple[np.ndarray, np.ndarray]:
    return init_own_rows(vocab_size, cfg.dim, cfg.seed, comm.rank, comm.size)


def read_params(found, where: dict, comm: Comm, cfg: TrainConfig, vocab_size: int, counts=None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Every rank reads its own rows, from its part (a sharded checkpoint of as many ranks)
    or in pieces of any checkpoint; rank 0 read no parameters."""
    path = where["path"]
    w_in, w_out = comm.agree(checkpoint.read_rows, path, where["parts"], vocab_size, comm.rank, comm.size)
    if w_in.shape[1] != cfg.dim:
        raise InputError(f"{path} holds vectors of {w_in.shape[1]} dimensions, --dim is {cfg.dim}")
    return w_in, w_out


def prepare_resume(directory: str) -> None:
    """Before a resume (rank 0): part files no checkpoint joins are a killed save's."""
    checkpoint.remove_stale_parts(directory, orphans=True)


class ShardedStore(Store):
    """A round plans, pulls, trains the working set and pushes it (module docstring).
    Pipelined (--pipeline), round k+1 is planned and pulled in a second thread, over a
    communicator of its own, while round k trains; after k's push the owners send again the
    rows of k+1's pull that the push changed (ShardStore.refresh), so round k+1 starts from
    exactly the rows a pull after the push would give: the same model as without the
    pipeline."""

    partial_rows = True
    plans_rounds = True
    params_on_root = False         # every rank reads its own rows of a checkpoint
    fresh_params = staticmethod(fresh_params)
    read_params = staticmethod(read_params)
    prepare_resume = staticmethod(prepare_resume)

    def __init__(self, comm: Comm, w_in: np.ndarray, w_out: np.ndarray, setup: StoreSetup):
        cfg, vocab_size = setup.cfg, setup.vocab_size
        # --balance speed splits round k+1 by the speeds measured in round k: nothing to prefetch
        self.looks_ahead = self.pipelined = cfg.pipeline and cfg.balance != "speed"
        if self.pipelined and not comm.thread_multiple:
            raise ConfigError("the sharded store's pipeline needs MPI_THREAD_MULTIPLE, which this MPI does not "
                              "give; run with --no-pipeline")
        self.comm, self.dim = comm, cfg.dim
        self.store = ShardStore(comm, vocab_size, w_in, w_out, setup.scale, refreshes=self.pipelined)
        self.stats = self.store.stats
        self._marks = (np.zeros(vocab_size, dtype=np.uint8), np.zeros(vocab_size, dtype=np.uint8))
        # two global -> slot tables: the next round plans into one while this round trains on the other
        self._slots = (np.full(vocab_size, -1, dtype=np.int32), np.full(vocab_size, -1, dtype=np.int32))
        self._rounds = 0          # rounds trained by this process (which slot table is free)
        self._round = None        # (Fetched, base rows, touched masks) of the round trained last
        self.ws_rows = 0          # the largest working set so far (rows)
        self.prefetch_comm = comm.dup() if self.pipelined else None
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="mpidwe-prefetch") if self.pipelined else None
        self._prefetch: Future | None = None      # the next round's plan and pull, under way
        self._next: Fetched | None = None         # the next round's rows, pulled and refreshed
        self.exposed_s = 0.0      # seconds the training thread spent pulling, waiting, pushing, refreshing
        self.prefetch_s = 0.0     # seconds of the prefetch thread (hidden behind training)

    def fetch(self, work: Work, rng: np.ndarray, args: KernelArgs, slots: np.ndarray, comm: Comm) -> Fetched:
        """Plan the round (from RNG states ``rng``, left untouched) and pull its rows."""
        t = time.perf_counter()
        planned = rng.copy()
        for tokens, starts in work.pieces:
            plan_block(tokens, starts, planned, *self._marks, args)
        ws = working_set(*self._marks, slots)
        plan_s = time.perf_counter() - t
        ws_in, ws_out, requests = self.store.pull(ws, comm)
        return Fetched(work, ws, (ws_in, ws_out), requests, planned, plan_s, time.perf_counter() - t)

    def train(self, work: Work, ahead: Work | None, rng: np.ndarray, args: KernelArgs, on_piece=None) -> Trained:
        f, self._next = self._next, None
        planned = 0.0
        if f is None:                    # not prefetched: the first round of this process, or no pipeline
            f = self.fetch(work, rng, args, self._slots[self._rounds % 2], self.comm)
            planned = f.plan_s
            self.exposed_s += f.seconds - f.plan_s
        self._rounds += 1
        if self.pipelined and ahead is not None:
            self._prefetch = self._pool.submit(self.fetch, ahead, f.rng_after, args,
                                               self._slots[self._rounds % 2], self.prefetch_comm)
        ws, (ws_in, ws_out) = f.ws, f.rows
        self.ws_rows = max(self.ws_rows, ws.size)
        base = (ws_in.copy(), ws_out.copy()) if self.comm.size > 1 else (None, None)
        touched = (np.zeros(ws.n_in, dtype=np.uint8), np.zeros(ws.size, dtype=np.uint8))
        args = args.on_slots(np.ascontiguousarray(args.keep_prob[ws.ids[:ws.n_in]]), ws.slots)

        def step(tokens, starts, a):
            return cpu.train_block(ws_in, ws_out, ws.slots[tokens], starts, rng, *touched, a)

        done = train_pieces(step, f.work.pieces, args, on_piece)
        if not np.array_equal(f.rng_after, rng):
            raise AssertionError("the planner's random stream differs from the kernel's")
        done.compute_s += planned
        self._round = (f, base, touched)
        return done

    def sync(self, rnd: int) -> float:
        """Wait for the next round's pull, push this round's changes, then refresh the next
        round's rows that the push changed."""
        f, base, touched = self._round
        self._round = None
        t = time.perf_counter()
        nxt, self._prefetch = (self._prefetch.result() if self._prefetch is not None else None), None
        biggest = self.store.push(f.ws, f.rows, base, touched)
        if nxt is not None:
            self.store.refresh(nxt.ws, *nxt.rows, nxt.requests)
            self.prefetch_s += nxt.seconds
        self._next = nxt
        self.exposed_s += time.perf_counter() - t
        return biggest

    def report(self) -> dict:
        """Per rank: the largest working set so far (rows); the rows pulled, pushed and sent
        again by refreshes since the start (rows of either matrix); the seconds the training
        thread spent in pulls, waiting for the prefetch, pushes and refreshes (the exposed
        communication) and the prefetch thread's seconds (planning and pulling, hidden)."""
        st = self.store
        return {"working_set_rows": int(self.ws_rows), "rows_pulled": int(st.rows_pulled),
                "rows_pushed": int(st.rows_pushed), "rows_refreshed": int(st.rows_refreshed),
                "exposed_comm_seconds": round(self.exposed_s, 4), "prefetch_seconds": round(self.prefetch_s, 4)}

    def settings(self) -> dict:
        return {"pipeline": self.pipelined}

    def extra_comm_bytes(self) -> int:
        return self.prefetch_comm.stats.bytes_sent if self.prefetch_comm is not None else 0

    def rows(self, ids: np.ndarray | None) -> np.ndarray | None:
        if ids is None:
            raise ValueError("the sharded store serves the rows it is asked for, not the whole matrix")
        return self.store.gather_rows(ids) if len(ids) else np.zeros((0, self.dim), np.float32)

    def save(self, directory: str, ck, keep: int) -> str | None:
        """Every owner writes its part; rank 0 then writes the checkpoint that joins them."""
        comm, state = self.comm, ck.state
        part = comm.agree(checkpoint.save_part, directory, state.progress.round, comm.rank, comm.size,
                          len(ck.words), *self.store.own)
        parts = comm.gather(part)
        return comm.on_root(checkpoint.save, directory, ck, keep=keep, parts=parts)

    def write_vectors(self, path: str, words: list[str], vectors_of) -> str | None:
        """vectors.txt from rows streamed to rank 0 in pieces (the rows are the vectors: the
        sharded store trains no subwords)."""
        blocks = self.store.row_blocks(0, EXPORT_ROWS)
        failed = None
        if self.comm.is_root:
            try:
                write_word2vec_blocks(path, words, self.dim, blocks, binary=False)
            except (OSError, InputError) as e:
                failed = reason(e) if isinstance(e, OSError) else str(e)
        for _ in blocks:            # the other ranks (and rank 0 after a failure) finish the stream
            pass
        return failed

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self.prefetch_comm is not None:
            self.prefetch_comm.free()
            self.prefetch_comm = None
