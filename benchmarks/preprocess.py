"""Preprocessing speed and memory: mpidwe on 1 and 2 ranks vs gensim's vocabulary scan.

    python benchmarks/preprocess.py [--input ../shared/data/enwiki-extract-100M.txt.gz]
                                    [--ranks 1 2] [--plain] [--repeat N]

The peer is gensim 4.x ``Word2Vec.build_vocab(corpus_file=...)`` (its C-accelerated
vocabulary pass) over the same text already normalised, which is only part of what
preprocessing does (no id writing, no HDF5), so a ratio near 1 means mpidwe does its whole
job in the time gensim takes to count words. ``--plain`` also runs mpidwe on the input
decompressed (no serial gunzip), and ``--repeat N`` on N copies of it concatenated (a
corpus N times larger, so that the fixed costs of a run weigh less). Each input's line
gives the speed-up of every rank count over 1 rank, measured in the same run. Run from the
repository root; prints seconds, peak memory (max RSS per process) and ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and the largest process's max RSS in MiB (measured in a fresh
    wrapper process, so earlier runs do not count)."""
    probe = ("import resource,subprocess,sys\n"
             "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", probe, *cmd], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
    wall = time.perf_counter() - t
    return wall, int(out.stdout.split()[-1]) / 1024


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", default=str(DATA / "enwiki-extract-100M.txt.gz"))
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--plain", action="store_true", help="also time mpidwe on the decompressed input")
    p.add_argument("--repeat", type=int, default=0, help="also time mpidwe on N copies of the input, concatenated")
    p.add_argument("--workdir", default=None, help="where the inputs and corpora go (default: a temporary folder)")
    a = p.parse_args()
    from mpidwe.demo import mpi_launch
    from mpidwe.io.text import ScanStats, TextOptions, describe_source, open_reader, scan_range

    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        inputs = {"input": a.input}
        if a.plain or a.repeat:
            plain = os.path.join(tmp, "plain.txt")
            with open_reader(describe_source(a.input)) as src, open(plain, "wb") as dst:
                while block := src.read(1 << 24):
                    dst.write(block)
            if a.plain:
                inputs["plain"] = plain
            if a.repeat:
                big = os.path.join(tmp, f"plain-x{a.repeat}.txt")
                with open(big, "wb") as dst:
                    for _ in range(a.repeat):
                        with open(plain, "rb") as src:
                            while block := src.read(1 << 24):
                                dst.write(block)
                inputs[f"plain x{a.repeat}"] = big
        results = {}
        for name, path in inputs.items():
            for n in a.ranks:
                out = os.path.join(tmp, f"c{n}.h5")
                cmd = mpi_launch(n, ["-m", "mpidwe.preprocess", path, "--output", out, "--normalize", "text8",
                                     "--strip-doc-tags", "--min-count", "5"])
                results[(name, n)] = timed(cmd)
                os.unlink(out)
        # the peer reads the same text, normalised the same way (not timed)
        norm = os.path.join(tmp, "normalised.txt")
        src = describe_source(a.input)
        with open(norm, "wb") as fh:
            for toks, nl in scan_range(src, 0, src.size, True, TextOptions("text8", False, True), ScanStats()):
                fh.write(b" ".join(toks) + (b"\n" if nl else b" "))
        code = ("import logging,sys\nfrom gensim.models import Word2Vec\n"
                f"Word2Vec(vector_size=100, min_count=5, workers=2).build_vocab(corpus_file={norm!r})\n")
        gensim = timed([sys.executable, "-c", code])
    print(f"input: {a.input} ({os.path.getsize(a.input) / 1e6:.1f} MB)")
    print(f"{'what':40s} {'seconds':>8s} {'max RSS MiB':>12s} {'time / gensim':>14s} {'speed-up':>9s}")
    for (name, n), (sec, mem) in results.items():
        what = f"mpidwe {n} rank(s), {name}"
        up = results[(name, a.ranks[0])][0] / sec
        ratio = f"{sec / gensim[0]:14.2f}" if name == "input" else f"{'':14s}"
        print(f"{what:40s} {sec:8.1f} {mem:12.0f} {ratio} {up:9.2f}")
    print(f"{'gensim build_vocab (corpus_file), input':40s} {gensim[0]:8.1f} {gensim[1]:12.0f} {1.0:14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
