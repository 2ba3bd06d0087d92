"""The GPU path in one command: words/s per GPU kernel, the share of the memory-bandwidth
roofline, quality against numba, and at 2 ranks the share of time in the exchange.

    python benchmarks/gpu_bench.py                              # CUDA: 3M-token demo, 1 epoch
    python benchmarks/gpu_bench.py --device cpu --tokens 60000 --kernels torch   # here, small

Generates the demo corpus (``mpidwe.synth``) into a temporary directory, then for each of
``--kernels`` (torch: the eager torch kernel; triton: the fused kernel, needs CUDA or
``TRITON_INTERPRET=1``) trains it at one rank through ``mpidwe.train.run`` (after one untimed run on a small demo,
``--count-tokens``, that compiles numba's and Triton's kernels) and prints its
words/s (trained raw words / wall seconds of the run's compute, from metrics), its bytes per
word (MODELLED: the torch kernel's from benchmarks/gpu_dispatch.py's counter over a short run,
the fused kernel's from its layout, kernels/triton_kernel.py's docstring) times words/s over
the peak bandwidth MEASURED by a large device copy, and its analogy/similarity on the demo's
answer keys beside numba's (CPU, ``--threads``). With ``--ranks 2`` (default) it also trains
the first kernel at 2 ranks under mpiexec and reports the exchange's share of the ranks' time
(``comm_seconds`` over ``comm_seconds + compute_seconds`` of the last metrics line).

``--blocks R [R ...]`` then trains the block store on the torch kernel (``--store blocks
--kernel torch``) at each R ranks under mpiexec, all ranks on the one device, and prints its
words/s (raw words x epochs over the run's wall seconds, metrics' ``seconds``), similarity
and analogy beside numba's, and its bytes sent per word and rank (metrics' ``comm_bytes``):
issue 42's GPU check in one command.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def peak_bandwidth(device: str, mbytes: int = 1024) -> float:
    """Bytes/s of a large device-to-device copy (read + write), best of 5."""
    import torch
    n = mbytes * (1 << 20) // 4
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(5):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        dst.copy_(src)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 2 * n * 4 / best


def torch_bytes_per_word(small: str, work: str, dim: int) -> float:
    """The eager kernel's modelled traffic per trained word (gpu_dispatch's counter, on the CPU,
    over the small demo corpus ``small``: the counter runs CPU torch, slow on a large corpus,
    and the traffic per word does not depend on the corpus's length)."""
    import gpu_dispatch
    counts, words, _ = gpu_dispatch.count_training(small, os.path.join(work, "count"), epochs=1, dim=dim,
                                                   export=False)
    return counts.bytes / max(words, 1)


def triton_bytes_per_word(corpus: str, dim: int) -> float:
    """The fused kernel's modelled traffic per raw word, from its layout of the first 1M tokens
    (the torch kernel's, laid out on the CPU): for a centre with n > 0 contexts, every context
    and output row read once and atomically added once (3 x 4 D bytes each), the slot ids and
    weights (12 bytes a slot), the output ids and weights (12 bytes each), its rate and loss
    (8 bytes); a centre with no context reads its slot weights and writes its loss."""
    import numpy as np
    from mpidwe.core.config import TrainConfig
    from mpidwe.core.vocab import keep_probabilities, negative_table
    from mpidwe.io.corpus import Corpus
    from mpidwe.kernels import torch_kernel
    from mpidwe.kernels.args import KernelArgs

    with Corpus(corpus) as c:
        tokens, starts, _ = next(c.iter_blocks(c.shard(), 1 << 20))
        counts = c.counts
    cfg = TrainConfig(corpus=corpus, out="-")
    args = KernelArgs(keep_prob=keep_probabilities(counts, cfg.sample), neg_table=negative_table(counts),
                      words_total=len(tokens), window=cfg.window, negative=cfg.negative, shared_negatives=True)
    layout = torch_kernel.prepare_block(tokens, starts, np.array([1], dtype=np.uint64), "cpu", args)
    m, k1 = layout.contexts.shape[1], layout.targets.shape[1]
    contexts = layout.ok.sum(1)
    trained = int((contexts > 0).sum())
    rows = float(contexts.sum()) + trained * k1
    return (rows * 12 * dim + trained * (m * 12 + k1 * 12 + 8) + (len(contexts) - trained) * (m * 4 + 4)) / len(tokens)


def train_one(corpus, out, kernel, device, dim, epochs, threads, keys):
    from mpidwe.core.config import TrainConfig
    from mpidwe.parallel.comm import Comm
    from mpidwe.train import run
    sim, ana = keys
    res = run(TrainConfig(corpus=corpus, out=out, kernel=kernel, device=device, dim=dim, epochs=epochs,
                          threads=threads, progress=False, export=False, force=True, eval_sim=(sim,),
                          eval_analogy=(ana,)), Comm.serial(), log=None)
    last = res.metrics[-1]
    ev = last.get("eval") or {}
    compute = sum(last["compute_seconds"])
    return {"words": res.words_total, "words_per_s": res.words_total / max(compute, 1e-9),
            "similarity": ev.get("sim:" + os.path.basename(sim)), "analogy": ev.get("analogy:" + os.path.basename(ana))}


