"""``--store replicated`` (numba kernel; what ``--store auto`` trains on below 8 ranks and in short runs): both
matrices on every rank.

Between two syncs every rank trains its own copy of the whole model on its shard; a sync
combines the ranks' changes by the scaled-mean rule (parallel/rule.py) so that every rank holds
the same parameters, bit for bit, again. ``--sync`` chooses what travels (:class:`Synchronizer`):
the rows some rank touched (``sparse``: an allgather of their ids and changes), the whole
matrices (``dense`` and ``average``: an all-reduce of the changes and the touch counts), or
per sync whichever of the first two walks fewer rows (``auto``, the default).
Rank 0 writes the checkpoints and the vectors from its copy.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from ..core.config import TrainConfig, feedback_of, wire_of
from ..core.errors import InputError
from ..io import checkpoint
from ..io.fsutil import reason
from ..io.vectors import write_word2vec
from ..kernels.args import KernelArgs
from .comm import Comm
from .rule import (MODES, _apply_dense, _apply_rows, _gather_delta, _max_abs_rows, apply_encoded, dense_pays,
                   row_divisors)
from .store import Store, StoreSetup, SyncStats, Trained, Work, train_pieces
from .wire import row_bytes, segments


# ------------------------------------------------------------------ the parameters a run starts from
def init_params(vocab_size: int, dim: int, seed: int, input_rows: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """word2vec initialisation: input uniform in [-0.5/dim, 0.5/dim), output zeros. The same
    seed gives the same matrices on every rank, so no broadcast is needed. ``input_rows``:
    rows of the input matrix when it holds more than the words (--subwords: n-gram buckets)."""
    rng = np.random.default_rng(seed)
    rows = vocab_size if input_rows is None else input_rows
    w_in = ((rng.random((rows, dim), dtype=np.float32) - 0.5) / dim).astype(np.float32)
    return np.ascontiguousarray(w_in), np.zeros((vocab_size, dim), dtype=np.float32)


def input_rows(cfg: TrainConfig, vocab_size: int) -> int:
    """Rows of the input matrix: the words, then (--subwords) the n-gram buckets."""
    return vocab_size + (cfg.buckets if cfg.subwords else 0)


def fresh_params(cfg: TrainConfig, comm: Comm, vocab_size: int, counts=None) -> tuple[np.ndarray, np.ndarray]:
    return init_params(vocab_size, cfg.dim, cfg.seed, input_rows(cfg, vocab_size))


def read_params(found, where: dict, comm: Comm, cfg: TrainConfig, vocab_size: int, counts=None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Rank 0 read the whole checkpoint (``found``); every rank receives its matrices."""
    w_in = found.w_in if comm.is_root else np.empty((input_rows(cfg, vocab_size), cfg.dim), np.float32)
    w_out = found.w_out if comm.is_root else np.empty((vocab_size, cfg.dim), np.float32)
    comm.bcast_array_(w_in)
    comm.bcast_array_(w_out)
    return w_in, w_out


def save_on_root(comm: Comm, directory: str, ck, keep: int) -> str | None:
    """Rank 0 writes the whole checkpoint; every rank learns its path (or the error)."""
    return comm.on_root(checkpoint.save, directory, ck, keep=keep)


def write_on_root(comm: Comm, path: str, words: list[str], vectors) -> str | None:
    """Rank 0 writes ``vectors()`` as word2vec text; why it failed, or None."""
    if not comm.is_root:
        return None
    try:
        write_word2vec(path, words, vectors(), binary=False)
    except (OSError, InputError) as e:
        return reason(e) if isinstance(e, OSError) else str(e)
    return None


