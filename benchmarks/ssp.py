"""Would bounded staleness (SSP) help the sharded store? Per-round compute and waiting (issue 10).

    python benchmarks/ssp.py [demo|enwiki] [--workdir /tmp/bench-ssp] [--ranks 3] [--slow 3]

Runs ``--store sharded`` on RANKS ranks, one metrics line per round, in three cases:

* even: every rank at its own speed;
* slow: rank 0 computes SLOW times slower than it could (after each piece its kernel trained
  it sleeps (SLOW - 1) x the piece's time, as tests/mpi/slow_rank.py does; a sleep, so the
  other ranks keep the cores), every rank the same words per round;
* balanced: the same slow rank, with --balance speed.

From each rank's cumulative compute seconds (planning and training, the sleep included) it
takes every round's compute time c[r][k], and from the exposed communication seconds (pulls,
waiting for the prefetch, pushes, refreshes) the time each rank waited per round (all but the
first round, which compiles and warms the kernels). Then it
replays the measured compute times under SSP with bound s: rank r starts round k once it has
finished round k-1 and every rank has finished round k-1-s (s = 0 is bulk-synchronous; s =
inf lets every rank run free), with communication left out, and prints each makespan against
s = 0 and as a fraction of the measured training loop. That is the most a bound s could
save on these runs: SSP would also cost the refresh
of rows other ranks change meanwhile, and staleness costs quality (docs/lab/sync-modes.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BOUNDS = (0, 1, 2, 4, None)       # None: unbounded


def rank_runner(slow: float, argv: list[str]) -> int:
    """One rank: train; rank 0 computes ``slow`` times slower than it could."""
    from mpidwe.kernels import cpu
    from mpidwe.train import main

    rank = int(os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or 0)
    if rank == 0 and slow > 1:
        original = cpu.train_block

        def slowed(*args, **kwargs):
            t = time.perf_counter()
            out = original(*args, **kwargs)
            time.sleep((slow - 1) * (time.perf_counter() - t))
            return out

        cpu.train_block = slowed
    return main(argv)


def makespan(c: np.ndarray, bound: int | None) -> float:
    """Finish time of the last rank when rank r may start round k once it finished k-1 and
    every rank finished k-1-bound (compute times ``c`` [ranks, rounds], no communication)."""
    ranks, rounds = c.shape
    finish = np.zeros((ranks, rounds))
    for k in range(rounds):
        gate = finish[:, k - 1 - bound].max() if bound is not None and k - 1 - bound >= 0 else 0.0
        prev = finish[:, k - 1] if k else np.zeros(ranks)
        finish[:, k] = np.maximum(prev, gate) + c[:, k]
    return float(finish[:, -1].max())


def per_round(lines: list[dict], key: str) -> np.ndarray:
    """[ranks, rounds] per-round increments of a cumulative per-rank metric."""
    cum = np.array([ln[key] for ln in lines], dtype=np.float64).T
    return np.diff(np.concatenate((np.zeros((cum.shape[0], 1)), cum), axis=1), axis=1)


def run(corpus: str, flags: list[str], ranks: int, slow: float, balance: str, out: Path) -> dict:
    from ranks import env, mpi_launch

    train = ["--corpus", corpus, "--out", str(out), "--force", "--threads", "1", "--store", "sharded",
             "--no-progress", "--log-seconds", "0", "--no-export", "--log-every", "1", "--balance", balance, *flags]
    cmd = mpi_launch(ranks, [str(Path(__file__).resolve()), "--rank-runner", str(slow), "--", *train])
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env())
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"exit {proc.returncode}\n{proc.stderr[-2000:]}")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    # the first round is left out: it includes compiling and warming the kernels (about 1.5 s)
    c = per_round(lines, "compute_seconds")[:, 1:]
    wait = per_round(lines, "exposed_comm_seconds")[:, 1:]
    bsp = makespan(c, 0)
    last = lines[-1]
    return {
        "rounds": c.shape[1], "train_s": round(last["seconds"], 2), "wall_s": round(wall, 1),
        "words_rank": last["words_rank"],
        "compute_s_rank": [round(x, 2) for x in c.sum(axis=1)],
        "compute_ms_per_round_rank": [round(1e3 * x, 1) for x in c.mean(axis=1)],
        # jitter: the spread of a rank's round times (standard deviation / mean)
        "round_cv_rank": [round(float(x), 3) for x in c.std(axis=1) / np.maximum(c.mean(axis=1), 1e-12)],
        "wait_ms_per_round_rank": [round(1e3 * x, 1) for x in wait.mean(axis=1)],
        "bsp_s": round(bsp, 2),
        # the compute makespan's saving under SSP(s), as a fraction of it and of the training loop
        "ssp_saving": {("inf" if b is None else str(b)): round(1 - makespan(c, b) / bsp, 4) for b in BOUNDS[1:]},
        "ssp_saving_of_train": {("inf" if b is None else str(b)): round((bsp - makespan(c, b)) / last["seconds"], 4)
                                for b in BOUNDS[1:]},
        "loss": last["loss"],
    }


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--rank-runner":
        sys.exit(rank_runner(float(sys.argv[2]), sys.argv[4:]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", nargs="?", default="demo", choices=["demo", "enwiki"])
    ap.add_argument("--workdir", default="/tmp/bench-ssp")
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--slow", type=float, default=3.0)
    ap.add_argument("--sync-every", type=int, default=20000)
    a = ap.parse_args()
    if a.ranks < 2 or a.slow < 1:
        raise SystemExit("ssp.py: --ranks must be >= 2 and --slow >= 1")
    from ranks import prepare

    corpus, flags, _ = prepare(a.kind, Path(a.workdir))
    keep = [i for i, f in enumerate(flags) if not f.startswith("--eval") and not (i and flags[i - 1].startswith("--eval"))]
    flags = [flags[i] for i in keep] + ["--sync-every", str(a.sync_every)]
    for case, slow, balance in (("even", 1.0, "off"), ("slow", a.slow, "off"), ("balanced", a.slow, "speed")):
        r = run(corpus, flags, a.ranks, slow, balance, Path(a.workdir) / f"ssp-{a.kind}-{case}")
        print(json.dumps({"case": case, "ranks": a.ranks, "slow": slow, "balance": balance, **r}), flush=True)


if __name__ == "__main__":
    main()
