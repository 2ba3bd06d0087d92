"""The round loop: one :class:`Trainer` over one parameter store (parallel/store.py).

Each round every rank takes its words of the round from its stream, the store trains them
and syncs the ranks; one small all-reduce sums the round (:class:`RoundTotals`) so that every
rank takes the same decisions from it: the divergence guard's verdict, a metrics line (and
an evaluation) when due, a checkpoint when due or asked for by SIGTERM/SIGUSR1. Where the
parameters live and how ranks combine them is the store's business, never the trainer's.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..core.config import TrainConfig
from ..core.errors import EXIT_DIVERGED, InputError, MpidweError
from ..core.balance import SpeedWeights, split_points
from ..core.guard import DivergenceGuard
from ..core.subwords import build_table
from ..core.vocab import keep_probabilities, negative_table
from ..parallel.comm import Comm
from ..parallel.store import Store, Work
from ..evaluate.suite import Evaluator, evaluation_ids
from ..io import charfile, checkpoint
from ..io.corpus import Corpus
from .plan import Plan, kernel_args, learning_rate, rng_seeds
from .resume import calibrated, calibrated_plan
from .progress import ProgressLog, bar_wanted
from .rundir import MetricsLog, thin_history, write_config
from .stream import EpochStream, ShardStream

GUARD_MIN_EXAMPLES = 1_000
# --sync-seconds: the speed of this round (from 0) sets the interval (round 0 compiles the kernel)
CALIBRATION_ROUND = 1


class TrainingDiverged(MpidweError):
    """The divergence guard tripped; raised on every rank at once (exit 3)."""

    exit_code = EXIT_DIVERGED
    agreed = True


@dataclass
class RoundTotals:
    """One round summed over ranks (one small all-reduce): every rank takes the same
    decisions from it."""

    words: int
    loss: float
    examples: float
    stop: bool                 # some rank got SIGTERM/SIGUSR1
    due: bool                  # rank 0's clock says a timed checkpoint is due
    log_due: bool = False      # rank 0's clock says a progress line is due
    speeds: np.ndarray | None = None   # --balance speed: every rank's words per compute second

    @classmethod
    def agree(cls, comm: Comm, mine: np.ndarray, speed: float | None = None) -> "RoundTotals":
        """``mine``: this rank's (words, loss, examples, stop, due, log_due)."""
        a = np.asarray(mine, dtype=np.float64)
        if speed is not None:          # each rank fills its own slot; the sum is the vector
            slots = np.zeros(comm.size)
            slots[comm.rank] = speed
            a = np.concatenate((a, slots))
        comm.allreduce_(a)
        return cls(int(a[0]), float(a[1]), float(a[2]), a[3] > 0, a[4] > 0, a[5] > 0,
                   a[6:].copy() if speed is not None else None)


@dataclass
class RunResult:
    w_in: np.ndarray
    w_out: np.ndarray
    words: list[str]
    metrics: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    words_total: int = 0
    stopped: bool = False          # stopped early by SIGTERM/SIGUSR1 after a checkpoint
    checkpoint: str | None = None
    config: dict | None = None       # the configuration as run (plan.resolved)


@dataclass
class Marks:
    """Where the run stood at its start, its last checkpoint and metrics line."""

    t_start: float
    words_at_start: int
    ckpt_words: int
    ckpt_time: float
    log_words: int
    log_seconds: float = 0.0


def keeps_rank_state(stop: bool, last: bool, due: bool) -> bool:
    """Whether a checkpoint keeps every rank's state beside it (Store.save_exact): a stop's,
    whose flush the uninterrupted run would not make there, so a resume goes on exactly; not
    the last round's, nor one due anyway (the uninterrupted run flushes there too, and its
    lossy ring and tiers go on from what the checkpoint holds)."""
    return stop and not last and not due


