"""Synthetic demo corpus whose right embedding is known: ``python -m mpidwe.synth``.

The generative model, per line (sentence):

* the line picks one topic cluster; each token is a *function word* (Zipf, shared by all
  topics), a *content word* (uniform over the line's cluster, or over a random cluster with
  probability ``OFF_TOPIC``) or a *rare filler word* (Zipf, no topic; ``--rare-zipf 0`` draws
  them uniformly and ``--rare-share`` sets their share, which makes a vocabulary of millions of
  words above min-count for the sharded store's tests and benchmarks);
* planted relation r has pairs (x_i, y_i) that live in the same cluster, so they share
  their topic context. Every occurrence of x_i (y_i) is, with probability ``MARK_PROB``,
  written next to one of r's side-A (side-B) *marker* words, like "he king" / "she queen".
  SGNS factorises shifted PMI, so vec(x_i) ~ topic(c_i) + a_r and vec(y_i) ~ topic(c_i) + b_r:
  the offset y_i - x_i ~ b_r - a_r is the same for every pair of r. The pairs of one
  relation sit in different clusters, so x_j + (y_i - x_i) points at y_j alone.

Files written into ``--output``, each to a temporary name, fsynced, then renamed; the key is
removed first and written last, so a directory without it holds an interrupted run:

``demo.txt``             the text: one sentence per line, words of a-z separated by one space
``demo-similarity.tsv``  WordSim-353 layout: two ``#`` lines, then ``word1<TAB>word2<TAB>score``;
                         score is ``SAME_CLUSTER_SCORE`` or ``OTHER_CLUSTER_SCORE`` (0-10 scale);
                         with these ties a perfect model reaches Spearman ~0.87, not 1
``demo-analogies.txt``   questions-words.txt layout: ``: relation-<r>`` then ``a b c d`` lines,
                         every ordered (i, j), i != j, of the relation's pairs
``demo-clusters.tsv``    ``word<TAB>cluster_id`` for every content word (relation pairs included)
``demo-key.json``        format name and version, seed, config, generator constants, counts,
                         the relations' pairs and markers, and the file names

The lexicon and answer key depend only on the seed and the vocabulary options, not on
``--tokens``; the text for fewer tokens is a prefix of the text for more (except its last line).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .version import __version__
from .core.config import SynthConfig, parse_command, resolve_path, to_dict
from .core.errors import InputError, MpidweError
from .core.prog import prog
from .io.fsutil import atomic_write, fsync_dir  # noqa: F401 (atomic_write is part of this module's API)

FORMAT = "mpidwe-synth"
FORMAT_VERSION = 1

FILES = {
    "text": "demo.txt",
    "similarity": "demo-similarity.tsv",
    "analogies": "demo-analogies.txt",
    "clusters": "demo-clusters.tsv",
    "key": "demo-key.json",
}

# Shares of the three word kinds among drawn words, before markers are added (renormalised
# when a kind is empty).
FUNCTION_SHARE = 0.35
CONTENT_SHARE = 0.57
RARE_SHARE = 0.08
FUNCTION_ZIPF = 1.0       # exponent: p(rank k) ~ 1 / k**s
OFF_TOPIC = 0.10          # a content token comes from a random cluster, not the line's
MARK_PROB = 0.8           # a relation word gets its marker written beside it
MARKERS_PER_SIDE = 4      # marker words per side (A, B) of each relation: several, so each
                          # stays rare enough to survive frequent-word subsampling
SIMILARITY_PAIRS = 300    # half same-cluster, half different-cluster (fewer if impossible)
SAME_CLUSTER_SCORE = 9.0
OTHER_CLUSTER_SCORE = 1.0
CHUNK_SENTENCES = 1 << 16  # fixed, so the text does not depend on --tokens

# Pseudo-words are built from onset + vowel + optional coda syllables.
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z",
           "br", "dr", "gr", "kr", "pl", "st", "tr", "sh", "ch")
_VOWELS = ("a", "e", "i", "o", "u")
_CODAS = ("", "", "", "n", "r", "s", "l", "m")
_SYLLABLES = tuple(o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS)


@dataclass(frozen=True)
class Lexicon:
    """Every word once; the arrays hold word ids (indices into ``words``)."""

    words: tuple[str, ...]
    function_ids: np.ndarray   # (function_words,) most frequent first
    cluster_ids: np.ndarray    # (clusters, cluster_size)
    rare_ids: np.ndarray       # (rare_words,) most frequent first
    pairs: np.ndarray          # (relations, relation_pairs, 2): x, y of each pair
    pair_clusters: np.ndarray  # (relations, relation_pairs): the cluster of each pair
    markers: np.ndarray        # (relations, 2, MARKERS_PER_SIDE): side A (x), side B (y)
    marker_group: np.ndarray   # (len(words),) 2 * relation + side for relation words, else -1


def _pseudo_words(rng: np.random.Generator, count: int, syllables: tuple[int, int],
                  taken: set[str]) -> list[str]:
    """``count`` new words of ``syllables`` (min, max) syllables, none in ``taken``."""
    lo, hi = syllables
    out: list[str] = []
    while len(out) < count:
        batch = 2 * (count - len(out)) + 16
        lengths = rng.integers(lo, hi + 1, size=batch)
        parts = rng.integers(len(_SYLLABLES), size=(batch, hi))
        fresh = 0
        for k, row in zip(lengths.tolist(), parts.tolist()):
            word = "".join(_SYLLABLES[j] for j in row[:k])
            if word not in taken:
                taken.add(word)
                out.append(word)
                fresh += 1
                if len(out) == count:
                    break
        if fresh < batch // 4:   # the short words are running out: allow longer ones
            lo, hi = lo + 1, hi + 1
    return out


def make_lexicon(cfg: SynthConfig, rng: np.random.Generator) -> Lexicon:
    """Draw the words and plant the relation pairs into the clusters."""
    taken: set[str] = set()
    function = sorted(_pseudo_words(rng, cfg.function_words, (1, 2), taken), key=len)
    content = _pseudo_words(rng, cfg.clusters * cfg.cluster_size, (2, 3), taken)
    n_markers = cfg.relations * 2 * MARKERS_PER_SIDE
    marker_words = _pseudo_words(rng, n_markers, (2, 2), taken)
    rare = _pseudo_words(rng, cfg.rare_words, (3, 4), taken)
    words = tuple(function + content + marker_words + rare)

    start = len(function)
    cluster_ids = np.arange(start, start + len(content)).reshape(cfg.clusters, cfg.cluster_size)
    start += len(content)
    markers = np.arange(start, start + n_markers).reshape(cfg.relations, 2, MARKERS_PER_SIDE)
    start += n_markers
    rare_ids = np.arange(start, start + len(rare))

    # Pair k = r * relation_pairs + i goes to cluster order[k % clusters]: consecutive k, so
    # the pairs of one relation get distinct clusters, and no cluster holds more than its share.
    n_pairs = cfg.relations * cfg.relation_pairs
    order = rng.permutation(cfg.clusters)
    k = np.arange(n_pairs)
    pair_clusters = order[k % cfg.clusters]
    slot = 2 * (k // cfg.clusters)
    pairs = np.stack([cluster_ids[pair_clusters, slot], cluster_ids[pair_clusters, slot + 1]],
                     axis=1)

    if cfg.part == 2:
        # drawn last, from the same stream: every word and relation of part 1 is unchanged
        fresh = _pseudo_words(rng, cfg.new_clusters * cfg.cluster_size, (2, 3), taken)
        cluster_ids = np.concatenate((cluster_ids, np.arange(len(words), len(words) + len(fresh)).reshape(
            cfg.new_clusters, cfg.cluster_size)))
        words = words + tuple(fresh)

    marker_group = np.full(len(words), -1, dtype=np.int64)
    relation = np.repeat(np.arange(cfg.relations), cfg.relation_pairs)
    marker_group[pairs[:, 0]] = 2 * relation
    marker_group[pairs[:, 1]] = 2 * relation + 1
    return Lexicon(
        words=words,
        function_ids=np.arange(len(function)),
        cluster_ids=cluster_ids,
        rare_ids=rare_ids,
        pairs=pairs.reshape(cfg.relations, cfg.relation_pairs, 2),
        pair_clusters=pair_clusters.reshape(cfg.relations, cfg.relation_pairs),
        markers=markers,
        marker_group=marker_group,
    )


def _zipf_cdf(n: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(weights / weights.sum())
    cdf[-1] = 1.0
    return cdf


def kind_shares(cfg: SynthConfig) -> tuple[float, float, float]:
    """(function, content, rare) shares of drawn words: the constants, or with --rare-share
    the rare share given and the other two scaled to fill the rest (the default share keeps
    the constants exactly, so the default text does not change)."""
    if cfg.rare_share == RARE_SHARE:
        return FUNCTION_SHARE, CONTENT_SHARE, RARE_SHARE
    rest = (1.0 - cfg.rare_share) / (FUNCTION_SHARE + CONTENT_SHARE)
    return FUNCTION_SHARE * rest, CONTENT_SHARE * rest, cfg.rare_share


def _kind_cdf(cfg: SynthConfig) -> np.ndarray:
    f_share, c_share, r_share = kind_shares(cfg)
    shares = np.array([f_share if cfg.function_words else 0.0, c_share,
                       r_share if cfg.rare_words else 0.0])
    cdf = np.cumsum(shares / shares.sum())
    cdf[-1] = 1.0
    return cdf


def _units_per_line(cfg: SynthConfig, lex: Lexicon) -> float:
    """Mean drawn words per line so that lines average ``sentence_length`` tokens once the
    markers are added."""
    content = _kind_cdf(cfg)
    content_share = content[1] - content[0]
    pair_share = lex.pairs.size / lex.cluster_ids.size if lex.pairs.size else 0.0
    return cfg.sentence_length / (1.0 + content_share * pair_share * MARK_PROB)


def _draw(cdf: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), len(cdf) - 1)


def _sentence_chunk(cfg: SynthConfig, lex: Lexicon, rng: np.random.Generator,
                    n_lines: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_lines`` lines: (tokens, tokens per line)."""
    lam = max(_units_per_line(cfg, lex) - 1.0, 0.0)
    units = 1 + rng.poisson(lam, size=n_lines)
    n = int(units.sum())
    line_of = np.repeat(np.arange(n_lines), units)
    n_clusters = len(lex.cluster_ids)       # part 2: the new clusters too
    topic = rng.integers(n_clusters, size=n_lines)[line_of]

    kind = _draw(_kind_cdf(cfg), rng, n)
    words = np.empty(n, dtype=np.int64)
    is_f, is_c, is_r = kind == 0, kind == 1, kind == 2
    if lex.function_ids.size:
        words[is_f] = lex.function_ids[_draw(_zipf_cdf(lex.function_ids.size, FUNCTION_ZIPF),
                                             rng, int(is_f.sum()))]
    if lex.rare_ids.size:
        words[is_r] = lex.rare_ids[_draw(_zipf_cdf(lex.rare_ids.size, cfg.rare_zipf),
                                         rng, int(is_r.sum()))]
    t = topic[is_c]
    off = rng.random(t.size) < OFF_TOPIC
    t[off] = rng.integers(n_clusters, size=int(off.sum()))
    words[is_c] = lex.cluster_ids[t, rng.integers(cfg.cluster_size, size=t.size)]

    # Relation words get a marker of their relation and side right before or after them.
    group = lex.marker_group[words]
    cand = np.flatnonzero(group >= 0)
    marked = cand[rng.random(cand.size) < MARK_PROB]
    flat_markers = lex.markers.reshape(-1, MARKERS_PER_SIDE)
    marker = flat_markers[group[marked], rng.integers(MARKERS_PER_SIDE, size=marked.size)]
    before = rng.random(marked.size) < 0.5
    first, second = words.copy(), np.full(n, -1, dtype=np.int64)
    first[marked[before]] = marker[before]
    second[marked[before]] = words[marked[before]]
    second[marked[~before]] = marker[~before]
    tokens = np.stack([first, second], axis=1).ravel()
    tokens = tokens[tokens >= 0]
    lengths = units + np.bincount(line_of[marked], minlength=n_lines)
    return tokens, lengths


