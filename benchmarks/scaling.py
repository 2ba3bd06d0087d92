"""Scaling estimate: predicted time per epoch for P = 1..64 ranks, per sync mode, at two
network bandwidths, from what one node measured.

    python benchmarks/scaling.py RUN_1 RUN_2 [RUN_2 ...] [--gbits 10 100]

RUN_1 is the run directory of a 1-rank training run, RUN_2 ... of 2-rank runs (one per sync
mode), all on the same corpus and settings (benchmarks/train.py leaves them in its workdir).
From them the model takes:

- r, the compute rate of one rank (words/s, training loop without communication);
- per sync and rank, the bytes each mode sends, split into a part that does not grow with P
  (dense and average: the matrices, 2(P-1)/P of them) and, for sparse, the rows one rank
  touches between two syncs (k rows of both matrices), which every other rank receives:
  (P-1) k (4 + 4 dim) bytes per matrix;
- the latency of a collective, alpha = 20 us per step (2(P-1) ring steps for an all-reduce).

time per epoch(P) = N / (P r) + syncs(P) * (bytes(P) / bandwidth + 2 (P-1) alpha),
syncs(P) = ceil(N / (P * sync_every)). The 1- and 2-rank rows are checked against the
measured wall time of those runs (here the "network" is shared memory, so the measured
seconds in communication also contain waiting for the slower rank).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ALPHA = 20e-6


def last_record(run: str) -> dict:
    return json.loads(Path(run, "metrics.jsonl").read_text().splitlines()[-1])


def config(run: str) -> dict:
    return json.loads(Path(run, "config.json").read_text())


def model_bytes(mode: str, p: int, vocab: int, dim: int, k_rows: float) -> float:
    """Bytes one rank sends per sync with P ranks (ring algorithms)."""
    if p == 1:
        return 0.0
    matrices = 2 * vocab * dim * 4
    if mode == "dense":
        return 2 * (p - 1) / p * matrices
    if mode == "average":
        return 2 * (p - 1) / p * (matrices + 2 * vocab * 4)
    return (p - 1) * 2 * k_rows * (4 + 4 * dim)  # sparse: allgather of touched rows


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
    vocab, dim, every = cfg1["vocab_size"], cfg1["dim"], cfg1["sync_every"]
    print(f"measured: 1 rank x {cfg1['threads']} thread(s) computes {rate:,.0f} words/s; corpus {words:,} words, "
          f"V={vocab:,}, dim={dim}, sync every {every:,} words per rank")

    measured = {}
    k_rows = None
    for run in a.two_ranks:
        rec, cfg = last_record(run), config(run)
        syncs = rec["rounds"]
        per_sync = max(rec["comm_bytes"]) / max(syncs, 1)
        measured[cfg["sync"]] = (rec["seconds"], per_sync, max(rec["comm_seconds"]), syncs, cfg["threads"])
        if cfg["sync"] == "sparse":
            k_rows = per_sync / (2 * (4 + 4 * dim))               # P=2: one other rank's rows
        print(f"measured: 2 ranks, sync {cfg['sync']}: {rec['seconds']:.1f} s wall, {syncs} syncs, "
              f"{per_sync / 1e6:.1f} MB sent per sync and rank, {max(rec['comm_seconds']):.1f} s in communication")
    if k_rows is None:
        k_rows = vocab / 2
    print(f"sparse: about {k_rows:,.0f} rows of each matrix touched per rank between syncs "
          f"({100 * k_rows / vocab:.0f}% of the vocabulary)\n")

    modes = [m for m in ("dense", "sparse", "average") if m in measured] or ["dense", "sparse", "average"]
    for gbits in a.gbits:
        bw = gbits * 1e9 / 8
        print(f"predicted seconds per epoch at {gbits:g} Gbit/s (compute {words / rate:.1f} s on one rank)")
        print(f"{'P':>4s} " + " ".join(f"{m:>10s}" for m in modes) + "   " + " ".join(f"{m + ' comm%':>14s}" for m in modes))
        for p in a.ranks:
            syncs = math.ceil(words / (p * every))
            row, share = [], []
            for m in modes:
                comm = syncs * (model_bytes(m, p, vocab, dim, k_rows) / bw + (2 * (p - 1) * ALPHA if p > 1 else 0))
                total = words / (p * rate) + comm
                row.append(total)
                share.append(100 * comm / total)
            print(f"{p:4d} " + " ".join(f"{t:10.1f}" for t in row) + "   " + " ".join(f"{s:13.0f}%" for s in share))
        print()
    print("check against the measured runs (this node; shared memory instead of a network):")
    print(f"  P=1: predicted {words / rate:.1f} s, measured {one['seconds']:.1f} s")
    for m, (secs, per_sync, comm_s, syncs, threads) in measured.items():
        pred = words / (2 * rate * threads / cfg1["threads"])
        print(f"  P=2 {m:8s}: compute alone {pred:.1f} s + measured communication {comm_s:.1f} s = "
              f"{pred + comm_s:.1f} s, measured {secs:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
