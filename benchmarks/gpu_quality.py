"""Quality of the GPU path (torch kernel, CPU torch) against the numba kernel, 1 epoch.

    python benchmarks/gpu_quality.py [--input ../shared/data/text8-prefix-12M.txt] [--kernels numba torch]

Preprocesses ``--input`` (text8 normalisation, ``<doc>`` lines dropped, min-count 5) into a
temporary directory, trains skip-gram (dim 100, window 5, negative 5, sample 1e-4, the
default ``--batch-size`` and shared negatives) with each kernel at one rank on the CPU, and
prints WS-353 Spearman and Google analogy accuracy (mpidwe.evaluate, 30,000 most frequent
words) with the wall seconds. CPU torch is slow (about 17k words/s at dim 100 on the
project's shared 2-core machine), so the default input is the 2M-token text8 prefix.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    from mpidwe.comm import Comm
    from mpidwe.config import PreprocessConfig, TrainConfig
    from mpidwe.preprocess import run as preprocess
    from mpidwe.train import run as train

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DATA / "text8-prefix-12M.txt"))
    p.add_argument("--kernels", nargs="+", default=["numba", "torch"], choices=["numba", "torch"])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        corpus = os.path.join(work, "corpus.h5")
        preprocess(PreprocessConfig(inputs=(a.input,), output=corpus, normalize="text8", strip_doc_tags=True,
                                    min_count=5), Comm.serial(), log=None)
        for kernel in a.kernels:
            t = time.perf_counter()
            res = train(TrainConfig(corpus=corpus, out=os.path.join(work, kernel), dim=100, window=5, negative=5,
                                    sample=1e-4, epochs=a.epochs, kernel=kernel, device="cpu", threads=a.threads,
                                    progress=False, export=False, eval_sim=(str(DATA / "wordsim353.tsv"),),
                                    eval_analogy=(str(DATA / "questions-words.txt"),)), Comm.serial(), log=None)
            ev = res.metrics[-1].get("eval") or {}
            print(f"{kernel:6s} {res.words_total:,} words in {time.perf_counter() - t:.0f} s: "
                  f"WS-353 {ev.get('sim:wordsim353.tsv', float('nan')):.3f}, "
                  f"Google analogy {ev.get('analogy:questions-words.txt', float('nan')):.2%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
