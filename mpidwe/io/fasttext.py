"""fastText's model file (``.bin``, format version 12), written from a ``--subwords`` checkpoint.

fastText (``fasttext.load_model``) and gensim (``load_facebook_model``,
``load_facebook_vectors``) read it and answer any word as mpidwe does: mpidwe's subword
model is fastText's (core/subwords.py: the same FNV-1a hash, n-grams and bucket rows), so
the file holds the checkpoint's input matrix as it is (V word rows, then ``buckets`` n-gram
rows) and its output matrix. The layout, in the machine's byte order, as fastText's
``FastText::saveModel`` writes it (``args.cc``, ``dictionary.cc``, ``densematrix.cc``):

- int32 magic 793712314, int32 version 12;
- the arguments: int32 dim, ws, epoch, minCount, neg, wordNgrams, loss (1 hs, 2 ns), model
  (1 cbow, 2 skip-gram), bucket, minn, maxn, lrUpdateRate; float64 t (the sample);
- the dictionary: int32 size, nwords, nlabels (0); int64 ntokens, pruneidx_size (-1);
  per word its UTF-8 bytes, a NUL, int64 count, int8 type (0: a word);
- bool quant (0), int64 rows, int64 cols, float32 rows x cols: the input matrix;
- bool qout (0), int64 rows, int64 cols, float32: the output matrix.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ..core.errors import InputError
from .fsutil import atomic_write

FASTTEXT_MAGIC = 793712314
FASTTEXT_VERSION = 12
LOSS_CODES = {"hs": 1, "ns": 2}
MODEL_CODES = {"cbow": 1, "skipgram": 2}


@dataclass(frozen=True)
class FastTextArgs:
    """The training arguments a fastText model file records (fastText's names)."""

    dim: int
    ws: int
    epoch: int
    min_count: int
    neg: int
    loss: str            # ns or hs
    model: str           # skipgram or cbow
    bucket: int
    minn: int
    maxn: int
    t: float

    @classmethod
    def of_config(cls, config: dict, min_count: int) -> "FastTextArgs":
        """From a --subwords checkpoint's configuration."""
        return cls(dim=config["dim"], ws=config["window"], epoch=config["epochs"], min_count=min_count,
                   neg=config["negative"], loss=config.get("loss", "ns"), model=config["model"],
                   bucket=config["buckets"], minn=config["minn"], maxn=config["maxn"], t=config["sample"])

    def header(self) -> bytes:
        return struct.pack("=12id", self.dim, self.ws, self.epoch, self.min_count, self.neg, 1,
                           LOSS_CODES[self.loss], MODEL_CODES[self.model], self.bucket, self.minn, self.maxn,
                           100, self.t)


def _matrix(m: np.ndarray) -> tuple[bytes, np.ndarray]:
    m = np.ascontiguousarray(m, dtype=np.float32)
    return struct.pack("=?2q", False, m.shape[0], m.shape[1]), m


def write_fasttext_bin(path: str, words: list[str], counts, w_in: np.ndarray, w_out: np.ndarray,
                       args: FastTextArgs) -> None:
    """Write fastText's ``.bin`` (module docstring), atomically. ``w_in``: the V word rows then
    the ``args.bucket`` n-gram rows; ``counts``: the words' corpus counts (int64)."""
    counts = np.asarray(counts, dtype=np.int64)
    if w_in.shape != (len(words) + args.bucket, args.dim) or len(counts) != len(words):
        raise ValueError(f"{len(words)} words and {args.bucket} buckets do not fit an input matrix of shape "
                         f"{w_in.shape} ({len(counts)} counts)")
    bad = [w for w in words if not w or "\0" in w or w.split() != [w]]
    if bad:
        raise InputError(f"{len(bad)} word(s) cannot be written to a fastText file (empty, or holding whitespace "
                         f"or NUL), e.g. {bad[0]!r}")
    try:
        with atomic_write(path) as fh:
            fh.write(struct.pack("=2i", FASTTEXT_MAGIC, FASTTEXT_VERSION) + args.header())
            fh.write(struct.pack("=3i2q", len(words), len(words), 0, int(counts.sum()), -1))
            fh.write(b"".join(w.encode("utf-8") + b"\0" + struct.pack("=qb", int(c), 0)
                              for w, c in zip(words, counts)))
            for m in (w_in, w_out):
                head, data = _matrix(m)
                fh.write(head)
                fh.write(memoryview(data).cast("B"))
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None


def write_checkpoint(path: str, ck, *, source: str, matrix: str = "input") -> None:
    """fastText's .bin of a --subwords checkpoint ``ck`` (read from ``source``): its word and
    n-gram rows and its output rows as they are. Anything else is refused in one line."""
    if ck is None or not ck.config.get("subwords"):
        raise InputError(f"--format fasttext-bin needs a run directory or checkpoint trained with --subwords (its "
                         f"n-gram rows answer unseen words); {source} has none: export word2vec-text (the format "
                         f"of fastText's .vec) instead")
    if matrix != "input":
        raise InputError("--format fasttext-bin writes the input matrix (fastText's word and n-gram rows) and the "
                         "output matrix together; drop --matrix")
    min_count = int(ck.counts.min()) if len(ck.counts) else 1
    write_fasttext_bin(path, ck.words, ck.counts, ck.w_in, ck.w_out, FastTextArgs.of_config(ck.config, min_count))
