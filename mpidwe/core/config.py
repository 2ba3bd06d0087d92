"""Frozen, typed configuration: one dataclass per command, help text on every field.

The same schema builds the argparse parser, reads TOML config files, validates values
and is stored (as JSON) in every output file, so a run can be reproduced from its output
(the machinery is mpidwe/core/options.py).
"""

from __future__ import annotations

import math
import os
import re
import typing
from dataclasses import dataclass

from .options import (FOREIGN_OPTIONS, _check, _positive, add_arguments, from_json,  # noqa: F401 (re-exported)
                      from_mapping, keyword_message, load_toml, opt, parse_command, resolve_path,
                      to_dict, to_json)



@dataclass(frozen=True)
class SynthConfig:
    """``python -m mpidwe.synth``: demo corpus with a planted answer key."""

    output: str = opt("demo", "directory to write demo.txt and the answer key into")
    tokens: int = opt(3_000_000, "number of tokens to generate")
    seed: int = opt(1, "random seed; the same seed gives the same bytes")
    clusters: int = opt(20, "number of topic clusters")
    cluster_size: int = opt(30, "content words per topic cluster")
    function_words: int = opt(100, "Zipf-distributed function words shared by all topics")
    relations: int = opt(3, "planted relations (each makes pairs a:b that form analogies)")
    relation_pairs: int = opt(12, "word pairs per planted relation")
    rare_words: int = opt(2000, "Zipf-distributed rare filler words (background noise)")
    sentence_length: int = opt(20, "mean sentence (line) length in tokens")
    part: int = opt(1, "1: the demo corpus; 2: a second part to grow it with (preprocess --append): the "
                    "same words plus --new-clusters topic clusters of new words, other sentences, and a "
                    "similarity file of the new clusters' words", choices=[1, 2])
    new_clusters: int = opt(5, "--part 2: topic clusters of new words (--cluster-size words each)")
    rare_share: float = opt(0.08, "share of drawn words that are rare filler words (the function and "
                            "content words share the rest in their usual 35:57 ratio)")
    rare_zipf: float = opt(1.0, "Zipf exponent of the rare filler words; 0 draws them uniformly, which "
                           "with --rare-words 2200000 --rare-share 0.5 --tokens 45000000 gives a "
                           "vocabulary of over 2M words above min-count 5 (docs/lab/benchmarks.md)")
    force: bool = opt(False, "overwrite existing output files")

    def __post_init__(self):
        for name in ("tokens", "clusters", "cluster_size", "sentence_length", "new_clusters"):
            _positive(name, getattr(self, name))
        for name in ("function_words", "relations", "relation_pairs", "rare_words"):
            _positive(name, getattr(self, name), allow_zero=True)
        _positive("seed", self.seed, allow_zero=True)
        _positive("rare_zipf", self.rare_zipf, allow_zero=True)
        _check(0.0 <= self.rare_share < 1.0, f"--rare-share must be in [0, 1), got {self.rare_share}")
        _check(bool(self.output), "--output must not be empty")
        _check(self.cluster_size >= 4, "--cluster-size must be >= 4")
        if self.relations:
            # Each pair of a relation gets its own cluster, and two content words of it.
            _check(self.relation_pairs >= 2, "--relation-pairs must be >= 2")
            _check(self.relation_pairs <= self.clusters, "--relation-pairs must be <= --clusters")
            per_cluster = -(-self.relations * self.relation_pairs // self.clusters)
            _check(2 * per_cluster <= self.cluster_size,
                   f"--relations x --relation-pairs needs --cluster-size >= {2 * per_cluster}")


@dataclass(frozen=True)
class PreprocessConfig:
    """``python -m mpidwe.preprocess``: raw text -> HDF5 corpus."""

    inputs: tuple[str, ...] = opt((), "plain text, .gz or .bz2 files, or - for standard input",
                                  positional=True)
    output: str = opt("corpus.h5", "HDF5 corpus file to write")
    min_count: int = opt(5, "drop words that occur fewer times than this")
    max_vocab: int | None = opt(None, "keep at most this many most frequent words")
    lowercase: bool = opt(False, "lowercase the text (Unicode-aware)")
    normalize: str = opt("none", "text normalisation: none, or text8 (lowercase; every byte "
                         "outside a-z becomes a space)", choices=["none", "text8"])
    strip_doc_tags: bool = opt(False, "drop WikiExtractor <doc ...> and </doc> lines")
    sentence_length: int = opt(1000, "cut lines into sentences of at most this many kept tokens")
    block_bytes: int = opt(4 << 20, "bytes read at a time by each rank (bounds memory)")
    max_word_bytes: int = opt(100, "leave words longer than this many bytes (UTF-8, as stored) out of the "
                              "vocabulary, as rare words are (runs of junk with no space; word2vec reads at "
                              "most 100); 0: no limit")
    force: bool = opt(False, "overwrite an existing output file")
    hold_out: str | None = opt(None, "a UTF-8 file of words (whitespace-separated) to leave out of the "
                               "vocabulary, as written after --lowercase/--normalize: their tokens are "
                               "dropped like rare words, so the words stay unseen (to measure vectors for "
                               "out-of-vocabulary words)")
    append: str | None = opt(None, "grow this corpus instead: the text becomes a new segment (old token ids "
                             "unchanged, new words reaching --min-count in the new text get ids after the "
                             "existing ones, counts updated); the text options and --min-count are the "
                             "corpus's own; the grown corpus replaces the file (written aside, then renamed)")
    allow_duplicate: bool = opt(False, "--append: append a text although the corpus already holds one with "
                                "the same content (SHA-256), or, where it recorded none, the same path and size")

    def __post_init__(self):
        _check(len(self.inputs) > 0, "no input given (a file, or - for standard input)")
        _check(self.append is None or self.output in ("corpus.h5", self.append),
               "--append replaces the corpus it grows; --output cannot name another file (copy the "
               "corpus first to keep the old one)")
        _check(self.inputs.count("-") <= 1, "standard input (-) given more than once")
        _check(not self.allow_duplicate or self.append is not None, "--allow-duplicate goes with --append")
        _check(self.hold_out is None or self.append is None,
               "--hold-out builds a new vocabulary; --append keeps the corpus's own")
        _positive("min_count", self.min_count)
        if self.max_vocab is not None:
            _positive("max_vocab", self.max_vocab)
        _positive("sentence_length", self.sentence_length)
        _check(self.block_bytes >= 4096, "--block-bytes must be >= 4096")
        _positive("max_word_bytes", self.max_word_bytes, allow_zero=True)
        _check(bool(self.output), "--output must not be empty")


MAX_NEGATIVE = 1000
MAX_THREADS_PER_CPU = 4      # --threads beyond this multiple of the node's CPUs is refused
MIN_SYNC_EVERY = 500


# The local-rate cap (``--max-local-lr 0``): negative sampling stays stable to 8 x word2vec's
# 0.025; hierarchical softmax moves its tree's top rows on every example, loses quality beyond
# 2 x --lr and diverges at 8 x (docs/lab/sync-modes.md, "Hierarchical softmax").
MAX_LOCAL_LR_NS = 0.2
MAX_LOCAL_SCALE_HS = 2


def default_max_local_lr(loss: str, lr: float) -> float:
    """What ``--max-local-lr 0`` (the default) means for this loss and rate."""
    return MAX_LOCAL_SCALE_HS * lr if loss == "hs" else MAX_LOCAL_LR_NS


@dataclass(frozen=True)
class TrainConfig:
    """``python -m mpidwe.train``: SGNS / CBOW on every rank's shard, combined over MPI."""

    # the sections of --help, in order (tests/test_config.py: every field is in one)
    HELP_GROUPS: typing.ClassVar[dict] = {
        "data": ("corpus", "out", "segments", "verify_corpus", "block_tokens", "follow", "follow_poll",
                 "follow_settle", "follow_exit_idle"),
        "model": ("model", "dim", "window", "negative", "loss", "sample", "lr", "min_lr_ratio", "epochs",
                  "subwords", "minn", "maxn", "buckets", "shared_negatives", "seed", "init_from"),
        "compute": ("device", "kernel", "threads", "batch_size"),
        "sync (how ranks combine)": ("sync", "sync_every", "sync_seconds", "max_local_lr", "wire", "wire_feedback",
                                     "overlap",
                                     "sync_hot", "sync_full", "sync_schedule", "balance", "allreduce", "exchange", "store", "ring_overlap",
                                     "pipeline",
                                     "memory_budget"),
        "checkpoints, resume and the divergence guard": ("checkpoint_every", "checkpoint_minutes",
                                                         "keep_checkpoints", "resume", "force",
                                                         "guard_loss_ratio", "guard_max_abs"),
        "evaluation": ("eval_every", "eval_sim", "eval_analogy", "eval_pip", "eval_restrict_vocab"),
        "logging and output": ("progress", "log_seconds", "log_every", "export"),
    }

    corpus: str | None = opt(None, "HDF5 corpus from mpidwe.preprocess; none: the demo corpus "
                             "(generated and preprocessed under demo/ if missing)")
    out: str = opt("run", "run directory (configuration, metrics log, vectors, checkpoints)")
    segments: str = opt("all", "which segments of a grown corpus (preprocess --append) to train on: all, new "
                        "(the last one), K (segment K, from 0), K: (K to the last) or K:L (K to L-1); the "
                        "vocabulary is always the whole corpus's")
    model: str = opt("skipgram", "skipgram or cbow", choices=["skipgram", "cbow"])
    dim: int = opt(100, "embedding dimension")
    window: int = opt(5, "maximum window radius (word2vec shrinks it at random per word)")
    negative: int = opt(5, "negative samples per positive example")
    loss: str = opt("ns", "output layer: ns (negative sampling) or hs (word2vec's hierarchical softmax over a "
                    "Huffman tree of the corpus counts; the tree's V-1 inner nodes are the output rows, "
                    "--negative is ignored)", choices=["ns", "hs"])
    sample: float = opt(1e-4, "subsampling threshold for frequent words (0 disables)")
    lr: float = opt(0.025, "starting learning rate (word2vec uses 0.025 for skip-gram, 0.05 for cbow)")
    min_lr_ratio: float = opt(1e-4, "final learning rate as a fraction of --lr")
    epochs: int = opt(5, "passes over the corpus (5, as gensim, word2vec and fastText)")
    subwords: bool = opt(False, "fastText's subword model: a word's input vector is the mean of its own row and "
                         "the rows of its hashed character n-grams (of <word>), so a word outside the "
                         "vocabulary gets a vector from its n-grams (numba kernel only)")
    minn: int = opt(3, "--subwords: shortest character n-gram (fastText -minn)")
    maxn: int = opt(6, "--subwords: longest character n-gram (fastText -maxn)")
    buckets: int = opt(2_000_000, "--subwords: hash buckets, i.e. n-gram rows of the input matrix (fastText -bucket)")
    seed: int = opt(1, "random seed (initialisation, subsampling, windows, negatives)")
    sync: str = opt("auto", "what travels when ranks combine: sparse (only rows some rank touched), "
                    "dense (all-reduce of the whole matrices), auto (per sync, whichever of those two walks "
                    "fewer rows: the same model) or average (whole matrices, classic model "
                    "averaging: every row divided by P); auto, sparse and dense average the rows many ranks "
                    "touched and keep the full step of rows one rank touched (docs/lab/sync-modes.md)",
                    choices=["auto", "dense", "sparse", "average"])
    sync_every: int = opt(0, "words each rank trains between two syncs; 0: W / P for P <= 2 ranks and "
                          "2 W / P^2 beyond, with W = min(2,000,000, 80 x the vocabulary size), and at "
                          "least 5,000 (docs/lab/sync-modes.md)")
    sync_seconds: float = opt(0.0, "several ranks: after the second round, set the words each rank trains between "
                              "syncs so that a round trains for about this many seconds at the slowest rank's "
                              "measured speed (at least 5,000 words; pWord2Vec syncs every 0.1 s); the first two "
                              "rounds use --sync-every; 0: off (docs/lab/sync-modes.md, \"An interval in seconds\")")
    max_local_lr: float = opt(0.0, "with P ranks every rank trains at s x --lr, s = min(P, this / --lr) "
                              "(linear scaling, capped where one rank's SGNS stays stable; in runs of at least "
                              "1,000,000 words per rank also at most max(4, ceil(P / 2)) and 0.15 / --lr), and each synced "
                              "row is divided by max(s, ranks that touched it / 2); 0: 0.2 with negative "
                              "sampling, 2 x --lr with --loss hs (whose tree-top rows every example "
                              "moves: docs/lab/sync-modes.md)")
    wire: str = opt("auto", "--sync dense or auto (its dense syncs): how changed rows travel: fp32, bf16 (16 bits), "
                    "int8 (a scale per row and 8 bits per value), int16 (a scale per row and 16 bits per value), int4 (a scale per row and 4 bits per value), or auto: int4 in tiers (--sync-full), int8 for "
                    "the other dense syncs of the replicated store from 3 ranks on, fp32 elsewhere "
                    "(docs/lab/sync-modes.md); --store blocks: how the output blocks travel round the ring (bf16, "
                    "int8 and int4 keep error feedback, int16 needs none), auto int8 from 16 ranks (int16 where "
                    "int8's feedback would take 256 MB a rank), fp32 below",
                    choices=["auto", "fp32", "bf16", "int8", "int16", "int4"])
    wire_feedback: str = opt("auto", "int8 and int4 rows: each rank keeps what the encoding of a row's change left "
                             "out and adds it to that row's next change (error feedback; two more copies of each "
                             "matrix per rank), forgotten at every checkpoint; auto: on in negative "
                             "sampling's tiers (--sync-full), off elsewhere (docs/lab/sync-modes.md, \"Error feedback\")",
                             choices=["auto", "on", "off"])
    overlap: bool = opt(False, "replicated store: a round's exchange runs in a second thread while the next round "
                        "trains and lands one round late (deterministic; docs/lab/sync-modes.md, \"Overlap\")")
    sync_hot: int = opt(0, "tiers: rows of each matrix, most frequent first, combined at every sync; 0: auto, "
                        "64 x ranks (--loss hs: 64) (docs/lab/sync-modes.md, \"Tiers\")")
    sync_schedule: str = opt("auto", "tiers: which rows the syncs between two of every row combine: geometric "
                             "(the --sync-hot most frequent rows and geometrically more at rarer syncs), doubling "
                             "(pWord2Vec's: at sync k the --sync-hot x 2^t most frequent, t the trailing zero bits "
                             "of k; --sync-hot auto 256, --sync-full auto the first power of 2 that reaches every "
                             "row), or auto: doubling in long runs of negative sampling with --sync-hot and "
                             "--sync-full auto (40M words or more over all epochs from 16 ranks, 16 / P times that "
                             "below), geometric otherwise (docs/lab/sync-modes.md, \"Long runs: averaging or blocks\")",
                             choices=["auto", "geometric", "doubling"])
    sync_full: int = opt(0, "every this many syncs all rows are combined; between, a sync combines the "
                         "--sync-hot most frequent rows and, at rarer syncs, geometrically more (pWord2Vec's "
                         "tiers); a power of 2; 1: every sync combines every row; 0: auto, 256 from 8 ranks on "
                         "(--loss hs: from 4 ranks on the numba kernel, about the rule's interval over HS's hot one) on the "
                         "replicated store with --exchange mpi, not --sync average; 1 elsewhere")
    balance: str = opt("off", "off: each rank trains its own shard, the same words per round (bit-reproducible); "
                       "speed: each round's words are divided among the ranks by the speed each measured "
                       "(for ranks of uneven speed; not bit-reproducible; resumes on any rank count)",
                       choices=["off", "speed"])
    allreduce: str = opt("mpi", "all-reduce algorithm: mpi (the library's) or ring (mpidwe's own)",
                         choices=["mpi", "ring"])
    exchange: str = opt("mpi", "--kernel torch on several ranks: how the device's rows travel between ranks: "
                        "mpi (through host memory and MPI) or torch (device to device by torch.distributed: "
                        "NCCL on CUDA, gloo on CPU; the same model, docs/lab/sync-modes.md)", choices=["mpi", "torch"])
    store: str = opt("auto", "auto: blocks for long runs (40M words or more over all epochs from 16 ranks, 16 / P "
                     "times that from 8 to 15 ranks) where the run allows it (skip-gram, negative sampling, "
                     "no --subwords or --follow, the numba kernel on the CPU, no option only averaging reads), "
                     "replicated otherwise (docs/guide.md, \"Long runs on many ranks\"); "
                     "replicated: every rank holds both full matrices; sharded: each rank owns "
                     "every P-th row and pulls the rows a round touches from their owners (for vocabularies "
                     "beyond one rank's memory; numba kernel, --sync sparse; docs/lab/sync-modes.md); blocks: "
                     "rank r owns vocabulary block r's input rows and the output blocks travel round a ring, so "
                     "every row has one writer and no rank averages copies (skip-gram, negative sampling, "
                     "numba kernel; a round is one pass of the ring: --sync-every words per rank, auto "
                     "4M words over all ranks, more where the ring's bytes or latency per word would be many, at "
                     "most the run's words / 12; docs/lab/blocks.md)",
                     choices=["auto", "replicated", "sharded", "blocks"])
    ring_overlap: str = opt("auto", "--store blocks: on: each output block travels round the ring in two halves "
                            "of equal frequency mass, one on the wire (from a thread of its own) while the other "
                            "trains, with noise words from the half that trains; off: the whole block in one "
                            "message after it trains; auto: on where a pass's 3 P + 8 latency steps stay within "
                            "150 per million words a rank trains (docs/lab/blocks.md, \"Overlap\")",
                            choices=["auto", "on", "off"])
    pipeline: bool = opt(False, "--store sharded: pull the next round's rows in a second thread while this round "
                         "trains, then send again only the rows this round's push changed (the same model as "
                         "without; the thread needs a core of its own: where the ranks fill the cores it "
                         "measured no faster, docs/lab/sync-modes.md; --balance speed splits a "
                         "round only after the one before, so it pulls each round when it starts)")
    memory_budget: float = opt(0.0, "--store sharded: megabytes (MiB) one rank may hold; a round's words are cut "
                             "where its expected working set would not fit beside the rank's own rows (the log "
                             "says whether the interval or the memory bounded the round); 0: half of one "
                             "replica's two matrices (4 x vocabulary x --dim bytes) plus 500, or the node's "
                             "memory over its ranks where that is smaller (docs/lab/sync-modes.md)")
    guard_loss_ratio: float = opt(2.0, "divergence guard: stop (exit 3) when the smoothed loss exceeds "
                                  "this multiple of its best value (0: off)")
    guard_max_abs: float = opt(100.0, "divergence guard: stop (exit 3) when a synced parameter exceeds "
                               "this absolute value (trained SGNS values stay below about 10)")
    device: str = opt("auto", "auto (CUDA if present, else CPU), cpu or cuda",
                      choices=["auto", "cpu", "cuda"])
    threads: int = opt(0, "CPU threads per rank; 0: the node's cores divided among its ranks")
    kernel: str = opt("auto", "update kernel: numba (CPU, Hogwild threads), torch (batched tensor ops; "
                      "CUDA, also runs on CPU), triton (one fused launch per batch of windows, CUDA; "
                      "skip-gram with shared negatives and negative sampling) or auto (numba on CPU; on "
                      "CUDA triton where it applies and is installed, else torch; docs/lab/benchmarks.md); --store "
                      "blocks: numba, or torch (its buckets as batches, on CUDA where there is one)",
                      choices=["auto", "numba", "torch", "triton"])
    shared_negatives: bool = opt(True, "skip-gram: one draw of negatives per centre word, shared by "
                                 "its window's context words (Intel pWord2Vec): about 2x faster at "
                                 "equal or better quality (docs/lab/benchmarks.md); --no-shared-negatives "
                                 "gives word2vec's per-pair negatives; CBOW ignores it")
    batch_size: int = opt(0, "torch and fused triton kernels: centre words (windows) trained per batch from one "
                          "parameter snapshot; 0 (default): adapts to the corpus, the largest power of two up "
                          "to 8,192 (at least 1,024) with 350 raw words per rank and run behind each centre "
                          "of a batch, so a small corpus keeps numba's quality, and at most 204.8 / the local "
                          "rate (s x --lr; at least 128): 4,096 at 0.05, 1,024 at 0.2 (kernels/batch.py); a "
                          "row a batch updates n times has the sum of its updates divided by max(1, n lr "
                          "sigma'(0) |partner row|^2 / 0.5) (docs/lab/benchmarks.md); --loss hs trains 4,096 "
                          "examples per batch (kernels/torch_hs.py)")
    verify_corpus: bool = opt(True, "check the corpus against its chunk digests before training (every rank "
                              "its share of the chunks) and refuse a damaged file")
    block_tokens: int = opt(1 << 20, "tokens read from the corpus at a time (bounds memory)")
    log_every: int = opt(1, "write a metrics line every this many syncs")
    progress: bool = opt(True, "show a progress bar on rank 0 when standard error is a terminal (tqdm); "
                         "otherwise, and with --no-progress, rank 0 logs a plain timestamped line every "
                         "--log-seconds")
    log_seconds: float = opt(30.0, "seconds between plain progress lines (percent, words, loss, lr, words/s, "
                             "ETA, the slowest rank's compute and communication share; Python logging, "
                             "logger mpidwe.train) when no bar is shown; 0: none")
    export: bool = opt(True, "write the final vectors as word2vec text (RUN_DIR/vectors.txt)")
    checkpoint_every: int = opt(0, "write a checkpoint every this many words (all ranks); 0: only "
                                "at the end and on SIGTERM/SIGUSR1")
    checkpoint_minutes: float = opt(0.0, "also write a checkpoint every this many minutes (0: off)")
    keep_checkpoints: int = opt(3, "checkpoints kept in RUN_DIR/checkpoints (older ones are deleted)")
    resume: str | None = opt(None, "auto (newest valid checkpoint in RUN_DIR, if any) or a checkpoint path; "
                             "a checkpoint of other ranks, --epochs or --sync-every continues re-planned")
    init_from: str | None = opt(None, "warm start: a new run starts from this trained model (checkpoint or run "
                                "directory): rows of words it knows are copied, new words start fresh, the "
                                "learning-rate schedule starts over; with --resume auto it applies only when "
                                "RUN_DIR has no checkpoint yet")
    force: bool = opt(False, "start over in a RUN_DIR that already holds a run (its metrics and "
                      "checkpoints are deleted)")
    follow: str | None = opt(None, "watch this folder: every new text file in it is appended to --corpus as a "
                             "segment and trained on (warm start from the previous step, --segments new), a "
                             "checkpoint after each, under RUN_DIR/steps/; a restart goes on where it stopped "
                             "(RUN_DIR/follow.json); write files elsewhere or as .tmp and rename them in")
    follow_poll: float = opt(2.0, "--follow: seconds between two looks at the folder")
    follow_settle: float = opt(1.0, "--follow: a file is taken once untouched for this many seconds")
    follow_exit_idle: bool = opt(False, "--follow: exit (0) when no new file is left instead of waiting")
    eval_every: int = opt(0, "evaluate on rank 0 after the round that passes each multiple of this many words "
                          "(0: only at the end); the other ranks "
                          "wait for it, the scores are logged and the time shows as evaluation")
    eval_sim: tuple[str, ...] = opt((), "word-similarity files (word1 word2 score) to evaluate on")
    eval_analogy: tuple[str, ...] = opt((), "analogy files (questions-words.txt format) to evaluate on")
    eval_pip: bool = opt(False, "also report the PIP loss against the corpus's SPPMI-SVD reference")
    eval_restrict_vocab: int = opt(30000, "analogy answers are searched among this many most frequent words")

    def tiers_can_apply(self) -> bool:
        """Whether tiers (--sync-full > 1) can combine this run's rows: the replicated store
        (the numba kernel's, or the torch and triton kernels' device store, whose syncs the
        host combines: --exchange mpi), with --sync auto, sparse or dense."""
        return self.store in ("replicated", "auto") and self.exchange == "mpi" and self.sync != "average"

    def __post_init__(self):
        _positive("keep_checkpoints", self.keep_checkpoints)
        _positive("checkpoint_every", self.checkpoint_every, allow_zero=True)
        _positive("checkpoint_minutes", self.checkpoint_minutes, allow_zero=True)
        _positive("log_seconds", self.log_seconds, allow_zero=True)
        _positive("eval_every", self.eval_every, allow_zero=True)
        _positive("eval_restrict_vocab", self.eval_restrict_vocab)
        _positive("sync_every", self.sync_every, allow_zero=True)
        _positive("sync_seconds", self.sync_seconds, allow_zero=True)
        _check(self.sync_seconds == 0 or (self.store in ("replicated", "auto") and self.balance == "off"),
               "--sync-seconds re-plans the rounds of the replicated store with --balance off (the sharded "
               "store plans its rounds ahead; --balance speed splits each round by speed already)")
        _positive("memory_budget", self.memory_budget, allow_zero=True)
        _check(self.sync_every == 0 or self.sync_every >= MIN_SYNC_EVERY,
               f"--sync-every must be 0 (automatic) or >= {MIN_SYNC_EVERY:,} words, got {self.sync_every} "
               f"(each sync is a collective over every rank; shorter rounds are mostly overhead and "
               f"empty rounds)")
        for name in ("dim", "window", "negative", "epochs", "block_tokens", "log_every"):
            _positive(name, getattr(self, name))
        _positive("batch_size", self.batch_size, allow_zero=True)
        for name in ("lr",):
            _positive(name, getattr(self, name))
        _check(0 <= self.sample < 1 and math.isfinite(self.sample), f"--sample must be in [0, 1), got {self.sample}")
        _check(self.sync_full >= 0 and self.sync_full & (self.sync_full - 1) == 0,
               f"--sync-full must be a power of 2 (or 0: auto), got {self.sync_full}")
        _check(self.sync_hot >= 0, f"--sync-hot must be >= 1 (or 0: auto), got {self.sync_hot}")
        _check(self.wire in ("fp32", "auto") or self.sync in ("dense", "auto") or self.store == "blocks",
               "--wire bf16, int8, int16 or int4 encodes the rows of --sync dense (or auto's dense syncs)")
        sends = {"fp32": "every bit", "int16": "rows to 1/65534 of their largest value, without feedback"}.get(
            self.wire, "rows rounded to 8 bits of mantissa, without feedback")
        _check(self.wire_feedback != "on" or self.wire in ("auto", "int8", "int4"),
               f"--wire-feedback on keeps what int8 and int4 rows round away; --wire {self.wire} sends {sends}: "
               f"give --wire int8 or int4, or leave --wire-feedback at auto")
        _check(not self.overlap or (self.store in ("replicated", "auto") and self.kernel not in ("torch", "triton") and self.device != "cuda"),
               "--overlap runs the replicated store's exchange beside the numba kernel (not --store sharded, "
               "which has --pipeline, nor --kernel torch)")
        _check(self.sync_full <= 1 or self.tiers_can_apply(),
               "--sync-full > 1 combines rows in tiers on the replicated store with --exchange mpi and --sync "
               "auto, sparse or dense")
        _check(self.exchange == "mpi" or (self.kernel != "numba" and self.store in ("replicated", "auto")
                                          and self.wire in ("fp32", "auto") and self.allreduce == "mpi"),
               "--exchange torch moves the torch or triton kernel's rows (--kernel torch/triton, or auto on CUDA) on the "
               "replicated store, by torch.distributed's own all-reduce in fp32 (not --wire, --allreduce ring)")
        _check(self.kernel != "triton" or (self.model == "skipgram" and self.shared_negatives and self.loss != "hs"),
               "--kernel triton trains skip-gram with shared negatives and negative sampling only")
        _positive("max_local_lr", self.max_local_lr, allow_zero=True)
        if self.max_local_lr == 0:     # automatic: stored resolved, so checkpoints hold the number
            object.__setattr__(self, "max_local_lr", default_max_local_lr(self.loss, self.lr))
        _positive("guard_loss_ratio", self.guard_loss_ratio, allow_zero=True)
        _positive("guard_max_abs", self.guard_max_abs)
        _check(self.guard_loss_ratio == 0 or self.guard_loss_ratio > 1,
               f"--guard-loss-ratio must be 0 (off) or > 1, got {self.guard_loss_ratio}")
        _check(0 < self.min_lr_ratio <= 1, f"--min-lr-ratio must be in (0, 1], got {self.min_lr_ratio}")
        _positive("threads", self.threads, allow_zero=True)
        # far more threads than CPUs only time-slice (and a stop waits for every one of them)
        cpus = os.cpu_count() or 1
        _check(self.threads <= MAX_THREADS_PER_CPU * cpus, f"--threads must be <= {MAX_THREADS_PER_CPU * cpus} "
               f"({MAX_THREADS_PER_CPU} x the {cpus} CPUs of this node), got {self.threads}; 0 (the default) "
               f"divides the node's cores among its ranks")
        _check(self.dim <= 4096, f"--dim must be <= 4096, got {self.dim}")
        # each example updates 1 + negative output rows; word2vec advises 2-20, and far beyond
        # a few hundred training crawls for minutes and then diverges
        _check(self.negative <= MAX_NEGATIVE, f"--negative must be <= {MAX_NEGATIVE}, got {self.negative} "
               f"(word2vec uses 5-20)")
        _check(self.seed >= 0, f"--seed must be >= 0, got {self.seed}")
        _check(1 <= self.minn <= self.maxn <= 32, f"--minn and --maxn must satisfy 1 <= minn <= maxn <= 32, "
               f"got {self.minn} and {self.maxn}")
        _check(1 <= self.buckets <= 100_000_000, f"--buckets must be in [1, 100,000,000], got {self.buckets}")
        _check(not (self.subwords and self.kernel in ("torch", "triton")), "--subwords runs on the numba kernel only "
               "(--kernel numba or auto on a CPU)")
        _check(bool(self.out), "--out must not be empty")
        for name in ("eval_sim", "eval_analogy"):
            paths = [os.path.normpath(p) for p in getattr(self, name)]
            twice = next((p for p in paths if paths.count(p) > 1), None)
            _check(twice is None, f"--{name.replace('_', '-')} names {twice} more than once")
        _positive("follow_poll", self.follow_poll)
        _positive("follow_settle", self.follow_settle, allow_zero=True)
        _check(not self.follow or (self.segments == "all" and self.resume is None and not self.force),
               "--follow trains each new file's segment and resumes by itself: leave out --segments, "
               "--resume and --force")
        _check(re.fullmatch(r"all|new|\d+(:\d*)?", self.segments.strip()) is not None,
               f"--segments must be all, new, K, K: or K:L, got {self.segments!r}")
        _check(self.store != "sharded" or (self.sync in ("sparse", "auto") and self.kernel not in ("torch", "triton")
                                               and self.device != "cuda" and not self.init_from
                                               and self.loss == "ns" and not self.subwords and not self.follow),
               "--store sharded runs the numba kernel on the CPU with --sync sparse or auto (owners combine "
               "pushed rows by the sparse rule), negative sampling without --subwords, and without "
               "--init-from or --follow")
        _check(self.store != "blocks" or (self.model == "skipgram" and self.loss == "ns" and not self.subwords
                                           and self.kernel != "triton" and (self.device != "cuda" or self.kernel == "torch")
                                           and self.balance == "off" and not self.overlap),
               "--store blocks trains skip-gram with negative sampling on the numba kernel or --kernel torch (a "
               "CBOW window, a Huffman path or subword rows would span every rank's block), without --kernel "
               "triton, --balance speed or --overlap; use --store replicated for those")
        _check(self.ring_overlap != "on" or self.store in ("blocks", "auto"),
               "--ring-overlap reads only the block store's ring; give --store blocks, or leave it out")
        _check(not (self.init_from and self.resume not in (None, "auto")),
               "--init-from starts a new run and cannot be combined with --resume PATH (with --resume auto "
               "it applies when RUN_DIR has no checkpoint yet)")


# --wire auto encodes from this many ranks on: from 3 ranks the default interval shrinks as
# 2 W / P^2, so syncs per epoch, and the bytes, grow with P; up to 2 ranks they are few (8
# per epoch on enwiki) and on one node the codec's array work costs more than the bytes it
# saves (docs/lab/sync-modes.md, "auto")
WIRE_AUTO_MIN_RANKS = 3


# --sync-full 0 (auto) combines in tiers from this many ranks on: there the rule's interval
# makes every sync of every row cost more bytes per word than the kernel can hide, and the
# most frequent TIERS_AUTO_HOT_PER_RANK x P rows of each matrix at every sync, the rest at
# exponentially rarer syncs, keep one rank's quality (docs/lab/sync-modes.md, "Tiers")
TIERS_AUTO_MIN_RANKS = 8
TIERS_AUTO_FULL = 256
TIERS_AUTO_HOT_PER_RANK = 64

# --loss hs combines in tiers from this many ranks on, its TIERS_AUTO_HOT_HS most frequent
# rows of each matrix (the tree's top nodes, on almost every path, and the most frequent
# words) at every sync of a short interval (train/plan.py, hs_tiers), every row about as
# often as the rule's interval: HS then keeps one rank's analogy score (within a point) at 4,
# 8 and 16 ranks, where every row at the rule's interval lost 1.6-6 points
# (docs/lab/sync-modes.md, "Hierarchical softmax in tiers")
TIERS_AUTO_MIN_RANKS_HS = 4
TIERS_AUTO_HOT_HS = 64


def tiers_of(cfg: TrainConfig, world_size: int, kernel: str = "numba", full_hs: int = TIERS_AUTO_FULL
             ) -> tuple[int, int]:
    """(every how many syncs all rows are combined, hot rows per matrix) on ``world_size``
    ranks: --sync-full and --sync-hot, or for 0 (auto) tiers where they apply (the replicated
    store with --exchange mpi, whatever the kernel; not --sync average) and every row at
    every sync (1) elsewhere:
    negative sampling from TIERS_AUTO_MIN_RANKS ranks, every TIERS_AUTO_FULL syncs, hot 0
    meaning 64 x ranks; --loss hs from TIERS_AUTO_MIN_RANKS_HS ranks, every ``full_hs``
    syncs (the plan's: the rule's interval over HS's), hot 0 meaning TIERS_AUTO_HOT_HS, with
    the numba ``kernel`` only (HS's tiers sync every few hundred words: measured on the CPU,
    not through the device store's host staging, which pays a copy each way per sync)."""
    hs = cfg.loss == "hs"
    hot = cfg.sync_hot or (TIERS_AUTO_HOT_HS if hs else TIERS_AUTO_HOT_PER_RANK * max(world_size, 1))
    if cfg.sync_full:
        return cfg.sync_full, hot
    least = TIERS_AUTO_MIN_RANKS_HS if hs else TIERS_AUTO_MIN_RANKS
    applies = world_size >= least and cfg.tiers_can_apply() and (kernel == "numba" or not hs)
    return ((full_hs if hs else TIERS_AUTO_FULL) if applies else 1), hot


def wire_of(cfg: TrainConfig, world_size: int, tiered: bool | None = None) -> str:
    """The encoding of the replicated store's dense syncs on ``world_size`` ranks: --wire,
    or for auto, where the sync has dense syncs (--sync auto or dense), int4 in tiers
    (``tiered``, as the plan resolved them; None: whether tiers_of would combine in tiers)
    and int8 from 3 ranks on, and fp32 otherwise (sparse rows and average travel as float32)."""
    if cfg.wire != "auto":
        return cfg.wire
    if cfg.sync not in ("auto", "dense") or world_size < WIRE_AUTO_MIN_RANKS:
        return "fp32"
    tiered = tiers_of(cfg, world_size)[0] > 1 if tiered is None else tiered
    return "int4" if tiered else "int8"


# --store auto trains on the block store (every row one writer, no averaging) from this many
# ranks on, in runs of at least BLOCKS_AUTO_RUN_WORDS words (all epochs) at 16 ranks and more,
# 16 / P times as many below: there averaging's copies drift apart, which no sync schedule or
# local rate we measured repairs (8 and 16 ranks lost 0.08-0.10 WS-353 on enwiki-64M over 3
# epochs), while blocks kept one process's quality. Shorter runs learn more per word by
# averaging's raised local rate: at 16 ranks averaging won at 16M words and lost from 48M on,
# at 8 ranks it won at 48M and 64M and lost at 129M (docs/lab/sync-modes.md, "Long runs:
# averaging or blocks")
BLOCKS_AUTO_MIN_RANKS = 8
BLOCKS_AUTO_RUN_WORDS = 40_000_000


def long_run_words(world_size: int) -> int:
    """The words (all epochs) from which a run on ``world_size`` ranks is long: averaging's
    copies drift apart there (BLOCKS_AUTO_RUN_WORDS from 16 ranks, 16 / P times that below)."""
    return int(BLOCKS_AUTO_RUN_WORDS * max(1.0, 16 / max(world_size, 1)))


# --sync-schedule auto: long runs (long_run_words) of negative sampling in tiers combine
# pWord2Vec's doubling tiers from DOUBLING_HOT rows: on enwiki-64M over 3 epochs they kept
# 0.061-0.081 more WS-353 than the geometric tiers at 8 and 16 ranks, at 40-55% of the bytes
# (rows past the hot tier lose word similarity when combined often); in short runs (enwiki,
# 1 epoch) they lost 1.4-3.6 analogy points, so short runs keep the geometric tiers
# (docs/lab/sync-modes.md, "Long runs: averaging or blocks")
DOUBLING_HOT = 256


def tier_schedule(cfg: TrainConfig, world_size: int, run_words: int) -> str:
    """--sync-schedule: geometric or doubling; auto: doubling in long runs of negative
    sampling whose --sync-hot and --sync-full are automatic, geometric otherwise."""
    if cfg.sync_schedule != "auto":
        return cfg.sync_schedule
    auto = cfg.loss == "ns" and not cfg.sync_hot and not cfg.sync_full
    return "doubling" if auto and run_words >= long_run_words(world_size) else "geometric"


def scheduled_tiers(cfg: TrainConfig, world_size: int, run_words: int, vocab_size: int, full: int, hot: int
                    ) -> tuple[int, int, bool]:
    """The tiers ``(full, hot)`` of tiers_of under this run's schedule (tier_schedule), and
    whether it is the doubling one (then --sync-hot or DOUBLING_HOT rows, and --sync-full or
    the first period that reaches every row)."""
    if full <= 1 or tier_schedule(cfg, world_size, run_words) != "doubling":
        return full, hot, False
    hot = cfg.sync_hot or DOUBLING_HOT
    return cfg.sync_full or doubling_full(vocab_size, hot), hot, True


def doubling_full(vocab_size: int, hot: int) -> int:
    """The doubling tiers' period of a sync of every row: the first power of 2 (at least 2)
    with hot x it >= the vocabulary."""
    full = 2
    while hot * full < vocab_size:
        full *= 2
    return full


# the ring encodings the block store was measured with over long runs (docs/lab/blocks.md):
# a run that names one of these with --wire still goes to the block store by --store auto
BLOCK_LONG_RUN_WIRES = ("fp32", "int8", "int16")


def block_blockers(cfg: TrainConfig, kernel: str, device: str) -> list[str]:
    """What in ``cfg`` (the kernel and device resolved) keeps --store auto on the replicated
    store: options the block store refuses, options only averaging reads, and a --wire the
    block store was not measured with (BLOCK_LONG_RUN_WIRES)."""
    return [name for name, on in (
        ("CBOW", cfg.model != "skipgram"), ("--loss hs", cfg.loss != "ns"), ("--subwords", cfg.subwords),
        (f"the {kernel} kernel", kernel != "numba"), (f"--device {device}", device != "cpu"),
        ("--balance speed", cfg.balance != "off"), ("--overlap", cfg.overlap),
        (f"--sync {cfg.sync}", cfg.sync != "auto"), ("--sync-every", cfg.sync_every != 0),
        ("--sync-full", cfg.sync_full != 0), ("--sync-hot", cfg.sync_hot != 0),
        ("--sync-schedule", cfg.sync_schedule != "auto"),
        ("--sync-seconds", cfg.sync_seconds != 0), ("--max-local-lr", cfg.max_local_lr != default_max_local_lr(cfg.loss, cfg.lr)),
        ("--wire-feedback", cfg.wire_feedback != "auto"),
        (f"--wire {cfg.wire}", cfg.wire not in ("auto",) + BLOCK_LONG_RUN_WIRES),
        (f"--allreduce {cfg.allreduce}", cfg.allreduce != "mpi"), (f"--exchange {cfg.exchange}", cfg.exchange != "mpi"),
        ("--follow", bool(cfg.follow)))
        if on]


def store_of(cfg: TrainConfig, world_size: int, run_words: int, kernel: str, device: str) -> tuple[str, str]:
    """The store this run trains on, and why (\"\" where --store said it): --store, or for auto
    blocks from BLOCKS_AUTO_MIN_RANKS ranks in runs of BLOCKS_AUTO_RUN_WORDS x max(1, 16 / P)
    words or more (``run_words``: all epochs) where nothing in block_blockers holds, else
    replicated."""
    if cfg.store != "auto":
        return cfg.store, ""
    if world_size < BLOCKS_AUTO_MIN_RANKS:
        return "replicated", ""
    least = long_run_words(world_size)
    if run_words < least:
        return "replicated", (f"auto: {run_words:,} words, under {least:,} on {world_size} ranks, average well; longer "
                              f"runs train on --store blocks")
    blockers = block_blockers(cfg, kernel, device)
    if blockers:
        return "replicated", f"auto: {', '.join(blockers)} keep(s) averaging; long runs keep quality on --store blocks"
    return "blocks", (f"auto: a long run ({run_words:,} words) on {world_size} ranks, where averaged copies "
                      f"lose quality")


def feedback_of(option: str, tiered: bool, loss: str = "ns") -> bool:
    """--wire-feedback: on, off, or auto: on in negative sampling's tiers (``tiered``, as the
    plan resolved them; int4 rows, where it was measured: docs/lab/sync-modes.md, "Error
    feedback"), off elsewhere (int8 rows, --loss hs's tiers)."""
    return option == "on" or (option == "auto" and tiered and loss != "hs")
