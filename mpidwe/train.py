"""``python -m mpidwe.train``: the one place that wires corpus, kernels, sync and comm.

Every rank streams its shard of the corpus block by block (read ahead in a background
thread), trains SGNS or CBOW on its own copy of the parameters for ``--sync-every`` words,
then all ranks combine their changes (mpidwe.sync). The number of sync rounds is fixed
before training from the largest shard, so every rank makes the same collectives in the
same order; each rank spreads its own shard evenly over those rounds.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from . import __version__
from .comm import Comm, run_main
from .config import TrainConfig, parse_command, to_dict
from . import checkpoint
from .corpus import Corpus, Shard, prefetch
from .evaluate.vectors import write_word2vec
from .kernels.common import learning_rate as kernel_learning_rate
from .fsutil import atomic_write
from .errors import EXIT_DIVERGED, EXIT_REQUEUE, ConfigError, InputError, MpidweError
from .sync import Synchronizer
from .vocab import keep_probabilities, negative_table

PROG = "python -m mpidwe.train"
DEMO_DIR = "demo"


class TrainingDiverged(MpidweError):
    """Loss or parameters became NaN/inf; raised on every rank at once."""

    exit_code = EXIT_DIVERGED
    agreed = True


# ------------------------------------------------------------------ pure helpers
def init_params(vocab_size: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """word2vec initialisation: input uniform in [-0.5/dim, 0.5/dim), output zeros. The same
    seed gives the same matrices on every rank, so no broadcast is needed."""
    rng = np.random.default_rng(seed)
    w_in = ((rng.random((vocab_size, dim), dtype=np.float32) - 0.5) / dim).astype(np.float32)
    return np.ascontiguousarray(w_in), np.zeros((vocab_size, dim), dtype=np.float32)


def rng_seeds(seed: int, rank: int, threads: int) -> np.ndarray:
    """One 64-bit LCG state per kernel thread, distinct per (seed, rank, thread)."""
    ss = np.random.SeedSequence([seed, rank])
    return ss.generate_state(threads, dtype=np.uint64)


def count_rounds(shard_tokens: list[int], epochs: int, sync_every: int) -> int:
    """Sync rounds for the whole run: enough that no rank trains more than ``sync_every``
    words between two syncs. Identical on every rank."""
    return max(1, math.ceil(max(shard_tokens) * epochs / sync_every))


def auto_sync_every(vocab_size: int) -> int:
    """Default words per rank between syncs: short enough that summed updates of frequent
    rows do not go stale on a small vocabulary (measured in docs/sync-modes.md)."""
    return int(min(250_000, max(10_000, 20 * vocab_size)))


def round_targets(local_total: int, rounds: int) -> np.ndarray:
    """Cumulative local words at the end of each round (the last is ``local_total``)."""
    return (np.arange(1, rounds + 1, dtype=np.int64) * local_total) // rounds


def learning_rate(cfg: TrainConfig, words_done: int, words_total: int) -> float:
    """The configured rate at a point of global progress (the kernels' own schedule)."""
    return kernel_learning_rate(cfg.lr, cfg.lr * cfg.min_lr_ratio, words_done, 1, 0, max(words_total, 1))


def resolve_threads(cfg: TrainConfig, comm: Comm) -> int:
    if cfg.threads:
        return cfg.threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // comm.node_size)


def _nvidia_gpus_visible() -> bool:
    """Cheap check before importing torch: the NVIDIA driver lists its GPUs in /proc."""
    try:
        return bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


def resolve_device(cfg: TrainConfig, comm: Comm) -> str:
    """``cpu`` or ``cuda:N`` with N = node-local rank modulo the GPUs on the node."""
    if cfg.device == "cpu" or (cfg.device == "auto" and not _nvidia_gpus_visible()):
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        if cfg.device == "auto":
            return "cpu"
        raise ConfigError("--device cuda: no CUDA device is available on this node")
    return f"cuda:{comm.node_rank % torch.cuda.device_count()}"


class Backend:
    """Where the update kernel runs. ``numba`` trains the host arrays in place; ``torch``
    trains a copy on the device (uploaded at the start of a round, downloaded before the
    sync, which always combines host arrays)."""

    def __init__(self, kind: str, device: str, w_in: np.ndarray, w_out: np.ndarray, touched: list[np.ndarray]):
        self.kind, self.device = kind, device
        self.host = (w_in, w_out, *touched)
        if kind == "numba":
            from .kernels import cpu

            self._train = cpu.train_block
            self.arrays = self.host
        else:
            import torch

            from .kernels import torch_kernel

            self._train = torch_kernel.train_block
            self.arrays = tuple(torch.from_numpy(a).to(device) for a in self.host) if device != "cpu" else self.host

    def begin_round(self) -> None:
        if self.arrays is not self.host:
            import torch

            for dev, host in zip(self.arrays, self.host):
                dev.copy_(torch.from_numpy(host))

    def end_round(self) -> None:
        if self.arrays is not self.host:
            for dev, host in zip(self.arrays, self.host):
                host[:] = dev.cpu().numpy()

    def train(self, tokens, starts, keep, table, rng_state, **kw):
        w_in, w_out, t_in, t_out = self.arrays
        return self._train(w_in, w_out, tokens, starts, keep, table, rng_state, touched_in=t_in,
                           touched_out=t_out, **kw)


def resolve_kernel(cfg: TrainConfig, device: str) -> str:
    if cfg.kernel == "auto":
        return "numba" if device == "cpu" else "torch"
    if cfg.kernel == "numba" and device != "cpu":
        raise ConfigError("--kernel numba runs on the CPU only; use --kernel torch (or auto) with CUDA")
    return cfg.kernel


# ------------------------------------------------------------------ data stream
class ShardStream:
    """The shard's sentences, epoch after epoch, handed out in pieces that end at sentence
    boundaries once a requested number of words is reached."""

    def __init__(self, corpus: Corpus, shard: Shard, epochs: int, block_tokens: int, start: int = 0):
        self.corpus, self.shard, self.epochs, self.block_tokens = corpus, shard, epochs, block_tokens
        self._held: tuple[np.ndarray, np.ndarray] | None = None
        self.consumed = start
        self._blocks = self._all_blocks(start)

    def _all_blocks(self, start: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        n = self.shard.n_tokens
        if n == 0:
            return
        first_epoch, offset = divmod(start, n)
        for epoch in range(first_epoch, self.epochs):
            begin = self.shard.token_start + offset if epoch == first_epoch and offset else None
            for tokens, starts, _ in prefetch(self.corpus.iter_blocks(self.shard, self.block_tokens, begin)):
                yield tokens, starts

    def take(self, until: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Pieces until ``consumed >= until`` (the last piece ends at the first sentence
        boundary at or after it)."""
        while self.consumed < until:
            if self._held is None:
                try:
                    self._held = next(self._blocks)
                except StopIteration:
                    return
            tokens, starts = self._held
            need = until - self.consumed
            if len(tokens) <= need:
                piece, self._held = (tokens, starts), None
            else:
                k = int(np.searchsorted(starts, need, side="left"))
                if k >= len(starts):
                    piece, self._held = (tokens, starts), None
                else:
                    cut = int(starts[k])
                    piece = (tokens[:cut], starts[:k])
                    self._held = (tokens[cut:], starts[k:] - cut)
            self.consumed += len(piece[0])
            if len(piece[0]):
                yield piece


# ------------------------------------------------------------------ outputs
class MetricsLog:
    """JSON lines in RUN_DIR/metrics.jsonl, appended and flushed line by line (rank 0)."""

    def __init__(self, path: str | None):
        self._fh = open(path, "a", encoding="utf-8") if path else None

    def write(self, record: dict) -> None:
        if self._fh:
            self._fh.write(json.dumps(record, sort_keys=True) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh:
            self._fh.close()


# ------------------------------------------------------------------ the run
def ensure_demo_corpus(comm: Comm, directory: str = DEMO_DIR) -> str:
    """The embedded default: demo/corpus.h5, generated and preprocessed if missing."""
    from . import preprocess, synth
    from .config import PreprocessConfig, SynthConfig

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


class StopRequest:
    """SIGTERM / SIGUSR1 (Slurm's time-limit and preemption warnings) set a flag; the
    trainer checkpoints at the next sync point and exits with EXIT_REQUEUE."""

    SIGNALS = ("SIGTERM", "SIGUSR1")

    def __init__(self):
        self.requested = False
        self._old = {}

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                sig = getattr(signal, name)
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        self.requested = True

    def __exit__(self, *exc):
        import signal

        for sig, old in self._old.items():
            signal.signal(sig, old)


def run(cfg: TrainConfig, comm: Comm, *, log=print, stop: StopRequest | None = None) -> RunResult:
    """Train on every rank of ``comm``. ``stop`` (installed by ``main`` as early as possible)
    turns SIGTERM/SIGUSR1 into a checkpoint and a clean exit."""
    log = log if comm.is_root else None
    corpus_path = cfg.corpus or ensure_demo_corpus(comm)
    corpus = comm.agree(Corpus, corpus_path)
    try:
        if stop is not None:
            return _train(cfg, comm, corpus, log, stop)
        with StopRequest() as own:
            return _train(cfg, comm, corpus, log, own)
    finally:
        corpus.close()


def _prepare_run_dir(cfg: TrainConfig, resuming: bool) -> None:
    """Never mix two runs in one RUN_DIR: a fresh start needs an empty one, ``--force``
    (which clears the old metrics and checkpoints) or ``--resume auto`` (which found none)."""
    os.makedirs(cfg.out, exist_ok=True)
    metrics = os.path.join(cfg.out, "metrics.jsonl")
    old = checkpoint.list_checkpoints(os.path.join(cfg.out, "checkpoints"))
    if resuming or not (old or os.path.exists(metrics)):
        return
    if not (cfg.force or cfg.resume == "auto"):
        raise InputError(f"{cfg.out} already holds a run; continue it with --resume auto, start over "
                         f"with --force, or choose another --out")
    for path in old + [metrics]:
        if os.path.exists(path):
            os.unlink(path)


def _check_resume(resolved: dict, ck: checkpoint.Checkpoint, corpus: Corpus, world: int) -> None:
    """Refuse a checkpoint that cannot continue this run, naming the mismatch."""
    if ck.corpus_id != corpus.corpus_id:
        raise InputError(f"cannot resume from {ck.path}: it was trained on another corpus "
                         f"({ck.config.get('corpus')}, id {ck.corpus_id[:12]}) than {corpus.path} "
                         f"(id {corpus.corpus_id[:12]})")
    for key in RESUME_MUST_MATCH:
        old, new = ck.config.get(key), resolved.get(key)
        if old != new:
            raise InputError(f"cannot resume from {ck.path}: --{key.replace('_', '-')} is {new!r} "
                             f"but the checkpoint has {old!r}")
    if ck.progress.world_size != world:
        raise InputError(f"cannot resume from {ck.path}: it was written by {ck.progress.world_size} "
                         f"rank(s), this job has {world} (shards and RNG streams are per rank; "
                         f"rerun with -np {ck.progress.world_size})")


# options that change what a resumed run would compute; the rest (logging, checkpoint and
# evaluation cadence, progress bar) may change between runs
RESUME_MUST_MATCH = ("model", "dim", "window", "negative", "sample", "lr", "min_lr_ratio", "epochs",
                     "seed", "sync", "sync_every", "average_rows", "block_tokens",
                     "kernel", "shared_negatives")


def _load_resume(cfg: TrainConfig, resolved: dict, comm: Comm, corpus: Corpus,
                 log) -> checkpoint.Checkpoint | None:
    """Rank 0 finds, loads and checks the checkpoint; everything is broadcast."""
    def find():
        if not cfg.resume:
            return None
        if cfg.resume == "auto":
            ck = checkpoint.latest_valid(os.path.join(cfg.out, "checkpoints"), warn=log)
            if ck is None:
                return None
        else:
            ck = checkpoint.load(cfg.resume)
        _check_resume(resolved, ck, corpus, comm.size)
        return ck

    ck = comm.agree(find) if comm.is_root else comm.agree(lambda: None)
    meta = comm.bcast(None if ck is None else (ck.progress, ck.metrics, ck.path, ck.rng_state, ck.complete))
    if meta is None:
        return None
    if not comm.is_root:
        v = corpus.n_words
        ck = checkpoint.Checkpoint(
            w_in=np.empty((v, cfg.dim), np.float32), w_out=np.empty((v, cfg.dim), np.float32),
            words=[], counts=np.zeros(0), config={}, corpus_id=corpus.corpus_id, corpus_path=corpus.path,
            progress=meta[0], rng_state=meta[3], metrics=meta[1], path=meta[2], complete=meta[4])
    comm.bcast_array_(ck.w_in)
    comm.bcast_array_(ck.w_out)
    return ck


def _train(cfg: TrainConfig, comm: Comm, corpus: Corpus, log, stop: StopRequest) -> RunResult:
    device = comm.agree(resolve_device, cfg, comm)
    kernel = comm.agree(resolve_kernel, cfg, device)
    threads = resolve_threads(cfg, comm)
    counts = corpus.counts
    words = corpus.words
    shard = corpus.shard(comm.rank, comm.size)
    shard_sizes = comm.allgather(shard.n_tokens)
    sync_every = cfg.sync_every or auto_sync_every(len(words))
    rounds = count_rounds(shard_sizes, cfg.epochs, sync_every)
    targets = round_targets(shard.n_tokens * cfg.epochs, rounds)
    words_total = corpus.n_tokens * cfg.epochs
    ckpt_dir = os.path.join(cfg.out, "checkpoints")

    resolved = dict(to_dict(cfg), corpus=corpus.path, corpus_id=corpus.corpus_id, device=device, kernel=kernel,
                    sync_every=sync_every,
                    threads=threads, ranks=comm.size, rounds=rounds, words_total=words_total,
                    vocab_size=len(words), mpi=comm.mpi_library, version=__version__)
    resumed = _load_resume(cfg, resolved, comm, corpus, log)
    if comm.is_root:
        comm.agree(_prepare_run_dir, cfg, resumed is not None)
        with atomic_write(os.path.join(cfg.out, "config.json"), "w", encoding="utf-8") as fh:
            fh.write(json.dumps(resolved, indent=2, sort_keys=True))
        if log:
            log(f"{PROG} {__version__}: " + json.dumps(resolved, sort_keys=True))
    else:
        comm.agree(lambda: None)
    if resumed is not None:
        w_in, w_out = resumed.w_in, resumed.w_out
        rng_state = np.ascontiguousarray(resumed.rng_state[comm.rank][:threads]).astype(np.uint64)
        if len(rng_state) < threads:  # more threads than when saved: seed the new ones
            rng_state = np.concatenate((rng_state, rng_seeds(cfg.seed + 7919, comm.rank, threads)[len(rng_state):]))
        start_round = resumed.progress.round
        global_words = resumed.progress.words_done
        position = resumed.progress.positions[comm.rank]
        history = list(resumed.metrics)
        if log:
            log(f"resuming from {resumed.path}: round {start_round}/{rounds}, {global_words:,} words done")
    else:
        w_in, w_out = init_params(len(words), cfg.dim, cfg.seed)
        rng_state = rng_seeds(cfg.seed, comm.rank, threads)
        start_round, global_words, position, history = 0, 0, 0, []

    # Model averaging divides every rank's step by the ranks that are averaged, so ranks
    # train with P x lr (the linear scaling rule) and each averaged step is worth lr again.
    local_lr = cfg.lr * (comm.size if cfg.sync == "average" else 1)
    shared_negatives = cfg.shared_negatives and cfg.model == "skipgram"  # CBOW has one target set per window already
    keep = keep_probabilities(counts, cfg.sample).astype(np.float32)
    table = negative_table(counts)
    touched = [np.zeros(len(words), dtype=np.uint8), np.zeros(len(words), dtype=np.uint8)]
    syncer = Synchronizer(comm, [w_in, w_out], mode=cfg.sync, allreduce=cfg.allreduce,
                          average_rows=cfg.average_rows)
    stream = ShardStream(corpus, shard, cfg.epochs, cfg.block_tokens, start=position)
    backend = Backend(kernel, device, w_in, w_out, touched)
    metrics = MetricsLog(os.path.join(cfg.out, "metrics.jsonl") if comm.is_root else None)
    bar = _progress_bar(cfg, words_total, global_words) if comm.is_root else None
    reference = None
    if cfg.eval_pip:  # computed once by all ranks (cached beside the corpus), before training
        from .evaluate.sppmi import ReferenceSpec, reference_embedding

        spec = ReferenceSpec(window=cfg.window, negatives=cfg.negative, dim=cfg.dim,
                             top_n=min(cfg.eval_restrict_vocab, len(words)))
        reference = reference_embedding(corpus.path, spec, comm, log=log)
    evaluator = comm.agree(Evaluator, cfg, words, reference) if comm.is_root else comm.agree(lambda: None)

    def save_checkpoint(rnd: int, complete: bool) -> str | None:
        """Gather every rank's RNG state and position; rank 0 writes; all wait at the end."""
        gathered = comm.gather((rng_state.copy(), stream.consumed))
        path = None
        if comm.is_root:
            width = max(len(g[0]) for g in gathered)
            rngs = np.zeros((comm.size, width), dtype=np.uint64)
            for r, (st, _) in enumerate(gathered):
                rngs[r, :len(st)] = st
            ck = checkpoint.Checkpoint(
                w_in=w_in, w_out=w_out, words=words, counts=counts, config=resolved,
                corpus_id=corpus.corpus_id, corpus_path=corpus.path,
                progress=checkpoint.Progress(round=rnd, rounds=rounds, words_done=global_words,
                                             words_total=words_total, world_size=comm.size,
                                             positions=[int(g[1]) for g in gathered],
                                             lr=learning_rate(cfg, global_words, words_total)),
                rng_state=rngs, metrics=history, complete=complete)
            path = comm.agree(checkpoint.save, ckpt_dir, ck, keep=cfg.keep_checkpoints)
        else:
            comm.agree(lambda: None)
        return comm.bcast(path)

    t_start = time.perf_counter()
    last_ckpt_words, last_ckpt_time, last_eval_words = global_words, t_start, global_words
    window_loss = np.zeros(2)            # loss sum, examples since the last log line
    compute_s = 0.0
    words_at_start = global_words
    last_log = (global_words, 0.0)         # words and seconds at the last metrics line
    ckpt_path, stopped = None, False
    try:
        for rnd in range(start_round, rounds):
            local_in_round = 0
            round_loss = np.zeros(2)
            t = time.perf_counter()
            backend.begin_round()
            for tokens, starts in stream.take(int(targets[rnd])):
                loss, n_ex, n_words = backend.train(
                    tokens, starts, keep, table, rng_state, model=cfg.model, window=cfg.window,
                    negative=cfg.negative, lr0=local_lr, lr_min=local_lr * cfg.min_lr_ratio,
                    words_done=global_words + comm.size * local_in_round, words_scale=comm.size,
                    words_total=words_total, threads=threads, shared_negatives=shared_negatives)
                local_in_round += n_words
                round_loss += (loss, n_ex)
                if bar is not None:
                    bar.update(n_words * comm.size)
            backend.end_round()
            compute_s += time.perf_counter() - t
            syncer.sync([w_in, w_out], touched)
            due_by_time = (comm.is_root and cfg.checkpoint_minutes > 0
                           and time.perf_counter() - last_ckpt_time >= 60 * cfg.checkpoint_minutes)
            totals = np.array([local_in_round, round_loss[0], round_loss[1], float(stop.requested),
                               float(due_by_time)], dtype=np.float64)
            comm.allreduce_(totals)
            global_words += int(totals[0])
            window_loss += totals[1:3]
            if not (np.isfinite(totals[1]) and _finite(w_in) and _finite(w_out)):
                raise TrainingDiverged(f"training diverged: the loss became {totals[1]} in round "
                                       f"{rnd + 1} (try a smaller --lr); the last checkpoint is kept")
            last = rnd == rounds - 1
            if (rnd + 1) % cfg.log_every == 0 or last or totals[3] > 0:
                per_rank = comm.gather((comm.stats.bytes_sent, comm.stats.seconds, compute_s))
                if comm.is_root:
                    elapsed = time.perf_counter() - t_start
                    record = {
                        "step": rnd + 1, "rounds": rounds, "words": global_words,
                        "epoch": global_words / max(corpus.n_tokens, 1),
                        "loss": window_loss[0] / max(window_loss[1], 1),
                        "lr": learning_rate(cfg, global_words, words_total),
                        # since the last line (what the machine does now) and since the start
                        "words_per_s": (global_words - last_log[0]) / max(elapsed - last_log[1], 1e-9),
                        "words_per_s_run": (global_words - words_at_start) / max(elapsed, 1e-9),
                        "seconds": elapsed, "sync": cfg.sync,
                        "comm_bytes": [int(b) for b, _, _ in per_rank],
                        "comm_seconds": [round(s, 4) for _, s, _ in per_rank],
                        "compute_seconds": [round(c, 4) for _, _, c in per_rank],
                    }
                    if cfg.eval_every and (global_words - last_eval_words >= cfg.eval_every) or last:
                        record["eval"] = evaluator(w_in)
                        last_eval_words = global_words
                    last_log = (global_words, elapsed)
                    metrics.write(record)
                    history.append(record)
                    if bar is not None:
                        bar.n = global_words
                        bar.set_postfix(_postfix(record), refresh=False)
                        bar.refresh()
                window_loss[:] = 0
            want_ckpt = (last or totals[3] > 0 or totals[4] > 0
                         or (cfg.checkpoint_every and global_words - last_ckpt_words >= cfg.checkpoint_every))
            if want_ckpt:
                ckpt_path = save_checkpoint(rnd + 1, complete=last)
                last_ckpt_words, last_ckpt_time = global_words, time.perf_counter()
            if totals[3] > 0 and not last:
                stopped = True
                break
    finally:
        if bar is not None:
            bar.close()
        metrics.close()
    seconds = time.perf_counter() - t_start
    if comm.is_root and log:
        if stopped:
            log(f"stop requested (SIGTERM/SIGUSR1): wrote {ckpt_path}; resume with --resume auto")
        else:
            log(f"trained {global_words - words_at_start:,} words in {seconds:.1f} s "
                f"({(global_words - words_at_start) / max(seconds, 1e-9):,.0f} words/s, {comm.size} rank(s) "
                f"x {threads} thread(s), sync {cfg.sync}); checkpoint {ckpt_path}")
    if comm.is_root and cfg.export and not stopped:
        write_word2vec(os.path.join(cfg.out, "vectors.txt"), words, w_in, binary=False)
        if log:
            log(f"wrote {os.path.join(cfg.out, 'vectors.txt')}")
            if history and history[-1].get("eval"):
                log("evaluation: " + json.dumps(history[-1]["eval"], sort_keys=True))
    return RunResult(w_in, w_out, words, history, seconds, global_words, stopped, ckpt_path)


def _finite(a: np.ndarray) -> bool:
    """NaN/inf anywhere makes the float64 sum non-finite (cheaper than isfinite(a).all())."""
    return bool(np.isfinite(a.sum(dtype=np.float64)))


def _postfix(record: dict) -> dict:
    out = {"loss": f"{record['loss']:.4f}", "lr": f"{record['lr']:.5f}"}
    for key, value in (record.get("eval") or {}).items():
        if isinstance(value, (int, float)):
            out[key] = f"{value:.3f}"
    return out


class Evaluator:
    """Rank 0's evaluation during training; returns a flat dict of headline numbers."""

    def __init__(self, cfg: TrainConfig, words: list[str], reference=None):
        from .evaluate import read_analogies, read_similarity

        self.cfg, self.reference = cfg, reference
        self.index = {w: i for i, w in enumerate(words)}
        self.sim = [(p, read_similarity(p)) for p in cfg.eval_sim]
        self.ana = [(p, read_analogies(p)) for p in cfg.eval_analogy]

    def __call__(self, vectors: np.ndarray) -> dict:
        from .evaluate import evaluate_analogies, evaluate_similarity

        out = {}
        for path, pairs in self.sim:
            r = evaluate_similarity(vectors, self.index, pairs)
            out[f"sim:{os.path.basename(path)}"] = r["spearman"]
        for path, sections in self.ana:
            r = evaluate_analogies(vectors, self.index, sections, restrict_vocab=self.cfg.eval_restrict_vocab)
            out[f"analogy:{os.path.basename(path)}"] = r["accuracy"]
        if self.reference is not None:
            from .evaluate.pip import pip_report

            # the reference rows are the corpus's most frequent words, in vocabulary order
            n = len(self.reference.words)
            r = pip_report(vectors[:n], self.reference.vectors)
            out["pip"], out["pip_normalized"] = r["pip"], r["normalized"]
        return out


def _progress_bar(cfg: TrainConfig, total: int, initial: int = 0):
    if not cfg.progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="w", unit_scale=True, desc="train", dynamic_ncols=True,
                mininterval=0.5, file=sys.stderr)


def _body(argv, comm: Comm, stop: StopRequest) -> int:
    cfg = comm.agree(parse_command, TrainConfig, argv, prog=PROG, config_file_flag=True,
                     description="Train word embeddings (SGNS/CBOW) on every rank's shard.")
    result = run(cfg, comm, stop=stop)
    return EXIT_REQUEUE if result.stopped else 0


def main(argv=None) -> int:
    # catch a time-limit signal that arrives while MPI and the corpus are still starting up
    with StopRequest() as stop:
        return run_main(PROG, lambda a, c: _body(a, c, stop), argv)


if __name__ == "__main__":
    sys.exit(main())
