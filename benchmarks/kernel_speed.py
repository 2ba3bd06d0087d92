"""Kernel speed and quality against gensim, on the same text, cores and hyperparameters.

    python benchmarks/kernel_speed.py [--epochs 5] [--threads 1 2] [--variants pair shared]
    python benchmarks/kernel_speed.py --stages [--corpus-h5 enwiki.h5] [--stage-tokens 4000000]

Builds a min_count vocabulary from ``--input`` (text8 style: one line of words), cuts it
into sentences of 1000 raw tokens as gensim's Text8Corpus does, and trains skip-gram
(dim 100, window 5, negative 5, sample 1e-4 by default; CBOW too if a cbow variant is
asked for) with gensim 4 and with mpidwe.kernels.cpu; each variant is compared with gensim
on the same model. Speed is raw corpus tokens (before min_count and subsampling) x
epochs / wall seconds of training only (vocabulary building excluded, for both). Quality is
WS-353 Spearman and analogy accuracy (restrict_vocab 30000), both via gensim's evaluators.

Our w_in starts as gensim initialises it (``--init``; see init_params).

gensim runs with workers=1 from a list of sentences, and with workers=N from
``corpus_file`` (its fastest multi-core mode). Our kernel runs ``threads`` Hogwild threads
on blocks of ``--block-tokens``. The first call of each variant is timed separately: it is
numba's compile (first run on a machine) or its cache load.

``--stages`` instead prints where a kept word's time goes in the default kernel (skip-gram,
shared negatives) on a prefix of a preprocessed corpus: cumulative variants of the kernel,
each one stage more than the last (see STAGES), timed in CPU seconds round robin, and a
roofline (flops and row bytes per kept word against this core's copy bandwidth, random row
gather and single-thread matmul).

The machine may be shared: the load average is printed with the table, and "w/s cpu" is
raw words per CPU second times the thread count, which other jobs disturb less than the
wall rate (gensim's count includes its job-producer thread).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Multi-threaded BLAS spins against the kernels' threads and other jobs, and makes gensim's
# analogy evaluation 5x slower on a shared machine; nothing timed here uses BLAS threads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from mpidwe.kernels import cpu  # noqa: E402
from mpidwe.kernels.args import KernelArgs  # noqa: E402
from mpidwe.core.vocab import keep_probabilities, negative_table  # noqa: E402

VARIANTS = {"pair": ("skipgram", False), "shared": ("skipgram", True), "cbow": ("cbow", False)}


@dataclass
class Corpus:
    words: list[str]
    counts: np.ndarray          # int64 [V]
    ids: np.ndarray             # int32, in-vocabulary tokens
    starts: np.ndarray          # int64 sentence offsets into ids
    sentences: list[list[str]]  # raw sentences of sentence_length tokens (for gensim)
    raw_tokens: int


def load_corpus(path: str, min_count: int, sentence_length: int) -> Corpus:
    raw = Path(path).read_text().split()
    counts = collections.Counter(raw)
    words = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(words)}
    sentences = [raw[i:i + sentence_length] for i in range(0, len(raw), sentence_length)]
    ids, starts = [], []
    for sentence in sentences:
        starts.append(len(ids))
        ids.extend(index[w] for w in sentence if w in index)
    return Corpus(words, np.array([counts[w] for w in words], np.int64),
                  np.array(ids, np.int32), np.array(starts, np.int64), sentences, len(raw))


def quality(words, vectors) -> tuple[float, float]:
    from gensim.models import KeyedVectors
    kv = KeyedVectors(vectors.shape[1])
    kv.add_vectors(words, vectors)
    return quality_kv(kv)


def quality_kv(kv) -> tuple[float, float]:
    ws = kv.evaluate_word_pairs(str(DATA / "wordsim353.tsv"))[1][0]
    analogy = kv.evaluate_word_analogies(str(DATA / "questions-words.txt"), restrict_vocab=30_000)[0]
    return float(ws), float(analogy)


def run_gensim(corpus: Corpus, a, kind: str, workers: int, seed: int) -> dict:
    from gensim.models import Word2Vec
    model = Word2Vec(vector_size=a.dim, window=a.window, negative=a.negative, sample=a.sample,
                     min_count=a.min_count, sg=int(kind == "skipgram"), hs=0, cbow_mean=1,
                     workers=workers, epochs=a.epochs, seed=seed, alpha=a.alpha,
                     min_alpha=a.min_alpha)
    if workers == 1:
        model.build_vocab(corpus.sentences)
        t, t_cpu = time.perf_counter(), time.process_time()
        model.train(corpus.sentences, total_examples=len(corpus.sentences), epochs=a.epochs)
        mode = "sentences"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "corpus.txt")
            with open(path, "w") as fh:
                fh.writelines(" ".join(s) + "\n" for s in corpus.sentences)
            model.build_vocab(corpus_file=path)
            t, t_cpu = time.perf_counter(), time.process_time()
            model.train(corpus_file=path, total_words=model.corpus_total_words,
                        total_examples=model.corpus_count, epochs=a.epochs)
        mode = "corpus_file"
    seconds = time.perf_counter() - t
    return dict(name=f"gensim {kind} {mode}", model=kind, threads=workers, seconds=seconds,
                cpu=time.process_time() - t_cpu, quality=quality_kv(model.wv), first_call=None)


INIT_HALF_WIDTH = {"gensim": 1.0, "word2vec": 0.5}


def init_params(vocab: int, dim: int, seed: int, init: str):
    """w_in uniform in [-s/dim, s/dim), w_out zeros: s = 0.5 is word2vec.c's choice, s = 1 is
    gensim 4's (its prep_vectors); the wider start gives gensim-level analogy scores here."""
    rng = np.random.default_rng(seed)
    scale = 2 * INIT_HALF_WIDTH[init] / dim
    w_in = ((rng.random((vocab, dim), dtype=np.float32) - 0.5) * scale).astype(np.float32)
    return w_in, np.zeros((vocab, dim), np.float32)


