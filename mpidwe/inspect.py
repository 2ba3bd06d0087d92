"""``python -m mpidwe.inspect``: query vectors and read checkpoints without training.

    inspect PATH [summary] [--json]                       summary (the default command)
    inspect PATH neighbors WORD [-k 10]                   nearest words by cosine
    inspect PATH neighbors - [-k 10]                      the same for each word read from stdin
    inspect PATH analogy A B C [-k 5]                     a:b :: c:?  (3CosAdd)
    inspect PATH analogy - [-k 5]                         the same for each 'a b c' line of stdin
    inspect PATH vectors [WORD ...]                       'word v1 ... vd' per word (none or -: stdin)
    inspect PATH export --format word2vec-text|word2vec-binary|fasttext-bin [--matrix ...] -o FILE
    inspect PATH fit-chars [--words 50000 --steps 6000 ...]  fit the character model for unseen words
    inspect RUN_DIR plot -o curves.png                    loss, words/s and evaluation curves

PATH is a run directory (its newest valid checkpoint), a checkpoint file, or a word2vec text or
binary file (mpidwe.api.load tells them apart by content); it is read once per call. A word2vec
file holds only words and vectors: its summary says so in one line, and ``--matrix`` other than
``input`` and ``plot`` (which reads RUN_DIR/metrics.jsonl) are refused with one line. Files
are opened read-only without HDF5 file locking, so a running job's checkpoints can be
inspected while it writes new ones.

Batch mode (a query word ``-``, or ``vectors`` without words), as fastText's ``nn`` and
``print-word-vectors``: every whitespace-separated word of standard input is a query
(``analogy -``: every non-blank line is ``a b c``). Text output is one tab-separated line per
answer (``query<TAB>word<TAB>cosine``; ``vectors``: ``word v1 ... vd``), ``--json`` one JSON
object per query; output is flushed after each query, so it works interactively. A word not
in the vocabulary (or a malformed analogy line) is one line on standard error, and the
queries go on; the exit status is 0 when at least one query was answered or none was asked,
and 2 when every query failed (the wrong file, or text normalised differently from the
vocabulary, rather than a few rare words). A query given as arguments that fails (an unknown
word among them) is one error line and exit 2, as every other error.

``export`` and ``plot`` write atomically (mpidwe.io.fsutil: a temporary name beside the output,
fsync, rename). An output that cannot be written (its folder missing, not a folder or not
writable, the output a folder) is refused before any work, and one that fails while being
written (a full disk) leaves neither the file nor a temporary one: both are one error line
naming the path and the reason, exit 2. A missing folder is not created.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys

import numpy as np

from .api import MATRICES, WordVectors, load
from .io.fasttext import write_checkpoint as write_fasttext
from .core.charmodel import CharModelOptions
from .core.errors import ConfigError, InputError, MpidweError
from .core.prog import prog
from .io.fsutil import atomic_path
from .io.vectors import nonfinite_rows

PROG = prog("inspect")
STDIN = "-"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Summaries, neighbours, analogies, vectors, export and plots of a "
                "run directory, a checkpoint or a word2vec file.")
    p.add_argument("path", help="run directory (its newest valid checkpoint), checkpoint file, or word2vec "
                   "text or binary file")
    p.add_argument("--json", action="store_true", help="machine-readable output (JSON; one JSON line per "
                   "query in batch mode)")
    # --json also after the command; SUPPRESS keeps a value given before it
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="machine-readable output (JSON; one JSON line per query in batch mode)")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND",
                           help="summary (the default), neighbors, analogy, vectors, export, fit-chars "
                           "or plot")

    def matrix_arg(parser):
        parser.add_argument("--matrix", choices=MATRICES, default="input",
                            help="which vectors: input (the word vectors; default), output (the context "
                            "vectors) or sum; a word2vec file holds only input")

    sub.add_parser("summary", parents=[common], help="what the file holds (the default command)",
                   description="Checkpoint: format, corpus, model, progress, last metrics. "
                   "Word2vec file: its size and dimension.")
    n = sub.add_parser("neighbors", parents=[common], help="nearest neighbours of a word by cosine",
                       description="Nearest neighbours by cosine; WORD '-' reads words from standard input.")
    n.add_argument("word", help="the query word, or - to read whitespace-separated words from standard input")
    n.add_argument("-k", type=int, default=10, help="how many neighbours (default 10)")
    matrix_arg(n)
    a = sub.add_parser("analogy", parents=[common], help="a:b :: c:? with 3CosAdd",
                       description="The words d closest to b - a + c (unit vectors), excluding a, b and c; "
                       "'-' reads one 'a b c' line per query from standard input.")
    a.add_argument("words", nargs="+", metavar="WORD",
                   help="the three words A B C of a:b :: c:?, or - to read 'a b c' lines from standard input")
    a.add_argument("-k", type=int, default=5, help="how many answers (default 5)")
    matrix_arg(a)
    v = sub.add_parser("vectors", parents=[common], help="print 'word v1 ... vd' per word",
                       description="The vector of each word, one 'word v1 ... vd' line (as fastText's "
                       "print-word-vectors); without words or with -, the words of standard input.")
    v.add_argument("words", nargs="*", metavar="WORD", help="words to print; none or - reads "
                   "whitespace-separated words from standard input")
    matrix_arg(v)
    e = sub.add_parser("export", parents=[common], help="write vectors in word2vec or fastText format")
    e.add_argument("--format", choices=["word2vec-text", "word2vec-binary", "fasttext-bin"],
                   default="word2vec-text",
                   help="word2vec-text (default; also fastText's .vec), word2vec-binary (as the C tool), or "
                        "fasttext-bin: a --subwords run as fastText's model, for fastText and gensim's FastText")
    matrix_arg(e)
    e.add_argument("-o", "--output", required=True, help="the file to write (atomically)")
    e.add_argument("--force", action="store_true", help="overwrite an existing output file")
    f = sub.add_parser("fit-chars", parents=[common], help="fit the character model for unseen words",
                       description="Fit the character-level generator (a BiLSTM over the characters of a word, "
                       "Mimick) to the vectors of a checkpoint (a run directory: its newest valid one) and "
                       "store it beside the checkpoint as ckpt-NNNNNNNNN.chars.h5; neighbors, analogy, "
                       "vectors, mpidwe.load and evaluate --oov then answer words outside the vocabulary "
                       "with it. Not for --subwords runs, whose n-grams already answer them.")
    d = CharModelOptions()
    for name, kind, text in [
            ("words", int, "fit on this many most frequent words"),
            ("steps", int, "Adam steps, batches of --batch spellings (the epochs follow from --words)"),
            ("batch", int, "spellings per step, all of one length"),
            ("lr", float, "Adam's learning rate, decayed linearly to a tenth"),
            ("char_dim", int, "character embedding size"),
            ("hidden", int, "LSTM state size per direction"),
            ("mlp", int, "hidden layer of the MLP from the LSTM states to the vector"),
            ("noise", float, "misspelt copies of each word per epoch (one random edit each, same target)"),
            ("alphabet", int, "characters kept (the most frequent); the rest share one id"),
            ("seed", int, "random seed"),
            ("threads", int, "torch threads")]:
        f.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(d, name),
                       help=f"{text} (default {getattr(d, name)})")
    matrix_arg(f)
    f.add_argument("--force", action="store_true", help="replace a character model already fitted")
    pl = sub.add_parser("plot", parents=[common], help="training curves of a run directory as a PNG")
    pl.add_argument("-o", "--output", required=True, help="the PNG file to write (atomically)")
    return p


# -------------------------------------------------------------------- summary
def summary(ck) -> dict:
    """The summary of a :class:`mpidwe.io.checkpoint.Checkpoint` (``--json`` prints it)."""
    p = ck.progress
    last = ck.metrics[-1] if ck.metrics else {}
    return {
        "path": ck.path,
        "format_version": ck.format_version, "tool_version": ck.tool_version,
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


W2V_NOTE = ("a word2vec file holds only words and vectors: training progress, configuration and "
            "metrics are in the run's checkpoints")


def vectors_summary(vecs: WordVectors) -> dict:
    """The summary of a word2vec file."""
    return {"path": vecs.path, "format": "word2vec", "vocab_size": len(vecs), "dim": vecs.dim,
            "note": W2V_NOTE}


def print_vectors_summary(s: dict) -> None:
    print(f"vectors      {s['path']}  (word2vec)")
    print(f"model        dim {s['dim']}  vocab {s['vocab_size']:,}")
    print(f"note         {s['note']}")


# -------------------------------------------------------------------- queries
NO_OOV = ("these vectors have no model for words outside the vocabulary (train with --subwords, or "
          f"fit one to a checkpoint: {PROG} RUN fit-chars)")


def unknown(vecs: WordVectors, words) -> list[str]:
    """The words that cannot be answered: outside the vocabulary, when there is no OOV model."""
    return [] if vecs.oov is not None else [w for w in words if w not in vecs]


def case_hint(vecs: WordVectors, words) -> str:
    """``; did you mean 'king'?`` for unknown words whose lowercase form is known."""
    known = [w.lower() for w in words if w not in vecs and w.lower() != w and w.lower() in vecs]
    return f"; did you mean {', '.join(map(repr, known))}? (the vocabulary is lowercase)" if known else ""


def nonfinite(vecs: WordVectors, words) -> list[str]:
    """The words among ``words`` whose vector holds a nan or an inf: no cosine with them means
    anything, so a query with one is refused, as evaluate skips them."""
    return [w for w in words if w in vecs and not np.isfinite(vecs.vectors[vecs.index[w]]).all()]


def _finite(vecs: WordVectors, query, ranked) -> list[tuple[str, float]]:
    """A query's answers, refused in one line when a query word's vector holds a nan or an
    inf (WordVectors never answers with such words)."""
    bad = nonfinite(vecs, query)
    if bad:
        raise InputError(f"the vector of {', '.join(map(repr, bad))} holds nan or inf; it has no neighbours "
                         f"(those words are skipped, as python -m mpidwe.evaluate skips them)")
    zero = [w for w in query if w in vecs and not vecs.vectors[vecs.index[w]].any()]
    if zero:        # its cosine with every word is 0: the answers are an arbitrary order of ties
        _warn(f"warning: the vector of {', '.join(map(repr, zero))} is all zeros (a word never trained?); "
              f"its cosine with every word is 0, so the order of these answers means nothing")
    return ranked()


def neighbors(vecs: WordVectors, word: str, k: int) -> list[tuple[str, float]]:
    """The ``k`` nearest words of ``word`` by cosine, itself excluded; a word outside the
    vocabulary gets its vector from the checkpoint's OOV model (subword n-grams)."""
    if unknown(vecs, [word]):
        raise InputError(f"word not in vocabulary: {word!r}{case_hint(vecs, [word])}; {NO_OOV}")
    return _finite(vecs, [word], lambda: vecs.most_similar(positive=[word], topn=k))


