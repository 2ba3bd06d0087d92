"""``python -m mpidwe.train``: the one place that wires corpus, kernels, sync and comm.

Every rank streams its shard of the corpus block by block (read ahead in a background
thread), trains SGNS or CBOW on its own copy of the parameters for ``--sync-every`` words,
then all ranks combine their changes (mpidwe.dist.sync). The number of sync rounds is fixed
before training from the largest shard, so every rank makes the same collectives in the
same order; each rank spreads its own shard evenly over those rounds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..version import __version__
from ..dist.comm import Comm, run_main
from ..core.config import MAX_LOCAL_LR_NS, TrainConfig, parse_command, to_dict
from ..io import checkpoint
from ..dist import deathwatch
from ..io.corpus import Corpus, Shard, prefetch
from ..io.vectors import write_word2vec
from ..kernels.args import KernelArgs
from ..kernels.common import learning_rate as kernel_learning_rate
from ..io.fsutil import DirLock, atomic_write, reason, remove_leftovers
from ..core.errors import EXIT_DIVERGED, EXIT_REQUEUE, ConfigError, InputError, MpidweError
from ..core.balance import EpochStream, SpeedWeights, split_points
from ..core.guard import DivergenceGuard
from ..core.huffman import build_tree
from ..core.subwords import build_table
from .progress import ProgressLog, bar_wanted, setup_cli_logging
from ..dist.sync import Synchronizer, lr_scale
from ..core.vocab import keep_probabilities, negative_table

PROG = "python -m mpidwe.train"
DEMO_DIR = "demo"


class TrainingDiverged(MpidweError):
    """The divergence guard tripped; raised on every rank at once (exit 3)."""

    exit_code = EXIT_DIVERGED
    agreed = True


# ------------------------------------------------------------------ pure helpers
def init_params(vocab_size: int, dim: int, seed: int, input_rows: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """word2vec initialisation: input uniform in [-0.5/dim, 0.5/dim), output zeros. The same
    seed gives the same matrices on every rank, so no broadcast is needed. ``input_rows``:
    rows of the input matrix when it holds more than the words (--subwords: n-gram buckets)."""
    rng = np.random.default_rng(seed)
    rows = vocab_size if input_rows is None else input_rows
    w_in = ((rng.random((rows, dim), dtype=np.float32) - 0.5) / dim).astype(np.float32)
    return np.ascontiguousarray(w_in), np.zeros((vocab_size, dim), dtype=np.float32)


def rng_seeds(seed: int, rank: int, threads: int) -> np.ndarray:
    """One 64-bit LCG state per kernel thread, distinct per (seed, rank, thread)."""
    ss = np.random.SeedSequence([seed, rank])
    return ss.generate_state(threads, dtype=np.uint64)


def count_rounds(shard_tokens: list[int], epochs: int, sync_every: int) -> int:
    """Sync rounds for the whole run: enough that no rank trains more than ``sync_every``
    words between two syncs. Identical on every rank."""
    return max(1, math.ceil(max(shard_tokens) * epochs / sync_every))


# The default sync interval counts the words ALL ranks train between two syncs, because the
# ranks' copies drift apart with every word trained since the last sync, whoever trained it.
# Up to 2 ranks that global interval is W (each rank trains W / P); beyond, averaging more
# copies loses more, so the global interval shrinks as 2/P and syncs per epoch grow with P
# (measured on enwiki: docs/sync-modes.md; predicted: docs/scaling.md).
SYNC_WORDS_MAX = 2_000_000
SYNC_WORDS_PER_TYPE = 80
SYNC_FULL_INTERVAL_RANKS = 2
SYNC_EVERY_MIN = 5_000


def auto_sync_every(vocab_size: int, world_size: int = 1) -> int:
    """Default words per rank between syncs: W / P up to 2 ranks and 2 W / P^2 beyond, with
    W = min(2M, 80 x V), and at least 5,000 (below that the per-sync overhead dominates)."""
    p = max(world_size, 1)
    global_words = min(SYNC_WORDS_MAX, SYNC_WORDS_PER_TYPE * vocab_size)
    share = p * max(1, p / SYNC_FULL_INTERVAL_RANKS)
    return int(max(SYNC_EVERY_MIN, global_words // share))


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
    trains parameters that stay on the device for the whole run (mpidwe.dist.device): only the
    rows a sync needs travel, and ``to_host`` copies them down for a checkpoint, an
    evaluation or the export."""

    def __init__(self, kind: str, device: str, w_in: np.ndarray, w_out: np.ndarray, touched: list[np.ndarray]):
        self.kind, self.device = kind, device
        self.host = (w_in, w_out, *touched)
        if kind == "numba":
            from ..kernels import cpu

            self._train = cpu.train_block
            self.resident = None
        else:
            from ..dist.device import DeviceParams

            self.resident = DeviceParams(device, w_in, w_out)

    def train(self, tokens, starts, rng_state, args):
        if self.resident is not None:
            return self.resident.train(tokens, starts, rng_state, args)
        w_in, w_out, t_in, t_out = self.host
        return self._train(w_in, w_out, tokens, starts, rng_state, t_in, t_out, args)

    def sync(self, syncer) -> float:
        """The round's sync; returns the largest |value| of the rows that changed."""
        if self.resident is not None:
            return self.resident.sync(syncer)
        return syncer.sync(list(self.host[:2]), list(self.host[2:]))

    def to_host(self) -> None:
        """The host arrays hold the trained parameters after this."""
        if self.resident is not None:
            self.resident.to_host()


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
    """JSON lines in RUN_DIR/metrics.jsonl, appended and flushed line by line (rank 0). The
    file is opened at the first record, so a run that fails before its first round leaves
    no metrics behind to make its corrected rerun look like a run in progress."""

    def __init__(self, path: str | None):
        self._path, self._fh = path, None

    def write(self, record: dict) -> None:
        if self._path is None:
            return
        if self._fh is None:
            self._fh = open(self._path, "a", encoding="utf-8")
        self._fh.write(json.dumps(record, sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh:
            self._fh.close()


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
    corpus = comm.agree(Corpus, corpus_path, cfg.segments)
    try:
        if cfg.verify_corpus:
            comm.on_root(corpus.verify, broadcast=False)
        if stop is not None:
            return _train(cfg, comm, corpus, log, stop)
        with StopRequest() as own:
            return _train(cfg, comm, corpus, log, own)
    finally:
        corpus.close()


def _check_writable(cfg: TrainConfig) -> None:
    """RUN_DIR and RUN_DIR/checkpoints must be folders this process can write, checked before
    any training (or the run trains for hours and then cannot save)."""
    ckpt_dir = os.path.join(cfg.out, "checkpoints")
    for path in (cfg.out, ckpt_dir):
        if os.path.exists(path) and not os.path.isdir(path):
            raise InputError(f"--out {cfg.out}: {path} exists and is not a folder")
    try:
        os.makedirs(ckpt_dir, exist_ok=True)
        probe = os.path.join(ckpt_dir, f".write-test-{os.getpid()}")
        with open(probe, "wb") as fh:
            fh.write(b"x")
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"--out {cfg.out} is not writable: {reason(e)}") from None


def _old_run(cfg: TrainConfig) -> list[str]:
    """The files of an earlier run in RUN_DIR: its checkpoints and metrics log."""
    metrics = os.path.join(cfg.out, "metrics.jsonl")
    old = checkpoint.list_checkpoints(os.path.join(cfg.out, "checkpoints"))
    return old + ([metrics] if os.path.exists(metrics) else [])


def _take_run_dir(cfg: TrainConfig, log) -> DirLock:
    """Rank 0 locks RUN_DIR for the whole run (a second run into it is refused), then removes
    the temporary files a killed run left there: under the lock none can be a live one."""
    _check_writable(cfg)
    lock = DirLock(cfg.out, "training run").acquire(warn=log)
    deathwatch.clear(cfg.out)
    for folder in (cfg.out, os.path.join(cfg.out, "checkpoints")):
        gone = remove_leftovers(folder)
        if gone and log:
            log(f"removed {len(gone)} temporary file(s) that a killed run left in {folder}")
    return lock


def _check_run_dir(cfg: TrainConfig, resuming: bool) -> None:
    """Never mix two runs in one RUN_DIR: a fresh start needs one without a run in it,
    ``--force`` (which clears the old metrics and checkpoints) or ``--resume auto`` (which
    found no checkpoint). Checked, like everything else, before anything is written."""
    if resuming or not _old_run(cfg) or cfg.force or cfg.resume == "auto":
        return
    raise InputError(f"{cfg.out} already holds a run; continue it with --resume auto, start over "
                     f"with --force, or choose another --out")


def _check_resume(resolved: dict, ck: checkpoint.Checkpoint, corpus: Corpus, world: int) -> None:
    """Refuse a checkpoint that cannot continue this run, naming the mismatch."""
    if ck.corpus_id != corpus.corpus_id:
        raise InputError(f"cannot resume from {ck.path}: it was trained on another corpus "
                         f"({ck.config.get('corpus')}, id {ck.corpus_id[:12]}) than {corpus.path} "
                         f"(id {corpus.corpus_id[:12]})")
    if ck.progress.words_done > resolved["words_total"]:
        raise InputError(f"cannot resume from {ck.path}: it has trained {ck.progress.words_done:,} words, "
                         f"more than --epochs {resolved['epochs']} gives ({resolved['words_total']:,}); "
                         f"give at least --epochs {ck.config.get('epochs')} or start a new run from it "
                         f"with --init-from")
    for key in resume_must_match(resolved):
        old, new = ck.config.get(key, RESUME_DEFAULTS.get(key)), resolved.get(key)
        if old != new:
            hint = ""
            if key == "max_local_lr":
                why = ("; --loss hs's default cap is 2 x --lr since it diverged at 8 ranks under 0.2"
                       if resolved.get("loss") == "hs" and old == MAX_LOCAL_LR_NS else "")
                hint = f" (give --max-local-lr {old!r} to continue it{why})"
            raise InputError(f"cannot resume from {ck.path}: --{key.replace('_', '-')} is {new!r} "
                             f"but the checkpoint has {old!r}{hint}")


# options that change what a resumed run would compute; the rest (logging, checkpoint and
# evaluation cadence, progress bar, guard limits) may change between runs. The number of
# ranks, --epochs and --sync-every may change too: the rest of the run is then re-planned
# (replan), which continues the run but is not bit-identical to an uninterrupted one.
RESUME_MUST_MATCH = ("model", "loss", "dim", "window", "negative", "sample", "lr", "min_lr_ratio",
                     "seed", "sync", "max_local_lr", "block_tokens", "kernel", "shared_negatives", "balance",
                     "segments", "subwords", "minn", "maxn", "buckets")
# --batch-size decides which updates of the torch kernel share a parameter snapshot, so a
# resumed torch run with another batch size computes other numbers; the numba kernel and
# --loss hs (its own batch, kernels/torch_hs.py) ignore it
RESUME_TORCH_MUST_MATCH = ("batch_size",)
# what a checkpoint written before an option existed ran with
RESUME_DEFAULTS = {"segments": "all", "loss": "ns", "subwords": False, "minn": 3, "maxn": 6, "buckets": 2_000_000}


def resume_must_match(resolved: dict) -> tuple[str, ...]:
    """The options a resumed run must share with its checkpoint (resolved: this run's config)."""
    torch_ns = resolved.get("kernel") == "torch" and resolved.get("loss", "ns") != "hs"
    return RESUME_MUST_MATCH + (RESUME_TORCH_MUST_MATCH if torch_ns else ())


def needs_replan(progress: checkpoint.Progress, plan: "Plan", world: int) -> bool:
    """A checkpoint continues exactly only with the plan that wrote it: the same ranks,
    words and rounds."""
    return (progress.world_size != world or progress.words_total != plan.words_total
            or progress.rounds != plan.rounds)


def snap_to_sentence(corpus: Corpus, shard: Shard, block_tokens: int, position: int) -> int:
    """The first sentence start at or after ``position`` in the shard's epoch-repeated
    stream (a position in the stream: epoch x shard tokens + offset)."""
    n = shard.n_tokens
    if n == 0:
        return 0
    epoch, offset = divmod(position, n)
    if offset == 0:
        return position
    target = shard.token_start + offset
    for start, end, local in corpus.block_spans(shard, block_tokens):
        if end <= target:
            continue
        k = int(np.searchsorted(local, target - start))
        if k < len(local):
            return epoch * n + int(start + local[k]) - shard.token_start
    return (epoch + 1) * n           # no sentence starts after it: the next epoch's start


def derived_seed(rng_state: np.ndarray, round_: int) -> int:
    """A seed for fresh RNG streams drawn from a checkpoint's streams (elastic resume)."""
    digest = hashlib.sha256(np.ascontiguousarray(rng_state, dtype=np.uint64).tobytes()
                            + round_.to_bytes(8, "little")).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def replan(cfg: TrainConfig, plan: "Plan", comm: Comm, corpus: Corpus,
           state: checkpoint.TrainingState) -> "Plan":
    """Continue a checkpoint written by another plan (other ranks, --epochs or --sync-every).

    The run's global progress f = words done / words of the new plan is re-derived over the
    new shards: rank r starts at f x (its shard's words over all epochs), moved to the next
    sentence start. The words done become the sum of those starts, so the run ends with
    exactly the plan's words. The rounds left split each rank's remaining words evenly, at
    the plan's --sync-every; every rank gets a fresh RNG stream derived from the
    checkpoint's. The learning rate, the words done and the history continue. Updates
    ``state.progress`` and ``state.rng_state`` in place and returns the new plan."""
    p = state.progress
    fraction = p.words_done / max(plan.words_total, 1)
    sizes = comm.allgather(plan.shard.n_tokens)
    own = plan.shard.n_tokens * cfg.epochs
    start = min(snap_to_sentence(corpus, plan.shard, cfg.block_tokens, int(fraction * own)), own)
    starts = comm.allgather(start)
    remaining = [n * cfg.epochs - s for n, s in zip(sizes, starts)]
    sync_every = plan.resolved["sync_every"]
    left = max(1, math.ceil(max(remaining) / sync_every)) if max(remaining) > 0 else 0
    rounds = p.round + left
    seed = derived_seed(state.rng_state, p.round)
    width = max(state.rng_state.shape[1], plan.threads)
    state.rng_state = np.stack([rng_seeds(seed, r, width) for r in range(comm.size)])
    record = {"from_ranks": p.world_size, "from_words_total": p.words_total, "round": p.round,
              "rounds": rounds, "starts": [int(s) for s in starts]}
    p.rounds, p.words_total, p.world_size = rounds, plan.words_total, comm.size
    p.words_done, p.positions = int(sum(starts)), [int(s) for s in starts]
    p.lr = learning_rate(cfg, p.words_done, plan.words_total)
    return with_replan(plan, comm, record)


def balanced_continuation(cfg: TrainConfig, plan: "Plan", comm: Comm, state: checkpoint.TrainingState) -> "Plan":
    """--balance speed: the stream position continues on any number of ranks; the rounds
    left split the remaining words (every rank gets fresh RNG streams if the ranks changed)."""
    p = state.progress
    cursor = int(p.positions[0])
    sync_every = plan.resolved["sync_every"]
    left = math.ceil((plan.words_total - cursor) / (comm.size * sync_every)) if cursor < plan.words_total else 0
    rounds = p.round + left
    targets = np.full(rounds, cursor, dtype=np.int64)
    if left:
        targets[p.round:] = cursor + round_targets(plan.words_total - cursor, left)
    if p.world_size != comm.size:
        seed = derived_seed(state.rng_state, p.round)
        width = max(state.rng_state.shape[1], plan.threads)
        state.rng_state = np.stack([rng_seeds(seed, r, width) for r in range(comm.size)])
    p.rounds, p.world_size, p.words_total, p.positions = rounds, comm.size, plan.words_total, [cursor] * comm.size
    p.lr = learning_rate(cfg, p.words_done, plan.words_total)
    return dataclasses.replace(plan, rounds=rounds, targets=targets, resolved=dict(plan.resolved, rounds=rounds))


def with_replan(plan: "Plan", comm: Comm, record: dict) -> "Plan":
    """The plan of a re-planned run (``record`` from :func:`replan`, stored in the run's
    configuration and so in every later checkpoint, which then resumes exactly)."""
    start, round0, rounds = record["starts"][comm.rank], record["round"], record["rounds"]
    targets = np.full(rounds, start, dtype=np.int64)
    if rounds > round0:
        targets[round0:] = start + round_targets(plan.shard.n_tokens * plan.resolved["epochs"] - start,
                                                 rounds - round0)
    resolved = dict(plan.resolved, rounds=rounds, replan=record)
    return dataclasses.replace(plan, rounds=rounds, targets=targets, resolved=resolved)


def continued_plan(cfg: TrainConfig, plan: "Plan", comm: Comm, corpus: Corpus,
                   state: checkpoint.TrainingState, record: dict | None, log) -> "Plan":
    """The plan that continues ``state``: the fresh plan when the checkpoint was written by
    it, the checkpoint's own re-plan when it was written after one, else a new re-plan."""
    p = state.progress
    if cfg.balance == "speed":
        return balanced_continuation(cfg, plan, comm, state)
    if record and (record["rounds"] == p.rounds and len(record["starts"]) == comm.size == p.world_size
                   and p.words_total == plan.words_total):
        return with_replan(plan, comm, record)
    if not needs_replan(p, plan, comm.size):
        return plan
    old = (p.world_size, p.words_total)
    plan = replan(cfg, plan, comm, corpus, state)
    if log:
        log(f"re-planned the rest of the run: written by {old[0]} rank(s) for {old[1]:,} words, continued "
            f"on {comm.size} rank(s) for {plan.words_total:,} words from {p.words_done:,} "
            f"({plan.rounds - p.round} rounds left; not bit-identical to an uninterrupted run)")
    return plan


@dataclass(frozen=True)
class Plan:
    """What every rank fixes before the first round; all of it but ``shard`` and ``targets``
    is the same on every rank, so every rank makes the same collectives in the same order."""

    device: str
    kernel: str
    threads: int
    shard: Shard
    rounds: int
    targets: np.ndarray        # this rank's cumulative local words at the end of each round
    words_total: int           # global words of the whole run
    scale: int                 # every rank trains at scale x lr (mpidwe.dist.sync)
    resolved: dict             # the configuration as run: config.json and every checkpoint


def make_plan(cfg: TrainConfig, comm: Comm, corpus: Corpus) -> Plan:
    device = comm.agree(resolve_device, cfg, comm)
    kernel = comm.agree(resolve_kernel, cfg, device)
    scale = comm.agree(lr_scale, cfg.sync, comm.size, cfg.lr, cfg.max_local_lr)
    threads = resolve_threads(cfg, comm)
    shard = corpus.shard(comm.rank, comm.size)
    shard_sizes = comm.allgather(shard.n_tokens)
    sync_every = cfg.sync_every or auto_sync_every(corpus.n_words, comm.size)
    rounds = count_rounds(shard_sizes, cfg.epochs, sync_every)
    words_total = corpus.n_tokens * cfg.epochs
    if cfg.balance == "speed":    # one stream for all ranks; targets are global positions
        rounds = max(1, math.ceil(words_total / (comm.size * sync_every)))
    resolved = dict(to_dict(cfg), corpus=corpus.path, corpus_id=corpus.corpus_id, device=device, kernel=kernel,
                    sync_every=sync_every, lr_scale=scale, local_lr=cfg.lr * scale,
                    threads=threads, ranks=comm.size, rounds=rounds, words_total=words_total,
                    vocab_size=corpus.n_words, mpi=comm.mpi_library, version=__version__)
    own = words_total if cfg.balance == "speed" else shard.n_tokens * cfg.epochs
    return Plan(device, kernel, threads, shard, rounds, round_targets(own, rounds), words_total, scale, resolved)


def input_rows(cfg: TrainConfig, vocab_size: int) -> int:
    """Rows of the input matrix: the words, then (--subwords) the n-gram buckets."""
    return vocab_size + (cfg.buckets if cfg.subwords else 0)


def fresh_state(cfg: TrainConfig, plan: Plan, comm: Comm, vocab_size: int) -> checkpoint.TrainingState:
    w_in, w_out = init_params(vocab_size, cfg.dim, cfg.seed, input_rows(cfg, vocab_size))
    rngs = np.stack([rng_seeds(cfg.seed, r, plan.threads) for r in range(comm.size)])
    progress = checkpoint.Progress(round=0, rounds=plan.rounds, words_done=0, words_total=plan.words_total,
                                   world_size=comm.size, positions=[0] * comm.size, lr=cfg.lr)
    return checkpoint.TrainingState(w_in, w_out, progress, rngs, [])


def _init_checkpoint(path: str, log) -> checkpoint.Checkpoint:
    """--init-from: a checkpoint, or a run directory (its newest valid checkpoint)."""
    if os.path.isdir(path):
        folder = os.path.join(path, "checkpoints") if os.path.isdir(os.path.join(path, "checkpoints")) else path
        ck = checkpoint.latest_valid(folder, warn=log)
        if ck is None:
            raise InputError(f"--init-from {path}: no valid checkpoint in {folder}")
        return ck
    if not os.path.exists(path):
        raise InputError(f"--init-from {path}: no such checkpoint or run directory")
    return checkpoint.load(path)


def carried_rows(old_words: list[str], new_words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(new ids, old ids) of the words both vocabularies hold."""
    old_index = {w: i for i, w in enumerate(old_words)}
    pairs = [(i, old_index[w]) for i, w in enumerate(new_words) if w in old_index]
    if not pairs:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    new_ids, old_ids = (np.array(x, dtype=np.int64) for x in zip(*pairs))
    return new_ids, old_ids


def warm_start(cfg: TrainConfig, plan: Plan, comm: Comm, corpus: Corpus, state: checkpoint.TrainingState,
               log) -> Plan:
    """--init-from: a new run whose parameters start from a trained model. The rows of words
    the model knows are copied (both matrices, matched by the word itself, so a grown corpus or
    another corpus both work); the other rows keep the fresh initialisation. Progress, the
    learning-rate schedule and the RNG streams are the new run's own. Any rank count works:
    rank 0 reads the model and broadcasts the result."""
    def build():
        ck = _init_checkpoint(cfg.init_from, log)
        if ck.w_in.shape[1] != cfg.dim:
            raise InputError(f"--init-from {ck.path}: its vectors have {ck.w_in.shape[1]} dimensions, "
                             f"--dim is {cfg.dim}")
        new_ids, old_ids = carried_rows(ck.words, corpus.words)
        if len(new_ids) == 0:
            raise InputError(f"--init-from {ck.path}: it shares no word with {corpus.path}")
        state.w_in[new_ids] = ck.w_in[old_ids]
        if cfg.loss == "ns" and ck.config.get("loss", "ns") == "ns":   # HS output rows are tree nodes
            state.w_out[new_ids] = ck.w_out[old_ids]
        same_buckets = all(ck.config.get(k, RESUME_DEFAULTS[k]) == getattr(cfg, k)
                           for k in ("subwords", "minn", "maxn", "buckets"))
        if cfg.subwords and same_buckets:          # the n-gram rows mean the same in both runs
            state.w_in[corpus.n_words:] = ck.w_in[len(ck.words):]
        info = {"path": ck.path, "corpus_id": ck.corpus_id, "words_done": ck.progress.words_done,
                "rows_carried": int(len(new_ids)), "rows_new": int(corpus.n_words - len(new_ids))}
        if log:
            log(f"warm start from {ck.path}: {len(new_ids):,} of {corpus.n_words:,} words carried over, "
                f"{corpus.n_words - len(new_ids):,} new")
        return info

    info = comm.on_root(build)
    comm.bcast_array_(state.w_in)
    comm.bcast_array_(state.w_out)
    return dataclasses.replace(plan, resolved=dict(plan.resolved, init_from=info))


def load_state(cfg: TrainConfig, plan: Plan, comm: Comm, corpus: Corpus, log
               ) -> tuple[checkpoint.TrainingState | None, dict | None]:
    """Rank 0 finds, loads and checks the checkpoint to resume from; every rank receives the
    training state it holds, and the re-plan record of its run (None if it was never re-planned)."""
    ck = comm.on_root(find_checkpoint, cfg, plan, corpus, comm.size, log, broadcast=False)
    header = comm.bcast(dict(ck.state.header(), replan=ck.config.get("replan"))
                        if comm.is_root and ck is not None else None)
    if header is None:
        return None, None
    record = header.pop("replan")
    shape = (corpus.n_words, cfg.dim)
    w_in = ck.w_in if comm.is_root else np.empty((input_rows(cfg, corpus.n_words), cfg.dim), np.float32)
    w_out = ck.w_out if comm.is_root else np.empty(shape, np.float32)
    comm.bcast_array_(w_in)
    comm.bcast_array_(w_out)
    return checkpoint.TrainingState.from_header(header, w_in, w_out), record


def find_checkpoint(cfg: TrainConfig, plan: Plan, corpus: Corpus, world: int, log,
                params: bool = True) -> checkpoint.Checkpoint | None:
    """Rank 0: the checkpoint --resume names (None for a fresh start), loaded and checked
    (``params=False``: without its matrices, as checkpoint.load)."""
    if not cfg.resume:
        return None
    if cfg.resume == "auto":
        ckpt_dir = os.path.join(cfg.out, "checkpoints")
        ck = checkpoint.latest_valid(ckpt_dir, warn=log, params=params)
        found = checkpoint.list_checkpoints(ckpt_dir)
        if ck is None and found:
            # maybe only unreadable for a moment (a network filesystem): never start over
            raise InputError(f"--resume auto: none of the {len(found)} checkpoint(s) in {ckpt_dir} "
                             f"can be read (damaged or unreadable); nothing was deleted; start over "
                             f"with --force, or resume from a copy with --resume PATH")
        if ck is None:
            return None
    else:
        if os.path.realpath(cfg.resume) == os.path.realpath(corpus.path):
            raise InputError(f"--resume {cfg.resume} is the corpus, not a checkpoint (checkpoints are "
                             f"RUN_DIR/checkpoints/ckpt-*.h5; --resume auto finds the newest)")
        ck = checkpoint.load(cfg.resume, params=params)
    _check_resume(plan.resolved, ck, corpus, world)
    if log:
        log(f"resuming from {ck.path}: round {ck.progress.round}/{ck.progress.rounds}, "
            f"{ck.progress.words_done:,} words done")
    return ck


def _metrics_until(path: str, history: list[dict]) -> list[str]:
    """The lines of metrics.jsonl up to the resumed checkpoint's last step: the file's own
    (the checkpoint may hold a thinned history), or the history where the file is missing,
    damaged or does not reach that far."""
    last = history[-1]["step"] if history else 0
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [ln if ln.endswith("\n") else ln + "\n" for ln in fh if ln.strip()]
        kept = [ln for ln in lines if json.loads(ln)["step"] <= last]
        if not history or (kept and json.loads(kept[-1])["step"] == last):
            return kept
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return [json.dumps(r, sort_keys=True) + "\n" for r in history]


def _start_run_dir(cfg: TrainConfig, resolved: dict, history: list[dict] | None, log) -> None:
    """``history``: the resumed checkpoint's metrics (None for a fresh start, which first
    clears what an earlier run left: _check_run_dir allowed it). metrics.jsonl is rewritten
    from the history, so lines logged after that checkpoint do not appear twice."""
    if history is None:
        for path in _old_run(cfg):
            os.unlink(path)
    else:
        lines = _metrics_until(os.path.join(cfg.out, "metrics.jsonl"), history)
        with atomic_write(os.path.join(cfg.out, "metrics.jsonl"), "w", encoding="utf-8") as fh:
            fh.writelines(lines)
    with atomic_write(os.path.join(cfg.out, "config.json"), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(resolved, indent=2, sort_keys=True))
    if log:
        log(f"{PROG} {__version__}: " + json.dumps(resolved, sort_keys=True))


GUARD_MIN_EXAMPLES = 1_000
# Metrics records a checkpoint embeds at most (metrics.jsonl keeps every line).
MAX_HISTORY = 10_000


def thin_history(history: list[dict]) -> None:
    """Keep the checkpoint's history bounded: past MAX_HISTORY records drop every other one
    (the last is always kept), so the curves keep their shape at half the resolution."""
    if len(history) > MAX_HISTORY:
        history[:] = history[:-1:2] + history[-1:]


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
    def agree(cls, comm: Comm, words: int, loss: float, examples: float, stop: bool, due: bool,
              log_due: bool = False, speed: float | None = None) -> "RoundTotals":
        a = np.array([words, loss, examples, float(stop), float(due), float(log_due)], dtype=np.float64)
        if speed is not None:          # each rank fills its own slot; the sum is the vector
            slots = np.zeros(comm.size)
            slots[comm.rank] = speed
            a = np.concatenate((a, slots))
        comm.allreduce_(a)
        return cls(int(a[0]), float(a[1]), float(a[2]), a[3] > 0, a[4] > 0, a[5] > 0,
                   a[6:].copy() if speed is not None else None)


def _train(cfg: TrainConfig, comm: Comm, corpus: Corpus, log, stop: StopRequest) -> RunResult:
    plan = make_plan(cfg, comm, corpus)
    lock = comm.on_root(_take_run_dir, cfg, log, broadcast=False)
    store = None
    if cfg.store == "sharded":       # rows spread over the ranks: mpidwe/sharded.py
        from ..dist import sharded as store
    try:
        state, record = (store.load_state if store else load_state)(cfg, plan, comm, corpus, log)
        history = None if state is None else state.history
        if state is not None:
            plan = continued_plan(cfg, plan, comm, corpus, state, record, log)
        comm.on_root(_check_run_dir, cfg, state is not None)
        if state is None:
            state = (store.fresh_state if store else fresh_state)(cfg, plan, comm, corpus.n_words)
            if cfg.init_from:
                plan = warm_start(cfg, plan, comm, corpus, state, log)
        trainer = (store.ShardedTrainer if store else Trainer)(cfg, comm, corpus, plan, state, log, stop)
        comm.on_root(_start_run_dir, cfg, plan.resolved, history, log)
        comm.barrier()    # the old marker is gone before any watcher starts
        deathwatch.start(cfg.out, comm.rank, comm.size, hint=f"; resume with --resume auto --out {cfg.out}")
        return trainer.run()
    finally:
        if lock is not None:
            lock.release()


class Trainer:
    """The round loop: train a round on every rank, sync, agree on the round, then log,
    evaluate and checkpoint as due. Owns one :class:`checkpoint.TrainingState`."""

    def __init__(self, cfg: TrainConfig, comm: Comm, corpus: Corpus, plan: Plan,
                 state: checkpoint.TrainingState, log, stop: StopRequest):
        self.cfg, self.comm, self.corpus, self.plan, self.state = cfg, comm, corpus, plan, state
        self.log, self.stop = log, stop
        self.words = corpus.words
        v = len(self.words)
        threads = plan.threads
        rng = np.ascontiguousarray(state.rng_state[comm.rank][:threads]).astype(np.uint64)
        if len(rng) < threads:  # more threads than when saved: seed the new ones
            rng = np.concatenate((rng, rng_seeds(cfg.seed + 7919, comm.rank, threads)[len(rng):]))
        self.rng = rng
        self.local_lr = cfg.lr * plan.scale
        # CBOW has one target set per window already
        self.shared_negatives = cfg.shared_negatives and cfg.model == "skipgram"
        self.keep = keep_probabilities(corpus.counts, cfg.sample).astype(np.float32)
        self.table = negative_table(corpus.counts)
        # hierarchical softmax: the Huffman tree of the counts, rebuilt on every rank at every start
        if cfg.loss == "hs" and corpus.n_words < 2:
            raise InputError(f"--loss hs needs a vocabulary of at least 2 words; {corpus.path} has {corpus.n_words}")
        hs = build_tree(corpus.counts).tables() if cfg.loss == "hs" else None
        # --subwords: every word's input rows (its own, then its n-grams'), rebuilt from the words
        self.subwords = build_table(self.words, cfg.minn, cfg.maxn, cfg.buckets) if cfg.subwords else None
        self.kernel_args = KernelArgs(
            keep_prob=self.keep, neg_table=self.table, words_total=plan.words_total, model=cfg.model,
            window=cfg.window, negative=cfg.negative, lr0=self.local_lr, lr_min=self.local_lr * cfg.min_lr_ratio,
            threads=plan.threads, shared_negatives=self.shared_negatives, hs=hs,
            subwords=None if self.subwords is None else (self.subwords.ptr, self.subwords.ids),
            batch_size=cfg.batch_size if hs is None else None)
        self.setup_params(v)
        self.balanced = cfg.balance == "speed"
        if self.balanced:
            self.stream = EpochStream(corpus, cfg.epochs, cfg.block_tokens, start=state.progress.positions[0])
            self.speeds = SpeedWeights(comm.size)
        else:
            self.stream = ShardStream(corpus, plan.shard, cfg.epochs, cfg.block_tokens,
                                      start=state.progress.positions[comm.rank])
        self.round_end = 0            # --balance speed: the stream position this round ends at
        self.round_speed = 0.0        # this rank's words per compute second in the last round
        self.guard = DivergenceGuard(cfg.guard_loss_ratio, cfg.guard_max_abs)
        self.evaluator = self.make_evaluator()
        self.compute_s = 0.0
        self.local_words = 0          # words this rank trained in this process
        # resumes so far: one more than the checkpoint's last record says
        self.restarts = (int(state.history[-1].get("restarts", 0)) + 1 if state.history
                         else int(state.progress.words_done > 0))
        self.last_rank_words: np.ndarray | None = None   # rank 0: per-rank words at the last record

    def setup_params(self, v: int) -> None:
        """The replicated store: full matrices on every rank, combined by ``self.syncer``
        (mpidwe.dist.sharded.ShardedTrainer overrides this and the other store-specific steps)."""
        state, plan = self.state, self.plan
        # --subwords: the input matrix has a row per n-gram bucket after the words
        self.touched = [np.zeros(len(state.w_in), dtype=np.uint8), np.zeros(v, dtype=np.uint8)]
        self.syncer = Synchronizer(self.comm, [state.w_in, state.w_out], mode=self.cfg.sync, scale=plan.scale,
                                   allreduce=self.cfg.allreduce)
        self.backend = Backend(plan.kernel, plan.device, state.w_in, state.w_out, self.touched)

    def params_to_host(self) -> None:
        """The host arrays hold the trained parameters after this (the torch kernel's live on
        the device)."""
        self.backend.to_host()

    def make_evaluator(self):
        """Rank 0's Evaluator over the whole vocabulary (None on the other ranks)."""
        return self.comm.on_root(Evaluator, self.cfg, self.words, self._pip_reference(), broadcast=False)

    def sync_round(self) -> float:
        """Combine the ranks' changes of the round; the largest |value| changed."""
        return self.backend.sync(self.syncer)

    def evaluate(self) -> dict:
        """Rank 0's evaluation dict (every rank calls this at the same point)."""
        self.params_to_host()
        return self.evaluator(self.word_vectors()) if self.comm.is_root else {}

    def _pip_reference(self):
        """Computed once by all ranks (cached beside the corpus), before training."""
        if not self.cfg.eval_pip:
            return None
        from ..evaluate.sppmi import ReferenceSpec, reference_embedding

        c = self.cfg
        spec = ReferenceSpec(window=c.window, negatives=c.negative, dim=c.dim,
                             top_n=min(c.eval_restrict_vocab, len(self.words)))
        return reference_embedding(self.corpus.path, spec, self.comm, log=self.log)

    # ---------------------------------------------------------------- one round
    def train_round(self, rnd: int, bar) -> tuple[int, float, float]:
        """Train this rank's share of round ``rnd``; returns (words, loss sum, examples)."""
        cfg, p = self.cfg, self.state.progress
        words, loss, examples = 0, 0.0, 0.0
        t = time.perf_counter()
        pieces, scale = self.round_pieces(rnd)
        for tokens, starts in pieces:
            l, n_ex, n_words = self.backend.train(tokens, starts, self.rng,
                                                  self.kernel_args.at(p.words_done + scale * words, scale))
            words += n_words
            self.local_words += n_words
            loss += l
            examples += n_ex
            if bar is not None:
                bar.update(n_words * self.comm.size)
        seconds = time.perf_counter() - t
        self.compute_s += seconds
        self.round_speed = words / seconds if words and seconds > 0 else 0.0
        return words, loss, examples

    def round_pieces(self, rnd: int):
        """This rank's pieces of round ``rnd`` and how many global words one of its words
        stands for (the learning-rate schedule runs on global progress)."""
        if not self.balanced:
            return self.stream.take(int(self.plan.targets[rnd])), float(self.comm.size)
        st = self.stream
        lo = st.consumed
        hi = st.total if rnd == self.plan.rounds - 1 else st.snap(int(self.plan.targets[rnd]))
        points = split_points(lo, hi, self.speeds.weights(), st.snap)
        a, b = points[self.comm.rank], points[self.comm.rank + 1]
        self.round_end = hi
        return st.pieces(a, b), (hi - lo) / max(b - a, 1)

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
        raise TrainingDiverged(f"training diverged in round {rnd + 1}/{self.plan.rounds}: {why}; "
                               f"try {hint}; the last checkpoint is kept")

    # ---------------------------------------------------------------- the loop
    def run(self) -> RunResult:
        cfg, comm, state, plan = self.cfg, self.comm, self.state, self.plan
        p = state.progress
        metrics = MetricsLog(os.path.join(cfg.out, "metrics.jsonl") if comm.is_root else None)
        bar = _progress_bar(cfg, plan.words_total, p.words_done) if comm.is_root else None
        ticker = (ProgressLog(cfg.log_seconds, plan.words_total, p.words_done)
                  if comm.is_root and bar is None and cfg.log_seconds > 0 else None)
        run_loss = np.zeros(2)                 # loss sum, examples since this process started
        t_start = time.perf_counter()
        words_at_start = p.words_done
        last_ckpt_words, last_ckpt_time, last_eval_words = p.words_done, t_start, p.words_done
        window = np.zeros(2)                   # loss sum, examples since the last metrics line
        last_log = (p.words_done, 0.0)         # words and seconds at the last metrics line
        ckpt_path, stopped = None, False
        try:
            for rnd in range(p.round, plan.rounds):
                words, loss, examples = self.train_round(rnd, bar)
                max_abs = self.sync_round()
                due_by_time = (comm.is_root and cfg.checkpoint_minutes > 0
                               and time.perf_counter() - last_ckpt_time >= 60 * cfg.checkpoint_minutes)
                totals = RoundTotals.agree(comm, words, loss, examples, self.stop.requested, due_by_time,
                                           ticker is not None and ticker.due(),
                                           self.round_speed if self.balanced else None)
                if self.balanced:
                    self.stream.consumed = self.round_end
                    self.speeds.update(totals.speeds)
                self.check_divergence(rnd, totals, max_abs)
                p.round, p.words_done = rnd + 1, p.words_done + totals.words
                p.lr = learning_rate(cfg, p.words_done, plan.words_total)
                window += (totals.loss, totals.examples)
                run_loss += (totals.loss, totals.examples)
                if totals.log_due:
                    self.progress_line(ticker, run_loss)
                last = rnd == plan.rounds - 1
                if (rnd + 1) % cfg.log_every == 0 or last or totals.stop:
                    due_eval = bool(cfg.eval_every and p.words_done - last_eval_words >= cfg.eval_every) or last
                    elapsed = time.perf_counter() - t_start
                    record = self.metrics_record(window, elapsed, last_log, words_at_start, due_eval)
                    if comm.is_root:
                        metrics.write(record)
                        state.history.append(record)
                        thin_history(state.history)
                        _show(bar, record)
                    if due_eval:
                        last_eval_words = p.words_done
                    last_log = (p.words_done, elapsed)
                    window[:] = 0
                if (last or totals.stop or totals.due
                        or (cfg.checkpoint_every and p.words_done - last_ckpt_words >= cfg.checkpoint_every)):
                    ckpt_path = self.save_checkpoint(complete=last)
                    last_ckpt_words, last_ckpt_time = p.words_done, time.perf_counter()
                if totals.stop and not last:
                    stopped = True
                    break
        finally:
            if bar is not None:
                bar.close()
            metrics.close()
        seconds = time.perf_counter() - t_start
        self.params_to_host()
        self.finish(stopped, ckpt_path, p.words_done - words_at_start, seconds)
        return RunResult(state.w_in, state.w_out, self.words, state.history, seconds, p.words_done,
                         stopped, ckpt_path)

    # ---------------------------------------------------------------- log, checkpoint, end
    def progress_line(self, ticker: ProgressLog | None, run_loss: np.ndarray) -> None:
        """Every rank: gather compute and communication seconds; rank 0 logs the line."""
        per_rank = self.comm.gather((self.compute_s, self.syncer.stats.comm_seconds))
        if ticker is not None:
            p = self.state.progress
            ticker.emit(p.words_done, run_loss[0], run_loss[1], p.lr, np.array(per_rank, dtype=np.float64))

    def metrics_record(self, window, elapsed: float, last_log, words_at_start: int, due_eval: bool) -> dict | None:
        """Gather every rank's timings; rank 0 builds the record (others get None)."""
        s = self.syncer.stats
        per_rank = self.comm.gather((self.comm.stats.bytes_sent, self.comm.stats.seconds, self.compute_s,
                                     s.comm_seconds, s.array_seconds, s.bytes_sent, self.local_words))
        evaluation = self.evaluate() if due_eval else None    # every rank: the sharded store gathers rows
        if not self.comm.is_root:
            return None
        p, cfg = self.state.progress, self.cfg
        rank_words = np.array([r[6] for r in per_rank], dtype=np.float64)
        since = rank_words - (self.last_rank_words if self.last_rank_words is not None else 0)
        self.last_rank_words = rank_words
        record = {
            "time": round(time.time(), 3), "restarts": self.restarts,
            "step": p.round, "rounds": self.plan.rounds, "words": p.words_done,
            "epoch": p.words_done / max(self.corpus.n_tokens, 1),
            # null when no rank trained an example since the last line (a 0 would read as a fit)
            "loss": window[0] / window[1] if window[1] else None, "lr": p.lr, "sync": cfg.sync,
            "lr_scale": self.plan.scale,
            # since the last line (what the machine does now) and since the start
            "words_per_s": (p.words_done - last_log[0]) / max(elapsed - last_log[1], 1e-9),
            "words_per_s_run": (p.words_done - words_at_start) / max(elapsed, 1e-9),
            # each rank's own words per wall second since the last line (a slow rank shows here)
            "words_per_s_rank": [round(float(w) / max(elapsed - last_log[1], 1e-9), 1) for w in since],
            "words_rank": [int(w) for w in rank_words],     # each rank's words in this process
            **({"balance_weights": [round(float(w), 3) for w in self.speeds.weights()]} if self.balanced else {}),
            "seconds": elapsed, "syncs": s.syncs,
            "comm_bytes": [int(r[0]) for r in per_rank],
            "comm_seconds": [round(r[1], 4) for r in per_rank],
            "compute_seconds": [round(r[2], 4) for r in per_rank],
            # the syncs' time so far, split into communication and their own array work
            "sync_comm_seconds": [round(r[3], 4) for r in per_rank],
            "sync_array_seconds": [round(r[4], 4) for r in per_rank],
            "sync_bytes": [int(r[5]) for r in per_rank],
        }
        if due_eval:
            record["eval"] = evaluation
        return record

    def word_vectors(self) -> np.ndarray:
        """The words' vectors: the input rows, or (--subwords) the mean of each word's rows."""
        if self.subwords is None:
            return self.state.w_in
        return self.subwords.word_vectors(self.state.w_in)

    def save_checkpoint(self, complete: bool) -> str | None:
        """Gather every rank's RNG state and position into the state; rank 0 writes it."""
        self.params_to_host()
        gathered = self.comm.gather((self.rng.copy(), self.stream.consumed))
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
        return self.comm.on_root(checkpoint.save, os.path.join(self.cfg.out, "checkpoints"), ck,
                                 keep=self.cfg.keep_checkpoints)

    def finish(self, stopped: bool, ckpt_path: str | None, words: int, seconds: float) -> None:
        """Rank 0 reports and exports ``vectors.txt``; every rank learns whether that failed."""
        cfg, log, comm = self.cfg, self.log, self.comm
        if log:
            if stopped:
                log(f"stop requested (SIGTERM/SIGUSR1): wrote {ckpt_path}; resume with --resume auto")
            else:
                log(f"trained {words:,} words in {seconds:.1f} s ({words / max(seconds, 1e-9):,.0f} words/s, "
                    f"{comm.size} rank(s) x {self.plan.threads} thread(s), sync {cfg.sync}, lr x "
                    f"{self.plan.scale}); checkpoint {ckpt_path}")
        if cfg.export and not stopped:
            self.export_vectors(ckpt_path)

    def export_vectors(self, ckpt_path: str | None) -> None:
        self.comm.on_root(self.export, ckpt_path, broadcast=False)

    def export(self, ckpt_path: str | None) -> None:
        vectors = os.path.join(self.cfg.out, "vectors.txt")
        try:
            write_word2vec(vectors, self.words, self.word_vectors(), binary=False)
        except (OSError, InputError) as e:   # the model is safe in the checkpoint: say how to get it
            why = reason(e) if isinstance(e, OSError) else str(e)
            raise InputError(f"training finished and {ckpt_path} holds the model, but writing the vectors "
                             f"failed ({why}); export them later with python -m mpidwe.inspect "
                             f"{self.cfg.out} export -o FILE") from None
        history = self.state.history
        if self.log:
            self.log(f"wrote {vectors}")
            if history and history[-1].get("eval"):
                self.log("evaluation: " + json.dumps(history[-1]["eval"], sort_keys=True))


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


class Evaluator:
    """Rank 0's evaluation during training; returns a flat dict of headline numbers."""

    def __init__(self, cfg: TrainConfig, words: list[str], reference=None):
        from ..evaluate import read_analogies, read_similarity

        self.cfg, self.reference = cfg, reference
        self.index = {w: i for i, w in enumerate(words)}
        self.sim = [(p, read_similarity(p)) for p in cfg.eval_sim]
        self.ana = [(p, read_analogies(p)) for p in cfg.eval_analogy]

    def __call__(self, vectors: np.ndarray) -> dict:
        from ..evaluate import evaluate_analogies, evaluate_similarity

        out = {}
        for path, pairs in self.sim:
            r = evaluate_similarity(vectors, self.index, pairs)
            out[f"sim:{os.path.basename(path)}"] = r["spearman"]
        for path, sections in self.ana:
            r = evaluate_analogies(vectors, self.index, sections, restrict_vocab=self.cfg.eval_restrict_vocab)
            out[f"analogy:{os.path.basename(path)}"] = r["accuracy"]
        if self.reference is not None:
            from ..evaluate.pip import pip_report

            # the reference rows are the corpus's most frequent words, in vocabulary order
            n = len(self.reference.words)
            r = pip_report(vectors[:n], self.reference.vectors)
            out["pip"], out["pip_normalized"] = r["pip"], r["normalized"]
        return out


def _progress_bar(cfg: TrainConfig, total: int, initial: int = 0):
    if not bar_wanted(cfg.progress):     # batch logs get plain lines instead (mpidwe.train.progress)
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="w", unit_scale=True, desc="train", dynamic_ncols=True,
                mininterval=0.5, file=sys.stderr)


def _body(argv, comm: Comm, stop: StopRequest) -> int:
    cfg = comm.agree(parse_command, TrainConfig, argv, prog=PROG, config_file_flag=True,
                     description="Train word embeddings (SGNS/CBOW) on every rank's shard.")
    if cfg.follow:
        from .follow import run_follow

        return run_follow(cfg, comm, stop)
    result = run(cfg, comm, stop=stop)
    return EXIT_REQUEUE if result.stopped else 0


def main(argv=None) -> int:
    setup_cli_logging()
    # catch a time-limit signal that arrives while MPI and the corpus are still starting up
    with StopRequest() as stop:
        return run_main(PROG, lambda a, c: _body(a, c, stop), argv)


class _CallableModule(types.ModuleType):
    """``mpidwe.train(**options)`` trains from Python: the same as :func:`mpidwe.fit`. The
    module stays the module (``python -m mpidwe.train``, ``from mpidwe.train import run``);
    calling it is the one extra (a module's ``__class__`` may be set to a ModuleType
    subclass: Python's reference, "Customizing module attribute access")."""

    def __call__(self, **options):
        from ..api import fit

        return fit(**options)


sys.modules[__name__].__class__ = _CallableModule
