"""``python -m mpidwe.inspect``: read checkpoints (and run directories) without training.

    inspect CKPT_OR_RUN_DIR [--json]                      summary
    inspect CKPT neighbors WORD [-k 10]                   nearest words by cosine
    inspect CKPT analogy A B C [-k 5]                     a:b :: c:?  (3CosAdd)
    inspect CKPT export --format word2vec-text|word2vec-binary [--matrix input|output|sum] -o FILE
    inspect RUN_DIR plot -o curves.png                    loss, words/s and evaluation curves

A run directory stands for its newest valid checkpoint. Files are opened read-only without
HDF5 file locking, so a running job's checkpoints can be inspected while it writes new ones.

``export`` and ``plot`` write atomically (mpidwe.fsutil: a temporary name beside the output,
fsync, rename). An output that cannot be written (its folder missing, not a folder or not
writable, the output a folder) is refused before any work, and one that fails while being
written (a full disk) leaves neither the file nor a temporary one: both are one error line
naming the path and the reason, exit 2. A missing folder is not created.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import numpy as np

from . import checkpoint
from .errors import ConfigError, InputError, MpidweError
from .fsutil import atomic_path

PROG = "python -m mpidwe.inspect"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Summaries, neighbours, analogies, export and plots of checkpoints.")
    p.add_argument("path", help="checkpoint file, or run directory (its newest valid checkpoint)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    n = sub.add_parser("neighbors", help="nearest neighbours of a word")
    n.add_argument("word")
    n.add_argument("-k", type=int, default=10)
    n.add_argument("--matrix", choices=["input", "output", "sum"], default="input")
    a = sub.add_parser("analogy", help="a:b :: c:? with 3CosAdd")
    a.add_argument("a")
    a.add_argument("b")
    a.add_argument("c")
    a.add_argument("-k", type=int, default=5)
    a.add_argument("--matrix", choices=["input", "output", "sum"], default="input")
    e = sub.add_parser("export", help="write vectors in word2vec format")
    e.add_argument("--format", choices=["word2vec-text", "word2vec-binary"], default="word2vec-text")
    e.add_argument("--matrix", choices=["input", "output", "sum"], default="input")
    e.add_argument("-o", "--output", required=True)
    e.add_argument("--force", action="store_true", help="overwrite an existing output file")
    pl = sub.add_parser("plot", help="training curves as a PNG")
    pl.add_argument("-o", "--output", required=True)
    return p


def resolve(path: str) -> str:
    """A checkpoint path, or the newest valid checkpoint of a run directory."""
    if os.path.isdir(path):
        ckdir = os.path.join(path, "checkpoints") if os.path.isdir(os.path.join(path, "checkpoints")) else path
        found = checkpoint.list_checkpoints(ckdir)
        if not found:
            raise InputError(f"no checkpoint in {ckdir}")
        for candidate in reversed(found):
            try:
                checkpoint.load(candidate)
                return candidate
            except InputError as e:
                print(f"{PROG}: warning: skipping damaged checkpoint: {e}", file=sys.stderr)
        raise InputError(f"no valid checkpoint in {ckdir}")
    return path


def matrix(ck: checkpoint.Checkpoint, which: str) -> np.ndarray:
    return {"input": ck.w_in, "output": ck.w_out, "sum": ck.w_in + ck.w_out}[which]


def summary(ck: checkpoint.Checkpoint) -> dict:
    p = ck.progress
    last = ck.metrics[-1] if ck.metrics else {}
    return {
        "path": ck.path, "format_version": checkpoint.FORMAT_VERSION, "tool_version": ck.tool_version,
        "created_utc": ck.created, "checksum": "ok", "complete": ck.complete,
        "corpus": ck.corpus_path, "corpus_id": ck.corpus_id, "vocab_size": len(ck.words),
        "dim": int(ck.w_in.shape[1]),
        "progress": {"round": p.round, "rounds": p.rounds, "words_done": p.words_done,
                     "words_total": p.words_total, "fraction": p.words_done / max(p.words_total, 1),
                     "world_size": p.world_size, "lr": p.lr},
        "last_metrics": last, "metrics_records": len(ck.metrics),
        "config": ck.config,
    }


def print_summary(s: dict) -> None:
    p, cfg = s["progress"], s["config"]
    print(f"checkpoint   {s['path']}  (format v{s['format_version']}, mpidwe {s['tool_version']}, "
          f"checksum {s['checksum']}, {'complete' if s['complete'] else 'in progress'})")
    print(f"created      {s['created_utc']}")
    print(f"corpus       {s['corpus']}  (id {s['corpus_id'][:16]})")
    print(f"model        {cfg.get('model')}  dim {s['dim']}  vocab {s['vocab_size']:,}  window {cfg.get('window')} "
          f"negative {cfg.get('negative')}  sync {cfg.get('sync')}  ranks {p['world_size']}")
    print(f"progress     round {p['round']}/{p['rounds']}, {p['words_done']:,} of {p['words_total']:,} words "
          f"({100 * p['fraction']:.1f}%), lr {p['lr']:.6f}")
    last = s["last_metrics"]
    if last:
        loss = last.get("loss")
        print(f"last metrics loss {float('nan') if loss is None else loss:.4f}  words/s {last.get('words_per_s_run', 0):,.0f} (run average)"
              + ("  eval " + json.dumps(last["eval"], sort_keys=True) if last.get("eval") else ""))
    print(f"history      {s['metrics_records']} metrics records")


def neighbors(vectors: np.ndarray, words: list[str], word: str, k: int,
              exclude: tuple[int, ...] = ()) -> list[tuple[str, float]]:
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    index = {w: i for i, w in enumerate(words)}
    if word not in index:
        raise InputError(f"word not in vocabulary: {word!r}")
    return _top(unit, words, unit[index[word]], k, (index[word],) + exclude)


def _top(unit, words, query, k, exclude):
    scores = unit @ (query / max(np.linalg.norm(query), 1e-12))
    scores[list(exclude)] = -np.inf
    best = np.argsort(-scores)[:k]
    return [(words[i], float(scores[i])) for i in best]


def analogy(vectors: np.ndarray, words: list[str], a: str, b: str, c: str, k: int) -> list[tuple[str, float]]:
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    index = {w: i for i, w in enumerate(words)}
    missing = [w for w in (a, b, c) if w not in index]
    if missing:
        raise InputError(f"not in vocabulary: {', '.join(missing)}")
    ia, ib, ic = index[a], index[b], index[c]
    return _top(unit, words, unit[ib] - unit[ia] + unit[ic], k, (ia, ib, ic))


def check_output(path: str) -> None:
    """Refuse an output path that cannot be written, before any work: the path is a folder,
    its folder (or a folder above) does not exist or is a file, or it is not writable."""
    if os.path.isdir(path):
        raise InputError(f"cannot write {path}: it is a folder")
    parent = os.path.dirname(os.path.abspath(path))
    probe = parent
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise InputError(f"cannot write {path}: {probe} is not a folder")
    if probe != parent:
        raise InputError(f"cannot write {path}: folder {parent} does not exist (create it first)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {path}: folder {parent} is not writable (permission denied)")


@contextlib.contextmanager
def writing(path: str):
    """An OSError while ``path`` is written (a full disk, a folder that turned read-only)
    becomes one InputError line naming the path and the reason."""
    try:
        yield
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None


def plot(run_dir: str, out: str) -> str:
    """Loss, words/s and evaluation curves from RUN_DIR/metrics.jsonl, as a PNG written
    atomically to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = os.path.join(run_dir, "metrics.jsonl") if os.path.isdir(run_dir) else None
    if path is None or not os.path.exists(path):
        raise InputError(f"no metrics.jsonl in {run_dir} (plot takes a run directory)")
    records = []
    with open(path, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                raise InputError(f"{path}:{no}: not a JSON line") from None
    if not records:
        raise InputError(f"{path} has no records yet")
    words = [r["words"] for r in records]
    evals = sorted({k for r in records for k, v in (r.get("eval") or {}).items() if isinstance(v, (int, float))})
    panels = 2 + (1 if evals else 0)
    fig, axes = plt.subplots(panels, 1, figsize=(8, 3 * panels), sharex=True)
    axes[0].plot(words, [float("nan") if r.get("loss") is None else r["loss"] for r in records])
    axes[0].set_ylabel("loss per example")
    axes[1].plot(words, [r["words_per_s"] for r in records])
    axes[1].set_ylabel("words/s")
    if evals:
        for key in evals:
            pts = [(r["words"], r["eval"][key]) for r in records if isinstance((r.get("eval") or {}).get(key), (int, float))]
            axes[2].plot(*zip(*pts), marker="o", label=key)
        axes[2].set_ylabel("evaluation")
        axes[2].legend(fontsize=8)
    axes[-1].set_xlabel("words trained (all ranks)")
    fig.suptitle(os.path.basename(os.path.abspath(run_dir)))
    fig.tight_layout()
    try:
        with writing(out), atomic_path(out) as tmp:
            fig.savefig(tmp, dpi=100, format="png")
    finally:
        plt.close(fig)
    return out


def run(argv=None) -> int:
    a = build_parser().parse_args(argv)
    if a.command in ("plot", "export"):
        check_output(a.output)
    if a.command == "plot":
        out = plot(a.path, a.output)
        print(json.dumps({"plot": out}) if a.json else f"wrote {out}")
        return 0
    ck = checkpoint.load(resolve(a.path))
    if a.command is None:
        s = summary(ck)
        if a.json:
            print(json.dumps(s, sort_keys=True, default=str))
        else:
            print_summary(s)
    elif a.command in ("neighbors", "analogy"):
        if a.k < 1:
            raise ConfigError("-k must be >= 1")
        vecs = matrix(ck, a.matrix)
        res = (neighbors(vecs, ck.words, a.word, a.k) if a.command == "neighbors"
               else analogy(vecs, ck.words, a.a, a.b, a.c, a.k))
        if a.json:
            print(json.dumps([{"word": w, "cosine": s} for w, s in res]))
        else:
            for w, s in res:
                print(f"{s:8.4f}  {w}")
    elif a.command == "export":
        from .evaluate.vectors import write_word2vec

        if os.path.exists(a.output) and not a.force:
            raise InputError(f"output exists: {a.output} (use --force to overwrite)")
        with writing(a.output):
            write_word2vec(a.output, ck.words, matrix(ck, a.matrix), binary=a.format == "word2vec-binary")
        print(json.dumps({"export": a.output}) if a.json else
              f"wrote {a.output} ({a.format}, {a.matrix} matrix, {len(ck.words):,} x {ck.w_in.shape[1]})")
    return 0


def main(argv=None) -> int:
    try:
        return run(argv)
    except MpidweError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
