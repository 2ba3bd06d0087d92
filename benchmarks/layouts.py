"""Ranks x threads on one node's cores: which layout trains fastest, at what quality.

    python benchmarks/layouts.py enwiki --cores 16                  # 1x16 2x8 4x4 8x2 16x1, and 1x1
    python benchmarks/layouts.py enwiki --layouts 1x1 1x2 2x1 --epochs 3
    python benchmarks/layouts.py demo --cores 2                     # the demo corpus, small

Every layout is a real ``mpiexec -n P python -m mpidwe.train --threads T`` on the corpus of
benchmarks/ranks.py (enwiki: 1 epoch by default, the benchmark hyper-parameters, WS-353 and
the Google analogies; demo: its answer key), with the defaults for P ranks (the interval,
tiers, the wire) and ``--device cpu``; Open MPI gets ``--bind-to none`` (mpidwe.demo's
launcher), without which a 1- or 2-rank job's threads share one core. Per layout it prints
words/s (corpus tokens x epochs over rank 0's training seconds, the last metrics line's
``seconds``: no start-up, no evaluation), the whole process's wall seconds, the ratio of both
to 1 x cores (the peer, in the same sitting: put it in --layouts), the kernel's compute
seconds and the sync's array and communication seconds (the slowest rank's), bytes sent per
trained word and rank, and the scores. Where 1 x 1 and 1 x T both ran it also prints the
threads' efficiency e(T) = compute(1 x 1) / (T x compute(1 x T)), the number
benchmarks/scaling_perword.py's --thread-efficiency stands for. Only layouts of up to
--cores processes x threads run (more would oversubscribe and time the machine, not the
layout).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mpidwe.demo import mpi_launch  # noqa: E402
import ranks  # noqa: E402
from ranks import env, prepare  # noqa: E402


def parse_layout(text: str) -> tuple[int, int]:
    try:
        p, t = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a layout is RANKSxTHREADS (16x1, 2x8), not {text!r}") from None
    if p < 1 or t < 1:
        raise argparse.ArgumentTypeError(f"a layout needs at least 1 rank and 1 thread, not {text!r}")
    return p, t


def run_layout(corpus: str, flags: list[str], names: dict, p: int, t: int, out: Path, extra: list[str]) -> dict:
    cmd = mpi_launch(p, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(out), "--force", "--threads", str(t),
                         "--device", "cpu", "--no-progress", "--no-export", *flags, *extra])
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env())
    wall = time.perf_counter() - start
    row = {"layout": f"{p}x{t}", "ranks": p, "threads": t, "exit": proc.returncode}
    if proc.returncode:
        errors = [ln for ln in proc.stderr.splitlines() if ": error" in ln]
        return {**row, "error": errors[-1] if errors else proc.stderr[-300:]}
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    cfg = json.loads((out / "config.json").read_text())
    per_rank = lambda key: last.get(key) or [0.0] * p  # noqa: E731   (one rank: no sync lists)
    compute = last["compute_seconds"] if isinstance(last["compute_seconds"], list) else [last["compute_seconds"]]
    words = last.get("words_rank") or [last["words"]]
    ev = last.get("eval", {})
    return {**row, "warnings": [ln for ln in proc.stdout.splitlines() if ln.startswith("warning:")],
            "words_per_s": cfg["words_total"] / last["seconds"], "train_s": last["seconds"], "wall_s": wall,
            "compute_s": max(compute), "array_s": max(per_rank("sync_array_seconds")),
            "comm_s": max(per_rank("sync_comm_seconds")), "syncs": last.get("syncs", 0),
            "bytes_per_word": sum(b / max(w, 1) for b, w in zip(per_rank("sync_bytes"), words)) / p,
            "sim": ev.get(names["sim"]), "analogy": ev.get(names["analogy"]), "loss": last["loss"]}


def table(rows: list[dict], peer: str) -> str:
    base = next((r for r in rows if r["layout"] == peer and not r["exit"]), None)
    lines = ["| layout | words/s | vs " + peer + " | wall s | vs " + peer + " | compute s | array s | comm s | syncs "
             "| bytes/word | similarity | analogy |", "|" + " --- |" * 12]
    for r in rows:
        if r["exit"]:
            lines.append(f"| {r['layout']} | failed (exit {r['exit']}): {r['error']} |" + " |" * 10)
            continue
        ratio = (f"{r['words_per_s'] / base['words_per_s']:.2f}", f"{base['wall_s'] / r['wall_s']:.2f}") if base else ("", "")
        score = (f"{r['sim']:.3f}", f"{100 * r['analogy']:.2f}%") if r["sim"] is not None else ("", "")
        lines.append(f"| {r['layout']} | {r['words_per_s'] / 1e6:.2f}M | {ratio[0]} | {r['wall_s']:.1f} | {ratio[1]} | "
                     f"{r['compute_s']:.2f} | {r['array_s']:.2f} | {r['comm_s']:.2f} | {r['syncs']} | "
                     f"{r['bytes_per_word']:.1f} | {score[0]} | {score[1]} |")
    return "\n".join(lines)


def efficiencies(rows: list[dict]) -> list[str]:
    """e(T) = compute(1x1) / (T compute(1xT)) for every 1 x T beside a 1 x 1."""
    one = next((r for r in rows if r["layout"] == "1x1" and not r["exit"]), None)
    if one is None:
        return []
    return [f"threads' efficiency e({r['threads']}) = {one['compute_s'] / (r['threads'] * r['compute_s']):.2f} "
            f"(1 x 1 computes {one['compute_s']:.2f} s, 1 x {r['threads']} {r['compute_s']:.2f} s)"
            for r in rows if r["ranks"] == 1 and r["threads"] > 1 and not r["exit"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus", choices=["demo", "enwiki"])
    ap.add_argument("--cores", type=int, default=None, help="the node's cores (default: this machine's)")
    ap.add_argument("--layouts", type=parse_layout, nargs="+", default=None,
                    help="RANKSxTHREADS each (default: 1x1 and every power-of-2 split of --cores)")
    ap.add_argument("--epochs", type=int, default=None, help="default: the corpus's (enwiki 1, demo 2)")
    ap.add_argument("--workdir", default="bench-work/layouts")
    ap.add_argument("--data", default=None, help="the folder of enwiki and its evaluation files "
                    "(default: ../shared/data beside the checkout)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("extra", nargs="*", help="more train flags, after --")
    a = ap.parse_args()
    if a.data:
        ranks.DATA = Path(a.data)
    cores = a.cores or len(os.sched_getaffinity(0))
    layouts = a.layouts or [(1, 1)] + [(cores // t, t) for t in (1 << k for k in range(cores.bit_length() - 1, -1, -1))
                                       if cores % t == 0]
    layouts = list(dict.fromkeys(layouts))
    too_many = [f"{p}x{t}" for p, t in layouts if p * t > cores]
    if too_many:
        ap.error(f"{', '.join(too_many)}: more processes x threads than --cores {cores}")
    workdir = Path(a.workdir)
    corpus, flags, names = prepare(a.corpus, workdir)
    if a.epochs:
        flags[flags.index("--epochs") + 1] = str(a.epochs)
    rows = []
    for p, t in layouts:
        row = run_layout(corpus, flags, names, p, t, workdir / f"run-{a.corpus}-{p}x{t}", a.extra)
        print(json.dumps(row), flush=True)
        rows.append(row)
    peer = f"1x{cores}"
    print(f"\n{a.corpus}: python benchmarks/layouts.py {a.corpus} --cores {cores} --layouts "
          f"{' '.join(f'{p}x{t}' for p, t in layouts)}{f' --epochs {a.epochs}' if a.epochs else ''}\n")
    print(table(rows, peer))
    for line in efficiencies(rows):
        print(line)
    for r in rows:
        for w in r.get("warnings", []):
            print(f"{r['layout']}: {w}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if not any(r["exit"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
