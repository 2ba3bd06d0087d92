"""PIP loss and the SPPMI reference against dense computations, on tiny seeded data (on several
ranks: tests/mpi/test_mpi_pip.py)."""

import h5py
import numpy as np
import pytest

from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig
from mpidwe.io.corpus import Corpus
from mpidwe.core.errors import ConfigError, InputError
from mpidwe.evaluate import pip, sppmi
from mpidwe.io import refcache
from mpidwe.evaluate.sppmi import ReferenceSpec, reference_embedding
from mpidwe.io.formats import reseal
from mpidwe.preprocess import run as preprocess

SPEC = ReferenceSpec(window=3, negatives=2, dim=4, top_n=30, alpha=0.5)


def make_corpus(directory, seed=3, lines=300, vocab=40, name="c.h5"):
    """A Zipf-ish text of ``vocab`` words in lines cut into sentences of at most 8 tokens,
    preprocessed into an mpidwe corpus; returns its path."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(vocab)]
    p = 1.0 / np.arange(1, vocab + 1)
    text = "\n".join(" ".join(rng.choice(words, size=rng.integers(1, 20), p=p / p.sum()))
                     for _ in range(lines)) + "\n"
    (directory / f"{name}.txt").write_text(text)
    out = str(directory / name)
    preprocess(PreprocessConfig(inputs=(str(directory / f"{name}.txt"),), output=out, min_count=1,
                                sentence_length=8, force=True), Comm.serial(), log=None)
    return out


# ----------------------------------------------------------------------------- PIP
@pytest.mark.parametrize("n,d1,d2,top_n", [(50, 8, 8, None), (50, 8, 5, None), (60, 3, 12, 17), (5, 4, 4, 100)])
def test_fast_pip_equals_dense(n, d1, d2, top_n):
    rng = np.random.default_rng(n + d1 + d2)
    e1 = rng.standard_normal((n, d1)).astype(np.float32)
    e2 = (2 * rng.standard_normal((n, d2))).astype(np.float32)
    dense = pip.pip_loss_dense(e1, e2, top_n)
    assert dense > 1.0
    assert pip.pip_loss(e1, e2, top_n=top_n) == pytest.approx(dense, rel=1e-9)
    # the small block size exercises the accumulation over row blocks
    assert pip.pip_from_grams(*pip.gram_matrices(e1, e2, top_n=top_n, block_rows=7)) == pytest.approx(dense, rel=1e-9)
    # against nothing, the loss is ||E E^T||_F
    assert pip.pip_loss(e1, np.zeros((n, 1)), top_n=top_n) == pytest.approx(
        np.linalg.norm(e1[:top_n].astype(np.float64) @ e1[:top_n].T.astype(np.float64)), rel=1e-9)


def test_top_n_uses_only_the_first_rows():
    rng = np.random.default_rng(1)
    e1, e2 = rng.standard_normal((40, 6)), rng.standard_normal((40, 6))
    e2b = e2.copy()
    e2b[10:] = 99.0  # rows past top_n must not matter
    assert pip.pip_loss(e1, e2, top_n=10) == pytest.approx(pip.pip_loss(e1, e2b, top_n=10), rel=1e-12)
    assert pip.pip_loss(e1, e2, top_n=10) != pytest.approx(pip.pip_loss(e1, e2b), rel=1e-3)


def test_pip_is_zero_under_rotation():
    rng = np.random.default_rng(2)
    e = rng.standard_normal((80, 10))
    q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    r = pip.pip_report(e, e @ q)
    assert r["pip"] <= 1e-6 * r["norm"]          # clipped at 0, never NaN
    assert r["normalized"] == pytest.approx(0, abs=1e-6)
    # the scale-free variant ignores scale; the plain loss does not
    r = pip.pip_report(3 * e @ q, e)
    assert r["normalized"] == pytest.approx(0, abs=1e-6) and r["pip"] == pytest.approx(8 * r["reference_norm"])
    assert r["relative"] == pytest.approx(8.0)


def test_pip_refuses_different_words():
    with pytest.raises(ValueError, match="same words"):
        pip.pip_loss(np.zeros((3, 2)), np.zeros((4, 2)))


@pytest.mark.parametrize("n,world", [(37, 3), (4, 6)])
def test_rank_shares_add_up_to_serial(n, world):
    rng = np.random.default_rng(world)
    e1, e2 = rng.standard_normal((n, 5)), rng.standard_normal((n, 3))
    serial = pip.gram_matrices(e1, e2)
    parts = [pip.gram_matrices(e1, e2, rank=r, world_size=world) for r in range(world)]
    for k in range(3):
        np.testing.assert_allclose(sum(p[k] for p in parts), serial[k], rtol=1e-12)
    # reduce is called once per rank, with one float64 buffer holding all three matrices
    calls = []
    others = [np.concatenate([g.ravel() for g in p]) for p in parts[1:]]

    def reduce(buf):
        calls.append(buf.dtype)
        buf += sum(others)
        return buf

    got = pip.pip_loss(e1, e2, rank=0, world_size=world, reduce=reduce)
    assert calls == [np.float64]
    assert got == pytest.approx(pip.pip_loss_dense(e1, e2), rel=1e-9)


# ----------------------------------------------------------------------------- SPPMI
def dense_reference(path, spec):
    """Co-occurrence by loops over the sentences, PPMI shift and a full SVD."""
    with Corpus(path) as c:
        ((tokens, starts, _),) = list(c.iter_blocks(c.shard(), block_tokens=1 << 30))
        n = min(spec.top_n, c.n_words)
    counts = np.zeros((n, n))
    bounds = list(starts) + [len(tokens)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        sent = tokens[a:b]
        for i in range(len(sent)):
            for j in range(i + 1, min(i + spec.window + 1, len(sent))):
                if sent[i] < n and sent[j] < n:
                    counts[sent[i], sent[j]] += 1
                    counts[sent[j], sent[i]] += 1
    with np.errstate(divide="ignore"):
        pmi = np.log(counts * counts.sum() / np.outer(counts.sum(1), counts.sum(0)))
    shifted = np.where(counts > 0, np.maximum(pmi - np.log(spec.negatives), 0), 0.0)
    u, s, _ = np.linalg.svd(shifted)
    return counts, shifted, u[:, :spec.dim] * s[:spec.dim] ** spec.alpha, s


def test_sppmi_reference_matches_dense(tmp_path):
    path = make_corpus(tmp_path)
    counts, shifted, expected, s = dense_reference(path, SPEC)
    assert np.min(np.diff(-s[:SPEC.dim + 1])) > 1e-3  # distinct singular values: columns defined up to sign
    with Corpus(path) as c:
        got_counts = sppmi.symmetrize(sppmi.count_cooccurrences(c, SPEC.window, SPEC.top_n)).toarray()
    np.testing.assert_array_equal(got_counts, counts)
    np.testing.assert_allclose(sppmi.sppmi_matrix(got_counts, SPEC.negatives).toarray(), shifted, atol=1e-12)
    ref = reference_embedding(path, SPEC, cache=False)
    assert ref.vectors.shape == (SPEC.top_n, SPEC.dim) and ref.vectors.dtype == np.float32
    with Corpus(path) as c:
        assert ref.words == c.words[:SPEC.top_n]
    np.testing.assert_allclose(ref.singular_values, s[:SPEC.dim], rtol=1e-6)
    for j in range(SPEC.dim):
        sign = np.sign(ref.vectors[:, j] @ expected[:, j])
        np.testing.assert_allclose(sign * ref.vectors[:, j], expected[:, j], atol=2e-5)


def test_counts_do_not_depend_on_blocks_or_ranks(tmp_path):
    path = make_corpus(tmp_path, seed=5)
    with Corpus(path) as c:
        serial = sppmi.count_cooccurrences(c, 4, 25).toarray()
        for world in (2, 3):
            parts = sum(sppmi.count_cooccurrences(c, 4, 25, rank=r, world_size=world, block_tokens=9).toarray()
                        for r in range(world))
            np.testing.assert_array_equal(parts, serial)
    assert serial.sum() > 1000


def test_reference_cache_is_reused_and_keyed(tmp_path, monkeypatch):
    path = make_corpus(tmp_path)
    cache = refcache.cache_path(path)
    first = reference_embedding(path, SPEC)
    assert not first.cached and refcache.list_references(cache) == [first.key.group]

    def no_recompute(*a, **k):
        raise AssertionError("the reference was recomputed")

    monkeypatch.setattr(sppmi, "factorize", no_recompute)
    again = reference_embedding(path, SPEC)
    assert again.cached and again.words == first.words and again.info == first.info
    np.testing.assert_array_equal(again.vectors, first.vectors)
    monkeypatch.undo()
    other = reference_embedding(path, ReferenceSpec(window=2, negatives=2, dim=4, top_n=30))
    assert not other.cached and other.key.group != first.key.group
    assert sorted(refcache.list_references(cache)) == sorted([first.key.group, other.key.group])
    assert not np.allclose(other.vectors, first.vectors)
    assert reference_embedding(path, SPEC).cached  # the first entry survived the rewrite
    # top_n beyond the vocabulary is the same reference as the whole vocabulary
    whole = reference_embedding(path, ReferenceSpec(window=3, negatives=2, dim=4, top_n=10**6))
    assert whole.key.top_n == 40 and not whole.cached
    assert reference_embedding(path, ReferenceSpec(window=3, negatives=2, dim=4, top_n=40)).cached


def test_cache_of_a_rewritten_corpus_is_stale(tmp_path):
    path = make_corpus(tmp_path)
    old = reference_embedding(path, SPEC)
    make_corpus(tmp_path, seed=9)  # same path, other text
    new = reference_embedding(path, SPEC)
    assert not new.cached and new.key.corpus_id != old.key.corpus_id
    with h5py.File(refcache.cache_path(path), "r") as f:
        assert f.attrs["corpus_id"] == new.key.corpus_id and len(f["references"]) == 1


def test_cache_version_is_checked(tmp_path):
    path = make_corpus(tmp_path)
    reference_embedding(path, SPEC)
    with h5py.File(refcache.cache_path(path), "a") as f:
        f.attrs["format_version"] = 99
    reseal(refcache.cache_path(path))     # an intact file of a newer version, not a damaged one
    with pytest.raises(InputError, match="version 99.*delete it"):
        reference_embedding(path, SPEC)
    assert not reference_embedding(path, SPEC, cache=False).cached


@pytest.mark.parametrize("part", ["embedding", "singular_values", "words", "info"])
def test_a_changed_cache_entry_fails_its_checksum(tmp_path, part):
    """One flipped value changed a PIP loss from 1,289 to 8,990 with exit 0 before."""
    path = make_corpus(tmp_path)
    first = reference_embedding(path, SPEC)
    with h5py.File(refcache.cache_path(path), "a") as f:
        g = f["references"][first.key.group]
        if part == "info":
            g.attrs["info"] = '{"tampered": true}'
        elif part == "words":
            g["words"][0] = "zzz"
        else:
            g[part][0] = g[part][0] * 1.5 + 1
    with pytest.raises(InputError, match="fails its checksum; delete it to recompute"):
        reference_embedding(path, SPEC)


def test_reference_spec_is_checked(tmp_path):
    path = make_corpus(tmp_path)
    with pytest.raises(ConfigError, match="dimension 30 must be below"):
        reference_embedding(path, ReferenceSpec(dim=30, top_n=30), cache=False)
    with pytest.raises(InputError, match="corpus not found"):
        reference_embedding(str(tmp_path / "nope.h5"), SPEC)