# ------------------------------------------------------------------ the combining
class Synchronizer:
    """Keeps ``base`` copies of the parameters and combines ranks at every ``sync``."""

    def __init__(self, comm: Comm, params: list[np.ndarray], *, mode: str = "sparse", scale: int = 1,
                 allreduce: str = "mpi", wire: str = "fp32", threads: int = 1, by_bytes: bool = False):
        if mode not in MODES:
            raise ValueError(f"unknown sync mode {mode!r}")
        self.comm, self.mode, self.scale, self.allreduce, self.wire = comm, mode, int(scale), allreduce, wire
        # ``auto`` in tiers: dense also where it sends fewer bytes (rule.dense_pays)
        self.by_bytes = by_bytes
        # the array work by row ranges on the rank's threads (the compiled loops release
        # the GIL); every row is computed as on one thread, so the result is the same
        self.threads = int(threads)
        self._pool = (ThreadPoolExecutor(self.threads, thread_name_prefix="sync")
                      if self.threads > 1 and comm.size > 1 else None)       # one rank: nothing to combine
        self.base = [p.copy() for p in params] if comm.size > 1 else []
        self.residual: list[tuple[np.ndarray, np.ndarray]] = []      # error feedback: keep_residuals
        self._senders = np.zeros(max(len(p) for p in params), dtype=np.int32) if comm.size > 1 else None
        self.stats = SyncStats()
        # per parameter, the rows the last sync changed (some rank touched them): what a
        # caller holding a copy of the parameters elsewhere (mpidwe.parallel.device) must refresh
        self.changed_rows: list[np.ndarray] = []

    def sync(self, params: list[np.ndarray], touched: list[np.ndarray], spans: list[tuple[int, int]] | None = None
             ) -> float:
        """Combine every rank's changes since the last sync into ``params`` (in place) and
        clear the ``touched`` masks. A collective: every rank calls it the same number of
        times, with the same ``spans``. ``spans``: per parameter, the rows [a, b) this sync
        combines (None: all); a row outside keeps its flag and its change until a sync that
        combines it. Returns the largest |value| of the rows that changed (inf if any is NaN)."""
        t, c, b = time.perf_counter(), self.comm.stats.seconds, self.comm.stats.bytes_sent
        k = self.comm.stats.steps
        self.changed_rows = []
        spans = [(0, len(param)) for param in params] if spans is None else spans
        if self.comm.size > 1:
            biggest = self._combine_all(params, touched, spans)
        else:
            biggest = max(_max_abs_rows(param[lo:hi], mask[lo:hi]) for param, mask, (lo, hi) in zip(params, touched, spans))
        for mask, (lo, hi) in zip(touched, spans):
            mask[lo:hi] = 0
        s = self.stats
        s.syncs += 1
        s.seconds += time.perf_counter() - t
        s.comm_seconds += self.comm.stats.seconds - c
        s.bytes_sent += self.comm.stats.bytes_sent - b
        s.steps += self.comm.stats.steps - k
        return float(biggest)

    def keep_residuals(self) -> "Synchronizer":
        """--wire-feedback (int8 and int4 wires): per matrix, what this rank's encodings of
        its changes left out, and what its encodings of the sums it owned left out (in the
        sum's units), each added to the row's next one (wire.encode); dropped at every
        checkpoint (drop_feedback), which a resumed run starts from without them. Written in
        full now, as the base is: pages first written inside the syncs, one by one, cost 16
        ranks on 2 cores 5.9 times the sync's array work."""
        fed = self.wire in ("int8", "int4") and self.comm.size > 1
        self.residual = [(np.zeros_like(b), np.zeros_like(b)) for b in self.base] if fed else []
        return self

    @property
    def feedback(self) -> bool:
        return bool(self.residual)

    def drop_feedback(self) -> None:
        """Forget what the encodings left out (at a checkpoint: a resumed run starts from
        none, so it continues as the run it resumes)."""
        for pair in self.residual:
            for r in pair:
                self._by_rows(len(r), lambda a, b, r=r: r[a:b].fill(0))

    def _residuals(self, which: int, lo: int, hi: int):
        """Matrix ``which``'s (own, owned sums') residuals, rows [lo, hi); None without feedback."""
        if not self.residual:
            return None
        own, owned = self.residual[which]
        return own[lo:hi], owned[lo:hi]

    def _combine_all(self, params, touched, spans) -> float:
        """Every matrix's rows [lo, hi) of ``spans``: sparse or dense by the mode (``auto``: by
        the ranks' touch counts, one allgather for all matrices, which every rank then knows
        alike: rule.dense_pays). The encoded dense ones travel together (``_dense_encoded``:
        one all-to-all and one allgather for all of them); ``changed_rows`` in matrix order."""
        dense, rows, counts = [self.mode not in ("sparse", "auto")] * len(params), None, None
        if self.mode in ("sparse", "auto"):
            rows = [(np.flatnonzero(mask[lo:hi]) + lo).astype(np.int32) for mask, (lo, hi) in zip(touched, spans)]
            counts = self.comm.allgather_array(np.array([len(r) for r in rows], dtype=np.int64))
            dense = [self.mode == "auto" and dense_pays(counts[:, i].copy(), hi - lo, *self._row_bytes(param.shape[1]))
                     for i, (param, (lo, hi)) in enumerate(zip(params, spans))]
            self.stats.dense_syncs += sum(dense)
        encoded = [i for i, d in enumerate(dense) if d and self.wire != "fp32"]
        done, biggest = {}, 0.0
        for i, (param, mask, (lo, hi)) in enumerate(zip(params, touched, spans)):
            if i in encoded:
                done = done or self._dense_encoded(params, touched, spans, encoded)
                peak, changed = done[i]
                self.changed_rows.append(changed)
            elif dense[i]:
                peak = self._dense(param, self.base[i], mask, lo, hi)
            else:
                peak = self._sparse(param, self.base[i], rows[i], counts[:, i].copy())
            biggest = max(biggest, peak)
        return biggest

    def _dense_encoded(self, params, touched, spans, which: list[int]) -> dict:
        """The matrices ``which``, all in one Comm.reduce_parts_encoded: their touch counts
        (a byte each while P < 256) and their changes, encoded as they are computed (param -
        base; error feedback: this rank's residual, added on the rows it touched, and the
        residual of the sums it owns, added on the rows some rank touched), applied as they
        are decoded (rule.apply_encoded), by row ranges on the rank's threads: no array of
        changes is written on either side. Per matrix: (the largest |value| that changed,
        the rows some rank touched)."""
        parts = []
        for i in which:
            (lo, hi), mask = spans[i], touched[i][spans[i][0]:spans[i][1]]
            resid = self._residuals(i, lo, hi)
            parts.append((params[i][lo:hi], self.base[i][lo:hi], mask.astype(self._counts_type()),
                          None if resid is None else (resid[0], mask), None if resid is None else (resid[1], None)))
        out = {}
        for i, (every, bounds, counts) in zip(which, self.comm.reduce_parts_encoded(parts, self.wire, self._by_rows)):
            lo, hi = spans[i]
            divisors = row_divisors(counts, self.scale, self.comm.size, self.mode)
            out[i] = (self._land(params[i][lo:hi], self.base[i][lo:hi], every, bounds, divisors, counts),
                      np.flatnonzero(counts) + lo)
        return out

    def _row_bytes(self, d: int) -> tuple[int, int]:
        """(bytes per row of a dense sync, of a sparse one) where ``auto`` weighs bytes (in
        tiers; (0, 0) elsewhere): an encoded or float32 row and its touch count, against a
        float32 row and its id."""
        if not self.by_bytes:
            return 0, 0
        count = np.dtype(self._counts_type()).itemsize
        return (4 * d if self.wire == "fp32" else row_bytes(self.wire, d)) + count, 4 * d + 4

    def _counts_type(self):
        """The touch counts' type in a dense sync: a byte each with an encoded wire while
        P < 256, int32 otherwise."""
        return np.uint8 if self.wire != "fp32" and self.comm.size < 256 else np.int32

    def _sparse(self, param, base, rows, counts) -> float:
        """The allgather of the touched ``rows`` (this rank's) and their changes; ``counts``:
        every rank's number of rows."""
        longest = int(counts.max())
        send_rows = np.zeros(longest, dtype=np.int32)
        send_rows[:len(rows)] = rows
        send_values = np.empty((longest, param.shape[1]), dtype=param.dtype)
        send_values[len(rows):] = 0                 # padding: never read, but sent
        self._by_rows(len(rows), lambda a, b: _gather_delta(param, base, rows[a:b], send_values[a:b]))
        all_rows = self.comm.allgather_array(send_rows)
        all_values = self.comm.allgather_array(send_values)
        self.changed_rows.append(np.unique(np.concatenate([all_rows[r, :counts[r]] for r in range(len(counts))])))
        return max(self._by_rows(len(param), lambda a, b: _apply_rows(
            base, param, all_rows, all_values, counts, self.scale, self._senders, a, b)))

    def _dense(self, param, base, mask, lo: int, hi: int) -> float:
        """float32 rows (--wire fp32): the changes and the touch counts all-reduced."""
        param, base = param[lo:hi], base[lo:hi]
        delta = np.empty_like(param)
        self._by_rows(len(param), lambda a, b: np.subtract(param[a:b], base[a:b], out=delta[a:b]))
        self.comm.allreduce_(delta, self.allreduce)
        counts = mask[lo:hi].astype(self._counts_type())
        self.comm.allreduce_(counts, self.allreduce)
        divisors = row_divisors(counts, self.scale, self.comm.size, self.mode)
        self.changed_rows.append(np.flatnonzero(counts) + lo)
        return max(self._by_rows(len(param), lambda a, b: _apply_dense(
            base[a:b], param[a:b], delta[a:b], divisors[a:b], counts[a:b])))

    def _land(self, param, base, every, bounds, divisors, counts) -> float:
        """The encoded sums ``every`` (owner s's rows [bounds[s], bounds[s + 1])) applied as
        they are decoded (rule.apply_encoded), by row ranges on the rank's threads."""
        def land(a: int, b: int) -> float:
            return max([apply_encoded(every[s, x - bounds[s]:y - bounds[s]], self.wire, base[x:y], param[x:y],
                                      divisors[x:y], counts[x:y]) for s, x, y in segments(bounds, a, b)],
                       default=0.0)
        return max(self._by_rows(len(param), land))

    def _by_rows(self, n: int, work) -> list:
        """``work(a, b)`` over [0, n), in one piece or one row range per thread; the results
        in order."""
        if self._pool is None or n < 1024 * self.threads:
            return [work(0, n)]
        bounds = np.linspace(0, n, self.threads + 1).astype(np.int64)
        return list(self._pool.map(lambda t: work(int(bounds[t]), int(bounds[t + 1])), range(self.threads)))


