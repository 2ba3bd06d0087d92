"""Training speed and quality: mpidwe vs gensim on the same corpus, cores and settings.

    python benchmarks/train.py [--input ../shared/data/enwiki-extract-100M.txt.gz] [--epochs 1]

Skip-gram, dim 100, window 5, negative 5, sample 1e-4, min-count 5, text8-style
normalisation. gensim 4.x trains with ``corpus_file`` and ``workers=2`` on the same
normalised text; mpidwe trains as 1 rank x 2 threads and as 2 ranks x 1 thread with each
sync mode. Speed is raw corpus tokens x epochs / wall seconds of training (both tools:
the training loop only, not vocabulary building or start-up; for mpidwe also its whole
process, start-up, corpus check and export included: "process s"). Quality: WS-353 Spearman and
Google analogy accuracy (3CosAdd, 30,000 most frequent words), scored for both by
mpidwe.evaluate. Ratios are printed against gensim from the same run, because the
machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

HYPER = dict(dim=100, window=5, negative=5, sample=1e-4, lr=0.025, min_count=5)


def env() -> dict:
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def score(vectors_path: str) -> dict:
    from mpidwe.evaluate import evaluate_analogies, evaluate_similarity, read_analogies, read_similarity
    from mpidwe.io.vectors import read_word2vec

    words, vecs = read_word2vec(vectors_path)
    index = {w: i for i, w in enumerate(words)}
    sim = evaluate_similarity(vecs, index, read_similarity(str(DATA / "wordsim353.tsv")))
    ana = evaluate_analogies(vecs, index, read_analogies(str(DATA / "questions-words.txt")), restrict_vocab=30000)
    return {"ws353": sim["spearman"], "ws353_covered": sim["covered"], "analogy": ana["accuracy"],
            "analogy_covered": ana["covered"], "semantic": ana["semantic"]["accuracy"],
            "syntactic": ana["syntactic"]["accuracy"]}


def run_gensim(text: str, out: str, epochs: int, seed: int, corpus_file: bool = True) -> float:
    """gensim 4 skip-gram, workers=2. ``corpus_file`` mode is gensim's fast path; note that in
    it each worker decays the learning rate by its own share of the corpus, so with 2 workers
    the rate only falls to about half of ``alpha`` by the end (gensim's word2vec_corpusfile.pyx,
    get_next_alpha). The iterable mode (LineSentence) decays it fully, as word2vec does."""
    source = f"corpus_file={text!r}" if corpus_file else "corpus_iterable=LineSentence(" + repr(text) + ")"
    code = f"""
import time
from gensim.models import Word2Vec
from gensim.models.word2vec import LineSentence
m = Word2Vec(vector_size={HYPER['dim']}, window={HYPER['window']}, negative={HYPER['negative']},
             sample={HYPER['sample']}, alpha={HYPER['lr']}, min_count={HYPER['min_count']}, sg=1, hs=0,
             workers=2, seed={seed})
m.build_vocab({source})
t = time.perf_counter()
m.train({source}, total_examples=m.corpus_count, total_words=m.corpus_total_words, epochs={epochs})
print("SECONDS", time.perf_counter() - t)
m.wv.save_word2vec_format({out!r})
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), check=True)
    return float(proc.stdout.split("SECONDS")[1].split()[0])


def run_mpidwe(corpus: str, out: str, ranks: int, threads: int, sync: str, epochs: int, seed: int,
               extra: list[str]) -> float:
    from mpidwe.demo import mpi_launch

    args = ["-m", "mpidwe.train", "--corpus", corpus, "--out", out, "--force", "--threads", str(threads), "--sync", sync,
            "--epochs", str(epochs), "--seed", str(seed), "--no-progress", "--dim", str(HYPER["dim"]),
            "--window", str(HYPER["window"]), "--negative", str(HYPER["negative"]),
            "--sample", str(HYPER["sample"]), "--lr", str(HYPER["lr"]), *extra]
    cmd = mpi_launch(ranks, args) if ranks > 1 else [sys.executable] + args
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env(), stdout=subprocess.DEVNULL)
    process = time.perf_counter() - start
    last = json.loads(Path(out, "metrics.jsonl").read_text().splitlines()[-1])
    return float(last["seconds"]), dict(last, process_seconds=process)

def prepare(a, work: str) -> tuple[str, str, int]:
    """The corpus (mpidwe) and the same normalised text (gensim), made once per workdir."""
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import PreprocessConfig
    from mpidwe.io.corpus import Corpus
    from mpidwe.preprocess import run as preprocess
    from mpidwe.io.text import ScanStats, TextOptions, describe_source, scan_range

    corpus = os.path.join(work, "corpus.h5")
    text = os.path.join(work, "normalised.txt")
    if not os.path.exists(corpus):
        preprocess(PreprocessConfig(inputs=(a.input,), output=corpus, normalize="text8", strip_doc_tags=True,
                                    min_count=HYPER["min_count"]), Comm.serial())
    if not os.path.exists(text):
        src = describe_source(a.input)
        with open(text + ".tmp", "wb") as fh:
            for toks, nl in scan_range(src, 0, src.size, True, TextOptions("text8", False, True), ScanStats()):
                if toks:
                    fh.write(b" ".join(toks) + b" ")
                if nl:
                    fh.write(b"\n")
        os.replace(text + ".tmp", text)
    with Corpus(corpus) as c:
        raw = int(c.attrs["raw_tokens"])
    return corpus, text, raw


