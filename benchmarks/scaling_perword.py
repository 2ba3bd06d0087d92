"""Parallel efficiency of a sync scheme on a cluster, from its measured costs per trained word.

    python benchmarks/scaling_perword.py RUN_1 RUN_P [RUN_P ...] [--threads 16 32] [--gbits 10 25 100]

RUN_1 is a 1-rank, 1-thread training run (its compute rate r); every RUN_P a run of the same
corpus and settings at P ranks, with any sync flags. From the last metrics line of a RUN_P,
averaged over its ranks, the model takes three costs per word a rank trains:

- b, bytes sent (``sync_bytes / words_rank``): set by the corpus, the scheme and P, not by
  the hardware;
- s, syncs (``syncs / words_rank``): the same;
- a, the sync's array work per second of the kernel's compute
  (``sync_array_seconds / compute_seconds``): both are seconds of one core, slowed alike
  when ranks are oversubscribed, so their ratio carries over.

One node runs one rank of T threads at T e r words per second (e: the threads' efficiency,
``--thread-efficiency``, assumed 0.8 by default; or ``--node-rate R``, a node's MEASURED
words/s at T threads, e.g. the kernel's rate of benchmarks/layouts.py's 1 x T run, which sets
e = R / (T r): a 16-core node computed enwiki at 7.3-8.2M words/s, e = 0.31-0.35 against
this machine's r, docs/lab/scaling.md).
The sync's array work runs on one core today (``--array-threads 1``); with more, it is
divided among them at the threads' efficiency. Per word of one node, with no overlap:

    compute 1 / (T e r) + array a / (A e r) + network b / B + latency s x 2 (P - 1) alpha

The block store with ``--ring-overlap`` (its metrics say ``block_pieces`` 2) sends one half
of an output block while the other half trains, so its ring bytes (``block_ring_bytes``) count
only where they take longer than the compute they hide behind:
network = (b - ring) / B + max(0, ring / B - compute).

(B: bandwidth per node; alpha = 20 us per latency step, as benchmarks/scaling.py, or
``--alpha-us``: an assumption, the largest term at 32 nodes, so the script can show how the
prediction moves with it; ``--breakdown`` prints each term in ns per word). The
steps are the run's own ``sync_steps`` where its metrics have them: the message rounds of
every collective its syncs made, each counted by its usual algorithm (``Comm``'s
accounting: P - 1 for an all-to-all and for a ring, ceil(log2 P) for recursive doubling;
parallel/comm.py, ``latency_steps``); in older runs 2 (P - 1) per sync, one all-to-all and one
allgather, which undercounts the tiers' syncs (per matrix a count allgather, a touch-count
all-reduce, an all-to-all and an allgather). Parallel efficiency = compute / the sum: the share of an ideal
P-fold speed-up a P-node job reaches. Each RUN_P predicts for its own P only: the costs
per word are measured, not extrapolated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mpidwe.core.config import feedback_of

ALPHA = 20e-6


def last(run: str) -> dict:
    return json.loads(Path(run, "metrics.jsonl").read_text().splitlines()[-1])


def flags(run: str) -> str:
    cfg = json.loads(Path(run, "config.json").read_text())
    if cfg.get("store") == "blocks":      # one pass of the ring a round
        halves = ", halves overlapped" if cfg.get("ring_pieces", 1) > 1 else ""
        return f"blocks, passes of {cfg['sync_every']:,} words per rank, {cfg.get('block_wire', 'fp32')}{halves}"
    parts = [f"sync {cfg['sync']}", f"every {cfg['sync_every']:,}"]
    tiers = cfg.get("sync_tiers")       # as run (--sync-full 0, auto, resolved); older runs: the flags
    if tiers:
        fed = feedback_of(cfg.get("wire_feedback", "off"), True, cfg.get("loss", "ns"))
        parts.append(f"tiers hot {tiers['hot']} full {tiers['full']}, {tiers['wire']}{', feedback' if fed else ''}")
    elif cfg.get("sync_full", 1) > 1:
        parts.append(f"tiers hot {cfg['sync_hot']} full {cfg['sync_full']}")
    if not tiers and cfg.get("wire", "fp32") not in ("fp32", "auto"):
        parts.append(cfg["wire"])
    return ", ".join(parts)


def costs(run: str) -> dict:
    rec = last(run)
    p = len(rec["words_rank"])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    steps = rec.get("sync_steps")        # measured: the collectives' latency steps, the same on every rank
    return {"P": p, "b": mean([b / w for b, w in zip(rec["sync_bytes"], rec["words_rank"])]),
            "s": mean([rec["syncs"] / w for w in rec["words_rank"]]),
            "steps": None if steps is None else mean([steps / w for w in rec["words_rank"]]),
            "a": mean([a / c for a, c in zip(rec["sync_array_seconds"], rec["compute_seconds"])]),
            # --ring-overlap: the ring's bytes, which travel while the other half trains
            "ring": mean([b / w for b, w in zip(rec["block_ring_bytes"], rec["words_rank"])])
            if rec.get("block_pieces", 1) > 1 else 0.0,
            "eval": rec.get("eval", {}), "flags": flags(run)}


def terms(c: dict, r: float, threads: int, e: float, gbits: float, array_threads: int,
          alpha: float = ALPHA) -> dict:
    """Seconds per word of one node: compute, the sync's array work, the network's bytes and
    its latency (the model above)."""
    array = c["a"] / r if array_threads == 1 else c["a"] / (min(array_threads, threads) * e * r)
    steps = c["steps"] if c["steps"] is not None else c["s"] * 2 * (c["P"] - 1)      # per word
    compute, bandwidth, ring = 1 / (threads * e * r), gbits * 1e9 / 8, c.get("ring", 0.0)
    return {"compute": compute, "array": array,
            "network": (c["b"] - ring) / bandwidth + max(0.0, ring / bandwidth - compute),
            "latency": steps * alpha}


def efficiency(c: dict, r: float, threads: int, e: float, gbits: float, array_threads: int,
               alpha: float = ALPHA) -> float:
    t = terms(c, r, threads, e, gbits, array_threads, alpha)
    return t["compute"] / sum(t.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("one", help="a 1-rank, 1-thread run directory")
    ap.add_argument("runs", nargs="+", help="run directories at P ranks")
    ap.add_argument("--threads", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--gbits", type=float, nargs="+", default=[10, 25, 100])
    ap.add_argument("--thread-efficiency", type=float, default=0.8)
    ap.add_argument("--node-rate", type=float, default=None,
                    help="a node's measured words/s at the one --threads T (sets the threads' efficiency)")
    ap.add_argument("--array-threads", type=int, default=1, help="threads of the sync's array work (1: today)")
    ap.add_argument("--alpha-us", type=float, default=ALPHA * 1e6,
                    help="the network's latency per step in microseconds (assumed; default 20)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also print each run's terms in ns per word (first --threads and --gbits)")
    a = ap.parse_args()
    alpha = a.alpha_us * 1e-6
    if a.node_rate is not None and len(a.threads) != 1:
        ap.error("--node-rate is a node's rate at one thread count: give one --threads")
    rec1 = last(a.one)
    r = rec1["words_rank"][0] / rec1["compute_seconds"][0]
    if a.node_rate is not None:
        a.thread_efficiency = a.node_rate / (a.threads[0] * r)
        how = f"{a.thread_efficiency:.2f}, from a node's measured {a.node_rate:,.0f} words/s at {a.threads[0]} threads"
    else:
        how = f"assumed {a.thread_efficiency}"
    print(f"measured: 1 rank x 1 thread computes {r:,.0f} words/s ({a.one}); threads' efficiency "
          f"{how}; the sync's array work on {a.array_threads} thread(s); assumed: {a.alpha_us:g} us per "
          f"latency step")
    head = " | ".join(f"T={t} {g:g} Gb/s" for t in a.threads for g in a.gbits)
    print(f"| P | scheme | quality | bytes/word | syncs per 1M words | latency steps per sync | array/compute | {head} |")
    print("|" + " --- |" * (7 + len(a.threads) * len(a.gbits)))
    for run in a.runs:
        c = costs(run)
        q = " / ".join(f"{v:.3f}" if "sim" in k else f"{100 * v:.2f}%" for k, v in sorted(c["eval"].items(), reverse=True))
        effs = " | ".join(f"{100 * efficiency(c, r, t, a.thread_efficiency, g, a.array_threads, alpha):.0f}%"
                          for t in a.threads for g in a.gbits)
        per_sync = (f"{c['steps'] / c['s']:.0f}" if c["steps"] is not None else f"{2 * (c['P'] - 1)} (assumed)")
        print(f"| {c['P']} | {c['flags']} | {q} | {c['b']:,.1f} | {1e6 * c['s']:.1f} | {per_sync} | {c['a']:.3f} | {effs} |")
        if a.breakdown:
            t = terms(c, r, a.threads[0], a.thread_efficiency, a.gbits[0], a.array_threads, alpha)
            print(f"  P={c['P']}, T={a.threads[0]}, {a.gbits[0]:g} Gb/s, ns per word: "
                  + ", ".join(f"{k} {v * 1e9:.0f}" for k, v in t.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