def analogy(vecs: WordVectors, a: str, b: str, c: str, k: int) -> list[tuple[str, float]]:
    """a:b :: c:? by 3CosAdd (gensim's most_similar(positive=[b, c], negative=[a]))."""
    missing = unknown(vecs, (a, b, c))
    if missing:
        raise InputError(f"not in vocabulary: {', '.join(missing)}{case_hint(vecs, missing)}; {NO_OOV}")
    return _finite(vecs, (a, b, c), lambda: vecs.most_similar(positive=[b, c], negative=[a], topn=k))


def warn_nonfinite(vecs: WordVectors) -> None:
    """One warning line when some vectors hold nan or inf (as evaluate gives): their words
    are neither queries nor answers."""
    bad = int(nonfinite_rows(vecs.vectors).sum())
    if bad:
        _warn(f"warning: {vecs.path}: {bad:,} of {len(vecs):,} vectors contain nan or inf; their words are "
              f"skipped (neither queries nor neighbours)")


def format_vector(word: str, vector) -> str:
    """``word v1 ... vd`` with 9 significant digits (every float32 reads back exactly)."""
    return word + " " + " ".join(f"{x:.9g}" for x in vector.tolist())


def stdin_words(stream):
    """(line number, word) for every whitespace-separated word of ``stream``."""
    for no, line in enumerate(stream, 1):
        for word in line.split():
            yield no, word


