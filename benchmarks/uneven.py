"""Ranks of uneven speed: the static split against --balance speed (issue 13).

    python benchmarks/uneven.py [enwiki|demo] [--workdir /tmp/bench-uneven]

Three ranks on this 2-core machine: ranks 0 and 1 pinned to core 0 (each gets half of it),
rank 2 pinned to core 1 (a whole core), as on a cluster where one node is shared or slower.
The same job runs with the static split (every rank trains its own shard, the same words
per round: the two half-speed ranks set the pace) and balanced (each round's words divided
by measured speed). Prints wall seconds, training seconds, the words each rank trained,
quality, and the ratio. Needs taskset (util-linux) and 2 cores.
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

from ranks import env, prepare  # noqa: E402


def mpiexec() -> str:
    exe = Path(sys.executable).parent / "mpiexec"
    return str(exe) if exe.exists() else "mpiexec"


def run(corpus: str, flags: list[str], out: Path, balance: str) -> dict:
    args = [sys.executable, "-m", "mpidwe.train", "--corpus", corpus, "--out", str(out), "--threads", "1",
            "--no-progress", "--log-seconds", "0", "--force", "--balance", balance, *flags]
    cmd = [mpiexec(), "-n", "2", "taskset", "-c", "0", *args, ":", "-n", "1", "taskset", "-c", "1", *args]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env())
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"{balance}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    return {"wall": wall, "train": last["seconds"], "words": last["words"], "words_rank": last["words_rank"],
            "compute": last["compute_seconds"], "eval": last.get("eval", {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", nargs="?", default="enwiki", choices=["enwiki", "demo"])
    ap.add_argument("--workdir", default="/tmp/bench-uneven")
    a = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs 2 cores")
    corpus, flags, names = prepare(a.kind, Path(a.workdir))
    rows = {}
    for balance in ("off", "speed"):
        rows[balance] = r = run(corpus, flags, Path(a.workdir) / f"uneven-{a.kind}-{balance}", balance)
        ev = r["eval"]
        print(f"{balance:>5}: wall {r['wall']:.1f} s, training {r['train']:.1f} s "
              f"({r['words'] / r['train']:,.0f} words/s), words per rank {r['words_rank']}, "
              f"compute s per rank {r['compute']}, sim {ev.get(names['sim'], float('nan')):.3f}, "
              f"analogy {ev.get(names['analogy'], float('nan')):.3f}", flush=True)
    print(f"balanced / static training time: {rows['speed']['train'] / rows['off']['train']:.2f} "
          f"(wall {rows['speed']['wall'] / rows['off']['wall']:.2f})")


if __name__ == "__main__":
    main()
