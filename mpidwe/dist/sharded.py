"""``--store sharded``: a model larger than one rank's memory (docs/sync-modes.md, "Sharded store").

Each rank owns every P-th row of both matrices (mpidwe/store.py) and nothing else. A sync
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
   (store.apply_pushed): a row n ranks changed moves by the sum of the changes divided by
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

import os
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..io import checkpoint
from .comm import Comm
from ..core.config import TrainConfig
from ..io.corpus import Corpus
from ..core.errors import ConfigError, InputError
from ..io.fsutil import reason
from ..kernels import cpu
from ..kernels.plan import plan_block
from .rows import WorkingSet, apply_pushed, group_by_owner, owned_count, owned_in_range, working_set
from .sync import SyncStats
from ..train import Evaluator, Plan, Trainer, find_checkpoint, rng_seeds

PIECE_ROWS = 8192           # rows per piece of the initialisation stream (bounds its temporaries)
EXPORT_ROWS = 1024          # rows per piece of the text export: its text is ~4x the rows' bytes, held ~4 times


# ------------------------------------------------------------------ the rows a rank owns
def init_own_rows(vocab_size: int, dim: int, seed: int, rank: int, world: int,
                  piece_rows: int = PIECE_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """This rank's rows of train.init_params(vocab_size, dim, seed), bit for bit: the same
    generator runs over the whole matrix in pieces of rows, and each rank keeps its own."""
    rng = np.random.default_rng(seed)
    w_in = np.empty((owned_count(vocab_size, rank, world), dim), dtype=np.float32)
    for a in range(0, vocab_size, piece_rows):
        b = min(vocab_size, a + piece_rows)
        block = rng.random((b - a, dim), dtype=np.float32)
        i0, i1 = owned_in_range(a, b, rank, world)
        w_in[i0:i1] = ((block[(rank - a) % world::world] - 0.5) / dim).astype(np.float32)
    return w_in, np.zeros_like(w_in)


def fresh_state(cfg: TrainConfig, plan: Plan, comm: Comm, vocab_size: int) -> checkpoint.TrainingState:
    w_in, w_out = init_own_rows(vocab_size, cfg.dim, cfg.seed, comm.rank, comm.size)
    rngs = np.stack([rng_seeds(cfg.seed, r, plan.threads) for r in range(comm.size)])
    progress = checkpoint.Progress(round=0, rounds=plan.rounds, words_done=0, words_total=plan.words_total,
                                   world_size=comm.size, positions=[0] * comm.size, lr=cfg.lr)
    return checkpoint.TrainingState(w_in, w_out, progress, rngs, [])


def load_state(cfg: TrainConfig, plan: Plan, comm: Comm, corpus: Corpus, log
               ) -> tuple[checkpoint.TrainingState | None, dict | None]:
    """As train.load_state, but rank 0 reads no parameters: every rank reads its own rows,
    from its part (a sharded checkpoint of as many ranks) or in pieces of any checkpoint."""
    def find():
        checkpoint.remove_stale_parts(os.path.join(cfg.out, "checkpoints"), orphans=True)
        return find_checkpoint(cfg, plan, corpus, comm.size, log, params=False)

    ck = comm.on_root(find, broadcast=False)
    header = comm.bcast(dict(ck.state.header(), replan=ck.config.get("replan"), path=ck.path, parts=ck.parts)
                        if comm.is_root and ck is not None else None)
    if header is None:
        return None, None
    record, path, parts = header.pop("replan"), header.pop("path"), header.pop("parts")
    w_in, w_out = comm.agree(checkpoint.read_rows, path, parts, corpus.n_words, comm.rank, comm.size)
    if w_in.shape[1] != cfg.dim:
        raise InputError(f"{path} holds vectors of {w_in.shape[1]} dimensions, --dim is {cfg.dim}")
    return checkpoint.TrainingState.from_header(header, w_in, w_out), record


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

    def __init__(self, comm: Comm, vocab_size: int, w_in: np.ndarray, w_out: np.ndarray, scale: int):
        self.comm, self.vocab_size, self.scale = comm, vocab_size, int(scale)
        self.own = (w_in, w_out)
        self.dim = w_in.shape[1]
        self._pos = np.full(len(w_in), -1, dtype=np.int32)
        # the own rows the last push changed, per matrix: what a refresh sends again
        self._changed = (np.zeros(len(w_in), dtype=bool), np.zeros(len(w_in), dtype=bool))
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

    def pull(self, ws: WorkingSet, comm: Comm | None = None, stats: SyncStats | None = None,
             patient: bool = False) -> tuple[np.ndarray, np.ndarray, tuple[Request, Request]]:
        """The working set's rows: input rows of its tokens [T, d], output rows of all [W, d],
        and the two requests (tokens: both matrices; noise words: output only) for
        :meth:`refresh`. ``comm`` and ``stats``: the prefetch thread's own (default: the
        store's); ``patient``: wait for the other ranks asleep first (Comm.barrier_sleeping)."""
        comm, stats = comm or self.comm, stats or self.stats
        t, c = time.perf_counter(), comm.stats.seconds
        if patient:
            comm.barrier_sleeping()
        d = self.dim
        both, tokens = self._pull(comm, ws.ids[:ws.n_in], self.own)
        only_out, noise = self._pull(comm, ws.ids[ws.n_in:], self.own[1:])
        ws_in = np.ascontiguousarray(both[:, :d])
        ws_out = np.empty((ws.size, d), dtype=np.float32)
        ws_out[:ws.n_in] = both[:, d:]
        ws_out[ws.n_in:] = only_out
        self.rows_pulled += ws.size + ws.n_in
        self._account(t, c, comm, stats)
        return ws_in, ws_out, (tokens, noise)

    def push(self, ws: WorkingSet, trained, base, touched) -> float:
        """Send the touched rows' changes (a world of one: the rows) to their owners, who
        apply them; returns the largest |value| written on any row this rank owns."""
        t, c = time.perf_counter(), self.comm.stats.seconds
        p, biggest = self.comm.size, 0.0
        for own, mat, b, mask, changed in zip(self.own, trained, base, touched, self._changed):
            sel = np.flatnonzero(mask)
            rows = ws.ids[sel]
            values = mat[sel] if p == 1 else mat[sel] - b[sel]
            order, counts = group_by_owner(rows, p)
            got_rows, got_counts = self.comm.alltoallv(rows[order], counts)
            got_values, _ = self.comm.alltoallv(values[order], counts, recv_counts=got_counts)
            n = len(got_rows)
            self.rows_pushed += len(rows)
            biggest = max(biggest, apply_pushed(
                own, got_rows // p, got_values, got_counts, self.scale, p == 1, self._pos,
                np.empty((n, self.dim), np.float32), np.empty(n, np.int32), np.empty(n, np.int64)))
            changed[:] = False
            changed[got_rows // p] = True
        self.stats.syncs += 1
        self._account(t, c, self.comm, self.stats)
        return float(biggest)

    def refresh(self, ws: WorkingSet, ws_in: np.ndarray, ws_out: np.ndarray, requests: tuple[Request, Request]
                ) -> None:
        """After a push: the rows of a working set pulled before it (the pipeline's prefetch)
        that the push changed, sent again by their owners with their current values, so the
        set holds exactly what a pull now would. Token rows travel with both matrices if
        either changed, noise rows with the output matrix."""
        t, c = time.perf_counter(), self.comm.stats.seconds
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
    def _account(t: float, c: float, comm: Comm, stats: SyncStats) -> None:
        stats.seconds += time.perf_counter() - t
        stats.comm_seconds += comm.stats.seconds - c

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


# ------------------------------------------------------------------ the pipeline
@dataclass
class Fetched:
    """A round planned and pulled: its words, its working set and that set's rows."""

    pieces: list                      # the round's (tokens, sentence starts)
    scale: float                      # global words one of this rank's words stands for
    position: int                     # this rank's stream position at the end of the round
    ws: WorkingSet
    rows: tuple[np.ndarray, np.ndarray]        # the working set's input and output rows
    requests: tuple[Request, Request]          # for ShardStore.refresh
    rng_after: np.ndarray             # the RNG states training the round ends with
    plan_s: float
    seconds: float                    # planning and pulling


class Prefetch:
    """A call run in a second thread (the next round's plan and pull, while this round
    trains: the kernel and the planner release the GIL, and so does MPI)."""

    def __init__(self, fn, *args):
        self._result, self._error = None, None
        self._thread = threading.Thread(target=self._run, args=(fn, args), name="mpidwe-prefetch", daemon=True)
        self._thread.start()

    def _run(self, fn, args) -> None:
        try:
            self._result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the training thread
            self._error = e

    def result(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result


# ------------------------------------------------------------------ the trainer
class ShardedTrainer(Trainer):
    """The round loop of train.Trainer over a ShardStore: a round plans, pulls, trains the
    working set and pushes it (module docstring). Pipelined (--pipeline), round k+1 is
    planned and pulled in a second thread, over a communicator of its own, while round k
    trains; after k's push the owners send again the rows of k+1's pull that the push
    changed (ShardStore.refresh), so round k+1 starts from exactly the rows a pull after the
    push would give: the same model as without the pipeline."""

    def setup_params(self, v: int) -> None:
        if self.plan.kernel != "numba":
            raise ConfigError("--store sharded needs the numba kernel (--device cpu)")
        self.store = self.syncer = ShardStore(self.comm, v, self.state.w_in, self.state.w_out, self.plan.scale)
        self.touched = []
        self._marks = (np.zeros(v, dtype=np.uint8), np.zeros(v, dtype=np.uint8))
        # two global -> slot tables: the next round plans into one while this round trains on the other
        self._slots = (np.full(v, -1, dtype=np.int32), np.full(v, -1, dtype=np.int32))
        self._round = None        # (Fetched, base rows, touched masks) of the round trained last
        self.ws_rows = 0          # the largest working set so far (rows)
        # --balance speed splits round k+1 by the speeds measured in round k: nothing to prefetch
        self.pipelined = self.cfg.pipeline and self.cfg.balance != "speed"
        if self.pipelined and not self.comm.thread_multiple:
            raise ConfigError("the sharded store's pipeline needs MPI_THREAD_MULTIPLE, which this MPI does not "
                              "give; run with --no-pipeline")
        self.prefetch_comm = self.comm.dup() if self.pipelined else None
        self.prefetch_stats = SyncStats()
        self._prefetch: Prefetch | None = None    # the next round's plan and pull, under way
        self._next: Fetched | None = None         # the next round's rows, pulled and refreshed
        self.position: int | None = None          # the stream position after the last round trained
        self.exposed_s = 0.0      # seconds the training thread spent pulling, waiting, pushing, refreshing
        self.prefetch_s = 0.0     # seconds of the prefetch thread (hidden behind training)

    def params_to_host(self) -> None:
        """Nothing to copy: the owned rows are host arrays."""

    def fetch(self, pieces: list, scale: float, position: int, rng: np.ndarray, slots: np.ndarray, comm: Comm,
              stats: SyncStats) -> Fetched:
        """Plan the round (from RNG states ``rng``, left untouched) and pull its rows."""
        t = time.perf_counter()
        planned = rng.copy()
        for tokens, starts in pieces:
            plan_block(tokens, starts, planned, *self._marks, self.kernel_args)
        ws = working_set(*self._marks, slots)
        plan_s = time.perf_counter() - t
        ws_in, ws_out, requests = self.store.pull(ws, comm, stats, patient=comm is self.prefetch_comm)
        return Fetched(pieces, scale, position, ws, (ws_in, ws_out), requests, planned, plan_s,
                       time.perf_counter() - t)

    def _pieces(self, rnd: int) -> tuple[list, float, int]:
        pieces, scale = self.round_pieces(rnd)
        pieces = list(pieces)            # the round's words, known before it trains
        return pieces, scale, self.stream.consumed

    def train_round(self, rnd: int, bar) -> tuple[int, float, float]:
        cfg, p = self.cfg, self.state.progress
        f, self._next = self._next, None
        if f is None:                    # not prefetched: the first round of this process, or no pipeline
            f = self.fetch(*self._pieces(rnd), self.rng, self._slots[rnd % 2], self.comm, self.store.stats)
            self.compute_s += f.plan_s
            self.exposed_s += f.seconds - f.plan_s
        if self.pipelined and rnd + 1 < self.plan.rounds:
            self._prefetch = Prefetch(self.fetch, *self._pieces(rnd + 1), f.rng_after, self._slots[(rnd + 1) % 2],
                                      self.prefetch_comm, self.prefetch_stats)
        ws, (ws_in, ws_out), scale = f.ws, f.rows, f.scale
        self.ws_rows = max(self.ws_rows, ws.size)
        base = (ws_in.copy(), ws_out.copy()) if self.comm.size > 1 else (None, None)
        touched = (np.zeros(ws.n_in, dtype=np.uint8), np.zeros(ws.size, dtype=np.uint8))
        keep = np.ascontiguousarray(self.keep[ws.ids[:ws.n_in]])
        t = time.perf_counter()
        words, loss, examples = 0, 0.0, 0.0
        for tokens, starts in f.pieces:
            args = self.kernel_args.on_slots(keep, ws.slots).at(p.words_done + scale * words, scale)
            l, n_ex, n_words = cpu.train_block(ws_in, ws_out, ws.slots[tokens], starts, self.rng, touched[0],
                                               touched[1], args)
            words += n_words
            self.local_words += n_words
            loss += l
            examples += n_ex
            if bar is not None:
                bar.update(n_words * self.comm.size)
        if not np.array_equal(f.rng_after, self.rng):
            raise AssertionError("the planner's random stream differs from the kernel's")
        seconds = time.perf_counter() - t
        self.compute_s += seconds
        self.round_speed = words / (seconds + f.plan_s) if words and seconds > 0 else 0.0
        self.position = f.position
        self._round = (f, base, touched)
        return words, loss, examples

    def sync_round(self) -> float:
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

    def metrics_record(self, *args, **kwargs) -> dict | None:
        """The replicated record (its comm_bytes with the prefetch thread's bytes added), plus
        per rank: the largest working set so far (rows); the rows pulled, pushed and sent
        again by refreshes since the start (rows of either matrix); the seconds the training
        thread spent in pulls, waiting for the prefetch, pushes and refreshes (the exposed
        communication) and the prefetch thread's seconds (planning and pulling, hidden)."""
        record = super().metrics_record(*args, **kwargs)
        st = self.store
        extra = self.prefetch_comm.stats.bytes_sent if self.prefetch_comm is not None else 0
        per_rank = self.comm.gather((self.ws_rows, st.rows_pulled, st.rows_pushed, st.rows_refreshed, extra,
                                     self.exposed_s, self.prefetch_s))
        if record is not None:
            record["comm_bytes"] = [b + int(r[4]) for b, r in zip(record["comm_bytes"], per_rank)]
            record["pipeline"] = self.pipelined
            for k, key in enumerate(("working_set_rows", "rows_pulled", "rows_pushed", "rows_refreshed")):
                record[key] = [int(r[k]) for r in per_rank]
            record["exposed_comm_seconds"] = [round(r[5], 4) for r in per_rank]
            record["prefetch_seconds"] = [round(r[6], 4) for r in per_rank]
        return record

    # ---------------------------------------------------------------- evaluation
    def make_evaluator(self):
        """Rank 0's Evaluator over the rows evaluation reads: the most frequent words (the
        analogy search space and the PIP reference) and the words of the evaluation files,
        in vocabulary order; every rank learns their ids (gathered at each evaluation)."""
        cfg = self.cfg
        ids = self.comm.on_root(_eval_ids, cfg, self.words) if (cfg.eval_sim or cfg.eval_analogy
                                                                or cfg.eval_pip) else np.zeros(0, np.int64)
        self.eval_ids = ids
        reference = self._pip_reference()
        return self.comm.on_root(Evaluator, cfg, [self.words[i] for i in ids], reference, broadcast=False)

    def evaluate(self) -> dict:
        rows = self.store.gather_rows(self.eval_ids) if len(self.eval_ids) else np.zeros((0, self.cfg.dim),
                                                                                         np.float32)
        return self.evaluator(rows) if self.comm.is_root else {}

    # ---------------------------------------------------------------- checkpoint, export
    def save_checkpoint(self, complete: bool) -> str | None:
        """Every owner writes its part; rank 0 then writes the checkpoint that joins them."""
        position = self.stream.consumed if self.position is None or self.balanced else self.position
        gathered = self.comm.gather((self.rng.copy(), position))
        state, comm = self.state, self.comm
        if comm.is_root:
            width = max(len(g[0]) for g in gathered)
            state.rng_state = np.zeros((comm.size, width), dtype=np.uint64)
            for r, (st, _) in enumerate(gathered):
                state.rng_state[r, :len(st)] = st
            state.progress.positions = [int(g[1]) for g in gathered]
        directory = os.path.join(self.cfg.out, "checkpoints")
        part = comm.agree(checkpoint.save_part, directory, state.progress.round, comm.rank, comm.size,
                          len(self.words), state.w_in, state.w_out)
        parts = comm.gather(part)
        ck = checkpoint.Checkpoint(state=state, words=self.words, counts=self.corpus.counts,
                                   config=self.plan.resolved, corpus_id=self.corpus.corpus_id,
                                   corpus_path=self.corpus.path, complete=complete)
        return comm.on_root(checkpoint.save, directory, ck, keep=self.cfg.keep_checkpoints, parts=parts)

    def export_vectors(self, ckpt_path: str | None) -> None:
        """vectors.txt from rows streamed to rank 0 in pieces; every rank learns of a failure."""
        from ..io.vectors import write_word2vec_blocks

        vectors = os.path.join(self.cfg.out, "vectors.txt")
        blocks = self.store.row_blocks(0, EXPORT_ROWS)
        failed = None
        if self.comm.is_root:
            try:
                write_word2vec_blocks(vectors, self.words, self.cfg.dim, blocks, binary=False)
            except (OSError, InputError) as e:
                failed = reason(e) if isinstance(e, OSError) else str(e)
        for _ in blocks:            # the other ranks (and rank 0 after a failure) finish the stream
            pass

        def report():
            if failed is not None:
                raise InputError(f"training finished and {ckpt_path} holds the model, but writing the vectors "
                                 f"failed ({failed}); export them later with python -m mpidwe.inspect "
                                 f"{self.cfg.out} export -o FILE")
            if self.log:
                self.log(f"wrote {vectors}")
                history = self.state.history
                if history and history[-1].get("eval"):
                    import json

                    self.log("evaluation: " + json.dumps(history[-1]["eval"], sort_keys=True))
        self.comm.on_root(report, broadcast=False)


def _eval_ids(cfg: TrainConfig, words: list[str]) -> np.ndarray:
    """Ids of the most frequent ``eval_restrict_vocab`` words and of every word (as written
    or lowercased) the evaluation files name."""
    wanted: set[str] = set()
    for path in (*cfg.eval_sim, *cfg.eval_analogy):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for token in fh.read().split():
                    wanted.update((token, token.lower()))
        except OSError:
            pass                     # Evaluator reports the unreadable file
    top = min(len(words), cfg.eval_restrict_vocab)
    extra = [i for i in range(top, len(words)) if words[i] in wanted]
    return np.concatenate((np.arange(top, dtype=np.int64), np.array(extra, dtype=np.int64)))
