"""Hierarchical softmax: mpidwe ``--loss hs`` vs gensim ``hs=1, negative=0``, same run.

    python benchmarks/hs.py [--input ../shared/data/enwiki-extract-100M.txt.gz] [--epochs 1]
                            [--workdir DIR] [--only NAME ...] [--models skipgram cbow]
                            [--seed N] [--mpidwe-flags "--sync-every 250000"]

The hyper-parameters of benchmarks/train.py (dim 100, window 5, sample 1e-4, lr 0.025 (0.05
for CBOW), min-count 5, text8-style normalisation), with hierarchical softmax instead of
negative sampling. gensim 4.x trains on the same normalised text with ``workers=2``, in
both its ``corpus_file`` mode (fast, but each worker decays the rate by its own share, so
it only falls to about lr/2: see benchmarks/train.py) and its iterable mode (full decay,
as word2vec and mpidwe). mpidwe trains as 1 rank x 2 threads (the window sharing the
centre's path, the default, and word2vec's per-pair order with --no-shared-negatives) and
as 2 ranks x 1 thread. Speed: raw tokens x epochs / seconds of the training loop; quality:
WS-353 Spearman and Google analogies (3CosAdd, 30,000 most frequent words), both tools
scored by mpidwe.evaluate. Ratios against gensim from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from train import DATA, HYPER, env, prepare, run_mpidwe, score, warm_corpus  # noqa: E402  (benchmarks/train.py)


def run_gensim_hs(text: str, out: str, epochs: int, seed: int, model: str, corpus_file: bool) -> float:
    source = f"corpus_file={text!r}" if corpus_file else "corpus_iterable=LineSentence(" + repr(text) + ")"
    lr = HYPER["lr"] * (2 if model == "cbow" else 1)
    code = f"""
import time
from gensim.models import Word2Vec
from gensim.models.word2vec import LineSentence
m = Word2Vec(vector_size={HYPER['dim']}, window={HYPER['window']}, negative=0, hs=1,
             sample={HYPER['sample']}, alpha={lr}, min_count={HYPER['min_count']}, sg={int(model == 'skipgram')},
             cbow_mean=1, workers=2, seed={seed})
m.build_vocab({source})
t = time.perf_counter()
m.train({source}, total_examples=m.corpus_count, total_words=m.corpus_total_words, epochs={epochs})
print("SECONDS", time.perf_counter() - t)
m.wv.save_word2vec_format({out!r})
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), check=True)
    return float(proc.stdout.split("SECONDS")[1].split()[0])


def warm_up(work: str, seed: int) -> None:
    """Compile the HS kernels once (numba caches them on disk) outside the timings."""
    warm = warm_corpus(work)
    for model in ("skipgram", "cbow"):
        for shared in ([], ["--no-shared-negatives"]):
            run_mpidwe(os.path.join(warm, "corpus.h5"), os.path.join(warm, "run"), 1, 2, "sparse", 1, seed,
                       ["--no-export", "--loss", "hs", "--model", model, *shared])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DATA / "enwiki-extract-100M.txt.gz"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=None, help="keep corpus and vectors here (default: a temp dir)")
    p.add_argument("--models", nargs="*", default=["skipgram", "cbow"], choices=["skipgram", "cbow"])
    p.add_argument("--only", nargs="*", default=None, help="run only these layouts (e.g. 1x2 gensim-file)")
    p.add_argument("--mpidwe-flags", default="", help="more flags for every mpidwe run, one string (e.g. "
                   "'--sync-every 250000' to test the sync interval of the 2 x 1 layout)")
    a = p.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="mpidwe-hs-")
    os.makedirs(work, exist_ok=True)
    corpus, text, raw = prepare(a, work)
    words = raw * a.epochs
    print(f"corpus: {a.input}: {raw:,} raw tokens, epochs {a.epochs}, hyperparameters {HYPER} with hs=1 negative=0")
    warm_up(work, a.seed)
    layouts = [("gensim-file", None), ("gensim-iterable", None), ("1x2", (1, 2, [])),
               ("1x2-per-pair", (1, 2, ["--no-shared-negatives"])), ("2x1", (2, 1, []))]
    table = {}
    for model in a.models:
        lr = HYPER["lr"] * (2 if model == "cbow" else 1)
        for name, layout in layouts:
            if a.only and name not in a.only or (model == "cbow" and name == "1x2-per-pair"):
                continue
            key = f"{model} {name}"
            if layout is None:
                out = os.path.join(work, f"{model}-{name}.txt")
                secs = run_gensim_hs(text, out, a.epochs, a.seed, model, corpus_file=name == "gensim-file")
                table[key] = {"seconds": secs, **score(out)}
                continue
            ranks, threads, more = layout
            out = os.path.join(work, f"run-{model}-{name}")
            secs, last = run_mpidwe(corpus, out, ranks, threads, "sparse", a.epochs, a.seed,
                                    ["--loss", "hs", "--model", model, "--lr", str(lr), *more,
                                     *shlex.split(a.mpidwe_flags)])
            table[key] = {"seconds": secs, **score(os.path.join(out, "vectors.txt"))}
    print(f"\n{'run':28s} {'seconds':>8s} {'words/s':>10s} {'x g-file':>8s} {'x g-iter':>8s} {'WS353':>7s} "
          f"{'dWS file':>8s} {'dWS iter':>8s} {'analogy':>8s} {'dA file':>8s} {'dA iter':>8s}")
    for key, r in table.items():
        model = key.split()[0]
        gf, gi = table.get(f"{model} gensim-file"), table.get(f"{model} gensim-iterable")

        def ratio(g):
            return f"{g['seconds'] / r['seconds']:.2f}" if g else "-"

        def dws(g):
            return f"{r['ws353'] - g['ws353']:+.3f}" if g else "-"

        def dan(g):
            return f"{100 * (r['analogy'] - g['analogy']):+.1f}" if g else "-"

        print(f"{key:28s} {r['seconds']:8.1f} {words / r['seconds']:10,.0f} {ratio(gf):>8s} {ratio(gi):>8s} "
              f"{r['ws353']:7.3f} {dws(gf):>8s} {dws(gi):>8s} {100 * r['analogy']:7.1f}% {dan(gf):>8s} {dan(gi):>8s}")
    print(json.dumps(table, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