class Trainer:
    """The round loop over ``store``. Owns the run's :class:`checkpoint.TrainingState` (the
    store holds its parameters), this rank's stream and RNG states, the guard and the
    evaluator."""

    def __init__(self, cfg: TrainConfig, comm: Comm, corpus: Corpus, plan: Plan,
                 state: checkpoint.TrainingState, store: Store, log, stop):
        self.cfg, self.comm, self.corpus, self.plan, self.state = cfg, comm, corpus, plan, state
        self.store, self.log, self.stop = store, log, stop
        self.words = corpus.words
        self.rng = self._rng(state.rng_state[comm.rank])
        if cfg.loss == "hs" and corpus.n_words < 2:
            raise InputError(f"--loss hs needs a vocabulary of at least 2 words; {corpus.path} has {corpus.n_words}")
        # --subwords: every word's input rows (its own, then its n-grams'), rebuilt from the words
        self.subwords = build_table(self.words, cfg.minn, cfg.maxn, cfg.buckets) if cfg.subwords else None
        keep = keep_probabilities(corpus.counts, cfg.sample).astype(np.float32)
        self.args = kernel_args(cfg, plan, corpus.counts, keep, negative_table(corpus.counts), self.subwords)
        self.balanced = cfg.balance == "speed"
        position = state.progress.positions[0 if self.balanced else comm.rank]
        if self.balanced:
            self.stream = EpochStream(corpus, cfg.epochs, cfg.block_tokens, start=position)
            self.speeds = SpeedWeights(comm.size)
        else:
            self.stream = ShardStream(corpus, plan.shard, cfg.epochs, cfg.block_tokens, start=position)
        self.position = position      # this rank's stream position after the last round trained
        self._ahead: Work | None = None   # the next round's work, taken early for a store that looks ahead
        self.round_speed = 0.0        # this rank's words per compute second in the last round
        # --sync-seconds: the round after which the interval is set from the measured speed
        # (the second: the first pays for compiling); never again once a run has done it
        self.calibrate_after = (CALIBRATION_ROUND if cfg.sync_seconds > 0 and comm.size > 1
                                and not calibrated(plan) else None)
        self.guard = DivergenceGuard(cfg.guard_loss_ratio, cfg.guard_max_abs)
        self.checkpointed = state.progress.words_done > 0   # a checkpoint of this run exists (resumed or written)
        self.eval_ids, self.evaluator = self.make_evaluator()
        self.compute_s = 0.0
        self.eval_s = 0.0             # evaluating (rank 0) or waiting for it (the others)
        self.local_words = 0          # words this rank trained in this process
        # resumes so far: one more than the checkpoint's last record says
        self.restarts = (int(state.history[-1].get("restarts", 0)) + 1 if state.history
                         else int(state.progress.words_done > 0))
        self.last_rank_words: np.ndarray | None = None   # rank 0: per-rank words at the last record
        self.chars: charfile.StoredChars | None = None    # rank 0: the character model carried forward

    def _rng(self, saved: np.ndarray) -> np.ndarray:
        threads = self.plan.threads
        rng = np.ascontiguousarray(saved[:threads]).astype(np.uint64)
        if len(rng) < threads:  # more threads than when saved: seed the new ones
            rng = np.concatenate((rng, rng_seeds(self.cfg.seed + 7919, self.comm.rank, threads)[len(rng):]))
        return rng

    # ---------------------------------------------------------------- evaluation
    def make_evaluator(self):
        """(row ids, rank 0's Evaluator): the whole vocabulary, or for a store that serves
        only the rows asked for, the rows evaluation reads (every rank learns their ids)."""
        cfg, comm = self.cfg, self.comm
        ids = None
        if self.store.partial_rows:
            evaluating = cfg.eval_sim or cfg.eval_analogy or cfg.eval_pip
            ids = comm.on_root(evaluation_ids, cfg, self.words) if evaluating else np.zeros(0, np.int64)
        words = self.words if ids is None else [self.words[i] for i in ids]
        return ids, comm.on_root(Evaluator, cfg, words, self._pip_reference(), broadcast=False)

    def _pip_reference(self):
        """Computed once by all ranks (cached beside the corpus), before training."""
        if not self.cfg.eval_pip:
            return None
        from ..evaluate.sppmi import ReferenceSpec, reference_embedding

        c = self.cfg
        spec = ReferenceSpec(window=c.window, negatives=c.negative, dim=c.dim,
                             top_n=min(c.eval_restrict_vocab, len(self.words)))
        return reference_embedding(self.corpus.path, spec, self.comm, log=self.log)

    def word_vectors(self, rows: np.ndarray) -> np.ndarray:
        """The words' vectors from input rows: the rows, or (--subwords) the mean of each
        word's rows."""
        return rows if self.subwords is None else self.subwords.word_vectors(rows)

    def evaluate(self) -> dict:
        """Rank 0's evaluation dict (every rank calls this at the same point). The other
        ranks wait for it here, and the time counts as evaluation on every rank: waiting
        in the next sync instead, it showed as communication ("comm 67%")."""
        t = time.perf_counter()
        rows = self.store.rows(self.eval_ids)
        result = self.evaluator(self.word_vectors(rows)) if self.comm.is_root else {}
        self.comm.barrier(accounted=False)
        self.eval_s += time.perf_counter() - t
        return result

    # ---------------------------------------------------------------- one round
    def work(self, rnd: int) -> Work:
        """This rank's words of round ``rnd`` (taken early if the store looked ahead)."""
        if self._ahead is not None:
            work, self._ahead = self._ahead, None
            return work
        if not self.balanced:
            pieces = self.stream.take(int(self.plan.targets[rnd]))
            if not (self.store.plans_rounds or self.store.looks_ahead):
                return Work(pieces, float(self.comm.size), None)   # read while it trains
            pieces = list(pieces)            # the words are known before the round trains
            return Work(pieces, float(self.comm.size), self.stream.consumed)
        st = self.stream
        lo = st.consumed
        hi = st.total if rnd == self.plan.rounds - 1 else st.snap(int(self.plan.targets[rnd]))
        points = split_points(lo, hi, self.speeds.weights(), st.snap)
        a, b = points[self.comm.rank], points[self.comm.rank + 1]
        pieces = st.pieces(a, b)
        return Work(list(pieces) if self.store.plans_rounds else pieces, (hi - lo) / max(b - a, 1), hi)

    def train_round(self, rnd: int, bar) -> tuple[int, float, float]:
        """Train this rank's share of round ``rnd``; returns (words, loss sum, examples)."""
        work = self.work(rnd)
        if self.store.looks_ahead and rnd + 1 < self.plan.rounds:
            self._ahead = self.work(rnd + 1)
        on_piece = None if bar is None else (lambda n: bar.update(n * self.comm.size))
        args = self.args.at(self.state.progress.words_done, work.scale)
        done = self.store.train(work, self._ahead, self.rng, args, on_piece)
        self.local_words += done.words
        self.compute_s += done.compute_s
        self.round_speed = done.words / done.compute_s if done.words and done.compute_s > 0 else 0.0
        self.position = self.stream.consumed if work.position is None else work.position
        return done.words, done.loss, done.examples

    def check_divergence(self, rnd: int, totals: RoundTotals, max_abs: float) -> None:
        """Every rank holds the same synced parameters, so the verdict is the same on every
        rank; the max of ``max_abs`` over ranks keeps it so even if they drifted."""
        max_abs = self.comm.allreduce_scalar(max_abs, "max")
        loss = totals.loss / totals.examples if totals.examples else None
        if loss is not None and math.isfinite(loss) and totals.examples < GUARD_MIN_EXAMPLES:
            loss = None   # a handful of examples (a shard's tail) says nothing about the trend
        why = self.guard.check(loss, max_abs)
        if why is None:
            return
        cfg, p = self.cfg, self.comm.size
        hint = f"a smaller --lr (now {cfg.lr:g})"
        if p > 1:
            hint += (f", a smaller --max-local-lr (ranks train at {self.plan.scale} x --lr) or --sync-every "
                     f"(now {self.plan.resolved['sync_every']:,} words per rank), or fewer than {p} ranks")
        kept = "the last checkpoint is kept" if self.checkpointed else "no checkpoint was written yet"
        if p > 1 and self.plan.scale > 1:        # the same command either way (no checkpoint: a fresh start)
            kept += (f"; `--resume auto --max-local-lr {max(cfg.lr, self.plan.scale * cfg.lr / 2):g}` "
                     + ("continues from it" if self.checkpointed else "starts it again") + " at half the ranks' rate")
        raise TrainingDiverged(f"training diverged in round {rnd + 1}/{self.plan.rounds}: {why}; "
                               f"try {hint}; {kept}")

    def round(self, rnd: int, bar, ticker, marks: Marks) -> RoundTotals:
        """Train, sync and agree on round ``rnd``; moves the global progress on."""
        cfg, p = self.cfg, self.state.progress
        words, loss, examples = self.train_round(rnd, bar)
        max_abs = self.store.sync(rnd)
        due_by_time = (self.comm.is_root and cfg.checkpoint_minutes > 0
                       and time.perf_counter() - marks.ckpt_time >= 60 * cfg.checkpoint_minutes)
        mine = (words, loss, examples, self.stop.requested, due_by_time, ticker is not None and ticker.due())
        totals = RoundTotals.agree(self.comm, mine, self.round_speed if self.balanced else None)
        if self.balanced:
            self.stream.consumed = self.position
            self.speeds.update(totals.speeds)
        self.check_divergence(rnd, totals, max_abs)
        p.round, p.words_done = rnd + 1, p.words_done + totals.words
        p.lr = learning_rate(cfg, p.words_done, self.plan.words_total)
        if rnd == self.calibrate_after and p.round < self.plan.rounds:
            self.calibrate()
        return totals

    def calibrate(self) -> None:
        """--sync-seconds: the rest of the run at the interval the slowest rank trains in
        that time (a collective; the same plan on every rank)."""
        speeds = [s for s in self.comm.allgather(self.round_speed) if s > 0]
        if not speeds:
            return
        before = self.plan
        self.plan = calibrated_plan(before, self.comm, self.state.progress, self.position, min(speeds),
                                    self.cfg.sync_seconds)
        if self.comm.is_root:
            write_config(self.cfg.out, self.plan.resolved)
        if self.log and self.comm.is_root:
            done, every = self.state.progress.round, self.plan.resolved["sync_every"]
            self.log(f"--sync-seconds {self.cfg.sync_seconds:g}: the slowest rank trained {min(speeds):,.0f} words/s "
                     f"in round {done}: {every:,} words per rank between syncs from now on (was "
                     f"{before.resolved['sync_every']:,}), {self.plan.rounds - done} rounds left")

    # ---------------------------------------------------------------- the loop
    def run(self) -> RunResult:
        cfg, comm, state, plan = self.cfg, self.comm, self.state, self.plan
        p = state.progress
        metrics = MetricsLog(os.path.join(cfg.out, "metrics.jsonl") if comm.is_root else None)
        bar = _progress_bar(cfg, plan.words_total, p.words_done) if comm.is_root else None
        ticker = (ProgressLog(cfg.log_seconds, plan.words_total, p.words_done)
                  if comm.is_root and bar is None and cfg.log_seconds > 0 else None)
        run_loss = np.zeros(2)                 # loss sum, examples since this process started
        window = np.zeros(2)                   # loss sum, examples since the last metrics line
        now = time.perf_counter()
        marks = Marks(now, p.words_done, p.words_done, now, p.words_done)
        ckpt_path, stopped = None, False
        finished = p.round >= plan.rounds      # resumed from the run's final checkpoint
        try:
            self.say_compiling(plan.rounds - p.round)
            first = rnd = p.round
            while rnd < self.plan.rounds:       # (--sync-seconds may re-plan the rounds after one)
                before = p.words_done
                totals = self.round(rnd, bar, ticker, marks)
                window += (totals.loss, totals.examples)
                run_loss += (totals.loss, totals.examples)
                if rnd == first and rnd < self.plan.rounds - 1:     # in place of a line due now
                    self.after_first_round(ticker, run_loss)
                elif totals.log_due:
                    self.progress_line(ticker, run_loss)
                last = rnd == self.plan.rounds - 1
                # an evaluation at the first round past every multiple of --eval-every: where
                # it falls (its flush changes a run in tiers) depends on the round alone, so a
                # resumed run evaluates where the run it resumes did
                due_eval = bool(cfg.eval_every and p.words_done // cfg.eval_every > before // cfg.eval_every) or last
                if (rnd + 1) % cfg.log_every == 0 or due_eval or totals.stop:
                    self.log_metrics(metrics, bar, window, marks, due_eval)
                due = totals.due or bool(cfg.checkpoint_every and p.words_done - marks.ckpt_words >= cfg.checkpoint_every)
                if last or totals.stop or due:
                    if keeps_rank_state(totals.stop, last, due):
                        self.store.save_exact(os.path.join(cfg.out, "checkpoints"), p.round)
                    ckpt_path = self.save_checkpoint(complete=last)
                    marks.ckpt_words, marks.ckpt_time = p.words_done, time.perf_counter()
                if totals.stop and not last:
                    stopped = True
                    break
                rnd += 1
        finally:
            if bar is not None:
                bar.close()
            metrics.close()
        seconds = time.perf_counter() - marks.t_start
        hosted = self.store.host()
        if hosted is not None:
            state.w_in, state.w_out = hosted
        self.store.close()
        if finished:
            self.already_finished()
        else:
            self.finish(stopped, ckpt_path, p.words_done - marks.words_at_start, seconds)
        return RunResult(state.w_in, state.w_out, self.words, state.history, seconds, p.words_done,
                         stopped, ckpt_path, self.plan.resolved)

    # ---------------------------------------------------------------- log, checkpoint, end
    def say_compiling(self, rounds_left: int) -> None:
        """Rank 0: why the first round will be slow, when it will: numba compiles the kernel
        for this mode and --dim on its first use on a machine, then loads it from its disk
        cache (kernels/cpu.py kernel_ready looks there first)."""
        if not (self.log and rounds_left > 0 and self.plan.kernel == "numba"):
            return
        from ..kernels.cpu import kernel_ready

        if not kernel_ready(self.args, self.cfg.dim):
            self.log("the first round compiles the training kernel, which numba has not cached for this mode and "
                     "--dim (once per machine: up to a minute); the progress rate and ETA leave that round out")

    def after_first_round(self, ticker: ProgressLog | None, run_loss: np.ndarray) -> None:
        """Every rank: the progress line measures from the end of the first round (a gather,
        made by every rank whether or not rank 0 logs lines)."""
        per_rank = self.comm.gather((self.compute_s, self.store.stats.comm_seconds, self.eval_s))
        if ticker is not None:
            ticker.rebase(self.state.progress.words_done, run_loss[0], run_loss[1],
                          np.array(per_rank, dtype=np.float64))

    def progress_line(self, ticker: ProgressLog | None, run_loss: np.ndarray) -> None:
        """Every rank: gather compute and communication seconds; rank 0 logs the line."""
        per_rank = self.comm.gather((self.compute_s, self.store.stats.comm_seconds, self.eval_s))
        if ticker is not None:
            p = self.state.progress
            ticker.emit(p.words_done, run_loss[0], run_loss[1], p.lr, np.array(per_rank, dtype=np.float64))

    def log_metrics(self, metrics: MetricsLog, bar, window: np.ndarray, marks: Marks, due_eval: bool) -> None:
        """A metrics line (with an evaluation when ``due_eval``): every rank gathers, rank 0 writes."""
        p = self.state.progress
        elapsed = time.perf_counter() - marks.t_start
        eval_before = self.eval_s
        record = self.metrics_record(window, elapsed, marks, due_eval)
        if self.comm.is_root:
            metrics.write(record)
            self.state.history.append(record)
            thin_history(self.state.history)
            _show(bar, record)
            if due_eval and self.log and record.get("eval"):
                self.log(evaluation_line(record, self.plan.words_total, self.eval_s - eval_before, self.comm.size))
        marks.log_words, marks.log_seconds = p.words_done, elapsed
        window[:] = 0

    def metrics_record(self, window, elapsed: float, marks: Marks, due_eval: bool) -> dict | None:
        """Gather every rank's timings; rank 0 builds the record (others get None)."""
        s, store = self.store.stats, self.store
        if due_eval:
            store.flush()         # its bytes and seconds belong to the record that evaluates
        per_rank = self.comm.gather((self.comm.stats.bytes_sent + store.extra_comm_bytes(), self.comm.stats.seconds,
                                     self.compute_s, s.comm_seconds, s.array_seconds, s.bytes_sent, self.local_words,
                                     store.report()))
        evaluation = self.evaluate() if due_eval else None    # every rank: the sharded store gathers rows
        if not self.comm.is_root:
            return None
        p, cfg = self.state.progress, self.cfg
        rank_words = np.array([r[6] for r in per_rank], dtype=np.float64)
        since = rank_words - (self.last_rank_words if self.last_rank_words is not None else 0)
        self.last_rank_words = rank_words
        span = max(elapsed - marks.log_seconds, 1e-9)
        record = {
            "time": round(time.time(), 3), "restarts": self.restarts,
            "step": p.round, "rounds": self.plan.rounds, "words": p.words_done,
            "epoch": p.words_done / max(self.corpus.n_tokens, 1),
            # null when no rank trained an example since the last line (a 0 would read as a fit)
            "loss": window[0] / window[1] if window[1] else None, "lr": p.lr, "sync": cfg.sync,
            "lr_scale": self.plan.scale,
            # since the last line (what the machine does now) and since the start
            "words_per_s": (p.words_done - marks.log_words) / span,
            "words_per_s_run": (p.words_done - marks.words_at_start) / max(elapsed, 1e-9),
            # each rank's own words per wall second since the last line (a slow rank shows here)
            "words_per_s_rank": [round(float(w) / span, 1) for w in since],
            "words_rank": [int(w) for w in rank_words],     # each rank's words in this process
            **({"balance_weights": [round(float(w), 3) for w in self.speeds.weights()]} if self.balanced else {}),
            "seconds": elapsed, "syncs": s.syncs,
            # --sync auto: how many (sync, matrix) pairs went dense, the rest sparse
            "sync_dense": s.dense_syncs,
            # the syncs' latency steps: every collective's message rounds by its usual
            # algorithm (parallel/comm.py latency_steps), the same on every rank
            "sync_steps": s.steps,
            "comm_bytes": [int(r[0]) for r in per_rank],
            "comm_seconds": [round(r[1], 4) for r in per_rank],
            "compute_seconds": [round(r[2], 4) for r in per_rank],
            # the syncs' time so far, split into communication and their own array work
            "sync_comm_seconds": [round(r[3], 4) for r in per_rank],
            "sync_array_seconds": [round(r[4], 4) for r in per_rank],
            "sync_bytes": [int(r[5]) for r in per_rank],
            **store.settings(),
            **{key: [r[7][key] for r in per_rank] for key in per_rank[0][7]},
        }
        if due_eval:
            record["eval"] = evaluation
        return record

    def save_checkpoint(self, complete: bool) -> str | None:
        """Gather every rank's RNG state and position into the state; the store writes it."""
        gathered = self.comm.gather((self.rng.copy(), self.position))
        state = self.state
        if self.comm.is_root:
            width = max(len(g[0]) for g in gathered)
            state.rng_state = np.zeros((self.comm.size, width), dtype=np.uint64)
            for r, (st, _) in enumerate(gathered):
                state.rng_state[r, :len(st)] = st
            state.progress.positions = [int(g[1]) for g in gathered]
        ck = checkpoint.Checkpoint(state=state, words=self.words, counts=self.corpus.counts,
                                   config=self.plan.resolved, corpus_id=self.corpus.corpus_id,
                                   corpus_path=self.corpus.path, complete=complete)
        path = self.store.save(os.path.join(self.cfg.out, "checkpoints"), ck, self.cfg.keep_checkpoints)
        self.checkpointed = True
        if self.chars is not None and path:
            try:
                charfile.carry_char_model(self.chars, replace(ck, path=path))
            except InputError as e:       # optional: the checkpoint is written and stays usable
                print(f"warning: the character model was not carried to {path}: {e}", file=sys.stderr)
        return path

    def carry_chars(self, origin: str | None) -> None:
        """Rank 0: a character model beside ``origin``, the checkpoint this run continues
        (--resume, --init-from, the step before a --follow step), is copied beside every
        checkpoint the run writes, naming the one it was fitted on (io/charfile.py). Copied,
        not refitted: a fit costs about a minute of CPU (docs/lab/running-notes.md)."""
        if not (self.comm.is_root and origin and os.path.exists(checkpoint.char_model_path(origin))):
            return
        ck = checkpoint.load(origin, verify=False, params=False)
        stored = charfile.load_char_model(ck, warn=self.log, say_carried=False)
        if stored is None or (stored.matrix != "input" and ck.config.get("loss", "ns") != self.cfg.loss):
            return                  # unusable, or fitted to output rows that mean other things now
        self.chars = stored
        if self.log:
            self.log(f"carrying the character model of {origin} to this run's checkpoints (fitted on "
                     f"{stored.fitted_on['checkpoint']}; refit it with inspect RUN fit-chars)")

    def finish(self, stopped: bool, ckpt_path: str | None, words: int, seconds: float) -> None:
        """Rank 0 reports; the store exports ``vectors.txt``; every rank learns whether that
        failed."""
        cfg, log, comm = self.cfg, self.log, self.comm
        if log:
            if stopped:
                why = "Ctrl-C" if getattr(self.stop, "interrupted", False) else "SIGTERM/SIGUSR1"   # a stand-in may lack it
                log(f"stop requested ({why}): wrote {ckpt_path}; resume with --resume auto")
            else:
                log(f"trained {words:,} words in {seconds:.1f} s ({words / max(seconds, 1e-9):,.0f} words/s, "
                    f"{comm.size} rank(s) x {self.plan.threads} thread(s), sync {cfg.sync}, lr x "
                    f"{self.plan.scale}); checkpoint {ckpt_path}")
        if not cfg.export or stopped:
            return
        vectors = os.path.join(cfg.out, "vectors.txt")
        failed = self.store.write_vectors(vectors, self.words, self.word_vectors)
        comm.on_root(self._exported, vectors, failed, ckpt_path, broadcast=False)

    def already_finished(self) -> None:
        """A resumed run with nothing left to train: say so, and how to train more."""
        if self.log:
            p, epochs = self.state.progress, self.cfg.epochs
            self.log(f"nothing to train: the run in {self.cfg.out} is finished ({p.words_done:,} words, "
                     f"--epochs {epochs}); give --epochs {epochs + 1} or more to train further")

    def _exported(self, vectors: str, failed: str | None, ckpt_path: str | None) -> None:
        if failed is not None:     # the model is safe in the checkpoint: say how to get it
            raise InputError(f"training finished and {ckpt_path} holds the model, but writing the vectors "
                             f"failed ({failed}); export them later with python -m mpidwe.inspect "
                             f"{self.cfg.out} export -o FILE")
        if self.log:
            self.log(f"wrote {vectors}")


def evaluation_line(record: dict, words_total: int, seconds: float, ranks: int) -> str:
    """The log line of one evaluation: its scores, when and how long (the other ranks wait)."""
    scores = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                       for k, v in sorted((record.get("eval") or {}).items()))
    wait = f"; the other {ranks - 1} rank(s) waited for it" if ranks > 1 else ""
    return (f"evaluation at {100 * record['words'] / max(words_total, 1):.1f}% ({record['words']:,} words, "
            f"{seconds:.1f} s on rank 0{wait}): {scores or 'no scores'}")


def _show(bar, record: dict) -> None:
    if bar is not None:
        bar.n = record["words"]
        bar.set_postfix(_postfix(record), refresh=False)
        bar.refresh()


def _postfix(record: dict) -> dict:
    out = {"loss": "-" if record["loss"] is None else f"{record['loss']:.4f}", "lr": f"{record['lr']:.5f}"}
    for key, value in (record.get("eval") or {}).items():
        if isinstance(value, (int, float)):
            out[key] = f"{value:.3f}"
    return out


def _progress_bar(cfg: TrainConfig, total: int, initial: int = 0):
    if not bar_wanted(cfg.progress):     # batch logs get plain lines instead (train/progress.py)
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="w", unit_scale=True, desc="train", dynamic_ncols=True,
                mininterval=0.5, file=sys.stderr)
