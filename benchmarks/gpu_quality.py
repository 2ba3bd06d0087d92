"""Quality of the GPU path (torch and fused triton kernels) against the numba kernel.

    python benchmarks/gpu_quality.py [--input ../shared/data/text8-prefix-12M.txt] [--kernels numba torch]
    python benchmarks/gpu_quality.py --demo 1000000 --dim 32 [--batch-size 16384 4096] [--stability 0.5 1]
    python benchmarks/gpu_quality.py --input ENWIKI --kernels numba torch triton --device cuda --threads 16

With ``--input``: preprocesses the text (text8 normalisation, ``<doc>`` lines dropped,
min-count 5) into a temporary directory and scores WS-353 Spearman and Google analogy
accuracy (mpidwe.evaluate, 30,000 most frequent words). With ``--demo TOKENS``: generates
the demo corpus (mpidwe.synth, ``--seed``) and scores its own answer keys
(demo-similarity.tsv, demo-analogies.txt). Trains skip-gram (window 5, negative 5, sample
1e-4, shared negatives) with each kernel at one rank (numba on the CPU, the others on
``--device``), for every ``--batch-size``, ``--stability`` and ``--lr`` (torch and triton
only; ``--stability`` sets the torch kernel's STABILITY constant, default its own), and
prints the scores with the wall seconds and the words/s of the run's compute (metrics; the
first run of a kernel includes its compilation). CPU torch is slow (about 17k
words/s at dim 100 on the project's shared 2-core machine).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import PreprocessConfig, SynthConfig, TrainConfig
    from mpidwe.kernels import torch_kernel
    from mpidwe.preprocess import run as preprocess
    from mpidwe.synth import write_demo
    from mpidwe.train import run as train

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DATA / "text8-prefix-12M.txt"))
    p.add_argument("--demo", type=int, metavar="TOKENS", help="train the generated demo corpus instead of --input")
    p.add_argument("--seed", type=int, default=5, help="demo corpus seed (default 5, as tests/test_gpu_path.py)")
    p.add_argument("--kernels", nargs="+", default=["numba", "torch"], choices=["numba", "torch", "triton"])
    p.add_argument("--device", default="cpu", help="torch and triton kernels' device (numba: the CPU)")
    p.add_argument("--data", default=str(DATA), help="folder of wordsim353.tsv and questions-words.txt")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, nargs="+", default=[TrainConfig.batch_size])
    p.add_argument("--stability", type=float, nargs="+", default=[torch_kernel.STABILITY])
    p.add_argument("--lr", type=float, nargs="+", default=[TrainConfig.lr], help="torch only (numba: the default)")
    a = p.parse_args(argv)
    if a.demo is None and not os.path.exists(a.input):
        p.error(f"--input {a.input}: no such file")
    with tempfile.TemporaryDirectory() as work:
        corpus = os.path.join(work, "corpus.h5")
        if a.demo is not None:
            write_demo(SynthConfig(output=work, tokens=a.demo, seed=a.seed))
            preprocess(PreprocessConfig(inputs=(os.path.join(work, "demo.txt"),), output=corpus), Comm.serial(),
                       log=None)
            sim, ana = os.path.join(work, "demo-similarity.tsv"), os.path.join(work, "demo-analogies.txt")
        else:
            preprocess(PreprocessConfig(inputs=(a.input,), output=corpus, normalize="text8", strip_doc_tags=True,
                                        min_count=5), Comm.serial(), log=None)
            sim, ana = os.path.join(a.data, "wordsim353.tsv"), os.path.join(a.data, "questions-words.txt")
        runs = [("numba", None, None, TrainConfig.lr)] if "numba" in a.kernels else []
        for kernel in ("torch", "triton"):
            if kernel in a.kernels:
                runs += [(kernel, *r) for r in itertools.product(a.batch_size, a.stability, a.lr)]
        for kernel, batch, stability, lr in runs:
            if stability is not None:
                torch_kernel.STABILITY = stability
            t = time.perf_counter()
            res = train(TrainConfig(corpus=corpus, out=os.path.join(work, f"{kernel}-{batch}-{stability}-{lr}"),
                                    dim=a.dim, window=5, negative=5, sample=1e-4, lr=lr, epochs=a.epochs, kernel=kernel,
                                    device="cpu" if kernel == "numba" else a.device, threads=a.threads, progress=False, export=False,
                                    batch_size=batch or TrainConfig.batch_size, eval_sim=(sim,),
                                    eval_analogy=(ana,)), Comm.serial(), log=None)
            ev = res.metrics[-1].get("eval") or {}
            compute = sum(res.metrics[-1]["compute_seconds"])
            label = kernel if batch is None else f"{kernel} batch {batch} stability {stability:g} lr {lr:g}"
            print(f"{label}: {res.words_total:,} words in {time.perf_counter() - t:.0f} s "
                  f"({res.words_total / max(compute, 1e-9):,.0f} words/s of compute): "
                  f"similarity {ev.get('sim:' + os.path.basename(sim), float('nan')):.3f}, "
                  f"analogy {ev.get('analogy:' + os.path.basename(ana), float('nan')):.2%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
