"""``mpidwe.train.run``: the one place that wires a training run together.

Every rank opens the corpus, fixes the plan (train/plan.py), loads the state it resumes from
or starts a fresh one (train/resume.py, train/warm.py), builds the parameter store that holds
it (parallel/store.py: replicated, sharded or on the device) and hands both to the round loop
(train/loop.py). Rank 0 holds the run directory's lock for the whole run (train/rundir.py).
"""

from __future__ import annotations

import os
from ..core.config import TrainConfig
from ..core.errors import EXIT_USAGE, MpidweError
from ..parallel import deathwatch
from ..parallel.comm import Comm
from ..parallel.store import Store, StoreSetup
from ..io.corpus import Corpus
from .loop import RunResult, Trainer
from .plan import Compute, Plan, choose_compute, make_plan, resolve_store, size_warnings
from .resume import (adopt_checkpoint_settings, continued_plan, fresh_state, load_state, needs_replan,
                     refuse_unresumable)
from .rundir import _check_run_dir, _start_run_dir, _take_run_dir, remove_if_empty, take_back
from .warm import warm_start

DEMO_DIR = "demo"


# ------------------------------------------------------------------ the run
def ensure_demo_corpus(comm: Comm, directory: str = DEMO_DIR) -> str:
    """The embedded default: demo/corpus.h5, generated and preprocessed if missing."""
    from .. import preprocess, synth
    from ..core.config import PreprocessConfig, SynthConfig

    path = os.path.join(directory, "corpus.h5")
    exists = comm.bcast(os.path.exists(path) if comm.is_root else None)
    if exists:
        return path
    if comm.is_root:
        comm.agree(lambda: synth.write_demo(SynthConfig(output=directory, force=True))
                   if not os.path.exists(os.path.join(directory, "demo.txt")) else None)
    else:
        comm.agree(lambda: None)
    preprocess.run(PreprocessConfig(inputs=(os.path.join(directory, "demo.txt"),), output=path, force=True),
                   comm, log=print if comm.is_root else None)
    return path


class StopRequest:
    """SIGTERM / SIGUSR1 (Slurm's time-limit and preemption warnings) and a first Ctrl-C
    (SIGINT) set a flag; the trainer checkpoints at the next sync point and exits (75 for
    requeue after SIGTERM/SIGUSR1, 130 after Ctrl-C). A second Ctrl-C stops at once, without
    a checkpoint (KeyboardInterrupt). SIGINT is left alone where it was ignored (nohup)."""

    SIGNALS = ("SIGTERM", "SIGUSR1", "SIGINT")

    def __init__(self):
        self.requested = False
        self.interrupted = False       # the request came from Ctrl-C (SIGINT)
        self._old = {}

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                sig = getattr(signal, name)
                if sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
                    continue
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        import signal

        from ..parallel.comm import launcher_rank

        if signum == signal.SIGINT:
            if self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            if launcher_rank() == 0:     # os.write: the handler may interrupt a write to sys.stderr
                os.write(2, b"interrupted: a checkpoint is written at the next sync, then the run stops "
                            b"(Ctrl-C again stops at once, without one)\n")
        self.requested = True

    def ignore_from_now(self) -> None:
        """The run is over and its outputs are written: from now on until the process ends
        (MPI's shutdown included), SIGTERM/SIGUSR1 are ignored, not restored when the ``with``
        block ends. Ignored, not handled: Python puts its own handlers back to the default
        (termination) at interpreter exit, before mpi4py finalizes MPI."""
        import signal

        for sig in self._old:
            signal.signal(sig, signal.SIG_IGN)
        self._old = {}

    def __exit__(self, *exc):
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)


