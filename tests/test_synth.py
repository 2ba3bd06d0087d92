"""The synthetic demo corpus: deterministic bytes, parseable answer key, safe writes, and a
planted structure that word2vec (gensim) actually learns."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpidwe import synth
from mpidwe.core.config import SynthConfig
from mpidwe.core.errors import EXIT_USAGE

SMALL = 200_000


def _write(out: Path, **kw) -> dict[str, str]:
    return synth.write_demo(SynthConfig(output=str(out), **{"tokens": SMALL, **kw}))


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    _write(out)
    return out


def _read_clusters(out: Path) -> dict[str, int]:
    rows = [line.split("\t") for line in (out / "demo-clusters.tsv").read_text().splitlines()]
    assert all(len(r) == 2 for r in rows)
    clusters = {w: int(c) for w, c in rows}
    assert len(clusters) == len(rows), "a word is listed twice"
    return clusters


def _read_analogies(out: Path) -> dict[str, list[list[str]]]:
    sections: dict[str, list[list[str]]] = {}
    current = None
    for line in (out / "demo-analogies.txt").read_text().splitlines():
        if line.startswith(": "):
            current = line[2:]
            sections[current] = []
        else:
            words = line.split(" ")
            assert current is not None and len(words) == 4, line
            sections[current].append(words)
    return sections


# -- determinism and size -------------------------------------------------------------------


def test_same_seed_same_bytes_other_seed_differs(demo, tmp_path):
    _write(tmp_path / "again")
    _write(tmp_path / "other", seed=2)
    for name in synth.FILES.values():
        if name == "demo-key.json":  # holds the output path
            keys = [json.loads((d / name).read_text()) for d in (tmp_path / "again", demo)]
            for key in keys:
                del key["config"]["output"]
            assert keys[0] == keys[1]
            continue
        assert (tmp_path / "again" / name).read_bytes() == (demo / name).read_bytes(), name
    for name in ("demo.txt", "demo-analogies.txt", "demo-clusters.tsv"):
        assert (tmp_path / "other" / name).read_bytes() != (demo / name).read_bytes(), name


def test_fewer_tokens_give_a_prefix_and_the_same_key(demo, tmp_path):
    _write(tmp_path, tokens=50_000)
    short = (tmp_path / "demo.txt").read_bytes()
    full = (demo / "demo.txt").read_bytes()
    head, _, last = short.rstrip(b"\n").rpartition(b"\n")
    assert full.startswith(head + b"\n")
    assert full[len(head) + 1:].startswith(last)
    for name in ("demo-analogies.txt", "demo-clusters.tsv", "demo-similarity.tsv"):
        assert (tmp_path / name).read_bytes() == (demo / name).read_bytes(), name


def test_token_count_and_text_shape(demo):
    text = (demo / "demo.txt").read_text(encoding="ascii")
    assert re.fullmatch(r"([a-z]+( [a-z]+)*\n)+", text), "only a-z words, single spaces, lines"
    lines = text.splitlines()
    n_tokens = sum(len(line.split(" ")) for line in lines)
    assert n_tokens == SMALL
    assert abs(n_tokens / len(lines) - SynthConfig().sentence_length) < 1.0
    key = json.loads((demo / "demo-key.json").read_text())
    assert key["format"] == synth.FORMAT and key["format_version"] == synth.FORMAT_VERSION
    assert key["counts"]["tokens"] == SMALL and key["counts"]["lines"] == len(lines)
    assert key["config"]["tokens"] == SMALL and key["seed"] == 1
    assert sorted(key["files"].values()) == sorted(synth.FILES.values())


def test_word_kinds_have_their_frequencies(demo):
    cfg = SynthConfig(tokens=SMALL)
    lex = synth.make_lexicon(cfg, synth._streams(cfg.seed)[0])
    ids = {w: i for i, w in enumerate(lex.words)}
    text = (demo / "demo.txt").read_text().split()
    counts = np.bincount([ids[w] for w in text], minlength=len(lex.words)).astype(float)
    counts /= len(text) - counts[lex.markers.ravel()].sum()  # shares of the drawn words
    share = lambda a: counts[np.asarray(a).ravel()].sum()  # noqa: E731
    assert share(lex.function_ids) == pytest.approx(synth.FUNCTION_SHARE, abs=0.01)
    assert share(lex.cluster_ids) == pytest.approx(synth.CONTENT_SHARE, abs=0.01)
    assert share(lex.rare_ids) == pytest.approx(synth.RARE_SHARE, abs=0.01)
    # Zipf: the k-th function word is about k times rarer than the first.
    f = counts[lex.function_ids]
    assert f[0] / f[9] == pytest.approx(10, rel=0.2)
    # Relation words carry a marker beside them MARK_PROB of the time.
    expected = synth.MARK_PROB * share(lex.pairs)
    assert share(lex.markers) == pytest.approx(expected, rel=0.1)
    assert counts[lex.cluster_ids].min() > 0 and counts[lex.markers].min() > 0


def test_large_vocabulary_option_makes_a_flat_tail_above_min_count(tmp_path):
    """--rare-zipf 0 --rare-share: the rare words are drawn uniformly, so almost all of them
    pass a min-count (the recipe that makes a 2M-word vocabulary, scaled down 200x)."""
    cfg = SynthConfig(output=str(tmp_path / "big"), tokens=225_000, rare_words=11_000, rare_share=0.5,
                      rare_zipf=0.0)
    synth.write_demo(cfg)
    lex = synth.make_lexicon(cfg, synth._streams(cfg.seed)[0])
    ids = {w: i for i, w in enumerate(lex.words)}
    text = (tmp_path / "big" / "demo.txt").read_text().split()
    counts = np.bincount([ids[w] for w in text], minlength=len(lex.words)).astype(float)
    drawn = len(text) - counts[lex.markers.ravel()].sum()
    assert counts[lex.rare_ids].sum() / drawn == pytest.approx(0.5, abs=0.01)
    f, c, r = synth.kind_shares(cfg)
    assert f + c + r == pytest.approx(1.0) and f / c == pytest.approx(synth.FUNCTION_SHARE / synth.CONTENT_SHARE)
    rare = counts[lex.rare_ids]
    assert rare.mean() == pytest.approx(225_000 * 0.5 / 11_000, rel=0.05)
    assert rare[:100].mean() == pytest.approx(rare[-100:].mean(), rel=0.3)    # flat, not Zipf
    assert (rare >= 5).mean() > 0.95              # above min-count 5: the vocabulary is large
    assert counts[lex.cluster_ids].min() > 0      # the planted clusters and pairs are still there
    key = json.loads((tmp_path / "big" / "demo-key.json").read_text())
    assert key["model"]["rare_zipf"] == 0.0 and key["model"]["rare_share"] == 0.5
    assert key["counts"]["analogy_questions"] > 0


# -- lexicon --------------------------------------------------------------------------------


def test_lexicon_words_unique_and_relations_planted():
    cfg = SynthConfig(relations=4, relation_pairs=10, clusters=12, cluster_size=8)
    lex = synth.make_lexicon(cfg, np.random.default_rng(5))
    assert len(set(lex.words)) == len(lex.words)
    assert all(re.fullmatch(r"[a-z]+", w) for w in lex.words)
    assert lex.cluster_ids.shape == (12, 8)
    assert lex.pairs.shape == (4, 10, 2) and lex.markers.shape == (4, 2, synth.MARKERS_PER_SIDE)
    assert len(np.unique(lex.pairs)) == lex.pairs.size, "a word is in two relation pairs"
    for r in range(cfg.relations):
        assert len(set(lex.pair_clusters[r].tolist())) == cfg.relation_pairs
        for (x, y), c in zip(lex.pairs[r].tolist(), lex.pair_clusters[r].tolist()):
            assert x in lex.cluster_ids[c] and y in lex.cluster_ids[c]
            assert lex.marker_group[x] == 2 * r and lex.marker_group[y] == 2 * r + 1
    assert (lex.marker_group >= 0).sum() == lex.pairs.size


# -- answer key -----------------------------------------------------------------------------


def test_clusters_file(demo):
    cfg = SynthConfig()
    clusters = _read_clusters(demo)
    assert len(clusters) == cfg.clusters * cfg.cluster_size
    assert np.bincount(list(clusters.values())).tolist() == [cfg.cluster_size] * cfg.clusters


def test_similarity_file(demo):
    lines = (demo / "demo-similarity.tsv").read_text().splitlines()
    assert lines[0].startswith("#") and lines[1].startswith("#")
    clusters = _read_clusters(demo)
    rows = [line.split("\t") for line in lines[2:]]
    assert len(rows) == synth.SIMILARITY_PAIRS
    assert len({frozenset(r[:2]) for r in rows}) == len(rows), "a pair is listed twice"
    for a, b, score in rows:
        s = float(score)
        assert 0.0 <= s <= 10.0 and a != b
        assert (s > 5.0) == (clusters[a] == clusters[b])
    assert sum(float(r[2]) > 5.0 for r in rows) == synth.SIMILARITY_PAIRS // 2


def test_analogy_file(demo):
    cfg = SynthConfig()
    sections = _read_analogies(demo)
    assert len(sections) == cfg.relations
    in_text = set((demo / "demo.txt").read_text().split())
    clusters = _read_clusters(demo)
    for questions in sections.values():
        assert len(questions) == cfg.relation_pairs * (cfg.relation_pairs - 1)
        for a, b, c, d in questions:
            assert {a, b, c, d} <= in_text
            assert clusters[a] == clusters[b] and clusters[c] == clusters[d] != clusters[a]


# -- command line ---------------------------------------------------------------------------


def test_refuses_to_overwrite_without_force(tmp_path, capsys):
    (tmp_path / "demo-analogies.txt").write_bytes(b"keep me\n")
    rc = synth.main(["--output", str(tmp_path), "--tokens", "1000"])
    out, err = capsys.readouterr()
    assert rc == EXIT_USAGE
    assert err.count("\n") == 1 and err.startswith("mpidwe.synth: error: ")
    assert "exists; use --force to overwrite" in err
    assert sorted(os.listdir(tmp_path)) == ["demo-analogies.txt"], "wrote something anyway"
    assert (tmp_path / "demo-analogies.txt").read_bytes() == b"keep me\n"

    assert synth.main(["--output", str(tmp_path), "--tokens", "1000", "--force"]) == 0
    assert (tmp_path / "demo-analogies.txt").read_bytes() != b"keep me\n"
    assert sorted(os.listdir(tmp_path)) == sorted(synth.FILES.values()), "temporary files left"


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"old\n")
    with pytest.raises(RuntimeError):
        with synth.atomic_write(str(path)) as fh:
            fh.write(b"half")
            raise RuntimeError("crash")
    assert path.read_bytes() == b"old\n" and os.listdir(tmp_path) == ["f.txt"]
    with synth.atomic_write(str(path)) as fh:
        fh.write(b"new\n")
    assert path.read_bytes() == b"new\n" and os.listdir(tmp_path) == ["f.txt"]


@pytest.mark.parametrize("argv, message", [
    (["--tokens", "0"], "--tokens must be > 0"),
    (["--relation-pairs", "30"], "--relation-pairs must be <= --clusters"),
    (["--seed", "-1"], "--seed must be >= 0"),
    (["--rare-share", "1"], "--rare-share must be in [0, 1)"),
    (["--rare-zipf", "-1"], "--rare-zipf must be >= 0"),
])
def test_invalid_option_is_one_line(tmp_path, capsys, argv, message):
    rc = synth.main(["--output", str(tmp_path / "out"), *argv])
    _, err = capsys.readouterr()
    assert rc == EXIT_USAGE
    assert err.count("\n") == 1 and err.startswith("mpidwe.synth: error: ") and message in err
    assert not (tmp_path / "out").exists()


def test_module_entry_point(tmp_path):
    res = subprocess.run([sys.executable, "-m", "mpidwe.synth", "--output", str(tmp_path),
                          "--tokens", "5000", "--seed", "3"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 0, res.stderr
    assert "5,000 tokens" in res.stdout and str(tmp_path / "demo.txt") in res.stdout
    assert len((tmp_path / "demo.txt").read_text().split()) == 5000


# -- quality: the planted structure is learnable ----------------------------------------------


def test_word2vec_learns_clusters_and_analogies(tmp_path):
    gensim_models = pytest.importorskip("gensim.models")
    _write(tmp_path, tokens=300_000)
    sentences = [line.split() for line in (tmp_path / "demo.txt").read_text().splitlines()]
    model = gensim_models.Word2Vec(sentences, vector_size=32, window=5, sg=1, negative=5,
                                   min_count=5, sample=1e-3, epochs=1, workers=1, seed=1)
    wv = model.wv

    # 3CosAdd over the planted analogies; chance is about 1 / vocabulary (~0.0004).
    accuracy, _ = wv.evaluate_word_analogies(str(tmp_path / "demo-analogies.txt"),
                                             restrict_vocab=len(wv))
    assert accuracy > 0.8      # measured 0.99-1.0 over synth and gensim seeds

    # Share of the 10 nearest words (whole vocabulary) in the same cluster; chance ~0.05.
    clusters = _read_clusters(tmp_path)
    words = [w for w in clusters if w in wv.key_to_index]
    assert len(words) == len(clusters)
    unit = wv.get_normed_vectors()
    idx = np.array([wv.key_to_index[w] for w in words])
    sims = unit[idx] @ unit.T
    sims[np.arange(len(idx)), idx] = -np.inf
    nearest = np.argsort(-sims, axis=1)[:, :10]
    label = np.array([clusters.get(w, -1) for w in wv.index_to_key])
    purity = float(np.mean(label[nearest] == label[idx][:, None]))
    assert purity > 0.9        # measured 1.0

    pearson, spearman, oov = wv.evaluate_word_pairs(str(tmp_path / "demo-similarity.tsv"))
    assert oov == 0 and spearman[0] > 0.75   # a perfect ranking gives 0.866 (tied scores)
