"""Scaling estimate: predicted time per epoch for P = 1..64 ranks, per sync mode, at two
network bandwidths, from what one node measured.

    python benchmarks/scaling.py RUN_1 RUN_2 [RUN_2 ...] [--gbits 10 100]

RUN_1 is the run directory of a 1-rank training run, RUN_2 ... of 2-rank runs (one per sync
mode), all on the same corpus and settings (benchmarks/train.py leaves them in its workdir).
From them the model takes:

- r, the compute rate of one rank (words/s, training loop without communication);
- per sync and rank, the bytes each mode sends (``auto``, the default, is modelled as the
  cheaper of the two by its rule once a sparse and a dense run are given), split into a part that does not grow with P
  (dense and average: the matrices, 2(P-1)/P of them) and, for sparse, the rows one rank
  touches between two syncs (k rows of both matrices), which every other rank receives:
  (P-1) k (4 + 4 dim) bytes per matrix;
- the latency of a collective, alpha = 20 us per step (2(P-1) ring steps for an all-reduce).

time per epoch(P) = N / (P r) + syncs(P) * (bytes(P) / bandwidth + 2 (P-1) alpha + array(P)),
syncs(P) = ceil(N / (P * S(P))), with S(P) the default interval mpidwe chooses for P ranks
(mpidwe.train.auto_sync_every: the words all ranks train between syncs are fixed up to 4
ranks and shrink as 4/P beyond, so syncs per epoch grow with P there). For sparse, k(P) is
the expected number of distinct rows a rank touches in S(P) words, computed from the
corpus's counts (a row is touched if its word occurs in the window, or is drawn as a
negative); array(P) is the sync's own array work, measured per sync at P = 2 and scaled by
the rows it handles. The 1- and 2-rank rows are checked against the measured wall time of
those runs (here the "network" is shared memory, so the measured seconds in communication
also contain waiting for the slower rank).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mpidwe.train.plan import auto_sync_every  # noqa: E402

ALPHA = 20e-6


def touched_rows(counts, keep, negative: int, words: float) -> float:
    """Expected distinct rows of (input + output) one rank touches in ``words`` raw words."""
    import numpy as np

    from mpidwe.core.vocab import negative_probabilities

    p = counts / counts.sum()
    kept = p * keep
    seen = 1 - np.exp(-words * kept)                                    # as a window word
    drawn = 1 - np.exp(-words * (kept + kept.sum() * negative * negative_probabilities(counts)))
    return float(seen.sum() + drawn.sum())


def last_record(run: str) -> dict:
    return json.loads(Path(run, "metrics.jsonl").read_text().splitlines()[-1])


def config(run: str) -> dict:
    return json.loads(Path(run, "config.json").read_text())


def model_bytes(mode: str, p: int, vocab: int, dim: int, k_rows: float) -> float:
    """Bytes one rank sends per sync with P ranks (ring algorithms); ``k_rows``: rows of both
    matrices one rank touched since the last sync."""
    if p == 1:
        return 0.0
    matrices = 2 * vocab * dim * 4
    if mode in ("dense", "average"):
        return 2 * (p - 1) / p * (matrices + 2 * vocab * 4)   # deltas + touch counts
    return (p - 1) * k_rows * (4 + 4 * dim)  # sparse: allgather of touched rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("one_rank")
    ap.add_argument("two_ranks", nargs="+")
    ap.add_argument("--gbits", type=float, nargs="+", default=[10, 100])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    a = ap.parse_args()

    one = last_record(a.one_rank)
    cfg1 = config(a.one_rank)
    words = one["words"]
    rate = words / max(one["compute_seconds"][0], 1e-9)       # one rank, its threads
    vocab, dim = cfg1["vocab_size"], cfg1["dim"]
    print(f"measured: 1 rank x {cfg1['threads']} thread(s) computes {rate:,.0f} words/s; corpus {words:,} words, "
          f"V={vocab:,}, dim={dim}")

    from mpidwe.io.corpus import Corpus
    from mpidwe.core.vocab import keep_probabilities

    with Corpus(cfg1["corpus"]) as corpus:
        counts = corpus.counts.astype(float)
    keep = keep_probabilities(counts, cfg1["sample"]).astype(float)

    measured, array_per_row = {}, {}
    for run in a.two_ranks:
        rec, cfg = last_record(run), config(run)
        syncs = rec["syncs"]
        per_sync = max(rec["sync_bytes"]) / max(syncs, 1)
        array_s = max(rec["sync_array_seconds"]) / max(syncs, 1)
        rows = 2 * touched_rows(counts, keep, cfg["negative"], cfg["sync_every"]) if cfg["sync"] == "sparse" \
            else 2 * vocab
        array_per_row[cfg["sync"]] = array_s / rows
        measured[cfg["sync"]] = (rec["seconds"], per_sync, max(rec["sync_comm_seconds"]), syncs, cfg["threads"])
        print(f"measured: 2 ranks, sync {cfg['sync']}: {rec['seconds']:.1f} s, {syncs} syncs, "
              f"{per_sync / 1e6:.1f} MB sent per sync and rank, {max(rec['sync_comm_seconds']):.1f} s in "
              f"communication, {1e3 * array_s:.0f} ms of array work per sync")

    modes = [m for m in ("dense", "sparse", "average") if m in measured] or ["dense", "sparse", "average"]
    if "dense" in modes and "sparse" in modes:
        modes.append("auto")       # the default: per sync whichever of the two walks fewer rows
    print(f"\n{'P':>4s} {'words/rank between syncs':>25s} {'syncs/epoch':>12s} {'sparse rows/rank':>17s}")
    for p in a.ranks:
        every = auto_sync_every(vocab, p)
        print(f"{p:4d} {every:25,d} {math.ceil(words / (p * every)):12d} "
              f"{touched_rows(counts, keep, cfg1['negative'], every):17,.0f}")
    print()
    for gbits in a.gbits:
        bw = gbits * 1e9 / 8
        print(f"predicted seconds per epoch at {gbits:g} Gbit/s (compute {words / rate:.1f} s on one rank)")
        print(f"{'P':>4s} " + " ".join(f"{m:>10s}" for m in modes) + "   " + " ".join(f"{m + ' sync%':>14s}" for m in modes))
        for p in a.ranks:
            every = auto_sync_every(vocab, p)
            syncs = math.ceil(words / (p * every))
            k = touched_rows(counts, keep, cfg1["negative"], every)
            row, share = [], []
            for m in modes:
                if m == "auto":      # mpidwe.parallel.rule.dense_pays, both matrices at once
                    m = "dense" if p * k >= 2 * vocab else "sparse"
                handled = p * k if m == "sparse" else 2 * vocab        # rows the sync's array work touches
                per_sync = (model_bytes(m, p, vocab, dim, k) / bw + 2 * (p - 1) * ALPHA
                            + array_per_row.get(m, 0.0) * handled) if p > 1 else 0.0
                comm = syncs * per_sync
                total = words / (p * rate) + comm
                row.append(total)
                share.append(100 * comm / total)
            print(f"{p:4d} " + " ".join(f"{t:10.1f}" for t in row) + "   " + " ".join(f"{s:13.0f}%" for s in share))
        print()
    print("check against the measured runs (this node; shared memory instead of a network):")
    print(f"  P=1: predicted {words / rate:.1f} s, measured {one['seconds']:.1f} s")
    for m, (secs, per_sync, comm_s, syncs, threads) in measured.items():
        pred = words / (2 * rate * threads / cfg1["threads"])
        print(f"  P=2 {m:8s}: compute alone {pred:.1f} s + measured sync communication {comm_s:.1f} s = "
              f"{pred + comm_s:.1f} s, measured {secs:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
