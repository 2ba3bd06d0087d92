"""--store sharded against --store replicated (issue 10), in the same run, same flags.

    python benchmarks/sharded.py synthetic [--workdir /tmp/bench-sharded] [--ranks 4]
    python benchmarks/sharded.py enwiki    [--workdir /tmp/bench-sharded] [--ranks 2]
    python benchmarks/sharded.py pipeline  [--workdir /tmp/bench-sharded] [--ranks 2] [--repeat 2]
    python benchmarks/sharded.py budget    [--workdir /tmp/bench-sharded] [--ranks 4]

synthetic: the large-vocabulary synthetic corpus (mpidwe.synth --tokens 45000000 --rare-words
2200000 --rare-share 0.5 --rare-zipf 0: 2.13M words above min-count 5), dim 100, 1 epoch,
--sync-every 50000, scored on its planted answer key. enwiki: the benchmark hyper-parameters
of benchmarks/ranks.py, 1 epoch. Each store runs once under mpiexec; every rank reports its
peak RSS (getrusage ru_maxrss) through this script's --rank-runner mode. Prints, per store:
peak RSS per rank, bytes sent per trained word (all ranks' communication over the corpus's
words), words per second (raw tokens x epochs / training seconds, and over the wall time
of the whole job), quality, and the ratios sharded / replicated.

pipeline: --store sharded with --pipeline against --no-pipeline (alternating, --repeat times
each) on the first --prefix-tokens words (10M) of the synthetic corpus's text at min-count 1
(about 2M words: the working sets stay a small part of the vocabulary, as in the use the
store is for), dim 100, --sync-every 50000, no evaluation or export. Prints, per run, the
training loop's words/s, the communication the training thread waited for (pulls, waiting
for the prefetch, pushes, refreshes: the slowest rank's seconds per round), the prefetch
thread's seconds, the rows refreshed per row pulled, bytes per word and the final loss
(which must be the same: the pipeline does not change the model), then the ratios.

budget: --store sharded at its defaults (dim 100, --memory-budget 0, 1 epoch) on a 1.5M-word
vocabulary (mpidwe.synth --tokens 8000000 --rare-words 1700000 --rare-share 0.5 --rare-zipf 0
at min-count 1: 1,526,844 words), scored on its planted key. Prints the run's row and the
bound of issue 23: every rank's peak RSS at most half of one replica's two matrices
(4 V d bytes) plus 500 MB, with what bounded the round (config.json's round_bound) and its
words per rank (tests/test_sharded.py, test_defaults_hold_half_a_replica, checks the bound).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

BUDGET_SYNTH = ["--tokens", "8000000", "--rare-words", "1700000", "--rare-share", "0.5", "--rare-zipf", "0"]
SYNTH = ["--tokens", "45000000", "--rare-words", "2200000", "--rare-share", "0.5", "--rare-zipf", "0"]


def rank_runner(rss_dir: str, argv: list[str]) -> int:
    """One rank: train, then write this process's peak RSS (bytes) to RSS_DIR/rss-RANK."""
    from mpidwe.train import main

    rc = main(argv)
    rank = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK") or "0"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    Path(rss_dir, f"rss-{rank}").write_text(str(peak))
    return rc


def prepare_synthetic(workdir: Path) -> tuple[str, list[str], dict]:
    from ranks import env

    demo = workdir / "synth-large"
    corpus = workdir / "synth-large.h5"
    if not (demo / "demo-key.json").exists():
        subprocess.run([sys.executable, "-m", "mpidwe.synth", "--output", str(demo), "--force", *SYNTH],
                       check=True, env=env())
    if not corpus.exists():
        subprocess.run([sys.executable, "-m", "mpidwe.preprocess", str(demo / "demo.txt"), "--output",
                        str(corpus)], check=True, env=env())
    flags = ["--epochs", "1", "--dim", "100", "--sync-every", "50000",
             "--eval-sim", str(demo / "demo-similarity.tsv"), "--eval-analogy", str(demo / "demo-analogies.txt")]
    return str(corpus), flags, {"sim": "sim:demo-similarity.tsv", "analogy": "analogy:demo-analogies.txt"}