def blocks(corpus: Corpus, block_tokens: int):
    """(tokens, sent_starts) blocks cut at sentence starts, as the trainer streams them."""
    cuts = np.searchsorted(corpus.starts, np.arange(0, len(corpus.ids), block_tokens))
    cuts = np.unique(np.append(cuts, len(corpus.starts)))
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        beg = corpus.starts[lo]
        end = corpus.starts[hi] if hi < len(corpus.starts) else len(corpus.ids)
        yield corpus.ids[beg:end], corpus.starts[lo:hi] - beg


def run_mpidwe(corpus: Corpus, a, variant: str, threads: int, seed: int) -> dict:
    model, shared = VARIANTS[variant]
    vocab = len(corpus.words)
    keep = keep_probabilities(corpus.counts, a.sample)
    table = negative_table(corpus.counts)
    w_in, w_out = init_params(vocab, a.dim, seed, a.init)
    rng_state = np.random.SeedSequence(seed).generate_state(threads, dtype=np.uint64)
    touched = np.zeros(vocab, np.uint8), np.zeros(vocab, np.uint8)
    total = len(corpus.ids) * a.epochs
    args = KernelArgs(keep_prob=keep, neg_table=table, words_total=total, model=model, window=a.window,
                      negative=a.negative, lr0=a.alpha, lr_min=a.min_alpha, threads=threads,
                      shared_negatives=shared)

    # The first call compiles (or loads numba's cache): timed on its own, on scratch rows.
    t = time.perf_counter()
    cpu.train_block(w_in.copy(), w_out.copy(), corpus.ids[:2000], np.zeros(1, np.int64), rng_state.copy(),
                    *touched, args)
    first_call = time.perf_counter() - t

    done, loss, examples = 0, 0.0, 0
    t, t_cpu = time.perf_counter(), time.process_time()
    for _ in range(a.epochs):
        for tokens, starts in blocks(corpus, a.block_tokens):
            l_, n_, words = cpu.train_block(w_in, w_out, tokens, starts, rng_state, *touched, args.at(done, 1.0))
            done, loss, examples = done + words, loss + l_, examples + n_
    seconds = time.perf_counter() - t
    return dict(name=f"mpidwe {variant}", model=model, threads=threads, seconds=seconds,
                cpu=time.process_time() - t_cpu, quality=quality(corpus.words, w_in),
                first_call=first_call, loss=loss / max(examples, 1))