def rest_of(spans: list[tuple[int, int]] | None, lengths: list[int]) -> list[tuple[int, int]] | None:
    """Per matrix, the rows outside ``spans`` (a sync's, Tiers.spans) as one range [a, b): a
    span starts at row 0 or ends at the last row, so the rest is contiguous; None: every
    row (after a sync of every row nothing waits, but a flush then has nothing to do)."""
    if spans is None:
        return None
    rest = []
    for (a, b), n in zip(spans, lengths):
        if a == 0:
            rest.append((b, n))
        elif b == n:
            rest.append((0, a))
        else:
            return None
    return rest


class Tiers:
    """Which rows a sync combines (``--sync-full F``): sync k (counted from 1 over the whole
    run, so a resumed run keeps the schedule) combines the ``hot`` most frequent rows of each
    matrix, and at every 2^j-th sync more of them: geometrically more, hot x (V / hot)^(j /
    log2 F), or (``schedule`` doubling, pWord2Vec's) hot x 2^j; every F-th sync combines every row. A row's change waits on
    its rank until a sync combines it: nothing is lost, and after a sync of every row all
    ranks hold the same parameters, bit for bit. ``hot_last``: per matrix, whether its most
    frequent rows are its last (a Huffman tree's top nodes, --loss hs); ``words``: the rows
    ranked by frequency (the vocabulary; an input matrix's n-gram rows beyond it are only
    combined with every row)."""

    def __init__(self, rows: list[int], words: int, hot: int, full: int, hot_last: list[bool],
                 schedule: str = "geometric"):
        self.rows, self.words, self.hot, self.full, self.hot_last = rows, words, hot, full, hot_last
        self.levels = max(0, full.bit_length() - 1)
        self.doubling = schedule == "doubling"

    @classmethod
    def planned(cls, setup: StoreSetup, rows: list[int]) -> "Tiers | None":
        """The tiers the plan resolved (``setup.tiers``; None: every row at every sync) for
        the input and output matrices of ``rows`` rows (--loss hs: the output's hot rows
        are its last, the tree's top)."""
        t = setup.tiers
        return (cls(rows, setup.vocab_size, t["hot"], t["full"], [False, setup.cfg.loss == "hs"],
                    t.get("schedule", "geometric")) if t else None)

    def covered(self, sync: int) -> int:
        """How many of the most frequent rows sync ``sync`` (from 1) combines."""
        if self.full <= 1 or sync % self.full == 0:
            return self.words
        level = (sync & -sync).bit_length() - 1        # trailing zeros: 0 at every other sync
        hot = min(self.hot, self.words)
        if self.doubling:                               # pWord2Vec's: H x 2^level
            return min(self.words, hot << level)
        return min(self.words, int(round(hot * (self.words / hot) ** (level / self.levels))))

    def spans(self, sync: int) -> list[tuple[int, int]] | None:
        """Per matrix, the rows [a, b) sync ``sync`` combines; None: every row."""
        if self.full <= 1 or sync % self.full == 0:
            return None
        n = self.covered(sync)
        return [(rows - n, rows) if last else (0, n) for rows, last in zip(self.rows, self.hot_last)]