def prepare_budget(workdir: Path) -> tuple[str, list[str], dict]:
    """The 1.5M-word synthetic corpus (BUDGET_SYNTH at min-count 1) and --store sharded's defaults."""
    from ranks import env

    demo = workdir / "synth-1.5m"
    corpus = workdir / "synth-1.5m.h5"
    if not (demo / "demo-key.json").exists():
        subprocess.run([sys.executable, "-m", "mpidwe.synth", "--output", str(demo), "--force", *BUDGET_SYNTH],
                       check=True, env=env())
    if not corpus.exists():
        subprocess.run([sys.executable, "-m", "mpidwe.preprocess", str(demo / "demo.txt"), "--output",
                        str(corpus), "--min-count", "1"], check=True, env=env())
    flags = ["--epochs", "1", "--eval-sim", str(demo / "demo-similarity.tsv"),
             "--eval-analogy", str(demo / "demo-analogies.txt")]
    return str(corpus), flags, {"sim": "sim:demo-similarity.tsv", "analogy": "analogy:demo-analogies.txt"}


def budget(workdir: Path, ranks: int, reuse: bool) -> dict:
    """The sharded store at its defaults against issue 23's bound (module docstring)."""
    corpus, flags, names = prepare_budget(workdir)
    out = workdir / f"budget-{ranks}-sharded"
    r = run_store(corpus, flags, names, ranks, "sharded", out, reuse)
    if r.get("exit"):
        return r
    resolved = json.loads((out / "config.json").read_text())
    bound = 4 * resolved["vocab_size"] * resolved["dim"] + 500_000_000
    return dict(r, vocab_size=resolved["vocab_size"], sync_every=resolved["sync_every"],
                round_bound=resolved["round_bound"], memory_budget_mb=resolved["memory_budget_mb"],
                bound_mb=round(bound / 2 ** 20), within=max(r["rss_mb"]) * 2 ** 20 <= bound)


def prepare_prefix(workdir: Path, tokens: int) -> tuple[str, list[str], dict]:
    """The first ``tokens`` words (whole lines) of the synthetic corpus's text, at min-count 1."""
    from ranks import env

    prepare_synthetic(workdir)
    text = workdir / f"synth-prefix-{tokens}.txt"
    corpus = workdir / f"synth-prefix-{tokens}.h5"
    if not corpus.exists():
        n = 0
        with open(workdir / "synth-large" / "demo.txt", encoding="utf-8") as src, open(text, "w") as dst:
            for line in src:
                dst.write(line)
                n += len(line.split())
                if n >= tokens:
                    break
        subprocess.run([sys.executable, "-m", "mpidwe.preprocess", str(text), "--output", str(corpus),
                        "--min-count", "1"], check=True, env=env())
        text.unlink()
    flags = ["--epochs", "1", "--dim", "100", "--sync-every", "50000", "--no-export"]
    return str(corpus), flags, {}


def finished(out: Path, ranks: int) -> bool:
    rss_dir = out.parent / f"{out.name}-rss"
    try:
        last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        return False
    return last["step"] == last["rounds"] and all((rss_dir / f"rss-{r}").exists() for r in range(ranks))


def run_store(corpus: str, flags: list[str], names: dict, ranks: int, store: str, out: Path,
              reuse: bool = False, extra: tuple[str, ...] = ()) -> dict:
    from ranks import env, mpi_launch

    rss_dir = out.parent / f"{out.name}-rss"
    if reuse and finished(out, ranks):
        return summarize(out, rss_dir, names, ranks, store, None)
    out.mkdir(parents=True, exist_ok=True)
    rss_dir.mkdir(exist_ok=True)
    for f in rss_dir.iterdir():
        f.unlink()
    train = ["--corpus", corpus, "--out", str(out), "--force", "--threads", "1", "--store", store,
             "--no-progress", "--log-seconds", "0", "--no-verify-corpus", *flags, *extra]
    cmd = mpi_launch(ranks, [str(Path(__file__).resolve()), "--rank-runner", str(rss_dir), "--", *train])
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env())
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-3:]
        return {"store": store, "exit": proc.returncode, "error": " | ".join(tail)[-400:], "wall_s": wall}
    (rss_dir / "wall").write_text(str(wall))
    return summarize(out, rss_dir, names, ranks, store, wall)