def stdin_triples(stream):
    """(line number, (a, b, c) or None for a malformed line) for every non-blank line."""
    for no, line in enumerate(stream, 1):
        words = line.split()
        if words:
            yield no, (tuple(words) if len(words) == 3 else None)


def _stdin():
    """Standard input as UTF-8 (the vocabulary's encoding) whatever the locale; a byte that
    is not UTF-8 becomes U+FFFD, so that word is reported unknown instead of failing."""
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(encoding="utf-8", errors="replace")
    return sys.stdin


def batch(queries, answer, show) -> int:
    """Answer each (line number, query); a failed query is one stderr line and the rest go
    on. Exit status: 2 when any query failed (a batch caller must know; the answers given
    are on standard output all the same), else 0."""
    asked = answered = 0
    for no, query in queries:
        asked += 1
        try:
            result = answer(query)
        except InputError as e:
            print(f"{PROG}: standard input line {no}: {e}", file=sys.stderr, flush=True)
            continue
        show(query, result)
        sys.stdout.flush()
        answered += 1
    if asked and not answered:
        print(f"{PROG}: error: no query could be answered ({asked} asked)", file=sys.stderr)
        return 2
    if answered < asked:
        print(f"{PROG}: error: {asked - answered} of {asked} queries could not be answered", file=sys.stderr)
        return 2
    return 0