def exchange_share(corpus, out, kernel, device, dim, epochs, ranks) -> float:
    from mpidwe.demo import mpi_launch
    cmd = mpi_launch(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", out, "--kernel", kernel,
                             "--device", device, "--dim", str(dim), "--epochs", str(epochs), "--no-progress",
                             "--no-export", "--force"])
    subprocess.run(cmd, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True)
    lines = Path(out, "metrics.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    comm, compute = sum(last["comm_seconds"]), sum(last["compute_seconds"])
    return comm / max(comm + compute, 1e-9)


def train_blocks(corpus, out, device, dim, epochs, ranks, keys) -> dict:
    """The block store on the torch kernel at ``ranks`` ranks (mpiexec), from its metrics."""
    from mpidwe.demo import mpi_launch
    sim, ana = keys
    cmd = mpi_launch(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", out, "--store", "blocks",
                             "--kernel", "torch", "--device", device, "--dim", str(dim), "--epochs", str(epochs),
                             "--threads", "1", "--no-progress", "--no-export", "--force", "--eval-sim", sim,
                             "--eval-analogy", ana])
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"gpu_bench: --store blocks at {ranks} rank(s) failed (exit {done.returncode}): "
                         f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}")
    last = json.loads(Path(out, "metrics.jsonl").read_text().splitlines()[-1])
    ev = last.get("eval") or {}
    words = int(last["words"])
    return {"words_per_s": words / max(float(last["seconds"]), 1e-9),
            "similarity": ev.get("sim:" + os.path.basename(sim)), "analogy": ev.get("analogy:" + os.path.basename(ana)),
            "bytes_per_word": sum(last["comm_bytes"]) / max(words, 1)}


def main(argv=None) -> int:
    import torch
    from gpu_dispatch import make_demo
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tokens", type=int, default=3_000_000, help="demo corpus size")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--kernels", nargs="+", default=["torch", "triton"], choices=["torch", "triton"])
    p.add_argument("--threads", type=int, default=0, help="numba's threads (0: the node's cores)")
    p.add_argument("--ranks", type=int, default=2, help="ranks of the exchange run (0 or 1: none)")
    p.add_argument("--copy-mb", type=int, default=1024, help="size of the bandwidth copy")
    p.add_argument("--count-tokens", type=int, default=200_000,
                   help="small demo corpus: the torch kernel's bytes per word are counted on it (CPU torch), "
                        "and each kernel trains it once before its timed run (compilation)")
    p.add_argument("--blocks", type=int, nargs="*", default=[], metavar="R",
                   help="also train --store blocks --kernel torch at each R ranks (all on the one device)")
    a = p.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here (use --device cpu)")
    with tempfile.TemporaryDirectory() as work:
        corpus = make_demo(Path(work), a.tokens, seed=5)
        Path(work, "small").mkdir()
        small = make_demo(Path(work, "small"), min(a.count_tokens, a.tokens), seed=5)
        keys = (os.path.join(work, "demo-similarity.tsv"), os.path.join(work, "demo-analogies.txt"))
        peak = peak_bandwidth(a.device, a.copy_mb)
        print(f"device {a.device}: peak copy bandwidth {peak / 1e9:,.1f} GB/s (measured, {a.copy_mb} MB copy)")
        warm_up = (lambda kernel, device: train_one(small, os.path.join(work, "warm-" + kernel), kernel, device,
                                                    a.dim, 1, a.threads, keys))
        warm_up("numba", "cpu")        # compile (numba's JIT, Triton's) outside the timed runs
        ref = train_one(corpus, os.path.join(work, "numba"), "numba", "cpu", a.dim, a.epochs, a.threads, keys)
        print(f"numba (cpu): {ref['words_per_s']:,.0f} words/s, similarity {ref['similarity']:.3f}, "
              f"analogy {ref['analogy']:.2%}")
        for kernel in a.kernels:
            per_word = (torch_bytes_per_word(small, work, a.dim) if kernel == "torch"
                        else triton_bytes_per_word(corpus, a.dim))
            warm_up(kernel, a.device)
            r = train_one(corpus, os.path.join(work, kernel), kernel, a.device, a.dim, a.epochs, a.threads, keys)
            print(f"{kernel} ({a.device}): {r['words_per_s']:,.0f} words/s, {per_word:,.0f} bytes/word (modelled) "
                  f"= {per_word * r['words_per_s'] / peak:.1%} of the roofline; similarity {r['similarity']:.3f} "
                  f"({r['similarity'] - ref['similarity']:+.3f} vs numba), analogy {r['analogy']:.2%} "
                  f"({100 * (r['analogy'] - ref['analogy']):+.1f} points)", flush=True)
        if a.ranks > 1:
            share = exchange_share(corpus, os.path.join(work, "ranks"), a.kernels[0], a.device, a.dim, a.epochs,
                                   a.ranks)
            print(f"{a.kernels[0]} at {a.ranks} ranks: {share:.1%} of the ranks' time in the exchange")
        for ranks in a.blocks:
            r = train_blocks(corpus, os.path.join(work, f"blocks-{ranks}"), a.device, a.dim, a.epochs, ranks, keys)
            print(f"blocks, torch ({a.device}), {ranks} rank(s): {r['words_per_s']:,.0f} words/s, similarity "
                  f"{r['similarity']:.3f} ({r['similarity'] - ref['similarity']:+.3f} vs numba), analogy "
                  f"{r['analogy']:.2%} ({100 * (r['analogy'] - ref['analogy']):+.1f} points), "
                  f"{r['bytes_per_word']:,.1f} bytes sent per word and rank", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