def generate_sentences(cfg: SynthConfig, lex: Lexicon,
                       rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (tokens, tokens per line) chunks holding exactly ``cfg.tokens`` tokens in all."""
    left = cfg.tokens
    while left > 0:
        tokens, lengths = _sentence_chunk(cfg, lex, rng, CHUNK_SENTENCES)
        if tokens.size >= left:
            ends = np.cumsum(lengths)
            last = int(np.searchsorted(ends, left))
            lengths = lengths[:last + 1].copy()
            lengths[last] -= ends[last] - left
            tokens = tokens[:left]
        left -= tokens.size
        yield tokens, lengths


def encode_lines(tokens: np.ndarray, lengths: np.ndarray, table: np.ndarray) -> bytes:
    """Tokens -> text. ``table`` (objects) holds ``word + b" "`` for each id, then
    ``word + b"\\n"`` for each id."""
    ids = tokens.copy()
    ids[np.cumsum(lengths) - 1] += len(table) // 2
    return b"".join(table[ids].tolist())


def similarity_pairs(lex: Lexicon, rng: np.random.Generator, first: int = 0) -> list[tuple[str, str, float]]:
    """Random distinct content-word pairs, half from the same cluster, half from different.
    The first word's cluster is ``first`` or a later one (part 2: the new clusters)."""
    n_clusters, size = lex.cluster_ids.shape
    n_first = n_clusters - first
    want = SIMILARITY_PAIRS // 2
    same_max = n_first * size * (size - 1) // 2
    other_max = size * size * (n_first * (n_clusters - 1) - n_first * (n_first - 1) // 2)
    seen: set[tuple[int, int]] = set()
    out = []
    for same, target in ((True, min(want, same_max)), (False, min(want, other_max))):
        got = 0
        while got < target:
            c1 = first + int(rng.integers(n_first))
            c2 = c1 if same else int((c1 + rng.integers(1, n_clusters)) % n_clusters)
            i, j = rng.integers(size, size=2).tolist()
            a, b = int(lex.cluster_ids[c1, i]), int(lex.cluster_ids[c2, j])
            if a == b or (min(a, b), max(a, b)) in seen:
                continue
            seen.add((min(a, b), max(a, b)))
            score = SAME_CLUSTER_SCORE if same else OTHER_CLUSTER_SCORE
            out.append((lex.words[a], lex.words[b], score))
            got += 1
    order = rng.permutation(len(out))
    return [out[k] for k in order]


def max_spearman(scores: list[float]) -> float | None:
    """Spearman correlation of a perfect ranking with ``scores``: below 1 when scores tie
    (0.87 for two equal halves), so a reader can tell how close a model gets. None when
    all scores are equal."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size < 2 or np.all(s == s[0]):
        return None
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    truth = ((np.cumsum(counts) - counts) + (counts - 1) / 2.0)[inverse]
    perfect = np.empty(s.size)
    perfect[np.argsort(s, kind="stable")] = np.arange(s.size)
    return float(np.corrcoef(truth, perfect)[0, 1])


def analogy_sections(lex: Lexicon) -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """For each relation, every question x_i y_i x_j y_j with i != j."""
    sections = []
    w = lex.words
    for r, pairs in enumerate(lex.pairs.tolist()):
        questions = [(w[a], w[b], w[c], w[d])
                     for i, (a, b) in enumerate(pairs) for j, (c, d) in enumerate(pairs) if i != j]
        sections.append((f"relation-{r + 1}", questions))
    return sections


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _prepare_output(cfg: SynthConfig) -> dict[str, str]:
    out_dir = resolve_path(cfg.output)
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError(f"{out_dir} exists and is not a directory")
    paths = {key: os.path.join(out_dir, name) for key, name in FILES.items()}
    if not cfg.force:
        for path in paths.values():
            if os.path.lexists(path):
                raise InputError(f"{path} exists; use --force to overwrite")
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create output directory {out_dir}: {e.strerror}") from None
    return paths


def _streams(seed: int, part: int = 1) -> tuple[np.random.Generator, ...]:
    """Independent generators for the lexicon, the answer key and the text, so that the
    answer key does not depend on --tokens. Part 2 has its own text and key streams (other
    sentences, other similarity pairs) and part 1's lexicon stream."""
    gens = [np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(seed).spawn(5)]
    return (gens[0], gens[1], gens[2]) if part == 1 else (gens[0], gens[3], gens[4])


def answer_key(cfg: SynthConfig, lex: Lexicon, counts: np.ndarray, lines: int,
               sims: list[tuple[str, str, float]],
               sections: list[tuple[str, list[tuple[str, str, str, str]]]]) -> dict:
    """The content of demo-key.json."""
    w = lex.words
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generator": f"mpidwe.synth {__version__}",
        "seed": cfg.seed,
        "config": to_dict(cfg),
        "model": {
            **dict(zip(("function_share", "content_share", "rare_share"), kind_shares(cfg))),
            "function_zipf": FUNCTION_ZIPF, "rare_zipf": cfg.rare_zipf,
            "off_topic": OFF_TOPIC, "mark_prob": MARK_PROB, "markers_per_side": MARKERS_PER_SIDE,
        },
        "counts": {
            "tokens": int(counts.sum()),
            "lines": lines,
            "words": len(w),
            "words_seen": int(np.count_nonzero(counts)),
            "cluster_words": int(lex.cluster_ids.size),
            "similarity_pairs": len(sims),
            "analogy_questions": sum(len(q) for _, q in sections),
        },
        "similarity": {
            "same_cluster_score": SAME_CLUSTER_SCORE, "other_cluster_score": OTHER_CLUSTER_SCORE,
            "max_spearman": _round(max_spearman([x[2] for x in sims])),
        },
        "relations": [
            {"name": name,
             "markers_a": [w[m] for m in lex.markers[r, 0].tolist()],
             "markers_b": [w[m] for m in lex.markers[r, 1].tolist()],
             "pairs": [[w[x], w[y]] for x, y in lex.pairs[r].tolist()],
             "clusters": lex.pair_clusters[r].tolist()}
            for r, (name, _) in enumerate(sections)
        ],
        "files": dict(FILES),
    }


def write_demo(cfg: SynthConfig) -> dict[str, str]:
    """Write the corpus and its answer key; return {file kind: path}."""
    paths = _prepare_output(cfg)
    # The key is written last: without it, the other files may be from an interrupted run.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(paths["key"])
    lex_rng, key_rng, text_rng = _streams(cfg.seed, cfg.part)
    lex = make_lexicon(cfg, lex_rng)

    counts = np.zeros(len(lex.words), dtype=np.int64)
    lines = 0
    table = np.array([w.encode("ascii") + end for end in (b" ", b"\n") for w in lex.words],
                     dtype=object)
    with atomic_write(paths["text"]) as fh:
        for tokens, lengths in generate_sentences(cfg, lex, text_rng):
            fh.write(encode_lines(tokens, lengths, table))
            counts += np.bincount(tokens, minlength=len(lex.words))
            lines += lengths.size

    with atomic_write(paths["clusters"]) as fh:
        fh.write("".join(f"{lex.words[w]}\t{c}\n" for c, row in enumerate(lex.cluster_ids.tolist())
                         for w in row).encode("ascii"))

    # part 2: pairs with a word of the new clusters (same new cluster, or a new and an old one)
    sims = similarity_pairs(lex, key_rng, first=cfg.clusters if cfg.part == 2 else 0)
    with atomic_write(paths["similarity"]) as fh:
        fh.write((f"# mpidwe.synth seed {cfg.seed}: {SAME_CLUSTER_SCORE:g} = same topic cluster, "
                  f"{OTHER_CLUSTER_SCORE:g} = different clusters\n"
                  "# Word 1\tWord 2\tScore (0-10)\n").encode("ascii"))
        fh.write("".join(f"{a}\t{b}\t{s:.2f}\n" for a, b, s in sims).encode("ascii"))

    sections = analogy_sections(lex)
    with atomic_write(paths["analogies"]) as fh:
        for name, questions in sections:
            fh.write(f": {name}\n".encode("ascii"))
            fh.write("".join(" ".join(q) + "\n" for q in questions).encode("ascii"))

    key = answer_key(cfg, lex, counts, lines, sims, sections)
    with atomic_write(paths["key"]) as fh:
        fh.write((json.dumps(key, indent=1) + "\n").encode("ascii"))
    fsync_dir(paths["key"])
    return paths


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_command(SynthConfig, argv, prog=prog("synth"),
                            description="Write a synthetic corpus with planted topic clusters "
                                        "and analogies, and its answer key.")
        start = time.perf_counter()
        paths = write_demo(cfg)
    except MpidweError as e:
        print(f"mpidwe.synth: error: {e}", file=sys.stderr)
        return e.exit_code
    seconds = time.perf_counter() - start
    print(f"mpidwe.synth: wrote {cfg.tokens:,} tokens (seed {cfg.seed}) in {seconds:.1f} s:")
    for path in paths.values():
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
