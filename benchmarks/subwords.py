"""Subword vectors: mpidwe ``--subwords`` vs fastText (fasttext-wheel) skip-gram, same run.

    python benchmarks/subwords.py [--input ../shared/data/enwiki-extract-100M.txt.gz] [--epochs 1]
                                  [--workdir DIR] [--only NAME ...]

Both tools: skip-gram, dim 100, window 5, negative 5, sample 1e-4, lr 0.05 (fastText's
default), min-count 5, character n-grams 3-6 in 2,000,000 buckets, 2 threads, on the same
text8-style normalised text (benchmarks/train.py). fastText's time is its whole
``train_unsupervised`` call (it also reads the text to build its vocabulary, a few seconds);
mpidwe's is the training loop from metrics.jsonl. The two differ in what they share with
word2vec: fastText draws negatives from counts^0.5 and discards frequent words with its own
formula; mpidwe keeps word2vec's (counts^0.75, word2vec's keep probability). Quality: WS-353
Spearman and Google analogies (3CosAdd, 30,000 most frequent words) of each tool's word
vectors (fastText's ``get_word_vector`` of its vocabulary), scored by mpidwe.evaluate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from train import DATA, HYPER, env, prepare, run_mpidwe, score, warm_corpus  # noqa: E402

LR = 0.05
SUB = dict(minn=3, maxn=6, buckets=2_000_000)


def run_fasttext(text: str, out: str, epochs: int, seed: int) -> float:
    code = f"""
import time, numpy as np, fasttext
from mpidwe.io.vectors import write_word2vec
t = time.perf_counter()
m = fasttext.train_unsupervised({text!r}, model="skipgram", dim={HYPER['dim']}, ws={HYPER['window']},
                                neg={HYPER['negative']}, t={HYPER['sample']}, lr={LR}, minCount={HYPER['min_count']},
                                minn={SUB['minn']}, maxn={SUB['maxn']}, bucket={SUB['buckets']}, epoch={epochs},
                                thread=2, verbose=0)   # fasttext-wheel 0.9.2 has no seed
print("SECONDS", time.perf_counter() - t)
words = [w for w in m.words if w != "</s>"]
write_word2vec({out!r}, words, np.stack([m.get_word_vector(w) for w in words]), binary=False)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), check=True)
    return float(proc.stdout.split("SECONDS")[1].split()[0])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DATA / "enwiki-extract-100M.txt.gz"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=None)
    p.add_argument("--only", nargs="*", default=None, help="fasttext, 1x2, 2x1")
    a = p.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="mpidwe-sub-")
    os.makedirs(work, exist_ok=True)
    corpus, text, raw = prepare(a, work)
    words = raw * a.epochs
    print(f"corpus: {a.input}: {raw:,} raw tokens, epochs {a.epochs}, {HYPER} lr {LR} subwords {SUB}")
    flags = ["--subwords", "--minn", str(SUB["minn"]), "--maxn", str(SUB["maxn"]), "--buckets", str(SUB["buckets"]),
             "--lr", str(LR)]
    # compile the subword kernel (numba caches it on disk) outside the timings
    warm = warm_corpus(work)
    run_mpidwe(os.path.join(warm, "corpus.h5"), os.path.join(warm, "run-sub"), 1, 2, "sparse", 1, a.seed,
               ["--no-export", "--subwords", "--buckets", "1000"])
    table = {}
    for name in ("fasttext", "1x2", "2x1"):
        if a.only and name not in a.only:
            continue
        if name == "fasttext":
            out = os.path.join(work, "fasttext.txt")
            table[name] = {"seconds": run_fasttext(text, out, a.epochs, a.seed), **score(out)}
            continue
        ranks, threads = (1, 2) if name == "1x2" else (2, 1)
        out = os.path.join(work, f"run-sub-{name}")
        secs, _ = run_mpidwe(corpus, out, ranks, threads, "sparse", a.epochs, a.seed, flags)
        table[f"mpidwe {name}"] = {"seconds": secs, **score(os.path.join(out, "vectors.txt"))}
    base = table.get("fasttext")
    print(f"\n{'run':16s} {'seconds':>8s} {'words/s':>10s} {'x fastText':>10s} {'WS353':>7s} {'dWS':>7s} "
          f"{'analogy':>8s} {'dA pt':>6s}")
    for key, r in table.items():
        ratio = f"{base['seconds'] / r['seconds']:.2f}" if base else "-"
        dws = f"{r['ws353'] - base['ws353']:+.3f}" if base else "-"
        dan = f"{100 * (r['analogy'] - base['analogy']):+.1f}" if base else "-"
        print(f"{key:16s} {r['seconds']:8.1f} {words / r['seconds']:10,.0f} {ratio:>10s} {r['ws353']:7.3f} {dws:>7s} "
              f"{100 * r['analogy']:7.1f}% {dan:>6s}")
    print(json.dumps(table, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
