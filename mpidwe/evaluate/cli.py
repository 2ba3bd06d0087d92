"""``python -m mpidwe.evaluate VECTORS ...``: one scorer for mpidwe's, gensim's and word2vec's vectors.

Every rank loads the vectors; similarity and analogy run on rank 0; the PIP loss needs the
SPPMI reference, whose co-occurrence counts and Gram matrices are shared out over the ranks.
Results go to standard output (a table, or one JSON object with ``--json``); progress notes
go to standard error. An evaluation that covers nothing is shown as such and makes the
command fail (exit 2) with a one-line reason, instead of printing NaN.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from ..parallel.comm import Comm, run_main
from ..core.config import parse_command, to_dict
from ..core.errors import ConfigError, InputError
from ..core.prog import prog
from .analogy import evaluate_analogies, read_analogies
from .config import EvaluateConfig
from .pip import pip_report
from .similarity import evaluate_similarity, read_similarity
from .sppmi import ReferenceSpec, reference_embedding
from ..io.vectors import load_vectors, nonfinite_rows

PROG = prog("evaluate")
MISSING_SHOWN = 10


def word_index(words: list[str], skip: np.ndarray | None = None) -> dict[str, int]:
    """Word -> row; a word listed twice keeps its first (more frequent) row. Rows where
    ``skip`` is true (those with nan or inf) are left out: their words count as missing."""
    index: dict[str, int] = {}
    for i, w in enumerate(words):
        if skip is None or not skip[i]:
            index.setdefault(w, i)
    return index


def score_tests(cfg: EvaluateConfig, vectors: np.ndarray, index: dict[str, int]) -> dict:
    """Similarity and analogy files (rank 0 only: they are small)."""
    out = {"similarity": [], "analogy": []}
    for path in cfg.similarity:
        t = time.perf_counter()
        r = evaluate_similarity(vectors, index, read_similarity(path))
        out["similarity"].append({"file": path, **r, "seconds": round(time.perf_counter() - t, 3)})
    methods = ("add", "mul") if cfg.analogy_method == "both" else (cfg.analogy_method,)
    for path in cfg.analogy:
        sections = read_analogies(path)
        for method in methods:
            t = time.perf_counter()
            r = evaluate_analogies(vectors, index, sections, restrict_vocab=cfg.restrict_vocab, method=method)
            out["analogy"].append({"file": path, **r, "seconds": round(time.perf_counter() - t, 3)})
    return out


def score_pip(cfg: EvaluateConfig, comm: Comm, words: list[str], vectors: np.ndarray,
              index: dict[str, int], log=None) -> dict:
    """PIP loss of the vectors against the corpus's SPPMI reference, on the reference's
    words (the ``pip_top_n`` most frequent) that the vectors have, matched exactly."""
    t = time.perf_counter()

    def same_dim():
        if cfg.pip_dim is not None and cfg.pip_dim != vectors.shape[1]:
            raise InputError(f"{cfg.vectors} has dimension {vectors.shape[1]} but the PIP reference was "
                             f"asked for dimension {cfg.pip_dim} (--pip-dim); PIP compares embeddings "
                             f"of the same dimension here: drop --pip-dim or pass {vectors.shape[1]}")

    comm.agree(same_dim)
    spec = ReferenceSpec(window=cfg.window, negatives=cfg.negative, dim=cfg.pip_dim or vectors.shape[1],
                         top_n=cfg.pip_top_n, alpha=cfg.pip_alpha)
    ref = reference_embedding(cfg.pip_reference, spec, comm, cache=cfg.pip_cache, log=log)
    ref_rows = [i for i, w in enumerate(ref.words) if w in index]
    missing = [w for w in ref.words if w not in index]

    def check():
        if not ref_rows:
            raise InputError(f"{cfg.vectors}: none of the {len(ref.words):,} reference words of "
                             f"{cfg.pip_reference} is in the vectors (PIP needs the same words)")

    comm.agree(check)
    e1 = vectors[[index[ref.words[i]] for i in ref_rows]]
    e2 = ref.vectors[ref_rows]
    report = pip_report(e1, e2, rank=comm.rank, world_size=comm.size, reduce=comm.allreduce_)
    k = ref.key
    return {"corpus": cfg.pip_reference, "reference": {"window": k.window, "negatives": k.negatives,
                                                       "dim": k.dim, "top_n": k.top_n, "alpha": k.alpha,
                                                       "cached": ref.cached, "corpus_id": k.corpus_id},
            **report, "reference_words": len(ref.words), "covered": len(ref_rows),
            "coverage": len(ref_rows) / len(ref.words), "missing": len(missing),
            "missing_examples": missing[:MISSING_SHOWN], "seconds": round(time.perf_counter() - t, 3)}


def with_oov_rows(cfg: EvaluateConfig) -> tuple[list[str], np.ndarray]:
    """--oov: the vocabulary's words and vectors, followed by a row for every word of the
    similarity files that the vocabulary lacks, from the checkpoint's OOV model."""
    from ..api import load

    vecs = load(cfg.vectors)
    if vecs.oov is None:
        raise InputError(f"--oov: {cfg.vectors} has no model for words outside the vocabulary (a run "
                         f"directory or checkpoint trained with --subwords has one, or one given a "
                         f"character model by python -m mpidwe.inspect RUN fit-chars)")
    missing = []
    for path in cfg.similarity:
        for a, b, _ in read_similarity(path):
            for w in (a, b):
                if w not in vecs.index and w.lower() not in vecs.index and w not in missing:
                    missing.append(w)
    if not missing:
        return vecs.words, vecs.vectors
    extra = np.stack([vecs.oov.vector(w) for w in missing]).astype(np.float32)
    return vecs.words + missing, np.concatenate([vecs.vectors, extra])