def report(rows: list[dict], corpus: Corpus, a) -> None:
    base = {(r["model"], r["threads"]): r["rate"] for r in rows if r["name"].startswith("gensim")}
    print(f"\n{corpus.raw_tokens:,} raw tokens, vocabulary {len(corpus.words):,}, {a.epochs} epochs, "
          f"dim {a.dim}, window {a.window}, negative {a.negative}, sample {a.sample}, "
          f"our init {a.init}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'variant':30} {'thr':>3} {'words/s':>10} {'w/s cpu':>10} {'vs gensim':>9} "
          f"{'WS353':>14} {'analogy':>14} {'first call':>10}")
    for r in rows:
        ratio = r["rate"] / base.get((r["model"], r["threads"]), float("nan"))
        ws = _mean_sd([q[0] for q in r["qualities"]])
        an = _mean_sd([q[1] for q in r["qualities"]])
        first = f"{r['first_call']:.2f} s" if r["first_call"] is not None else "-"
        print(f"{r['name']:30} {r['threads']:>3} {r['rate']:>10,.0f} {r['cpu_rate']:>10,.0f} "
              f"{ratio:>8.2f}x {ws:>14} {an:>14} {first:>10}")


def _mean_sd(values) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{np.mean(values):.4f}+-{np.std(values, ddof=1):.4f}"


def merge(runs: list[dict], raw_words: int) -> dict:
    """Best speed over seeds (the machine may be shared); quality of every seed."""
    best = min(runs, key=lambda r: r["seconds"])
    return dict(best, rate=raw_words / best["seconds"], first_call=runs[0]["first_call"],
                cpu_rate=raw_words / min(r["cpu"] for r in runs) * best["threads"],
                qualities=[r["quality"] for r in runs])


# ------------------------------------------------------------------ where a kept word's time goes
# Cumulative variants of the default kernel (skip-gram, negatives shared per window), built
# from the kernel's own compiled steps: each adds one stage to the one before, so the
# difference of two times is that stage's cost on the same tokens and the same draws.
STAGES = ("loop", "subsampling", "lr schedule", "window draws", "negative draws", "row loads",
          "dot products", "updates")