def warm_corpus(work: str) -> str:
    """A small demo corpus to compile the kernels on, made once per workdir."""
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import PreprocessConfig, SynthConfig
    from mpidwe.preprocess import run as preprocess
    from mpidwe.synth import write_demo

    warm = os.path.join(work, "warmup")
    if not os.path.exists(os.path.join(warm, "corpus.h5")):
        write_demo(SynthConfig(output=warm, tokens=200_000, force=True))
        preprocess(PreprocessConfig(inputs=(os.path.join(warm, "demo.txt"),), output=os.path.join(warm, "corpus.h5")),
                   Comm.serial(), log=None)
    return warm


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DATA / "enwiki-extract-100M.txt.gz"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=None, help="keep corpus and vectors here (default: a temp dir)")
    p.add_argument("--only", nargs="*", default=None, help="run only these layouts (e.g. 1x2 2x1-sparse)")
    p.add_argument("--sync-every", type=int, default=None)
    p.add_argument("--skip-gensim", action="store_true")
    p.add_argument("--no-iterable", action="store_true", help="gensim in corpus_file mode only")
    a = p.parse_args()
    from mpidwe.io.corpus import Corpus

    work = a.workdir or tempfile.mkdtemp(prefix="mpidwe-bench-")
    os.makedirs(work, exist_ok=True)
    corpus, text, raw_tokens = prepare(a, work)
    with Corpus(corpus) as c:
        kept = c.n_tokens
    words = raw_tokens * a.epochs
    print(f"corpus: {a.input}: {raw_tokens:,} raw tokens ({kept:,} in vocabulary), epochs {a.epochs}, "
          f"hyperparameters {HYPER}")

    # warm-up: compile the kernels once (numba caches them on disk)
    warm = warm_corpus(work)
    run_mpidwe(os.path.join(warm, "corpus.h5"), os.path.join(warm, "run"), 1, 2, "sparse", 1, a.seed, ["--no-export"])

    layouts = [("2x1", 2, 1, "auto", []), ("1x2", 1, 2, "sparse", []), ("2x1-sparse", 2, 1, "sparse", []),
               ("2x1-dense", 2, 1, "dense", []),
               ("1x1", 1, 1, "sparse", []), ("2x1-average", 2, 1, "average", []),
               ("1x2-per-pair", 1, 2, "sparse", ["--no-shared-negatives"]),
               ("1x2-halfdecay", 1, 2, "sparse", ["--min-lr-ratio", "0.5"])]
    results = {}
    if not a.skip_gensim:
        out = os.path.join(work, "gensim.txt")
        secs = run_gensim(text, out, a.epochs, a.seed)
        results["gensim workers=2"] = {"seconds": secs, **score(out)}
    if not a.skip_gensim and not a.no_iterable:
        out = os.path.join(work, "gensim-iterable.txt")
        secs = run_gensim(text, out, a.epochs, a.seed, corpus_file=False)
        results["gensim iterable w=2"] = {"seconds": secs, **score(out)}
    for name, ranks, threads, sync, more in layouts:
        if a.only and name not in a.only:
            continue
        out = os.path.join(work, f"run-{name}")
        extra = (["--sync-every", str(a.sync_every)] if a.sync_every else []) + more
        secs, last = run_mpidwe(corpus, out, ranks, threads, sync, a.epochs, a.seed, extra)
        results[f"mpidwe {name}"] = {"seconds": secs, "process_seconds": last["process_seconds"],
                                    "comm_s": max(last["comm_seconds"]),
                                    "comm_MB": max(last["comm_bytes"]) / 1e6, **score(os.path.join(out, "vectors.txt"))}
    base = results.get("gensim workers=2")
    print(f"\n{'run':24s} {'seconds':>8s} {'words/s':>10s} {'x gensim':>8s} {'WS353':>7s} {'dWS':>6s} "
          f"{'analogy':>8s} {'dAna pt':>8s} {'comm s':>7s} {'comm MB':>8s} {'process s':>9s} {'x gensim':>8s}")
    for k, r in results.items():
        wps = words / r["seconds"]
        ratio = f"{base['seconds'] / r['seconds']:.2f}" if base else "-"
        dws = f"{r['ws353'] - base['ws353']:+.3f}" if base else "-"
        dan = f"{100 * (r['analogy'] - base['analogy']):+.1f}" if base else "-"
        process = f"{r['process_seconds']:.1f}" if "process_seconds" in r else "-"   # mpidwe's whole process
        whole = f"{base['seconds'] / r['process_seconds']:.2f}" if base and "process_seconds" in r else "-"
        print(f"{k:24s} {r['seconds']:8.1f} {wps:10,.0f} {ratio:>8s} {r['ws353']:7.3f} {dws:>6s} "
              f"{r['analogy']:8.3f} {dan:>8s} {r.get('comm_s', 0):7.2f} {r.get('comm_MB', 0):8.1f} "
              f"{process:>9s} {whole:>8s}")
    print(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
