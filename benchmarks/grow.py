"""Warm start on a grown corpus, against training from scratch (issue 13).

    python benchmarks/grow.py [--workdir /tmp/bench-grow] [--ranks 2] [--epochs 1]

enwiki-extract-100M is cut in two halves at a line end (by bytes). The first half is
preprocessed (text8 normalisation, doc tags dropped, min-count 5) and trained on ("half 1");
the second half is appended to that corpus (``preprocess --append``: a new segment) and
then, on the grown corpus:

- warm, new:  ``--init-from`` the half-1 model, ``--segments new`` (only the new text);
- warm, all:  ``--init-from`` the half-1 model, ``--segments all`` (old and new text);
- scratch, all: no warm start, the whole grown corpus (the retrain a warm start avoids);
- scratch, half 2: the second half alone, preprocessed as its own corpus, from scratch.

Every run uses the hyper-parameters of benchmarks/train.py for --epochs, on --ranks ranks x
1 thread, and is scored on WS-353 and the Google analogies (30,000 most frequent words).
Printed per run: the words trained, training seconds (the loop, from metrics.jsonl) and
their ratio to the retrain from scratch (run in the same invocation, so the machine's load
is comparable), and quality; and the seconds of the append against those of
preprocessing half 2 on its own (every way of using the new text needs one of them).
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from mpidwe.demo import mpi_launch  # noqa: E402
from ranks import ENWIKI, env  # noqa: E402

PRE = ["--normalize", "text8", "--strip-doc-tags", "--min-count", "5"]


def halves(workdir: Path) -> tuple[Path, Path]:
    """The text cut at the first line end after the middle byte, uncompressed."""
    a, b = workdir / "half1.txt", workdir / "half2.txt"
    if not (a.exists() and b.exists()):
        text = gzip.decompress((DATA / "enwiki-extract-100M.txt.gz").read_bytes())
        cut = text.index(b"\n", len(text) // 2) + 1
        a.write_bytes(text[:cut])
        b.write_bytes(text[cut:])
    return a, b


def sh(args: list[str], ranks: int) -> float:
    t = time.perf_counter()
    proc = subprocess.run(mpi_launch(ranks, args), capture_output=True, text=True, env=env())
    if proc.returncode:
        raise SystemExit(f"{' '.join(args[:3])}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t


def train(corpus: Path, out: Path, ranks: int, epochs: int, extra: list[str]) -> dict:
    flags = ["--epochs", str(epochs), "--threads", "1", "--no-progress", "--log-seconds", "0", "--force",
             "--eval-sim", str(DATA / "wordsim353.tsv"), "--eval-analogy", str(DATA / "questions-words.txt")]
    for k, v in ENWIKI.items():
        flags += [f"--{k}", str(v)]
    wall = sh(["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), *flags, *extra], ranks)
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    return {"train_s": last["seconds"], "wall_s": wall, "words": last["words"],
            "sim": last["eval"]["sim:wordsim353.tsv"], "analogy": last["eval"]["analogy:questions-words.txt"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/bench-grow")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    w = Path(a.workdir)
    w.mkdir(parents=True, exist_ok=True)
    h1, h2 = halves(w)
    grown, alone = w / "grown.h5", w / "half2.h5"
    for p in (grown, alone):
        p.unlink(missing_ok=True)
    sh(["-m", "mpidwe.preprocess", str(h1), "--output", str(grown), *PRE], a.ranks)
    alone_s = sh(["-m", "mpidwe.preprocess", str(h2), "--output", str(alone), *PRE], a.ranks)
    rows = {"half 1 (the model before growing)": train(grown, w / "run-half1", a.ranks, a.epochs, [])}
    append_s = sh(["-m", "mpidwe.preprocess", str(h2), "--append", str(grown)], a.ranks)
    init = ["--init-from", str(w / "run-half1")]
    rows["warm, new segment"] = train(grown, w / "run-warm-new", a.ranks, a.epochs, init + ["--segments", "new"])
    rows["warm, all segments"] = train(grown, w / "run-warm-all", a.ranks, a.epochs, init + ["--segments", "all"])
    rows["scratch, all segments"] = train(grown, w / "run-scratch-all", a.ranks, a.epochs, [])
    rows["scratch, half 2 alone"] = train(alone, w / "run-scratch-half2", a.ranks, a.epochs, [])
    ref = rows["scratch, all segments"]
    print(f"\nappend of half 2: {append_s:.1f} s wall; preprocessing half 2 alone: {alone_s:.1f} s wall "
          f"({a.ranks} ranks); training: {a.ranks} ranks x 1 thread, {a.epochs} epoch(s)\n")
    print("| run | words trained | training s | x scratch-all time | WS-353 | analogy |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in rows.items():
        print(f"| {name} | {r['words']:,} | {r['train_s']:.1f} | {r['train_s'] / ref['train_s']:.2f} | "
              f"{r['sim']:.3f} | {100 * r['analogy']:.1f}% |")
    (w / "grow.json").write_text(json.dumps({"append_s": append_s, "alone_s": alone_s, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
