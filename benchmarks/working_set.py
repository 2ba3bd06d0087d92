"""The sharded store's working set and traffic per round, from its model (parallel/rows.py).

    python benchmarks/working_set.py zipf [--words 20000000] [--tokens 50e9] [--dim 300]
        [--rounds 50000 200000] [--ranks 8 16 32 64]
    python benchmarks/working_set.py corpus CORPUS.h5 [--rounds 5000 20000 50000 200000]

zipf: a Zipf (exponent 1) vocabulary of --words words whose counts sum to --tokens (for the
subsampling), skip-gram, window 5, 5 shared negatives, sample 1e-4: per round size B, E[T]
(distinct tokens), E[W] (working-set rows), the working set's bytes 8 (T + W) d, and per
rank count P the own rows 8 V d / P and the bytes each rank sends per trained word,
(8 d + 16) (T + W) (P - 1) / (P B), with the microseconds they take at 10 and 100 Gbit/s
(docs/lab/scaling.md). corpus: E[W] of a real corpus's counts with shared and per-pair negatives,
as a share of the vocabulary (docs/lab/sync-modes.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mpidwe.core.vocab import keep_probabilities  # noqa: E402
from mpidwe.parallel.rows import expected_working_set  # noqa: E402

WINDOW, NEGATIVE, SAMPLE = 5, 5, 1e-4


def zipf(args) -> None:
    counts = args.tokens / np.arange(1, args.words + 1, dtype=np.float64)
    counts *= args.tokens / counts.sum()
    keep = keep_probabilities(counts, SAMPLE)
    d = args.dim
    print("| B (words per rank per round) | E[T] | E[W] | working set | P | own rows | bytes per word "
          "| us per word at 10 Gbit/s | at 100 Gbit/s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for b in args.rounds:
        t, w = expected_working_set(b, counts, keep, WINDOW, NEGATIVE, shared_negatives=True)
        for k, p in enumerate(args.ranks):
            per_word = (8 * d + 16) * (t + w) * (p - 1) / (p * b)
            first = f"{t:,.0f} | {w:,.0f} | {8 * (t + w) * d / 1e9:.2f} GB" if k == 0 else " | | "
            print(f"| {b:,} | {first} | {p} | {8 * args.words * d / p / 1e9:.2f} GB | {per_word:,.0f} "
                  f"| {per_word * 8 / 10e9 * 1e6:.1f} | {per_word * 8 / 100e9 * 1e6:.2f} |")


def corpus(args) -> None:
    from mpidwe.io.corpus import Corpus

    with Corpus(args.corpus) as c:
        counts = np.asarray(c.counts, dtype=np.float64)
    keep = keep_probabilities(counts, SAMPLE)
    v = len(counts)
    print("| words per round (B) | E[W], shared negatives (default) | E[W], per-pair negatives |")
    print("| ---: | ---: | ---: |")
    for b in args.rounds:
        _, shared = expected_working_set(b, counts, keep, WINDOW, NEGATIVE, shared_negatives=True)
        _, pairs = expected_working_set(b, counts, keep, WINDOW, NEGATIVE, shared_negatives=False)
        print(f"| {b:,} | {shared:,.0f} ({shared / v:.1%}) | {pairs:,.0f} ({pairs / v:.0%}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    z = sub.add_parser("zipf")
    z.add_argument("--words", type=int, default=20_000_000)
    z.add_argument("--tokens", type=float, default=50e9)
    z.add_argument("--dim", type=int, default=300)
    z.add_argument("--rounds", type=int, nargs="+", default=[50_000, 200_000])
    z.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    c = sub.add_parser("corpus")
    c.add_argument("corpus")
    c.add_argument("--rounds", type=int, nargs="+", default=[5_000, 20_000, 50_000, 200_000])
    args = ap.parse_args()
    (zipf if args.what == "zipf" else corpus)(args)


if __name__ == "__main__":
    main()
