"""Evaluation speed: PIP loss, the SPPMI reference, analogies and WS-353 on the enwiki corpus.

    python benchmarks/evaluate.py [--corpus CORPUS.h5] [--input ../shared/data/enwiki-extract-100M.txt.gz]

Without ``--corpus`` the input is preprocessed first into a temporary directory
(``--normalize text8 --strip-doc-tags``, as text8 was made; not part of the timings).
The vectors are seeded random numbers over the corpus vocabulary: the timings do not depend
on what the vectors have learned. Where gensim is installed, its evaluators run on the same
vectors as the peer. Run from the repository root; prints one table.

On a machine shared with other jobs, multi-threaded BLAS spins against them and the
matrix products (PIP, analogies, the SVD) slow down by 10x or more at random; set
``OPENBLAS_NUM_THREADS=1`` (and ``OMP_NUM_THREADS=1``) there for stable numbers. The
setting in force is printed with the table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def best_of(fn, repeat: int) -> tuple[float, object]:
    """Smallest wall time of ``repeat`` calls (the machine may be shared) and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", help="an mpidwe corpus to use instead of preprocessing --input")
    p.add_argument("--input", default=str(DATA / "enwiki-extract-100M.txt.gz"))
    p.add_argument("--rows", type=int, default=70_000, help="rows of the two PIP embeddings")
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--top-n", type=int, default=30_000, help="SPPMI reference rows")
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--negative", type=int, default=5)
    p.add_argument("--restrict-vocab", type=int, default=30_000)
    a = p.parse_args()

    from mpidwe.parallel.comm import Comm
    from mpidwe.io.corpus import Corpus
    from mpidwe.evaluate import evaluate_analogies, evaluate_similarity, read_analogies, read_similarity
    from mpidwe.io import refcache
    from mpidwe.evaluate.cli import word_index
    from mpidwe.evaluate.pip import pip_loss
    from mpidwe.evaluate.sppmi import ReferenceSpec, reference_embedding
    from mpidwe.io.vectors import load_vectors, write_word2vec

    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = a.corpus
        if not corpus:
            corpus = os.path.join(tmp, "corpus.h5")
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "mpidwe.preprocess", a.input, "--output", corpus,
                            "--normalize", "text8", "--strip-doc-tags"], check=True, cwd=ROOT,
                           stdout=subprocess.DEVNULL)
            print(f"(setup) preprocessed {a.input} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        with Corpus(corpus) as c:
            words, n_tokens = c.words, c.n_tokens
        rng = np.random.default_rng(0)

        # PIP between two rows x dim embeddings (float32, as trained vectors are)
        e1 = rng.standard_normal((a.rows, a.dim), dtype=np.float32)
        e2 = rng.standard_normal((a.rows, a.dim), dtype=np.float32)
        s, _ = best_of(lambda: pip_loss(e1, e2), 3)
        rows.append((f"PIP loss, two {a.rows:,} x {a.dim} embeddings", s, "best of 3"))

        # vectors files over the corpus vocabulary
        vecs = rng.standard_normal((len(words), a.dim), dtype=np.float32)
        for binary in (True, False):
            path = os.path.join(tmp, "vectors.bin" if binary else "vectors.txt")
            s, _ = best_of(lambda: write_word2vec(path, words, vecs, binary=binary), 1)
            rows.append((f"write word2vec {'binary' if binary else 'text'}, {len(words):,} x {a.dim}", s, ""))
            s, _ = best_of(lambda: load_vectors(path), 1)
            rows.append((f"read word2vec {'binary' if binary else 'text'}, {len(words):,} x {a.dim}", s, ""))
        index = word_index(words)

        # SPPMI reference (computed, not cached), then the cache written and read back
        spec = ReferenceSpec(window=a.window, negatives=a.negative, dim=a.dim, top_n=a.top_n)
        s, ref = best_of(lambda: reference_embedding(corpus, spec, Comm.serial(), cache=False), 1)
        info = ref.info
        rows.append((f"SPPMI reference: count window {a.window} ({n_tokens / 1e6:.1f}M tokens)",
                     info["count_seconds"], f"{info['cooccurrence_nnz']:,} non-zero counts"))
        rows.append((f"SPPMI reference: PMI + svds to dim {a.dim}",
                     info["seconds"] - info["count_seconds"],
                     f"{ref.key.top_n:,} x {ref.key.top_n:,}, {info['sppmi_nnz']:,} non-zeros"))
        rows.append(("SPPMI reference, total (1 rank)", s, f"svds {info['svd_seconds']:.1f} s"))
        cache = os.path.join(tmp, "ref.sppmi.h5")
        entry = refcache.CachedReference(ref.key, ref.words, ref.vectors, ref.singular_values, ref.info)
        s, _ = best_of(lambda: refcache.write_reference(cache, entry), 1)
        rows.append(("SPPMI reference cache: write", s, f"{os.path.getsize(cache) / 2**20:.1f} MiB"))
        s, _ = best_of(lambda: refcache.read_reference(cache, ref.key), 3)
        rows.append(("SPPMI reference cache: read (hit)", s, "best of 3"))
        sub = [index[w] for w in ref.words]
        s, _ = best_of(lambda: pip_loss(vecs[sub], ref.vectors), 3)
        rows.append((f"PIP loss vs the reference ({len(sub):,} words)", s, "best of 3"))

        # test sets
        questions = read_analogies(str(DATA / "questions-words.txt"))
        pairs = read_similarity(str(DATA / "wordsim353.tsv"))
        for method in ("add", "mul"):
            s, r = best_of(lambda: evaluate_analogies(vecs, index, questions, restrict_vocab=a.restrict_vocab,
                                                      method=method), 1)
            rows.append((f"Google analogies 3Cos{method.capitalize()}, restrict {a.restrict_vocab:,}", s,
                         f"{r['covered']:,} of {r['questions']:,} questions covered"))
        s, r = best_of(lambda: evaluate_similarity(vecs, index, pairs), 3)
        rows.append(("WS-353 Spearman", s, f"{r['covered']} of {r['pairs']} pairs covered, best of 3"))

        try:
            from gensim.models import KeyedVectors
        except ImportError:
            KeyedVectors = None
        if KeyedVectors is not None:
            kv = KeyedVectors(a.dim)
            kv.add_vectors(words, vecs)
            s, r = best_of(lambda: kv.evaluate_word_analogies(str(DATA / "questions-words.txt"),
                                                              restrict_vocab=a.restrict_vocab), 1)
            covered = sum(len(sec["correct"]) + len(sec["incorrect"]) for sec in r[1] if sec["section"] == "Total accuracy")
            rows.append((f"  peer: gensim evaluate_word_analogies, restrict {a.restrict_vocab:,}", s,
                         f"{covered:,} questions covered"))
            s, _ = best_of(lambda: kv.evaluate_word_pairs(str(DATA / "wordsim353.tsv")), 3)
            rows.append(("  peer: gensim evaluate_word_pairs (WS-353)", s, "best of 3"))

        # the whole command, reference from the cache beside the corpus
        vec_path = os.path.join(tmp, "vectors.bin")
        cmd = [sys.executable, "-m", "mpidwe.evaluate", vec_path, "--similarity", str(DATA / "wordsim353.tsv"),
               "--analogy", str(DATA / "questions-words.txt"), "--pip-reference", corpus,
               "--pip-top-n", str(a.top_n), "--window", str(a.window), "--negative", str(a.negative), "--json"]
        if not a.corpus:  # do not write a cache beside someone else's corpus
            refcache.write_reference(refcache.cache_path(corpus), entry)
        else:
            cmd.append("--no-pip-cache")
        t = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        rows.append(("python -m mpidwe.evaluate: WS-353 + analogies + PIP" + ("" if a.corpus else " (cached)"),
                     time.perf_counter() - t, "whole process"))

    print(f"corpus: {a.corpus or a.input} ({n_tokens:,} tokens, {len(words):,} words)")
    threads = {k: os.environ.get(k, "unset") for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    print(f"cores: {os.cpu_count()}, " + ", ".join(f"{k}={v}" for k, v in threads.items()))
    print(f"{'what':62s} {'seconds':>8s}  notes")
    for what, s, note in rows:
        print(f"{what:62s} {s:8.3f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
