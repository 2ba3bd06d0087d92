"""Quality against the number of ranks, for every sync mode (docs/lab/sync-modes.md).

    python benchmarks/ranks.py demo   [--ranks 1 2 4 8 16] [--modes auto sparse dense average]
    python benchmarks/ranks.py enwiki [--ranks 1 2 4 8] [--data DIR] [-- TRAIN FLAGS]
    python benchmarks/ranks.py enwiki --data .devdata --ranks 1 2 8 16 --modes auto -- --device cuda --threads 2
    python benchmarks/ranks.py enwiki64 --ranks 1 8 16 --modes auto blocks --epochs 3 --seeds 1 2

``demo``: the demo corpus (3M tokens, planted answer key; made under --workdir if missing),
2 epochs, the defaults of ``make demo``. ``enwiki``: ../shared/data/enwiki-extract-100M
(text8 normalisation, min-count 5), 1 epoch, the hyper-parameters of benchmarks/train.py,
scored on WS-353 and the Google analogies; ``enwiki64``: that file and
enwiki-extract-AB-AD together (64.3M tokens, 145,785 words), for long runs. The mode
``blocks`` is ``--store blocks`` (block-partitioned, no averaging: docs/lab/blocks.md),
the others are ``--sync`` modes of the replicated store. Ranks beyond this machine's cores are
oversubscribed: quality does not depend on it, the seconds do (they are printed but mean
little there). Every run is a real ``mpiexec -n P python -m mpidwe.train``; a refused
combination prints its one-line reason instead of a row, a diverged one its exit 3. The
third form is the GPU check of docs/lab/sync-modes.md ("The fused kernel at several ranks"): all
ranks on the one GPU of a lent machine (``--data``: a folder holding the enwiki text and the
evaluation files, as the device tool carries it); rows then also give the device store's
copies between device and host per trained word (``device_down_bytes`` and
``device_up_bytes`` of metrics.jsonl).
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
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

from mpidwe.core.errors import EXIT_DIVERGED  # noqa: E402
from mpidwe.demo import mpi_launch  # noqa: E402

ENWIKI = dict(dim=100, window=5, negative=5, sample=1e-4, lr=0.025)


def env() -> dict:
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def prepare(kind: str, workdir: Path, data: Path = DATA) -> tuple[str, list[str], dict]:
    """The corpus, the train flags and the names of the two headline scores."""
    workdir.mkdir(parents=True, exist_ok=True)
    corpus = workdir / f"{kind}.h5"
    if kind == "demo":
        demo = workdir / "demo"
        if not (demo / "demo.txt").exists():
            subprocess.run([sys.executable, "-m", "mpidwe.synth", "--output", str(demo)], check=True, env=env())
        source, extra_pre = demo / "demo.txt", []
        flags = ["--epochs", "2", "--eval-sim", str(demo / "demo-similarity.tsv"),
                 "--eval-analogy", str(demo / "demo-analogies.txt")]
        names = {"sim": "sim:demo-similarity.tsv", "analogy": "analogy:demo-analogies.txt"}
    else:
        source = data / "enwiki-extract-100M.txt.gz"
        if kind == "enwiki64":
            source = [source, data / "enwiki-extract-AB-AD.txt.gz"]
        extra_pre = ["--normalize", "text8", "--strip-doc-tags", "--min-count", "5"]
        flags = ["--epochs", "1", "--eval-sim", str(data / "wordsim353.tsv"),
                 "--eval-analogy", str(data / "questions-words.txt")]
        for k, v in ENWIKI.items():
            flags += [f"--{k}", str(v)]
        names = {"sim": "sim:wordsim353.tsv", "analogy": "analogy:questions-words.txt"}
    if not corpus.exists():
        sources = [str(x) for x in (source if isinstance(source, list) else [source])]
        subprocess.run(mpi_launch(2, ["-m", "mpidwe.preprocess", *sources, "--output", str(corpus), *extra_pre]),
                       check=True, env=env())
    return str(corpus), flags, names


def run_one(corpus: str, flags: list[str], names: dict, ranks: int, mode: str, out: Path, extra: list[str]) -> dict:
    how = ["--store", "blocks"] if mode == "blocks" else ["--store", "replicated", "--sync", mode]
    cmd = mpi_launch(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(out), "--force", "--threads", "1",
                             *how, "--no-progress", "--no-export", *flags, *extra])
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env())
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        errors = [ln for ln in proc.stderr.splitlines() if ": error" in ln]
        return {"ranks": ranks, "mode": mode, "exit": proc.returncode, "error": errors[-1] if errors else proc.stderr[-300:]}
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    cfg = json.loads((out / "config.json").read_text())
    return {**row_of(last, cfg, names, ranks, mode), "wall_s": wall}


def per_word(last: dict, key: str) -> float:
    """A per-rank counter of metrics.jsonl per word that rank trained, averaged over ranks."""
    return sum(b / max(w, 1) for b, w in zip(last[key], last["words_rank"])) / len(last["words_rank"])


def row_of(last: dict, cfg: dict, names: dict, ranks: int, mode: str) -> dict:
    """A table row from a run's last metrics line and its config.json."""
    syncs = max(last["syncs"], 1)
    return {"ranks": ranks, "mode": mode, "exit": 0, "sim": last["eval"][names["sim"]],
            "analogy": last["eval"][names["analogy"]], "loss": last["loss"], "lr_scale": cfg["lr_scale"],
            "sync_every": cfg["sync_every"], "syncs": last["syncs"], "epochs": last["epoch"],
            # in tiers (by default from 8 ranks): hot rows, every how many syncs all, the wire
            "tiers": cfg.get("sync_tiers"),
            # --sync auto: the (sync, matrix) pairs that went dense
            "dense": last.get("sync_dense", 0),
            "mb_per_sync": max(last["sync_bytes"]) / syncs / 1e6,
            # the collectives' latency steps per sync (what a network's latency is charged for)
            "steps_per_sync": last.get("sync_steps", 0) / syncs,
            # bytes each rank sent in syncs per word it trained, and the syncs' array work
            # against the kernels' compute, averaged over the ranks
            "bytes_per_word": per_word(last, "sync_bytes"),
            "array_share": sum(a / max(c, 1e-9) for a, c in zip(last["sync_array_seconds"], last["compute_seconds"]))
            / ranks,
            "sync_comm_s": max(last["sync_comm_seconds"]), "sync_array_s": max(last["sync_array_seconds"]),
            "train_s": last["seconds"],
            # the device store (--device cuda, or the torch kernel): its host syncs' copies
            **({"device_down_per_word": per_word(last, "device_down_bytes"),
                "device_up_per_word": per_word(last, "device_up_bytes"),
                "device_copy_s": max(last["device_copy_seconds"])} if "device_down_bytes" in last else {})}