def stage_function(stage: int):
    from numba import literally, njit

    from mpidwe.kernels.chunk import make_scratch, refresh_lr
    from mpidwe.kernels.common import LR_REFRESH_WORDS
    from mpidwe.kernels.rows import gradient
    from mpidwe.kernels.sampling import draw_negatives, sentence, shrunk_window, subsample
    from mpidwe.kernels.simd import row_dots
    from mpidwe.kernels.window import shared_window

    @njit(nogil=True, fastmath=True)
    def run(dim, params, chunk, targets, schedule):
        """Returns (checksum, kept words, contexts, outputs) of the chunk's centre words."""
        dim = literally(dim)
        scratch = make_scratch(chunk, targets, dim)
        kept, raw_pos, ctx, outs = scratch.kept, scratch.raw_pos, scratch.contexts, scratch.negs
        state = chunk.rng_state[chunk.tid]
        raw_done, last_refresh, lr = 0, 0, refresh_lr(chunk, 0, schedule)
        acc, n_kept, n_ctx_sum, n_out_sum = 0.0, 0, 0, 0
        for si in range(chunk.s_lo, chunk.s_hi):
            beg, end = sentence(chunk, si)
            if stage >= 1:
                n, state = subsample(chunk.tokens, beg, end, chunk.keep_prob, state, kept, raw_pos, raw_done)
            else:                                      # the loop alone: every token kept, no draw
                n = end - beg
                for i in range(n):
                    kept[i] = chunk.tokens[beg + i]
                    raw_pos[i] = raw_done + i
            n_kept += n
            for pos in range(n):
                if stage >= 2 and raw_pos[pos] - last_refresh >= LR_REFRESH_WORDS:
                    last_refresh = raw_pos[pos]
                    lr = refresh_lr(chunk, last_refresh, schedule)
                if stage < 3:
                    acc += kept[pos]
                    continue
                state, lo, hi = shrunk_window(state, chunk.window, pos, n)
                if hi == lo or stage < 4:
                    acc += hi - lo
                    continue
                n_ctx = 0
                for c in range(lo, hi + 1):
                    if c != pos:
                        ctx[n_ctx] = kept[c]
                        n_ctx += 1
                outs[0] = kept[pos]
                state, n_negs = draw_negatives(state, kept[pos], targets, outs[1:], params.w_out)
                n_out = n_negs + 1
                n_ctx_sum += n_ctx
                n_out_sum += n_out
                if stage == 4:
                    acc += outs[n_negs]
                elif stage == 5:                       # read every row the window reads, once
                    for i in range(n_ctx):
                        row = params.w_in[ctx[i]]
                        for k in range(dim):
                            acc += row[k]
                    for j in range(n_out):
                        row = params.w_out[outs[j]]
                        for k in range(dim):
                            acc += row[k]
                elif stage == 6:                       # the scores and their table gradients
                    for i in range(n_ctx):
                        row_dots(params.w_in[ctx[i]], params.w_out, outs, n_out, scratch.scores_g[i], dim)
                    for i in range(n_ctx):
                        for j in range(n_out):
                            g, l_ = gradient(scratch.scores_g[i, j], 1 - min(j, 1), lr)
                            acc += g + l_
                else:                                  # the kernel's window update
                    noise = (outs, scratch.codes, n_out, False)
                    acc += shared_window(params, ctx, n_ctx, noise, lr, scratch, dim)
            raw_done += end - beg
        return acc, n_kept, n_ctx_sum, n_out_sum

    return run


def compiled_stage(stage: int, dim: int, rest):
    """Stage ``stage``'s machine code for ``dim``, called without numba's dispatcher (which
    re-resolves the literal dim on every call; see kernels/cpu.py)."""
    from numba import typeof, types
    from mpidwe.kernels.chunk import Chunk
    params, targets, schedule = rest
    chunk = Chunk(np.zeros(1, np.int32), np.zeros(1, np.int64), 0, 1, np.ones(1, np.float32), 1, 0,
                  np.zeros(1, np.uint64), np.zeros(1, np.int64))
    argtypes = (types.IntegerLiteral(dim),) + tuple(typeof(x) for x in (params, chunk, targets, schedule))
    return stage_function(stage).compile(argtypes)


def load_h5_prefix(path: str, n_tokens: int):
    """(ids, sentence starts, counts) of the first ``n_tokens`` tokens (whole sentences) of a
    preprocessed corpus (docs/hdf5-format.md)."""
    from mpidwe.io.corpus import Corpus as H5Corpus
    with H5Corpus(path) as c:
        starts = c.read_sentences(0, c.n_sentences)
        n_sent = int(np.searchsorted(starts, n_tokens, side="right")) - 1 if n_tokens < c.n_tokens else len(starts)
        end = int(starts[n_sent]) if n_sent < len(starts) else c.n_tokens
        return c.read_tokens(0, end), starts[:n_sent].copy(), c.counts