def planned_synchronizer(comm: Comm, params: list[np.ndarray], setup: StoreSetup, mode: str, wire: str
                         ) -> Synchronizer:
    """A store's host Synchronizer as the plan set it up: ``auto`` weighing bytes in tiers,
    the array work on the rank's threads, error feedback where --wire-feedback says."""
    cfg, tiered = setup.cfg, setup.tiers is not None
    syncer = Synchronizer(comm, params, mode=mode, scale=setup.scale, allreduce=cfg.allreduce, wire=wire,
                          threads=setup.threads, by_bytes=tiered)
    return syncer.keep_residuals() if feedback_of(cfg.wire_feedback, tiered, cfg.loss) else syncer


class Exchange:
    """``--overlap``: a round's sync runs in a second thread, on a second communicator,
    while the next round trains. At the end of round k the parameters are copied
    (``snap``) and a working copy is synchronised in the thread (the base moves as in a
    blocking sync); at the end of round k+1 the result lands: ``param = work + (param - snap)``, the
    ranks' combined change of round k on top of this rank's own change of round k+1. Which
    numbers are computed depends only on the rounds, never on timing, so a run is
    deterministic for a given P; every rank launches and lands the same exchanges in the
    same order."""

    def __init__(self, comm: Comm):
        self.comm = comm.dup()
        if not self.comm.thread_multiple:
            self.comm.free()
            raise InputError("--overlap needs an MPI library with MPI_THREAD_MULTIPLE (MPICH and Open MPI "
                             "have it); run without --overlap")
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="exchange")
        self._inflight = None

    def launch(self, syncer: Synchronizer, params, touched, spans) -> None:
        snap = [p.copy() for p in params]
        work = [p.copy() for p in snap]
        masks = [t.copy() for t in touched]
        for i, t in enumerate(touched):      # this sync takes these flags; rows outside a span keep theirs
            lo, hi = (0, len(t)) if spans is None else spans[i]
            t[lo:hi] = 0
        self._inflight = (self._pool.submit(syncer.sync, work, masks, spans), snap, work)

    def land(self, params) -> float:
        """Wait for the exchange in flight and apply it; its largest |value| (0.0: none)."""
        if self._inflight is None:
            return 0.0
        future, snap, work = self._inflight
        self._inflight = None
        biggest = future.result()             # an error in the thread is raised here
        for p, s, w in zip(params, snap, work):
            np.subtract(p, s, out=s)       # this rank's change since the launch: exactly 0 where none
            np.add(w, s, out=p)            # so an untouched row is the combined value, bit for bit
        return biggest

    def close(self) -> None:
        if self._inflight is not None:
            self._inflight[0].result()
            self._inflight = None
        self._pool.shutdown()
        self.comm.free()