def run(cfg: TrainConfig, comm: Comm, *, log=print, stop: StopRequest | None = None,
        given=None) -> RunResult:
    """Train on every rank of ``comm``. ``stop`` (installed by ``main`` as early as possible)
    turns SIGTERM/SIGUSR1 into a checkpoint and a clean exit. ``given``: the names of the
    options the user set; a resumed run takes the others from its checkpoint (None: none,
    the run is ``cfg`` as it is)."""
    log = log if comm.is_root else None
    cfg = adopt_checkpoint_settings(cfg, given, comm, log)
    compute = choose_compute(cfg, comm)       # before the corpus: --device cuda without a GPU fails at once
    if not cfg.corpus and cfg.resume:     # a resume that cannot go on writes no demo corpus first
        comm.on_root(refuse_unresumable, cfg)
    corpus_path = cfg.corpus or ensure_demo_corpus(comm)
    corpus = comm.agree(Corpus, corpus_path, cfg.segments)
    try:
        if cfg.verify_corpus:       # every rank its share of the chunks; a bad one stops all
            comm.agree(corpus.verify, comm.rank, comm.size)
        if stop is not None:
            return _train(cfg, comm, corpus, log, stop, compute)
        with StopRequest() as own:
            return _train(cfg, comm, corpus, log, own, compute)
    finally:
        corpus.close()


def store_class(cfg: TrainConfig, plan: Plan) -> type[Store]:
    """Where this run's parameters live: spread over the ranks (--store sharded), on the
    torch kernel's device, or replicated in every rank's memory."""
    if cfg.store == "blocks":
        from ..parallel.blocks import BlockStore

        return BlockStore
    if cfg.store == "sharded":
        from ..parallel.sharded import ShardedStore

        return ShardedStore
    if plan.kernel in ("torch", "triton"):     # triton: the torch kernel's store, KernelArgs.fused
        from ..parallel.device import DeviceStore

        return DeviceStore
    from ..parallel.replicated import ReplicatedStore

    return ReplicatedStore


def _train(cfg: TrainConfig, comm: Comm, corpus: Corpus, log, stop: StopRequest, compute: Compute) -> RunResult:
    cfg, store_choice = resolve_store(cfg, comm.size, corpus, compute)      # --store auto: which store
    plan = make_plan(cfg, comm, corpus, compute, store_choice)
    lock = comm.on_root(_take_run_dir, cfg, log, broadcast=False)
    kind = store_class(cfg, plan)
    bad_input = False
    try:
        state, record, origin = load_state(cfg, plan, comm, corpus, kind, log)
        history = None if state is None else state.history
        exact = state is not None and not needs_replan(state.progress, plan, comm.size)
        if state is not None:
            plan = continued_plan(cfg, plan, comm, corpus, state, record, log)
        comm.on_root(_check_run_dir, cfg, state is not None)
        if state is None:
            # a warm start writes the carried rows into the whole matrices
            state = fresh_state(cfg, plan, comm, kind, corpus.n_words, None if cfg.init_from else corpus.counts)
            if cfg.init_from:
                plan = warm_start(cfg, plan, comm, corpus, state, log)
                origin = plan.resolved["init_from"]["path"]
        setup = StoreSetup(cfg, plan.scale, plan.device, corpus.n_words, plan.threads, plan.resolved["sync_tiers"],
                           corpus.counts, plan.resolved.get("ring_pieces", 1), plan.kernel)
        store = kind(comm, state.w_in, state.w_out, setup)
        if store.keeps_own_rows:           # the whole matrices go: the store copied its rows
            state.w_in = state.w_out = None
        trainer = Trainer(cfg, comm, corpus, plan, state, store, log, stop)
        if exact and trainer.store.restore_exact(os.path.dirname(origin), state.progress.round) and log:
            log("resuming exactly where the stop left every rank (its waiting changes, residuals and exchange)")
        trainer.carry_chars(origin)
        comm.on_root(_start_run_dir, cfg, plan.resolved, history, log)
        if log and plan.binding:
            log(plan.binding)
        for line in size_warnings(corpus.n_tokens, corpus.n_words, comm.size) if log else ():
            log(line)
        comm.barrier()    # the old marker is gone before any watcher starts
        deathwatch.start(cfg.out, comm.rank, comm.size, hint=f"; resume with --resume auto --out {cfg.out}")
        return trainer.run()
    except MpidweError as e:
        bad_input = e.exit_code == EXIT_USAGE
        raise
    finally:
        if lock is not None:
            lock.release()
            if bad_input:
                take_back(cfg, lock)       # a failed start: no config.json where nothing trained
            remove_if_empty(lock.made)     # a failed start: no empty RUN_DIR is left
