"""The vocabulary: the ranks' token counts merged on rank 0, the kept words chosen (count
descending, ties by word), or, with ``--append``, a corpus's vocabulary grown."""

from __future__ import annotations

import collections

import numpy as np

from ..core.config import PreprocessConfig
from ..core.errors import InputError
from ..io import corpus as corpus_io
from ..io.fsutil import reason
from ..io.text import ScanStats
from .tokens import TokenTable


def build_vocab(counts: dict[bytes, int], min_count: int, max_vocab: int | None, max_bytes: int = 0):
    """Kept words (count >= min_count, at most ``max_bytes`` long unless 0, at most
    max_vocab), count descending, ties by word (UTF-8 byte order, which is code point order)."""
    kept = sorted(((w, c) for w, c in counts.items() if c >= min_count and not (max_bytes and len(w) > max_bytes)),
                  key=lambda wc: (-wc[1], wc[0]))
    if max_vocab is not None:
        kept = kept[:max_vocab]
    return [w for w, _ in kept], np.array([c for _, c in kept], dtype=np.int64)


def build_vocab_from_table(table: TokenTable, min_count: int, max_vocab: int | None, max_bytes: int = 0):
    """build_vocab over a TokenTable: the same words in the same order."""
    counts = table.counts[: len(table)]
    ok = counts >= min_count
    if max_bytes:
        ok &= table.lens[: len(table)] <= max_bytes
    kept = np.flatnonzero(ok)
    words = table.words(kept)
    by_word = sorted(range(len(kept)), key=words.__getitem__)
    order = np.asarray(by_word, dtype=np.int64)
    if len(order):
        order = order[np.argsort(-counts[kept[order]], kind="stable")]
    if max_vocab is not None:
        order = order[:max_vocab]
    return [words[i] for i in order.tolist()], counts[kept[order]].astype(np.int64)


def hold_out(words: list[bytes], counts: np.ndarray, path: str):
    """The vocabulary without the words of the file ``path`` (whitespace-separated, UTF-8):
    their tokens are then dropped as a rare word's are."""
    try:
        with open(path, "rb") as fh:
            drop = set(fh.read().split())
    except OSError as e:
        raise InputError(f"cannot read --hold-out file {path}: {reason(e)}") from None
    keep = [i for i, w in enumerate(words) if w not in drop]
    return [words[i] for i in keep], counts[np.asarray(keep, dtype=np.int64)]


def grow_vocab(old_words: list[bytes], old_counts: np.ndarray, seen, min_count: int,
               max_vocab: int | None, max_bytes: int = 0):
    """The vocabulary of a corpus grown by a new segment (``--append``). ``seen``: (word,
    count) of every distinct token of the new text. Old words keep their ids and gain the
    new counts (whatever those are); a word the corpus does not hold gets an id after them
    when its count *in the new text* reaches ``min_count`` (the old text's occurrences of a
    word below the threshold were dropped and never stored), count descending, ties by
    word, while ``max_vocab`` (the whole vocabulary's bound) leaves room; a new word longer
    than ``max_bytes`` (unless 0) is left out."""
    index = {w: i for i, w in enumerate(old_words)}
    counts = np.asarray(old_counts, dtype=np.int64).copy()
    fresh = []
    for w, c in seen:
        i = index.get(w)
        if i is not None:
            counts[i] += int(c)
        elif c >= min_count and not (max_bytes and len(w) > max_bytes):
            fresh.append((w, int(c)))
    fresh.sort(key=lambda wc: (-wc[1], wc[0]))
    if max_vocab is not None:
        fresh = fresh[:max(0, max_vocab - len(old_words))]
    return (list(old_words) + [w for w, _ in fresh],
            np.concatenate((counts, np.array([c for _, c in fresh], dtype=np.int64))))


def _add_stats(totals: ScanStats, s: ScanStats) -> None:
    totals.raw_tokens += s.raw_tokens
    totals.invalid_utf8 += s.invalid_utf8
    totals.doc_lines += s.doc_lines


def merge_counts(gathered) -> tuple[collections.Counter, ScanStats]:
    """The token counts and scan statistics of all ranks, summed in rank order."""
    total: collections.Counter = collections.Counter()
    totals = ScanStats()
    for c, s in gathered:
        total.update(c)
        _add_stats(totals, s)
    return total, totals


def merge_tables(gathered) -> tuple[TokenTable, ScanStats]:
    """The distinct tokens of all ranks with summed counts, and the summed statistics."""
    total = TokenTable()
    totals = ScanStats()
    for (arena, starts, lens, counts), s in gathered:
        ids = total.add_all(arena, starts, lens)
        total.counts[ids] += counts      # the ids of one rank's tokens are distinct
        _add_stats(totals, s)
    return total, totals


def choose_vocabulary(cfg: PreprocessConfig, total, totals: ScanStats):
    """Rank 0: (words, counts) of the corpus from the merged counts ``total`` (a TokenTable
    or a Counter) and statistics ``totals``: the kept words, less those held out, or with
    ``--append`` the corpus's vocabulary grown."""
    if cfg.append:     # the corpus's vocabulary, extended
        compiled = isinstance(total, TokenTable)
        seen = zip(total.words(), total.counts[: len(total)].tolist()) if compiled else total.items()
        with corpus_io.Corpus(cfg.append) as base:   # verified by every rank before (pipeline)
            old = [w.encode("utf-8") for w in base.words]
            return grow_vocab(old, base.counts, seen, cfg.min_count, cfg.max_vocab, cfg.max_word_bytes)
    if isinstance(total, TokenTable):
        words, counts = build_vocab_from_table(total, cfg.min_count, cfg.max_vocab, cfg.max_word_bytes)
    else:
        words, counts = build_vocab(total, cfg.min_count, cfg.max_vocab, cfg.max_word_bytes)
    if cfg.hold_out:
        words, counts = hold_out(words, counts, cfg.hold_out)
    if not words:
        raise InputError(f"no word occurs at least --min-count={cfg.min_count} times "
                         f"({totals.raw_tokens} tokens, {len(total)} distinct)")
    return words, counts