# ------------------------------------------------------------------ the store
class ReplicatedStore(Store):
    """Both matrices on every rank, trained in place by the numba kernel and combined by
    :class:`Synchronizer`, every row at every sync or (``--sync-full``) in :class:`Tiers`."""

    fresh_params = staticmethod(fresh_params)
    read_params = staticmethod(read_params)

    def __init__(self, comm: Comm, w_in: np.ndarray, w_out: np.ndarray, setup: StoreSetup):
        from ..kernels import cpu

        cfg = setup.cfg
        self.comm, self.params = comm, (w_in, w_out)
        # --subwords: the input matrix has a row per n-gram bucket after the words
        self.touched = (np.zeros(len(w_in), dtype=np.uint8), np.zeros(len(w_out), dtype=np.uint8))
        # --overlap: every exchange on a second communicator, from a second thread
        self.exchange = Exchange(comm) if cfg.overlap and comm.size > 1 else None
        self.syncer = planned_synchronizer(comm if self.exchange is None else self.exchange.comm, [w_in, w_out],
                                           setup, cfg.sync, wire_of(cfg, comm.size, setup.tiers is not None))
        self.stats = self.syncer.stats
        # as the plan resolved them (config.tiers_of), None on one rank
        self.tiers = Tiers.planned(setup, [len(w_in), len(w_out)])
        self.pending = False      # some rank may hold changes no sync has combined yet
        self._rest = None         # per matrix, the rows [a, b) outside the last blocking sync's span (None: all)
        self._kernel = cpu.train_block

    def _step(self, tokens, starts, args):
        return self._kernel(*self.params, tokens, starts, self._rng, *self.touched, args)

    def train(self, work: Work, ahead: Work | None, rng: np.ndarray, args: KernelArgs, on_piece=None) -> Trained:
        self._rng = rng
        self._rest = None          # rows trained since the last sync may wait anywhere
        return train_pieces(self._step, work.pieces, args, on_piece)

    def sync(self, rnd: int) -> float:
        spans = None if self.tiers is None else self.tiers.spans(rnd + 1)
        if self.exchange is None:
            self.pending = spans is not None
            self._rest = rest_of(spans, [len(p) for p in self.params])
            return self.syncer.sync(list(self.params), list(self.touched), spans)
        biggest = self.exchange.land(self.params)          # round rnd - 1's, one round late
        self.pending = True
        self.exchange.launch(self.syncer, self.params, self.touched, spans)
        return biggest

    def flush(self) -> None:
        """Combine every change still waiting (the tiers', an exchange in flight), so that
        every rank holds the same rows (before an evaluation, a checkpoint or the export)."""
        if self.exchange is not None:
            self.exchange.land(self.params)
        if self.pending:
            # only the rows outside the last sync's span can wait: the rows it combined hold
            # no change (the same model as a sync of every row, fewer rows to walk and send)
            self.syncer.sync(list(self.params), list(self.touched), self._rest)
            self.pending = False

    def extra_comm_bytes(self) -> int:
        return 0 if self.exchange is None else self.exchange.comm.stats.bytes_sent

    def close(self) -> None:
        if self.exchange is not None:
            self.flush()                 # (a no-op after the final checkpoint's flush)
            self.exchange.close()
            self.exchange = None

    def rows(self, ids: np.ndarray | None) -> np.ndarray | None:
        self.flush()
        if not self.comm.is_root:
            return None
        return self.params[0] if ids is None else self.params[0][ids]

    def save(self, directory: str, ck, keep: int) -> str | None:
        self.flush()
        self.syncer.drop_feedback()      # a run resumed from this checkpoint starts without residuals
        return save_on_root(self.comm, directory, ck, keep)

    def _exact_state(self) -> dict[str, np.ndarray]:
        """What this rank holds that a flush would change: its parameters (changes waiting in
        tiers), touched flags, the sync's base, the error-feedback residuals and the exchange
        in flight (--overlap, its result awaited). Empty where a flush changes nothing."""
        fed, flight = self.syncer.feedback, self.exchange is not None and self.exchange._inflight is not None
        if self.comm.size == 1 or not (self.pending or fed or flight):
            return {}
        state = {"pending": np.array([self.pending]),
                 "rest": np.array(self._rest if self._rest is not None else [], dtype=np.int64).reshape(-1, 2)}
        if flight:         # first: the exchange's thread moves the base and the residuals
            future, snap, work = self.exchange._inflight
            state["flight_max_abs"] = np.array([future.result()])
        for i, side in enumerate(("in", "out")):
            state.update({f"params_{side}": self.params[i], f"touched_{side}": self.touched[i],
                          f"base_{side}": self.syncer.base[i]})
            if fed:
                state[f"residual_own_{side}"], state[f"residual_owned_{side}"] = self.syncer.residual[i]
            if flight:
                state[f"snap_{side}"], state[f"work_{side}"] = snap[i], work[i]
        return state

    def save_exact(self, directory: str, round_: int) -> None:
        from ..io import rankstate

        state = self._exact_state()
        if self.comm.allreduce_scalar(float(bool(state)), "max") > 0:
            self.comm.agree(rankstate.save_rank_state, directory, round_, self.comm.rank, self.comm.size, state)

    def restore_exact(self, directory: str, round_: int) -> bool:
        from concurrent.futures import Future

        from ..io import rankstate

        try:
            state = rankstate.load_rank_state(directory, round_, self.comm.rank, self.comm.size)
            if state is not None:
                self._check_exact(state)
        except InputError as e:
            print(f"warning: {e}; resuming from the flushed checkpoint (not bit-identical)", flush=True)
            state = None
        if self.comm.allreduce_scalar(float(state is not None), "min") == 0:
            return False
        for i, side in enumerate(("in", "out")):
            for mine, name in ((self.params[i], "params"), (self.touched[i], "touched"), (self.syncer.base[i], "base")):
                np.copyto(mine, state[f"{name}_{side}"])
            if self.syncer.feedback and f"residual_own_{side}" in state:
                for mine, name in zip(self.syncer.residual[i], ("residual_own", "residual_owned")):
                    np.copyto(mine, state[f"{name}_{side}"])
        self.pending = bool(state["pending"][0])
        self._rest = [tuple(int(x) for x in r) for r in state["rest"]] or None
        if self.exchange is not None and "flight_max_abs" in state:
            done = Future()
            done.set_result(float(state["flight_max_abs"][0]))
            self.exchange._inflight = (done, [state["snap_in"], state["snap_out"]],
                                       [state["work_in"], state["work_out"]])
        return True

    def _check_exact(self, state: dict) -> None:
        """A rank state that does not fit this store (another run's, edited) is refused."""
        for i, side in enumerate(("in", "out")):
            for name, like in (("params", self.params[i]), ("touched", self.touched[i]), ("base", self.syncer.base[i]),
                               *((("snap", self.params[i]), ("work", self.params[i])) if "snap_in" in state else ())):
                got = state.get(f"{name}_{side}")
                if got is None or got.shape != like.shape or got.dtype != like.dtype:
                    raise InputError(f"the rank state beside the checkpoint does not fit this run ({name}_{side})")

    def write_vectors(self, path: str, words: list[str], vectors_of: Callable) -> str | None:
        self.flush()
        return write_on_root(self.comm, path, words, lambda: vectors_of(self.params[0]))