def _cosines(a, result) -> None:
    if a.json:
        print(json.dumps([{"word": w, "cosine": s} for w, s in result]))
    else:
        for w, s in result:
            print(f"{s:8.4f}  {w}")


def query_command(a, vecs: WordVectors) -> int:
    """neighbors, analogy and vectors: one query from the arguments, or a batch from stdin."""
    if a.command == "vectors":
        def answer(word):
            if unknown(vecs, [word]):
                raise InputError(f"word not in vocabulary: {word!r}; {NO_OOV}")
            return vecs.vector(word)

        def show(word, vector):
            print(json.dumps({"word": word, "vector": vector.tolist()}) if a.json else format_vector(word, vector))

        if not a.words or a.words == [STDIN]:
            return batch(stdin_words(_stdin()), answer, show)
        missing = unknown(vecs, a.words)
        if missing:  # words given as arguments: all must be known, as in analogy
            raise InputError(f"not in vocabulary: {', '.join(missing)}; {NO_OOV}")
        for word in a.words:
            show(word, vecs.vector(word))
        return 0

    if a.k < 1:
        raise ConfigError("-k must be >= 1")
    warn_nonfinite(vecs)
    if a.command == "neighbors":
        def answer(word):
            return neighbors(vecs, word, a.k)

        def show(word, result):
            if a.json:
                print(json.dumps({"word": word, "neighbors": [{"word": w, "cosine": s} for w, s in result]}))
            else:
                print("".join(f"{word}\t{w}\t{s:.4f}\n" for w, s in result), end="")

        if a.word != STDIN:
            _cosines(a, answer(a.word))
            return 0
        return batch(stdin_words(_stdin()), answer, show)

    # analogy
    def answer(q):
        if q is None:
            raise InputError("expected three words a b c")
        return analogy(vecs, *q, a.k)

    def show(q, result):
        if a.json:
            print(json.dumps({"query": list(q), "answers": [{"word": w, "cosine": s} for w, s in result]}))
        else:
            print("".join(f"{' '.join(q)}\t{w}\t{s:.4f}\n" for w, s in result), end="")

    if a.words == [STDIN]:
        return batch(stdin_triples(_stdin()), answer, show)
    if len(a.words) != 3:
        raise ConfigError(f"analogy takes three words A B C or -, got {len(a.words)} (see {PROG} analogy --help)")
    _cosines(a, answer(tuple(a.words)))
    return 0


# -------------------------------------------------------------------- writing
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
    path = os.path.join(run_dir, "metrics.jsonl") if os.path.isdir(run_dir) else None
    if path is None and os.path.isfile(run_dir):
        raise InputError(f"plot takes a run directory (it reads RUN_DIR/metrics.jsonl), not the file {run_dir}")
    if path is None or not os.path.exists(path):
        raise InputError(f"no metrics.jsonl in {run_dir} (plot takes a run directory)")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def export(a, vecs: WordVectors) -> None:
    if os.path.exists(a.output) and not a.force:
        raise InputError(f"output exists: {a.output} (use --force to overwrite)")
    with writing(a.output):
        if a.format == "fasttext-bin":
            write_fasttext(a.output, vecs.checkpoint, source=a.path, matrix=vecs.matrix)
        else:
            vecs.save_word2vec_format(a.output, binary=a.format == "word2vec-binary")
    print(json.dumps({"export": a.output}) if a.json else
          f"wrote {a.output} ({a.format}, {vecs.matrix} matrix, {len(vecs):,} x {vecs.dim})")


def sharded_checkpoint(path: str):
    """The checkpoint ``path`` names when it is a sharded one (its parameters in part files),
    read without its matrices; None for anything else."""
    from . import api

    if api.kind_of(path) == "word2vec":
        return None
    ck = api.read_checkpoint(path, warn=_warn, params=False)
    return ck if ck.parts else None


