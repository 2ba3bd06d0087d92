"""Word similarity: Spearman correlation of cosine similarity with human scores."""

from __future__ import annotations

import numpy as np

from ..core.errors import InputError
from .textfile import utf8_lines
from ..io.vectors import nonfinite_rows


def read_similarity(path: str) -> list[tuple[str, str, float]]:
    """``word1 word2 score`` lines, tab or space separated; ``#`` starts a comment."""
    pairs = []
    for no, line in utf8_lines(path, "similarity"):
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
    then lowercased). A word whose row holds a nan or inf counts as missing. Returns rho,
    coverage and counts; rho is None when nothing is covered."""
    found, human = [], []
    for a, b, s in pairs:
        ia = index.get(a, index.get(a.lower()))
        ib = index.get(b, index.get(b.lower()))
        if ia is not None and ib is not None:
            found.append((ia, ib))
            human.append(s)
    ids = np.array(found, dtype=np.int64).reshape(-1, 2)
    rows, inv = np.unique(ids, return_inverse=True)
    inv = inv.reshape(ids.shape)
    sub = np.asarray(vectors[rows], dtype=np.float32)
    bad = nonfinite_rows(sub)
    if bad.any():  # drop the pairs that use such a row
        keep = ~bad[inv].any(axis=1)
        inv, human = inv[keep], [h for h, k in zip(human, keep) if k]
        sub[bad] = 0
    out = {"pairs": len(pairs), "covered": len(inv), "coverage": len(inv) / max(len(pairs), 1),
           "spearman": None}
    if len(inv) >= 2:
        unit = unit_rows(sub)
        cos = np.einsum("ij,ij->i", unit[inv[:, 0]], unit[inv[:, 1]])
        from scipy.stats import spearmanr   # here: importing scipy.stats costs every rank ~1.5 s

        rho = spearmanr(cos, human).statistic
        out["spearman"] = None if not np.isfinite(rho) else float(rho)
    return out