def run(cfg: EvaluateConfig, comm: Comm, *, log=None) -> dict:
    """All requested evaluations; the full result dict on rank 0 (PIP only elsewhere)."""
    if cfg.oov:
        words, vectors = comm.agree(with_oov_rows, cfg)
    else:
        words, vectors = comm.agree(load_vectors, cfg.vectors, log)  # refuses vectors that are all nan/inf
    bad = nonfinite_rows(vectors)
    skipped = int(bad.sum())
    if skipped and log:
        log(f"warning: {cfg.vectors}: {skipped:,} of {len(words):,} vectors contain nan or inf; "
            f"their words are skipped (counted as not in the vectors)")
    index = word_index(words, skip=bad if skipped else None)
    results = {"vectors": cfg.vectors, "words": len(words), "dim": int(vectors.shape[1]),
               "nonfinite_skipped": skipped, "similarity": [], "analogy": [], "pip": None}
    tests = comm.on_root(score_tests, cfg, vectors, index, broadcast=False)
    if tests:
        results.update(tests)
    if cfg.pip_reference:
        results["pip"] = score_pip(cfg, comm, words, vectors, index, log)
    results["problems"] = comm.bcast(problems(results) if comm.is_root else None)
    results["config"] = to_dict(cfg)
    return results


def problems(results: dict) -> list[str]:
    """One line per evaluation that covered nothing (so has no score)."""
    out = []
    where = f"vectors {results['vectors']}"
    for r in results["similarity"]:
        if r["spearman"] is None:
            out.append(f"{r['file']}: {r['covered']} of {r['pairs']} word pairs are in the {where} "
                       f"(a correlation needs at least 2 with distinct scores)")
    for r in results["analogy"]:
        if r["accuracy"] is None:
            out.append(f"{r['file']}: none of the {r['questions']} questions has all four words among "
                       f"the first {r['restrict_vocab']:,} words of the {where}")
    return out