def export_streamed(a, ck) -> None:
    """Export a sharded checkpoint piece by piece: no more than a piece of rows in memory."""
    from .io import checkpoint
    from .io.vectors import write_word2vec_blocks

    if os.path.exists(a.output) and not a.force:
        raise InputError(f"output exists: {a.output} (use --force to overwrite)")
    matrix = getattr(a, "matrix", "input")
    pick = {"input": lambda i, o: i, "output": lambda i, o: o, "sum": lambda i, o: i + o}[matrix]
    dim = int(ck.parts[0]["dim"])
    with writing(a.output):
        write_word2vec_blocks(a.output, ck.words, dim,
                              (pick(i, o) for _, i, o in checkpoint.iter_rows(ck, piece_rows=8192)),
                              binary=a.format == "word2vec-binary")
    print(json.dumps({"export": a.output}) if a.json else
          f"wrote {a.output} ({a.format}, {matrix} matrix, {len(ck.words):,} x {dim}, streamed from "
          f"{len(ck.parts)} parts)")


# -------------------------------------------------------------------- the character model
def fit_chars(a) -> dict:
    """Fit the character generator to a checkpoint's vectors and store it beside it."""
    import dataclasses

    from . import api
    from .io import charfile, checkpoint
    from .core import charmodel

    if api.kind_of(a.path) == "word2vec":
        raise InputError(f"fit-chars stores the model beside a checkpoint; {a.path} is a word2vec file "
                         f"(give the run directory or a checkpoint)")
    options = CharModelOptions(**{f.name: getattr(a, f.name) for f in dataclasses.fields(CharModelOptions)})
    options.check()
    ck = api.read_checkpoint(a.path, warn=_warn)
    if ck.config.get("subwords"):
        raise InputError(f"{ck.path} was trained with --subwords: its n-grams already answer words outside "
                         f"the vocabulary")
    out = checkpoint.char_model_path(ck.path)
    if os.path.exists(out) and not a.force and not _carried_here(ck):
        raise InputError(f"a character model exists: {out} (use --force to fit it again)")
    vectors = api._matrix(ck, a.matrix)
    log = None if a.json else (lambda line: print(line, file=sys.stderr, flush=True))
    model = charmodel.fit(ck.words, vectors, options, log=log)
    charfile.save_char_model(ck, model.meta(), model.state(), a.matrix)
    return {"char_model": out, "checkpoint": ck.path, "matrix": a.matrix, **model.info}


def _carried_here(ck) -> bool:
    """Whether the model beside ``ck`` was carried forward from an earlier checkpoint (a fit
    replaces it without --force: it was fitted to other vectors)."""
    from .io import charfile

    try:
        stored = charfile.read_char_model(ck)
    except InputError:
        return False
    return stored is not None and stored.carried


# -------------------------------------------------------------------- command
def _warn(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr)


def run(argv=None) -> int:
    a = build_parser().parse_args(argv)
    command = a.command or "summary"
    if command in ("plot", "export"):
        check_output(a.output)
        from .io.checkpoint import check_not_source

        check_not_source(a.output, a.path)
    if command == "fit-chars":
        r = fit_chars(a)
        print(json.dumps(r) if a.json else f"wrote {r['char_model']} (fitted to {r['fitted_words']:,} words of "
              f"{r['checkpoint']}, {r['matrix']} matrix, final loss {r['epoch_losses'][-1]:.4f}, "
              f"{r['seconds']:.0f} s, {r['cpu_seconds']:.0f} s of CPU)")
        return 0
    if command == "plot":
        out = plot(a.path, a.output)
        print(json.dumps({"plot": out}) if a.json else f"wrote {out}")
        return 0
    if command == "export":
        ck = sharded_checkpoint(a.path)
        if ck is not None and a.format == "fasttext-bin":   # a sharded run has no subwords: refused
            write_fasttext(a.output, ck, source=a.path)
        if ck is not None:
            export_streamed(a, ck)
            return 0
    vecs = load(a.path, matrix=getattr(a, "matrix", "input"), warn=_warn)
    if command == "summary":
        s = summary(vecs.checkpoint) if vecs.checkpoint is not None else vectors_summary(vecs)
        if a.json:
            print(json.dumps(s, sort_keys=True, default=str))
        else:
            (print_summary if vecs.checkpoint is not None else print_vectors_summary)(s)
        return 0
    if command == "export":
        export(a, vecs)
        return 0
    return query_command(a, vecs)


class _Warnings(logging.Handler):
    """The library's warnings (the ``mpidwe`` logger: an unusable character model) as this
    command's own lines on standard error."""

    def emit(self, record):
        _warn(record.getMessage())


def main(argv=None) -> int:
    logger, handler = logging.getLogger("mpidwe"), _Warnings(logging.WARNING)
    logger.addHandler(handler)
    try:
        return run(argv)
    except MpidweError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # the reader went away (| head): stop quietly, also at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        logger.removeHandler(handler)


if __name__ == "__main__":
    sys.exit(main())