def summarize(out: Path, rss_dir: Path, names: dict, ranks: int, store: str, wall: float | None) -> dict:
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    ev = last.get("eval") or {}
    if wall is None and (rss_dir / "wall").exists():
        wall = float((rss_dir / "wall").read_text())
    rss = [int((rss_dir / f"rss-{r}").read_text()) for r in range(ranks)]
    return {"store": store, "ranks": ranks, "exit": 0, "rss_mb": [round(x / 2 ** 20) for x in rss],
            "bytes_per_word": sum(last["comm_bytes"]) / last["words"],
            "words_per_s": last["words"] / last["seconds"],
            "words_per_s_wall": last["words"] / wall if wall else None,
            "train_s": last["seconds"], "wall_s": wall, "loss": last["loss"],
            "compute_s": max(last["compute_seconds"]), "sync_comm_s": max(last["sync_comm_seconds"]),
            "sim": ev.get(names.get("sim")), "analogy": ev.get(names.get("analogy")),
            **({"pipeline": last["pipeline"], "rounds": last["syncs"],
                "exposed_ms_per_round": round(1e3 * max(last["exposed_comm_seconds"]) / max(last["syncs"], 1), 1),
                "prefetch_ms_per_round": round(1e3 * max(last["prefetch_seconds"]) / max(last["syncs"], 1), 1),
                "refreshed_per_pulled": round(sum(last["rows_refreshed"]) / max(sum(last["rows_pulled"]), 1), 3),
                "working_set_rows": max(last["working_set_rows"])} if "pipeline" in last else {})}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--rank-runner":
        sys.exit(rank_runner(sys.argv[2], sys.argv[4:]))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["synthetic", "enwiki", "pipeline", "budget"])
    ap.add_argument("--workdir", default="/tmp/bench-sharded")
    ap.add_argument("--ranks", type=int, default=0, help="default: 4 (synthetic, budget), 2 (enwiki)")
    ap.add_argument("--stores", default="replicated,sharded")
    ap.add_argument("--replicated-ranks", type=int, default=0,
                    help="ranks of the replicated run (default: --ranks). Its peak RSS per rank does not "
                         "depend on the rank count (four V x d matrices from 2 ranks on), so fewer ranks "
                         "measure it where P of them would not fit in this machine's memory")
    ap.add_argument("--reuse", action="store_true", help="reuse a finished run found in the work folder")
    ap.add_argument("--prefix-tokens", type=int, default=10_000_000, help="pipeline: words of the synthetic text")
    ap.add_argument("--repeat", type=int, default=2, help="pipeline: runs of each mode, alternating")
    a = ap.parse_args()
    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    ranks = a.ranks or (4 if a.kind in ("synthetic", "budget") else 2)
    if a.kind == "pipeline":
        pipeline(workdir, ranks, a.prefix_tokens, a.repeat)
        return
    if a.kind == "budget":
        print(json.dumps(budget(workdir, ranks, a.reuse)))
        return
    if a.kind == "synthetic":
        corpus, flags, names = prepare_synthetic(workdir)
    else:
        from ranks import prepare

        corpus, flags, names = prepare("enwiki", workdir)
    rows = {}
    for store in a.stores.split(","):
        n = a.replicated_ranks or ranks if store == "replicated" else ranks
        rows[store] = r = run_store(corpus, flags, names, n, store, workdir / f"{a.kind}-{n}-{store}", a.reuse)
        print(json.dumps(r), flush=True)
    if all(r.get("exit") == 0 for r in rows.values()) and len(rows) == 2:
        rep, sh = rows["replicated"], rows["sharded"]
        print(json.dumps({
            "ranks": {"replicated": rep["ranks"], "sharded": sh["ranks"]},
            "peak_rss_ratio": round(max(sh["rss_mb"]) / max(rep["rss_mb"]), 3),
            "speed_ratio": round(sh["words_per_s"] / rep["words_per_s"], 3),
            "wall_speed_ratio": (round(sh["words_per_s_wall"] / rep["words_per_s_wall"], 3)
                                 if sh["words_per_s_wall"] and rep["words_per_s_wall"] else None),
            "sim_diff": round(sh["sim"] - rep["sim"], 4), "analogy_diff": round(sh["analogy"] - rep["analogy"], 4),
        }))


def pipeline(workdir: Path, ranks: int, tokens: int, repeat: int) -> None:
    corpus, flags, names = prepare_prefix(workdir, tokens)
    rows = {"on": [], "off": []}
    for i in range(repeat):
        for mode in ("on", "off"):
            out = workdir / f"pipeline-{ranks}-{mode}-{i}"
            r = run_store(corpus, flags, names, ranks, "sharded", out, extra=("--pipeline" if mode == "on"
                                                                               else "--no-pipeline",))
            rows[mode].append(r)
            print(json.dumps(r), flush=True)
            if r.get("exit"):
                return
    on, off = rows["on"], rows["off"]
    print(json.dumps({
        "ranks": ranks,
        "same_loss": all(r["loss"] == off[0]["loss"] for r in on + off),
        "speed_ratio": [round(a["words_per_s"] / b["words_per_s"], 3) for a, b in zip(on, off)],
        "exposed_ratio": [round(a["exposed_ms_per_round"] / b["exposed_ms_per_round"], 3) for a, b in zip(on, off)],
    }))


if __name__ == "__main__":
    main()
