"""Vectors for unseen words, measured on real words: WS-353 with half its words held out.

    python benchmarks/oov.py [--input ../shared/data/enwiki-extract-100M.txt.gz] [--epochs 1]
                             [--workdir DIR] [--fraction 0.5] [--seed 1]

A seeded ``--fraction`` of WS-353's distinct (lowercased) words is written to a hold-out
file, and the corpus is preprocessed with ``--hold-out`` (text8 normalisation, min-count 5):
those words' tokens are dropped, so the trained models never see them. Then, 1 rank x 2
threads, skip-gram with benchmarks/train.py's settings:

* ``plain``: no OOV model (the zero/skip baselines), then the character generator fitted to
  its vectors with ``python -m mpidwe.inspect RUN fit-chars``, with the default options
  (``chars``) and with ``--noise 0`` (``chars-noise0``: no misspelt copies, plain Mimick);
* ``subwords``: ``--subwords`` with benchmarks/subwords.py's settings (n-grams 3-6, 2M buckets,
  lr 0.05).

Reported: WS-353 Spearman over the pairs that contain a held-out word (with their count),
and over all 353 pairs, for: skip (pairs with an unknown word left out: it answers none of
the held-out pairs), zero (an unknown word's cosine is 0), the char generator and subwords.
Every score comes from ``python -m mpidwe.evaluate --oov`` (or without ``--oov`` for skip),
on a pair file written here; the zero baseline is computed here from the plain vectors.
Steps whose output exists in ``--workdir`` are not run again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from train import DATA, HYPER, env, run_mpidwe  # noqa: E402

SUB_FLAGS = ["--subwords", "--minn", "3", "--maxn", "6", "--buckets", "2000000", "--lr", "0.05"]


def held_out_words(fraction: float, seed: int) -> list[str]:
    import numpy as np

    from mpidwe.evaluate import read_similarity

    words = sorted({w.lower() for a, b, _ in read_similarity(str(DATA / "wordsim353.tsv")) for w in (a, b)})
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(words), int(round(fraction * len(words))), replace=False)
    return sorted(words[i] for i in pick)


def pair_files(work: str, held: set[str]) -> dict[str, str]:
    """WS-353 lowercased (the corpus is), all pairs and the pairs with a held-out word."""
    from mpidwe.evaluate import read_similarity

    pairs = [(a.lower(), b.lower(), s) for a, b, s in read_similarity(str(DATA / "wordsim353.tsv"))]
    out = {}
    for name, keep in (("all", pairs), ("held", [p for p in pairs if p[0] in held or p[1] in held])):
        path = os.path.join(work, f"ws353-{name}.tsv")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("".join(f"{a}\t{b}\t{s}\n" for a, b, s in keep))
        out[name] = path
    return out


def evaluate(vectors: str, pairs: str, oov: bool) -> dict:
    cmd = [sys.executable, "-m", "mpidwe.evaluate", vectors, "--similarity", pairs, "--json"] + (["--oov"] if oov else [])
    # exit status 2 with no pair covered (skip on the held-out pairs); the JSON still comes
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env())
    if not proc.stdout:
        raise SystemExit(proc.stderr)
    sim = json.loads(proc.stdout)["similarity"][0]
    return {"spearman": sim["spearman"], "covered": sim["covered"], "pairs": sim["pairs"]}


def zero_baseline(run: str, pairs: str) -> dict:
    """An unknown word's vector is zero, so a pair with one has cosine 0."""
    import numpy as np
    from scipy.stats import spearmanr

    import mpidwe
    from mpidwe.evaluate import read_similarity

    vecs = mpidwe.load(os.path.join(run, "vectors.txt"))
    cos, human = [], []
    for a, b, s in read_similarity(pairs):
        cos.append(vecs.similarity(a, b) if a in vecs and b in vecs else 0.0)
        human.append(s)
    rho = spearmanr(cos, human)[0] if np.ptp(cos) > 0 else float("nan")
    return {"spearman": float(rho), "covered": len(cos), "pairs": len(cos)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DATA / "enwiki-extract-100M.txt.gz"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fraction", type=float, default=0.5, help="share of WS-353's words held out")
    p.add_argument("--workdir", default=None)
    a = p.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="mpidwe-oov-")
    os.makedirs(work, exist_ok=True)
    held = held_out_words(a.fraction, a.seed)
    hold_file = os.path.join(work, "hold-out.txt")
    Path(hold_file).write_text("\n".join(held) + "\n", encoding="utf-8")
    corpus = os.path.join(work, "corpus.h5")
    if not os.path.exists(corpus):
        subprocess.run([sys.executable, "-m", "mpidwe.preprocess", a.input, "--output", corpus, "--normalize", "text8",
                        "--strip-doc-tags", "--min-count", str(HYPER["min_count"]), "--hold-out", hold_file],
                       check=True, env=env(), stdout=subprocess.DEVNULL)
    from mpidwe.io.corpus import Corpus

    with Corpus(corpus) as c:
        vocab = set(c.words)
    assert not vocab & set(held), "held-out words in the vocabulary"
    files = pair_files(work, set(held))
    runs = {"plain": [], "subwords": SUB_FLAGS}
    seconds = {}
    for name, flags in runs.items():
        out = os.path.join(work, f"run-{name}")
        if not os.path.exists(os.path.join(out, "vectors.txt")):
            seconds[name] = run_mpidwe(corpus, out, 1, 2, "sparse", a.epochs, a.seed, flags)[0]
    plain = os.path.join(work, "run-plain")
    # the generator with its default options, and without misspelt copies (--noise 0, plain
    # Mimick), each beside its own copy of the plain run's checkpoint
    for name, flags in (("chars", []), ("chars-noise0", ["--noise", "0"])):
        run = os.path.join(work, f"run-{name}")
        if not os.path.exists(run):
            shutil.copytree(plain, run + ".tmp")
            os.replace(run + ".tmp", run)
        if not list(Path(run, "checkpoints").glob("*.chars.h5")):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "mpidwe.inspect", run, "fit-chars", *flags], check=True,
                           env=env(), stdout=subprocess.DEVNULL)
            seconds[f"fit-chars {name} command"] = round(time.perf_counter() - t, 1)
    table = {}
    for subset, path in files.items():
        table[subset] = {
            "skip": evaluate(os.path.join(plain, "vectors.txt"), path, oov=False),
            "zero": zero_baseline(plain, path),
            "chars": evaluate(os.path.join(work, "run-chars"), path, oov=True),
            "chars-noise0": evaluate(os.path.join(work, "run-chars-noise0"), path, oov=True),
            "subwords": evaluate(os.path.join(work, "run-subwords"), path, oov=True),
        }
    import mpidwe

    for name in ("chars", "chars-noise0"):    # the fits' own record (also when they ran earlier)
        info = mpidwe.load(os.path.join(work, f"run-{name}")).oov.info
        seconds[f"fit {name} (wall, cpu)"] = (info["seconds"], info.get("cpu_seconds"))
    print(f"held out {len(held)} of WS-353's words ({a.fraction:.0%}, seed {a.seed}); corpus {a.input}, "
          f"{a.epochs} epoch(s); seconds {seconds}")
    print(f"{'pairs':6s} {'method':12s} {'spearman':>9s} {'pairs scored':>13s}")
    for subset, rows in table.items():
        for method, r in rows.items():
            rho = "-" if r["spearman"] is None or r["spearman"] != r["spearman"] else f"{r['spearman']:.3f}"
            print(f"{subset:6s} {method:12s} {rho:>9s} {r['covered']:>6d} of {r['pairs']:<5d}")
    print(json.dumps({"held_out": len(held), "seconds": seconds, "table": table}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
