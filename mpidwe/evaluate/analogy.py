"""Word analogies a:b :: c:d with 3CosAdd and 3CosMul, vectorised in batches."""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from .similarity import unit_rows
from .textfile import utf8_lines
from ..io.vectors import nonfinite_rows

SEMANTIC = "semantic"
SYNTACTIC = "syntactic"


def read_analogies(path: str) -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """Google ``questions-words.txt`` format (``: section`` headers, ``a b c d`` lines) or a
    plain file of 4-word lines (one section named after the file)."""
    sections: list[tuple[str, list]] = []
    for no, line in utf8_lines(path, "analogy"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(":"):
            sections.append((line[1:].strip(), []))
            continue
        words = line.split()
        if len(words) != 4:
            raise InputError(f"{path}:{no}: expected 4 words (a b c d), got {len(words)}")
        if not sections:
            sections.append(("all", []))
        sections[-1][1].append(tuple(words))
    if not any(q for _, q in sections):
        raise InputError(f"{path}: no analogy questions found")
    return sections


def _section_kind(name: str) -> str:
    return SYNTACTIC if name.startswith("gram") else SEMANTIC


def evaluate_analogies(vectors: np.ndarray, index: dict[str, int], sections, *,
                       restrict_vocab: int = 30000, method: str = "add", batch: int = 1024) -> dict:
    """Accuracy per section, semantic / syntactic / total, and coverage.

    The answer is searched among the ``restrict_vocab`` first rows (the most frequent words)
    excluding a, b and c; a question with any word outside them is not covered (as gensim).
    Words are looked up lowercased. A row that holds a nan or inf is neither a question word
    (the question is not covered) nor a candidate answer."""
    if method not in ("add", "mul"):
        raise ValueError(f"unknown analogy method {method!r}")
    n = min(restrict_vocab, vectors.shape[0])
    bad = nonfinite_rows(vectors[:n])
    any_bad = bool(bad.any())
    with np.errstate(invalid="ignore"):  # inf / inf in a row with an inf
        unit = unit_rows(vectors[:n])    # a new array
    if any_bad:
        unit[bad] = 0  # no nan in the products; these columns are excluded below
    questions, names = [], []
    total_q = 0
    for name, qs in sections:
        total_q += len(qs)
        for q in qs:
            ids = [index.get(w.lower()) for w in q]
            if all(i is not None and i < n and not bad[i] for i in ids):
                questions.append(ids)
                names.append(name)
    per_section = {name: {"correct": 0, "total": 0, "questions": len(qs)} for name, qs in sections}
    correct = np.zeros(len(questions), dtype=bool)
    q = np.array(questions, dtype=np.int64).reshape(-1, 4)
    for s in range(0, len(q), batch):
        a, b, c, d = (q[s:s + batch, k] for k in range(4))
        if method == "add":
            target = unit[b] - unit[a] + unit[c]
            scores = target @ unit.T
        else:  # Levy & Goldberg's 3CosMul, cosines shifted to [0, 1]
            ca, cb, cc = ((unit[x] @ unit.T + 1) / 2 for x in (a, b, c))
            scores = cb * cc / (ca + 1e-3)
        rows = np.arange(len(a))
        for x in (a, b, c):
            scores[rows, x] = -np.inf
        if any_bad:
            scores[:, bad] = -np.inf
        correct[s:s + batch] = scores.argmax(axis=1) == d
    for name, ok in zip(names, correct):
        per_section[name]["total"] += 1
        per_section[name]["correct"] += int(ok)
    summary = {}
    for kind in (SEMANTIC, SYNTACTIC):
        secs = [v for k, v in per_section.items() if _section_kind(k) == kind]
        tot = sum(v["total"] for v in secs)
        summary[kind] = {"correct": sum(v["correct"] for v in secs), "total": tot,
                         "accuracy": (sum(v["correct"] for v in secs) / tot) if tot else None}
    for v in per_section.values():
        v["accuracy"] = v["correct"] / v["total"] if v["total"] else None
    covered = len(questions)
    return {
        "method": method, "restrict_vocab": n, "questions": total_q, "covered": covered,
        "coverage": covered / max(total_q, 1),
        "accuracy": float(correct.mean()) if covered else None,
        "correct": int(correct.sum()),
        "semantic": summary[SEMANTIC], "syntactic": summary[SYNTACTIC], "sections": per_section,
    }