def table(rows: list[dict]) -> str:
    head = ("| ranks | sync | lr x | words/rank between syncs | syncs per epoch | dense / all matrix-syncs "
            "| MB sent per sync and rank | latency steps per sync "
            "| bytes per trained word and rank | array / compute "
            "| similarity | analogy | final loss | train s | sync s (comm + array) |")
    lines = [head, "|" + " --- |" * 15]
    for r in rows:
        if r["exit"]:
            what = "diverged" if r["exit"] == EXIT_DIVERGED else "refused"
            lines.append(f"| {r['ranks']} | {r['mode']} | {what} (exit {r['exit']}): {r['error']} |" + " |" * 12)
            continue
        t = r.get("tiers")
        sync = r["mode"] + (f", tiers {t['hot']}/{t['full']} {t['wire']}" if t else "")
        sync += f" (seed {r['seed']})" if r.get("seed", 1) != 1 else ""
        lines.append(f"| {r['ranks']} | {sync} | {r['lr_scale']} | {r['sync_every']:,} | "
                     f"{r['syncs'] / max(r['epochs'], 1e-9):.1f} | {r['dense']} / {2 * r['syncs'] if r['ranks'] > 1 else 0} | "
                     f"{r['mb_per_sync']:.2f} | {r['steps_per_sync']:.1f} | "
                     f"{r['bytes_per_word']:,.1f} | {r['array_share']:.3f} | {r['sim']:.3f} | "
                     f"{100 * r['analogy']:.1f}% | {r['loss']:.3f} | {r['train_s']:.1f} | "
                     f"{r['sync_comm_s']:.1f} + {r['sync_array_s']:.1f} |")
    copies = [r for r in rows if not r["exit"] and "device_down_per_word" in r and r["ranks"] > 1]
    if copies:
        lines += ["", "| ranks | sync | device to host, bytes per trained word | host to device | copy s |",
                  "|" + " --- |" * 5]
        lines += [f"| {r['ranks']} | {r['mode']} | {r['device_down_per_word']:,.1f} | {r['device_up_per_word']:,.1f} | "
                  f"{r['device_copy_s']:.2f} |" for r in copies]
    return "\n".join(lines)


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """The script's own arguments and the train flags after ``--`` (argparse would have
    bound an optional positional list before the options and refused the flags)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="more train flags after --, passed to every run")
    p.add_argument("corpus", choices=["demo", "enwiki", "enwiki64"])
    p.add_argument("--ranks", type=int, nargs="+", default=None, help="default: 1 2 4 8 16 (demo), 1 2 4 8 (enwiki)")
    p.add_argument("--modes", nargs="+", default=["auto", "sparse", "dense", "average"])
    p.add_argument("--epochs", type=int, default=None, help="default: 2 (demo), 1 (enwiki, enwiki64)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--workdir", default="bench-work/ranks")
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--data", default=str(DATA), help="enwiki: the folder of enwiki-extract-100M.txt.gz, "
                   "wordsim353.tsv and questions-words.txt")
    own, extra = split_extra(sys.argv[1:] if argv is None else argv)
    a = p.parse_args(own)
    a.extra = extra
    ranks = a.ranks or ([1, 2, 4, 8, 16] if a.corpus == "demo" else [1, 2, 4, 8])
    workdir = Path(a.workdir)
    corpus, flags, names = prepare(a.corpus, workdir, Path(a.data))
    if a.epochs:
        flags = [*flags, "--epochs", str(a.epochs)]
    rows = []
    for seed in a.seeds:
        for n in ranks:
            # one rank: no sync, the sync modes coincide (blocks: one block, plain skip-gram)
            for mode in (a.modes if n > 1 else sorted(set(a.modes[:1]) | ({"blocks"} & set(a.modes)))):
                name = f"run-{a.corpus}-{n}-{mode}" + (f"-seed{seed}" if len(a.seeds) > 1 else "")
                row = run_one(corpus, [*flags, "--seed", str(seed)], names, n, mode, workdir / name, a.extra)
                row["seed"] = seed
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(f"\n{a.corpus}: python benchmarks/ranks.py {a.corpus} --ranks {' '.join(map(str, ranks))} "
          f"--modes {' '.join(a.modes)}" + (f" --epochs {a.epochs}" if a.epochs else "")
          + (f" --seeds {' '.join(map(str, a.seeds))}" if a.seeds != [1] else "")
          + (f" --data {a.data}" if Path(a.data) != DATA else "")
          + (f" -- {' '.join(a.extra)}" if a.extra else "") + "\n")
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
