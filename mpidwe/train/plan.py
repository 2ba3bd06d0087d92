"""What every rank fixes before the first round: device, kernel, threads, the sync interval
and learning-rate scale, the number of rounds and each rank's words per round.

The number of sync rounds is fixed before training from the largest shard, so every rank
makes the same collectives in the same order; each rank spreads its own shard evenly over
those rounds. A run that continues a checkpoint written by another plan is re-planned in
train/resume.py.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

import numpy as np

from ..core.blocks import block_wire, ring_pieces
from ..core.config import MIN_SYNC_EVERY, TrainConfig, scheduled_tiers, store_of, tiers_of, to_dict, wire_of
from ..core.errors import ConfigError
from ..core.huffman import build_tree
from ..core.vocab import keep_probabilities
from ..parallel.comm import Comm
from ..parallel.rows import MiB, RoundMemory, default_budget, fixed_bytes
from ..parallel.rule import lr_scale
from ..io.corpus import Corpus, Shard
from ..kernels.args import KernelArgs
from ..kernels.common import learning_rate as kernel_learning_rate
from ..version import __version__


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
# (measured on enwiki: docs/lab/sync-modes.md; predicted: docs/lab/scaling.md).
SYNC_WORDS_MAX = 2_000_000


SYNC_WORDS_PER_TYPE = 80


SYNC_FULL_INTERVAL_RANKS = 2


SYNC_EVERY_MIN = 5_000


# In tiers (config.tiers_of) the hot rows are combined at every sync and the rest wait, so
# the interval must stay where the hot tier keeps quality: the rule's global interval at
# this many ranks, 2 W / 16, shared among the ranks from there on, and below it the rule's
# interval per rank at this many ranks, 2 W / 16^2 (measured on enwiki: 8 ranks in tiers
# lose 3 analogy points at their own rule's 62,500 words per rank, none at 15,625; 32 ranks
# keep quality at 7,812, lose 1.6 points at 15,625; docs/lab/sync-modes.md, "Tiers")
TIERS_INTERVAL_RANKS = 16


# --loss hs in tiers (config.tiers_of, auto): the hot rows, the Huffman tree's top nodes on
# almost every path and the most frequent words, are combined every 1 / HS_TIERS_SHARE of
# the rule's global words W, shared among the ranks (20,000 / P words per rank on enwiki), up
# to HS_TIERS_RANKS ranks and 1 / P^2 beyond, as the rule's own interval shrinks beyond 2
# ranks (enwiki: 5,000 / 2,500 / 625 words per rank at 4 / 8 / 16 ranks), and every row about
# as often as the rule's interval (auto_sync_every): HS's top nodes take a step from every
# example, and at the rule's interval P ranks' stale steps on them cost 1.6-2.6 analogy
# points at 4 and 8 ranks and 6 at 16; at 16 ranks 1,250 words still cost 1.3-1.4 points,
# 1,000 0.3-1.3 and 625 0.1-0.9 (docs/lab/sync-modes.md, "Hierarchical softmax in tiers")
HS_TIERS_SHARE = 100
HS_TIERS_RANKS = 8


def hs_tiers(vocab_size: int, world_size: int, sync_every: int = 0) -> tuple[int, int]:
    """--loss hs in tiers: (words per rank between syncs, every how many syncs every row is
    combined): --sync-every or W / (HS_TIERS_SHARE x P), times HS_TIERS_RANKS / P beyond
    HS_TIERS_RANKS ranks, at least MIN_SYNC_EVERY, and the power of 2 of those nearest the
    rule's interval (auto_sync_every); 1 (every row at every sync) where the interval is over
    1 / sqrt(2) of the rule's."""
    p = max(world_size, 1)
    global_words = min(SYNC_WORDS_MAX, SYNC_WORDS_PER_TYPE * vocab_size)
    share = HS_TIERS_SHARE * p * max(1, p / HS_TIERS_RANKS)
    every = sync_every or max(MIN_SYNC_EVERY, int(global_words // share))
    ratio = auto_sync_every(vocab_size, p) / every
    return every, 1 << max(0, round(math.log2(ratio)))


def auto_sync_every(vocab_size: int, world_size: int = 1, tiered: bool = False) -> int:
    """Default words per rank between syncs: W / P up to 2 ranks and 2 W / P^2 beyond, with
    W = min(2M, 80 x V), and at least 5,000 (below that the per-sync overhead dominates);
    ``tiered`` (the run combines in tiers): 2 W / (16 max(P, 16)), at least 5,000."""
    p = max(world_size, 1)
    global_words = min(SYNC_WORDS_MAX, SYNC_WORDS_PER_TYPE * vocab_size)
    if tiered:
        share = TIERS_INTERVAL_RANKS * max(p, TIERS_INTERVAL_RANKS) / SYNC_FULL_INTERVAL_RANKS
    else:
        share = p * max(1, p / SYNC_FULL_INTERVAL_RANKS)
    return int(max(SYNC_EVERY_MIN, global_words // share))


# --store blocks: words all ranks train in one pass of the ring (a round). A pass trains every
# (input block, output block) bucket once, so a row's neighbours in another block reach it
# once per pass: passes of 4M words held one process's quality in a one-process simulation of
# 16 blocks on enwiki and on a corpus four times its size, 16M-word passes lost 1-6 analogy
# points at one epoch; with real ranks 16M-word passes held it at 32 ranks over 3 epochs of
# enwiki-64M (docs/lab/blocks.md)
BLOCK_PASS_WORDS = 4_000_000
# ... longer where the ring's bytes or its latency steps per word would be too many: a pass
# sends the output matrix once round the ring (V (P - 1) rows per rank, in int8 d + 4 bytes
# each) and takes about 2 P + 8 latency steps (the routing's all-to-all and the ring's P - 1
# steps), against P over the pass's words per rank. The ring gets 30 bytes per word of a
# 60-byte budget, counted in int8 rows (below 16 ranks it sends fp32, 4 times that): the pairs'
# routing takes 25-30 more (int32 ids; enwiki-64M at 16 ranks: 7.6M-word passes, 58 bytes a word
# in all, WS-353 0.689 / 0.680 and Google 56.3% / 55.5% on two seeds against one process's
# 0.694 / 0.693 and 54.8% / 54.2%; docs/lab/blocks.md)
BLOCK_RING_BYTES_PER_WORD = 30
BLOCK_STEPS_PER_MILLION = 150
# ... and at least this many passes in a run: each trains every bucket once, so a short run
# needs short passes (the 3M-token demo corpus, 2 epochs, 8 ranks: 96.5% analogy in 8 passes,
# 99.2% in 12, 99.5% in 18, one process 100%)
BLOCK_PASSES_MIN = 12


def block_pass_words(run_words: int, world_size: int, vocab_size: int = 0, dim: int = 100) -> int:
    """--store blocks, --sync-every 0: the words per rank of one pass (``run_words``: the
    run's words over all epochs)."""
    p = max(world_size, 1)
    ring = vocab_size * (dim + 4) * (p - 1) / BLOCK_RING_BYTES_PER_WORD
    latency = (2 * p + 8) * p * 1e6 / BLOCK_STEPS_PER_MILLION if p > 1 else 0
    words = min(max(BLOCK_PASS_WORDS, ring, latency), run_words // BLOCK_PASSES_MIN)
    return max(SYNC_EVERY_MIN, int(words) // p)


def node_memory() -> int:
    """This node's physical memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0


def sharded_round(cfg: TrainConfig, counts: np.ndarray, interval: int, world_size: int, share: int = 0
                  ) -> tuple[int, str, int]:
    """--store sharded: (words per rank per round, what bounded them, the budget in bytes).
    The round is cut where its expected working set would not fit in the budget beside the
    rank's own rows, vocabulary and runtime (parallel/rows.py); where the budget does not bind the
    interval stays as it is, and so does the model. ``share``: the smallest node memory per
    rank (0: unknown)."""
    v = len(counts)
    budget = int(cfg.memory_budget * MiB) if cfg.memory_budget else default_budget(v, cfg.dim, world_size, share)
    model = RoundMemory(np.asarray(counts, dtype=np.float64), keep_probabilities(counts, cfg.sample), cfg.dim,
                        cfg.window, cfg.negative, cfg.shared_negatives or cfg.model == "cbow",
                        cfg.pipeline and cfg.balance != "speed")
    fixed = fixed_bytes(v, cfg.dim, world_size)
    least = min(interval, SYNC_EVERY_MIN)
    words = model.words_within(budget - fixed, interval, least)
    if words >= interval:
        return interval, "interval", budget
    if words >= least:
        return words, "memory", budget
    need = (fixed + model.peak(least)) / MiB
    if cfg.memory_budget:
        raise ConfigError(f"--memory-budget {cfg.memory_budget:g} MB does not hold a round of {least:,} words per "
                          f"rank beside the rank's own rows, vocabulary and runtime ({fixed / MiB:,.0f} MB): it "
                          f"needs about {need:,.0f} MB; give more, or run on more ranks")
    return least, f"memory (the node's share, {budget / MiB:,.0f} MB, is below the {need:,.0f} MB of the " \
                  f"smallest round)", budget


def round_targets(local_total: int, rounds: int) -> np.ndarray:
    """Cumulative local words at the end of each round (the last is ``local_total``)."""
    return (np.arange(1, rounds + 1, dtype=np.int64) * local_total) // rounds


def learning_rate(cfg: TrainConfig, words_done: int, words_total: int) -> float:
    """The configured rate at a point of global progress (the kernels' own schedule)."""
    return kernel_learning_rate(cfg.lr, cfg.lr * cfg.min_lr_ratio, words_done, 1, 0, max(words_total, 1))


def cpus_allowed() -> int:
    """The CPUs this process may run on (its affinity mask, which MPI launchers set when
    they bind ranks), or the machine's where the mask cannot be read."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve_threads(cfg: TrainConfig, comm: Comm) -> int:
    if cfg.threads:
        return cfg.threads
    return max(1, cpus_allowed() // comm.node_size)


def binding_warning(threads: int, auto: bool, allowed: list[int], node_cpus: int, node_size: int) -> str:
    """A warning where the ranks' CPU binding does not fit their threads ("" where it does):
    ``allowed`` is every rank's CPU count (its affinity), ``node_cpus`` the node's CPUs and
    ``node_size`` its ranks. Open MPI binds each rank to one core when a job has 1 or 2
    ranks: 16 threads on that core trained enwiki no faster than 1 thread (measured on a
    16-core node, docs/lab/scaling.md), and ``--threads 0`` there chose 1 thread."""
    rank, fewest = min(enumerate(allowed), key=lambda rc: (rc[1], rc[0]))
    fix = (f"Open MPI binds each rank to one core when a job has 1 or 2 ranks: add --bind-to none "
           f"(or --map-by ppr:1:node:PE={max(threads, node_cpus // max(node_size, 1))}); under srun give --cpus-per-task")
    if threads > fewest:
        return (f"warning: {threads} thread(s) per rank, but rank {rank} may run on {fewest} CPU(s) (its affinity, "
                f"as the MPI launcher bound it), so its threads share them; {fix}")
    if auto and fewest < node_cpus // max(node_size, 1):
        return (f"warning: --threads 0 chose {threads} thread(s) per rank: rank {rank} may run on {fewest} of its "
                f"node's {node_cpus} CPUs (its affinity, as the MPI launcher bound it); {fix}, or give --threads")
    return ""


def _nvidia_gpus_visible() -> bool:
    """Cheap check before importing torch: the NVIDIA driver lists its GPUs in /proc."""
    try:
        return bool(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


def _torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _import_torch(why: str):
    torch = _torch_or_none()
    if torch is None:
        raise ConfigError(f"{why} needs PyTorch, which is not installed (pip install torch)")
    return torch


def resolve_device(cfg: TrainConfig, comm: Comm) -> tuple[str, str]:
    """``cpu`` or ``cuda:N`` with N = node-local rank modulo the GPUs on the node, and why
    (the run's first log line says both; "" where the option said it all). ``--device cuda``
    without a usable GPU is an error, never a quiet fall back to the CPU."""
    if cfg.device == "cpu":
        return "cpu", ""
    if cfg.device == "auto" and not _nvidia_gpus_visible():
        return "cpu", "auto: no NVIDIA GPU found"
    torch = _import_torch("--device cuda") if cfg.device == "cuda" else _torch_or_none()
    if torch is None:
        return "cpu", "auto: an NVIDIA GPU but no PyTorch"
    if not torch.cuda.is_available():
        if cfg.device == "auto":
            return "cpu", "auto: PyTorch sees no usable CUDA device"
        raise ConfigError("--device cuda: no usable CUDA device on this node (torch.cuda.is_available() is "
                          "False); use --device auto or cpu")
    n = torch.cuda.device_count()
    return f"cuda:{comm.node_rank % n}", f"{'auto: ' if cfg.device == 'auto' else ''}{n} CUDA device(s) found"


def _triton_available() -> bool:
    from ..kernels import triton_kernel       # only on a CUDA node: it imports torch and triton

    return triton_kernel.available()


def fused_applies(cfg: TrainConfig) -> str:
    """"" where the fused kernel can train this run, else why not."""
    if cfg.model != "skipgram" or cfg.loss == "hs" or not cfg.shared_negatives:
        return "the fused kernel trains skip-gram with shared negatives and negative sampling only"
    if cfg.subwords:
        return "--subwords runs on the numba kernel only"
    return ""


def resolve_kernel(cfg: TrainConfig, device: str) -> tuple[str, str]:
    """The update kernel for ``device`` and why ("" where the device or the option said it
    all). auto: numba on the CPU; on CUDA the fused triton kernel (the fastest there, at
    numba's quality: docs/lab/benchmarks.md) where it applies and triton is installed, else torch."""
    if cfg.kernel == "auto":
        if device == "cpu":
            return "numba", ""
        why_not = fused_applies(cfg) or ("" if _triton_available() else "triton is not installed")
        return ("torch", f"auto: torch kernel, not triton ({why_not})") if why_not else ("triton", "")
    if cfg.kernel == "numba" and device != "cpu":
        raise ConfigError("--kernel numba runs on the CPU only; use --kernel triton, torch (or auto) with CUDA")
    if cfg.kernel == "torch":
        _import_torch("--kernel torch")
        if device == "cpu":
            return "torch", "--kernel torch on the CPU, where numba is faster"
    if cfg.kernel == "triton":
        _import_torch("--kernel triton")
        if not _triton_available():
            raise ConfigError("--kernel triton needs the triton package, which is not installed (pip install triton)")
        if device == "cpu":
            if os.environ.get("TRITON_INTERPRET") != "1":
                raise ConfigError("--kernel triton runs on CUDA (on the CPU only under TRITON_INTERPRET=1, "
                                  "for tests); use --kernel numba or auto on the CPU")
            return "triton", "--kernel triton on the CPU under TRITON_INTERPRET=1 (a test mode, slow)"
    return cfg.kernel, ""


def resolve_exchange(cfg: TrainConfig, kernel: str) -> None:
    """Refuse what the kernel ``--kernel auto`` chose cannot do (config.py checks only the
    kernel a user names): the device store has no overlapped exchange."""
    if cfg.exchange == "torch" and kernel not in ("torch", "triton"):
        raise ConfigError(f"--exchange torch moves the torch kernel's rows, but this run trains with {kernel} "
                          f"(--kernel auto on a CPU); give --kernel torch or leave out --exchange")
    if kernel != "numba" and cfg.overlap:
        raise ConfigError(f"--overlap needs the numba kernel on the CPU, but --kernel {cfg.kernel} chose {kernel} "
                          f"on this GPU node; give --kernel numba --device cpu or leave out --overlap")


@dataclass(frozen=True)
class Compute:
    """Where a run trains and with what, and why (said in its first log line)."""

    device: str
    kernel: str
    why: str              # "" where the options said it all


def choose_compute(cfg: TrainConfig, comm: Comm) -> Compute:
    """Device and kernel, the same on every rank (a collective: a rank's error is raised on all)."""
    device, why_device = comm.agree(resolve_device, cfg, comm)
    if cfg.store == "blocks" and device != "cpu" and cfg.kernel != "torch":
        # the block store trains on the GPU with --kernel torch only (config.py refuses triton and
        # --device cuda without it): auto keeps the numba kernel, which its figures are of
        device, why_device = "cpu", (f"--store blocks: numba on the CPU (give --kernel torch for the GPU; "
                                     f"{why_device.removeprefix('auto: ')}, unused)")
    kernel, why_kernel = comm.agree(resolve_kernel, cfg, device)
    comm.agree(resolve_exchange, cfg, kernel)
    return Compute(device, kernel, "; ".join(why for why in (why_device, why_kernel) if why))


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
    scale: int                 # every rank trains at scale x lr (parallel/rule.py)
    resolved: dict             # the configuration as run: config.json and every checkpoint
    binding: str = ""          # a warning where the ranks' CPU binding does not fit their threads

    @property
    def local_lr(self) -> float:
        """The learning rate every rank starts at: scale x --lr."""
        return self.resolved["local_lr"]


MIN_WORDS_PER_RANK = 1_000     # below this, a rank's share is a few sentences: more ranks only add syncs


def size_warnings(n_tokens: int, n_words: int, ranks: int) -> list[str]:
    """Lines for a run too small to learn anything: a vocabulary of one word (every pair is
    that word with itself), or fewer than MIN_WORDS_PER_RANK corpus words per rank."""
    out = []
    if n_words < 2:
        out.append(f"warning: the vocabulary holds {n_words} word(s): every training pair is that word with "
                   f"itself, so the vectors learn nothing (preprocess more text, or with a lower --min-count)")
    if ranks > 1 and n_tokens < MIN_WORDS_PER_RANK * ranks:
        out.append(f"warning: {n_tokens:,} corpus words over {ranks} ranks ({n_tokens // ranks:,} per rank): too "
                   f"few for several ranks to help, and a rank may get none; train on 1 rank (mpiexec -n 1), "
                   f"or on a larger corpus")
    return out


def resolve_store(cfg: TrainConfig, world_size: int, corpus: Corpus, compute: Compute) -> tuple[TrainConfig, str]:
    """``cfg`` with --store auto resolved (config.store_of: the block store for long runs on
    many ranks), and why (said in the first log line); the same on every rank."""
    store, why = store_of(cfg, world_size, corpus.n_tokens * cfg.epochs, compute.kernel, compute.device)
    return (cfg if store == cfg.store else dataclasses.replace(cfg, store=store)), why


def make_plan(cfg: TrainConfig, comm: Comm, corpus: Corpus, compute: Compute | None = None,
              store_choice: str = "") -> Plan:
    """``compute``: the run's device and kernel when already chosen (before the corpus opens);
    ``cfg.store`` as :func:`resolve_store` left it, which says why: ``store_choice``."""
    compute = choose_compute(cfg, comm) if compute is None else compute
    device, kernel = compute.device, compute.kernel
    # --store blocks: one writer per row, so every rank trains at one process's rate
    scale = 1 if cfg.store == "blocks" else comm.agree(lr_scale, cfg.sync, comm.size, cfg.lr, cfg.max_local_lr,
                                                       corpus.n_tokens * cfg.epochs / comm.size)
    threads = resolve_threads(cfg, comm)
    allowed = comm.allgather(cpus_allowed())        # every rank, whatever its device: a collective
    binding = binding_warning(threads, not cfg.threads, allowed, os.cpu_count() or 1,
                              comm.node_size) if device == "cpu" else ""
    shard = corpus.shard(comm.rank, comm.size)
    shard_sizes = comm.allgather(shard.n_tokens)
    every_hs, full_hs = hs_tiers(corpus.n_words, comm.size, cfg.sync_every)
    full, hot, doubling = scheduled_tiers(cfg, comm.size, corpus.n_tokens * cfg.epochs, corpus.n_words,
                                          *tiers_of(cfg, comm.size, kernel, full_hs))
    # as run: every F-th sync combines every row, the others the H most frequent and more
    # (None: every sync, every row; the replicated store with --exchange mpi only); the
    # geometric schedule says no name (as every config.json before the doubling one)
    tiers = (dict(full=full, hot=hot, wire=wire_of(cfg, comm.size, True), **({"schedule": "doubling"} if doubling else {}))
             if full > 1 and comm.size > 1 else None)
    if tiers and cfg.loss == "hs" and not cfg.sync_full:      # --loss hs, tiers by default: HS's interval
        sync_every = every_hs
    elif cfg.store == "blocks":       # a round is one pass of the ring
        sync_every = cfg.sync_every or block_pass_words(corpus.n_tokens * cfg.epochs, comm.size, corpus.n_words,
                                                        cfg.dim)
    else:
        sync_every = cfg.sync_every or auto_sync_every(corpus.n_words, comm.size, tiers is not None)
    sharded = {}
    if cfg.store == "sharded":
        share = min(comm.allgather(node_memory() // max(comm.node_size, 1)))
        sync_every, bound, budget = comm.on_root(sharded_round, cfg, corpus.counts, sync_every, comm.size, share)
        sharded = dict(round_bound=bound, memory_budget_mb=round(budget / MiB, 3))
    rounds = count_rounds(shard_sizes, cfg.epochs, sync_every)
    words_total = corpus.n_tokens * cfg.epochs
    if cfg.balance == "speed":    # one stream for all ranks; targets are global positions
        rounds = max(1, math.ceil(words_total / (comm.size * sync_every)))
    resolved = dict(to_dict(cfg), corpus=corpus.path, corpus_id=corpus.corpus_id, device=device, kernel=kernel,
                    compute_choice=compute.why, store_choice=store_choice,
                    sync_every=sync_every, lr_scale=scale, local_lr=cfg.lr * scale, sync_tiers=tiers,
                    threads=threads, ranks=comm.size, rounds=rounds, words_total=words_total,
                    **({"block_wire": block_wire(cfg, comm.size, corpus.n_words, cfg.dim),
                        "ring_pieces": ring_pieces(cfg.ring_overlap, comm.size, sync_every)} if cfg.store == "blocks" else {}),
                    vocab_size=corpus.n_words, mpi=comm.mpi_library, version=__version__, **sharded)
    own = words_total if cfg.balance == "speed" else shard.n_tokens * cfg.epochs
    return Plan(device, kernel, threads, shard, rounds, round_targets(own, rounds), words_total, scale, resolved,
                binding)


def kernel_args(cfg: TrainConfig, plan: Plan, counts: np.ndarray, keep: np.ndarray, table: np.ndarray,
                subwords=None) -> KernelArgs:
    """The kernels' arguments for the whole run (``subwords``: the run's core.subwords table).
    --loss hs: the Huffman tree of the counts, rebuilt at every start; its torch kernel keeps
    its own batch size (it counts examples, not windows)."""
    hs = build_tree(counts).tables() if cfg.loss == "hs" else None
    return KernelArgs(
        keep_prob=keep, neg_table=table, words_total=plan.words_total, model=cfg.model, window=cfg.window,
        negative=cfg.negative, lr0=plan.local_lr, lr_min=plan.local_lr * cfg.min_lr_ratio, threads=plan.threads,
        # CBOW has one target set per window already
        shared_negatives=cfg.shared_negatives and cfg.model == "skipgram", hs=hs,
        subwords=None if subwords is None else (subwords.ptr, subwords.ids),
        batch_size=cfg.batch_size if hs is None else None, fused=plan.kernel == "triton")