def stage_table(a) -> None:
    """Time the cumulative stages on a prefix of a preprocessed corpus; print the table."""
    from mpidwe.parallel.replicated import init_params as word2vec_init
    from mpidwe.kernels.chunk import Chunk, Schedule, targets_of
    from mpidwe.kernels.rows import Params
    tokens, starts, counts = load_h5_prefix(a.corpus_h5, a.stage_tokens)
    vocab = len(counts)
    args = KernelArgs(keep_prob=keep_probabilities(counts, a.sample), neg_table=negative_table(counts),
                      words_total=len(tokens), model="skipgram", window=a.window, negative=a.negative,
                      lr0=a.alpha, lr_min=a.alpha * 1e-4, threads=1, shared_negatives=True)
    w_in, w_out = word2vec_init(vocab, a.dim, 1)
    touched = np.zeros(vocab, np.uint8), np.zeros(vocab, np.uint8)
    seed = np.random.SeedSequence(1).generate_state(1, dtype=np.uint64)
    schedule = Schedule(args.lr0, args.lr_min, 0.0, 1.0, float(len(tokens)))
    targets = targets_of(args, vocab)

    def kernel(w_in_, w_out_, seed_):
        return cpu.train_block(w_in_, w_out_, tokens, starts, seed_, *touched, args)

    def stage_run(fn):
        def go(w_in_, w_out_, seed_):
            chunk = Chunk(tokens, starts, 0, len(starts), args.keep_prob, a.window, 0, seed_, np.zeros(1, np.int64))
            return fn(a.dim, Params(w_in_, w_out_, *touched), chunk, targets, schedule)
        return go

    kernel(w_in, w_out, seed.copy())               # compiles, and trains the rows the stages read
    runs = [stage_run(compiled_stage(stage, a.dim, (Params(w_in, w_out, *touched), targets, schedule)))
            for stage in range(len(STAGES))] + [kernel]
    times, stats = [float("inf")] * len(runs), None
    for _ in range(a.repeats):                     # round robin: a change of load hits every stage
        for r, run in enumerate(runs):
            w_in_, w_out_, seed_ = w_in.copy(), w_out.copy(), seed.copy()
            t = time.thread_time()
            out = run(w_in_, w_out_, seed_)
            times[r] = min(times[r], time.thread_time() - t)
            stats = out if r == len(STAGES) - 1 else stats
    kernel_s = [times.pop()]
    _, kept, n_ctx, n_out = stats
    print(f"\n{len(tokens):,} raw tokens of {a.corpus_h5}, {kept:,} kept ({kept / len(tokens):.1%}), "
          f"{n_ctx / kept:.2f} contexts and {n_out / kept:.2f} output rows per kept word; "
          f"load average {os.getloadavg()[0]:.2f}; CPU time, best of {a.repeats}")
    print(f"{'stage':16} {'ns/kept word':>12} {'cumulative':>10} {'share':>6}")
    prev = 0.0
    for name, s in zip(STAGES, times):
        ns, cum = (s - prev) / kept * 1e9, s / kept * 1e9
        print(f"{name:16} {ns:>12.1f} {cum:>10.1f} {ns / (times[-1] / kept * 1e9):>6.1%}")
        prev = s
    print(f"{'kernel':16} {'':>12} {min(kernel_s) / kept * 1e9:>10.1f}   (cpu.train_block, "
          f"{len(tokens) / min(kernel_s):,.0f} raw words/s)")
    roofline(a, kept / len(tokens), n_ctx / kept, n_out / kept, min(kernel_s) / kept)