# ------------------------------------------------------------------------------ output
def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def _num(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def format_report(results: dict) -> str:
    skipped = results.get("nonfinite_skipped")
    lines = [f"vectors: {results['vectors']} ({results['words']:,} words, dimension {results['dim']}"
             + (f", {skipped:,} with nan or inf skipped)" if skipped else ")")]
    for r in results["similarity"]:
        name = os.path.basename(r["file"])
        rho = "no pairs covered" if r["spearman"] is None else f"Spearman {r['spearman']:.4f}"
        lines.append(f"similarity  {name:24s} {rho:20s} pairs {r['covered']}/{r['pairs']} ({_pct(r['coverage'])})")
    for r in results["analogy"]:
        name = os.path.basename(r["file"])
        method = {"add": "3CosAdd", "mul": "3CosMul"}[r["method"]]
        if r["accuracy"] is None:
            lines.append(f"analogy     {name:24s} {method:8s} no questions covered "
                         f"(restrict {r['restrict_vocab']:,})")
            continue
        lines.append(f"analogy     {name:24s} {method:8s} accuracy {_pct(r['accuracy']):>7s}  "
                     f"semantic {_pct(r['semantic']['accuracy']):>7s}  "
                     f"syntactic {_pct(r['syntactic']['accuracy']):>7s}  "
                     f"covered {r['covered']}/{r['questions']} ({_pct(r['coverage'])}, "
                     f"restrict {r['restrict_vocab']:,})")
    p = results["pip"]
    if p:
        ref = p["reference"]
        lines.append(f"PIP loss    {os.path.basename(p['corpus']):24s} {p['pip']:.6g}  relative "
                     f"{_num(p['relative'])}  scale-free {_num(p['normalized'])}  "
                     f"words {p['covered']:,}/{p['reference_words']:,}")
        lines.append(f"            reference: SPPMI window {ref['window']}, k {ref['negatives']}, top "
                     f"{ref['top_n']:,}, dimension {ref['dim']}, alpha {ref['alpha']:g} "
                     f"({'from cache' if ref['cached'] else 'computed'})")
        if p["missing"]:
            lines.append(f"            {p['missing']:,} reference word(s) not in the vectors, e.g. "
                         + " ".join(p["missing_examples"]))
    return "\n".join(lines)


LIST_FLAGS = ("--similarity", "--analogy")


def vectors_moved_first(argv: list[str]) -> list[str] | None:
    """``--similarity ws.tsv VECTORS``: --similarity takes one or more files, so argparse gives
    it VECTORS too and then misses VECTORS. The last value of the last such list, when it is
    vectors (a folder, an HDF5 file, or a file whose first line is word2vec's ``count dim``)
    and the list keeps a file, moved to the front; None where there is none."""
    from ..api import kind_of
    from ..io.formats import HDF5_SIGNATURE

    def vectors(path: str) -> bool:
        try:
            if kind_of(path) != "checkpoint":
                return True
            with open(path, "rb") as fh:
                return fh.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE
        except (InputError, OSError):
            return False

    last = None
    for i, a in enumerate(argv):
        if a in LIST_FLAGS:
            last = i
    if last is None:
        return None
    end = last + 1
    while end < len(argv) and not argv[end].startswith("-"):
        end += 1
    if end - last < 3 or not vectors(argv[end - 1]):
        return None
    return [argv[end - 1], *argv[:end - 1], *argv[end:]]


def parse(argv) -> EvaluateConfig:
    """The command line; VECTORS may come after a list of files (vectors_moved_first)."""
    description = ("Score word vectors (word2vec text or binary) on word similarity, analogies and the PIP "
                   "loss against an SPPMI reference.")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return parse_command(EvaluateConfig, argv, prog=PROG, description=description)
    except ConfigError as e:
        moved = vectors_moved_first(argv) if "required: VECTOR" in str(e) else None
        if moved is None:
            raise
        return parse_command(EvaluateConfig, moved, prog=PROG, description=description)


def _body(argv, comm: Comm) -> int:
    cfg = comm.agree(parse, argv)

    def note(msg):
        print(msg, file=sys.stderr, flush=True)

    results = run(cfg, comm, log=note if comm.is_root else None)
    if comm.is_root:
        print(json.dumps(results, indent=2) if cfg.json else format_report(results), flush=True)
    if results["problems"]:
        e = InputError("; ".join(results["problems"]))
        e.agreed = True  # every rank raises the same error (rank 0 prints it)
        raise e
    return 0


def main(argv=None) -> int:
    return run_main(PROG, _body, argv)
