"""Word similarity: Spearman correlation of cosine similarity with human scores."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from ..errors import InputError


def read_similarity(path: str) -> list[tuple[str, str, float]]:
    """``word1 word2 score`` lines, tab or space separated; ``#`` starts a comment."""
    pairs = []
    try:
        fh = open(path, encoding="utf-8")
    except OSError as e:
        raise InputError(f"cannot read similarity file {path}: {e.strerror}") from None
    with fh:
        for no, line in enumerate(fh, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            cols = line.split("\t") if "\t" in line else line.split()
            if len(cols) != 3:
                raise InputError(f"{path}:{no}: expected 3 columns (word1 word2 score), got {len(cols)}")
            try:
                score = float(cols[2])
            except ValueError:
                raise InputError(f"{path}:{no}: score {cols[2]!r} is not a number") from None
            pairs.append((cols[0].strip(), cols[1].strip(), score))
    if not pairs:
        raise InputError(f"{path}: no word pairs found")
    return pairs


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return v / np.maximum(norms, 1e-12)


def evaluate_similarity(vectors: np.ndarray, index: dict[str, int],
                        pairs: list[tuple[str, str, float]]) -> dict:
    """Spearman rho over the pairs whose words are both in ``index`` (looked up as given,
    then lowercased). Returns rho, coverage and counts; rho is None when nothing is covered."""
    found, human = [], []
    for a, b, s in pairs:
        ia = index.get(a, index.get(a.lower()))
        ib = index.get(b, index.get(b.lower()))
        if ia is not None and ib is not None:
            found.append((ia, ib))
            human.append(s)
    out = {"pairs": len(pairs), "covered": len(found), "coverage": len(found) / max(len(pairs), 1),
           "spearman": None}
    if len(found) >= 2:
        ids = np.array(found)
        unit = unit_rows(vectors[np.unique(ids)])
        pos = {w: k for k, w in enumerate(np.unique(ids))}
        cos = np.einsum("ij,ij->i", unit[[pos[i] for i in ids[:, 0]]], unit[[pos[i] for i in ids[:, 1]]])
        rho = spearmanr(cos, human).statistic
        out["spearman"] = None if not np.isfinite(rho) else float(rho)
    return out