def roofline(a, keep: float, n_ctx: float, n_out: float, seconds_per_kept: float) -> None:
    """Bytes and flops per trained word against this core's measured copy bandwidth, random
    row gather and matmul peak."""
    big = np.ones(1 << 27, np.float32)               # 512 MiB
    dst = np.empty_like(big)
    copy_s = min(_timed(lambda: np.copyto(dst, big)) for _ in range(3))
    bandwidth = 2 * big.nbytes / copy_s               # read + write
    del big, dst
    m = np.random.default_rng(0).random((2048, 2048), dtype=np.float32)
    mm_s = min(_timed(lambda: m @ m) for _ in range(3))
    peak = 2 * 2048 ** 3 / mm_s
    table = np.random.default_rng(0).random((69_103, a.dim), dtype=np.float32)
    idx = np.random.default_rng(1).integers(0, len(table), 1 << 20)
    gather_s = min(_timed(lambda: table[idx]) for _ in range(3)) / len(idx)
    flops = n_ctx * n_out * a.dim * 2 * 3 + n_ctx * a.dim     # scores, both gradient products, add_rows
    row_bytes = a.dim * 4
    touched = (n_ctx + n_out) * row_bytes * 2                 # every row read and written once
    fresh = (1 + n_out) * row_bytes * 2                       # one new context enters the window
    print(f"\nroofline, per kept word (x {keep:.3f} per raw word): {flops:,.0f} flop, {touched:,.0f} bytes "
          f"of rows read+written, {fresh:,.0f} of them new to the window (1 context + the outputs)")
    print(f"this core: copy bandwidth {bandwidth / 1e9:.1f} GB/s, float32 matmul {peak / 1e9:.1f} GFLOP/s "
          f"(1 thread), random {row_bytes}-byte row gather {gather_s * 1e9:.1f} ns/row")
    print(f"bounds per kept word: flops {flops / peak * 1e9:.1f} ns, new rows at copy bandwidth "
          f"{fresh / bandwidth * 1e9:.1f} ns, new rows gathered {(1 + n_out) * gather_s * 1e9:.1f} ns; "
          f"measured {seconds_per_kept * 1e9:.1f} ns = {flops / seconds_per_kept / 1e9:.1f} GFLOP/s "
          f"({flops / seconds_per_kept / peak:.1%} of the matmul peak)")


def _timed(fn) -> float:
    """CPU seconds of this thread (the machine may be shared: a wall clock counts the others)."""
    t = time.thread_time()
    fn()
    return time.thread_time() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DATA / "text8-prefix-12M.txt"))
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--variants", nargs="+", default=["pair", "shared"], choices=sorted(VARIANTS))
    p.add_argument("--seeds", type=int, default=1, help="repeat every run with this many seeds")
    p.add_argument("--no-gensim", action="store_true")
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--sample", type=float, default=1e-4)
    p.add_argument("--min-count", type=int, default=5)
    p.add_argument("--alpha", type=float, default=0.025)
    p.add_argument("--min-alpha", type=float, default=0.0001)
    p.add_argument("--block-tokens", type=int, default=1_000_000)
    p.add_argument("--init", choices=sorted(INIT_HALF_WIDTH), default="gensim",
                   help="initial w_in scale for our kernel (gensim's is twice word2vec's)")
    p.add_argument("--stages", action="store_true",
                   help="print where a kept word's time goes and the roofline, instead of the gensim race")
    p.add_argument("--corpus-h5", default="/tmp/i23/enwiki.h5", help="--stages: a preprocessed corpus")
    p.add_argument("--stage-tokens", type=int, default=4_000_000, help="--stages: tokens of its prefix")
    p.add_argument("--repeats", type=int, default=3, help="--stages: runs per stage (the best is kept)")
    a = p.parse_args()
    if a.stages:
        stage_table(a)
        return 0

    corpus = load_corpus(a.input, a.min_count, 1000)
    raw_words = corpus.raw_tokens * a.epochs
    rows = []
    for threads in a.threads:
        kinds = sorted({VARIANTS[v][0] for v in a.variants}, reverse=True)
        for kind in [] if a.no_gensim else kinds:
            runs = [run_gensim(corpus, a, kind, threads, seed) for seed in range(1, a.seeds + 1)]
            rows.append(merge(runs, raw_words))
            print(f"  {rows[-1]['name']} x{threads}: {rows[-1]['rate']:,.0f} words/s", flush=True)
        for variant in a.variants:
            runs = [run_mpidwe(corpus, a, variant, threads, seed) for seed in range(1, a.seeds + 1)]
            rows.append(merge(runs, raw_words))
            print(f"  {rows[-1]['name']} x{threads}: {rows[-1]['rate']:,.0f} words/s", flush=True)
    report(rows, corpus, a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
