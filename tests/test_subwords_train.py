"""--subwords end to end: the demo's answer key, vectors for words the vocabulary never saw
(neighbours of a misspelt cluster word come from its cluster) in the Python API and in
inspect, the checkpoint format, and exact resume under mpiexec."""

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import mpidwe
from mpidwe.io import checkpoint
from mpidwe.core.config import TrainConfig

from conftest import (clusters, error_lines, make_demo_corpus, misspelt, misspelt_neighbours, run_mpi, run_py,
                      train_small_demo)

BUCKETS = 20_000


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("subdemo"), tokens=300_000, seed=5)


@pytest.fixture(scope="module")
def trained(demo, tmp_path_factory):
    out = tmp_path_factory.mktemp("subrun") / "run"
    res = train_small_demo(demo, out, subwords=True, buckets=BUCKETS, eval_sim=(str(demo / "demo-similarity.tsv"),),
                           eval_analogy=(str(demo / "demo-analogies.txt"),))
    return out, res


def test_subword_run_learns_the_answer_key_and_stores_its_buckets(demo, trained):
    out, res = trained
    ev = res.metrics[-1]["eval"]
    assert ev["analogy:demo-analogies.txt"] > 0.85 and ev["sim:demo-similarity.tsv"] > 0.6, ev
    v = len(res.words)
    assert res.w_in.shape == (v + BUCKETS, 32) and res.w_out.shape == (v, 32)
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    assert ck.w_in.shape == (v + BUCKETS, 32) and ck.config["subwords"] and ck.config["buckets"] == BUCKETS
    import h5py

    with h5py.File(ck.path, "r") as f:
        assert int(f.attrs["format_version"]) == 3      # a version-2 reader would misread w_in
    # vectors.txt holds the words' vectors: the mean of their own and their n-gram rows
    vecs = mpidwe.load(str(out))
    assert vecs.oov is not None and vecs.oov.kind == "subwords" and vecs.vectors.shape == (v, 32)
    from mpidwe.io.vectors import read_word2vec

    words, text = read_word2vec(str(out / "vectors.txt"))
    assert words == vecs.words
    np.testing.assert_allclose(text, vecs.vectors, rtol=1e-5, atol=1e-6)
    assert not np.allclose(vecs.vectors, res.w_in[:v], atol=1e-3)     # not just the word rows


def test_a_misspelt_cluster_word_has_neighbours_from_its_cluster(demo, trained):
    out, _ = trained
    vecs = mpidwe.load(str(out))
    labels = clusters(demo)
    pairs = misspelt(vecs, labels)
    assert len(pairs) >= 30
    found, same = misspelt_neighbours(vecs, labels, pairs)
    # chance is 1 in 20 clusters (and 5 in 600 words for the original): measured 0.545 and
    # 0.65 here (short words keep few n-grams after a change)
    assert same / (5 * len(pairs)) > 0.45 and found / len(pairs) > 0.55, (found, same, len(pairs))
    changed, original = pairs[0]
    assert vecs.similarity(changed, original) > 0.5
    np.testing.assert_array_equal(vecs[changed], vecs.vector(changed))


def test_inspect_answers_oov_queries_and_says_so_without_a_model(demo, trained, tmp_path):
    out, _ = trained
    vecs = mpidwe.load(str(out))
    changed, original = misspelt(vecs, clusters(demo))[0]
    proc = run_py(["-m", "mpidwe.inspect", str(out), "neighbors", changed, "-k", "3"])
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 3, proc.stderr
    proc = run_py(["-m", "mpidwe.inspect", str(out), "vectors"], input=f"{original} {changed}\n")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and [ln.split()[0] for ln in lines] == [original, changed]
    got = np.array(lines[1].split()[1:], dtype=np.float32)
    np.testing.assert_allclose(got, vecs.vector(changed), rtol=1e-6)
    proc = run_py(["-m", "mpidwe.inspect", str(out), "analogy", original, changed, original, "-k", "2"])
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 2, proc.stderr
    # the same query on plain word2vec vectors: one line saying there is no OOV model
    proc = run_py(["-m", "mpidwe.inspect", str(out / "vectors.txt"), "neighbors", changed])
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "no model for words outside the vocabulary" in proc.stderr


FLAGS = ["--dim", "16", "--threads", "1", "--no-progress", "--sync-every", "20000", "--keep-checkpoints", "100",
         "--subwords", "--buckets", "5000", "--epochs", "2", "--checkpoint-every", "100000"]


def digest(run_dir) -> str:
    ck = checkpoint.load(checkpoint.list_checkpoints(os.path.join(run_dir, "checkpoints"))[-1])
    assert ck.complete and ck.config["subwords"]
    return hashlib.sha256(ck.w_in.tobytes() + ck.w_out.tobytes()).hexdigest()


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,sync", [(2, "sparse"), (4, "dense")])
def test_subword_resume_from_a_middle_checkpoint_is_exact(demo, tmp_path, ranks, sync):
    corpus = str(demo / "corpus.h5")
    full, part = tmp_path / "full", tmp_path / "part"
    run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(full), "--sync", sync, *FLAGS], timeout=400)
    shutil.copytree(full, part)
    for p in checkpoint.list_checkpoints(str(part / "checkpoints"))[2:]:
        os.unlink(p)
    mid = checkpoint.load(checkpoint.list_checkpoints(str(part / "checkpoints"))[-1])
    assert not mid.complete and mid.w_in.shape[0] == len(mid.words) + 5000
    run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(part), "--sync", sync, *FLAGS,
                    "--resume", "auto"], timeout=400)
    assert digest(part) == digest(full)
    # a subword checkpoint does not continue without subwords, or with other buckets, when
    # they are asked for (left out, both are taken from the checkpoint)
    for drop, add, msg in [(["--subwords"], ["--no-subwords"], "--subwords is False but the checkpoint has True"),
                           (["--buckets", "5000"], ["--buckets", "7000"],
                            "--buckets is 7000 but the checkpoint has 5000")]:
        flags = [f for f in FLAGS if f not in drop] + add
        proc = run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(tmp_path / "x"), *flags,
                               "--sync", sync, "--resume", mid.path], check=False, timeout=60)
        lines = error_lines(proc.stderr)
        assert proc.returncode == 2 and len(lines) == 1 and msg in lines[0], proc.stderr


def test_subwords_refuse_the_torch_kernel_and_bad_ngram_lengths():
    from mpidwe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="numba kernel only"):
        TrainConfig(subwords=True, kernel="torch")
    with pytest.raises(ConfigError, match="minn <= maxn"):
        TrainConfig(subwords=True, minn=5, maxn=3)


def test_evaluate_answers_oov_pairs_with_the_flag(demo, trained, tmp_path):
    out, _ = trained
    vecs = mpidwe.load(str(out))
    changed, original = misspelt(vecs, clusters(demo))[0]
    pairs = tmp_path / "pairs.tsv"
    words = vecs.words[:6]
    pairs.write_text("".join(f"{a}\t{b}\t{i}\n" for i, (a, b) in enumerate(zip(words, words[1:]))) +
                     f"{changed}\t{original}\t9\n")
    plain = run_py(["-m", "mpidwe.evaluate", str(out / "vectors.txt"), "--similarity", str(pairs), "--json"])
    oov = run_py(["-m", "mpidwe.evaluate", str(out), "--similarity", str(pairs), "--json", "--oov"])
    assert plain.returncode == 0 and oov.returncode == 0, (plain.stderr, oov.stderr)
    assert json.loads(plain.stdout)["similarity"][0]["covered"] == 5
    assert json.loads(oov.stdout)["similarity"][0]["covered"] == 6
    proc = run_py(["-m", "mpidwe.evaluate", str(out / "vectors.txt"), "--similarity", str(pairs), "--oov"])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "no model for words outside the vocabulary" in lines[0]


def test_fasttext_export_loads_in_gensim_and_fasttext_and_answers_unseen_words_alike(demo, trained, tmp_path):
    """inspect export --format fasttext-bin: gensim's load_facebook_vectors/_model and fastText's
    load_model read the file, and give the vocabulary's vectors and an unseen word's vector
    as mpidwe does (the same hash, n-grams and rows)."""
    from gensim.models.fasttext import load_facebook_model, load_facebook_vectors

    out, _ = trained
    path = tmp_path / "model.bin"
    proc = run_py(["-m", "mpidwe.inspect", str(out), "export", "--format", "fasttext-bin", "-o", str(path)])
    assert proc.returncode == 0 and "wrote" in proc.stdout, proc.stderr
    vecs = mpidwe.load(str(out))
    unseen = [misspelt(vecs, clusters(demo), n=1)[0][0], "zzqx-never-seen", "日本語"]
    assert not any(w in vecs for w in unseen)
    vecs.save_fasttext(tmp_path / "api.bin")                  # the Python call writes the same bytes
    assert (tmp_path / "api.bin").read_bytes() == path.read_bytes()
    kv = load_facebook_vectors(str(path))
    assert kv.index_to_key == vecs.words and (kv.min_n, kv.max_n, kv.bucket) == (3, 6, BUCKETS)
    np.testing.assert_allclose(kv.vectors, vecs.vectors, atol=1e-6)
    for word in unseen:
        ours, theirs = vecs[word], kv[word]
        assert float(ours @ theirs / np.linalg.norm(ours) / np.linalg.norm(theirs)) > 0.99999, word
        np.testing.assert_allclose(theirs, ours, atol=1e-6)
    model = load_facebook_model(str(path))
    assert (model.sg, model.hs, model.negative, model.vector_size) == (1, 0, 5, 32)
    np.testing.assert_array_equal(model.syn1neg, checkpoint.latest_valid(str(out / "checkpoints")).w_out)
    fasttext = pytest.importorskip("fasttext")      # in the test extras (fasttext-wheel)
    ft = fasttext.load_model(str(path))
    assert ft.get_words(on_unicode_error="replace")[:5] == vecs.words[:5]
    for word in unseen + vecs.words[:3]:
        np.testing.assert_allclose(ft.get_word_vector(word), vecs[word], atol=1e-6)
    # refused with one line: vectors without subword rows, and another matrix
    plain = tmp_path / "plain.txt"
    vecs.save_word2vec_format(str(plain))
    proc = run_py(["-m", "mpidwe.inspect", str(plain), "export", "--format", "fasttext-bin", "-o",
                   str(tmp_path / "no.bin")])
    assert proc.returncode == 2 and "needs a run directory or checkpoint trained with --subwords" in proc.stderr
    assert not (tmp_path / "no.bin").exists()
    proc = run_py(["-m", "mpidwe.inspect", str(out), "export", "--format", "fasttext-bin", "--matrix", "sum",
                   "-o", str(tmp_path / "no.bin")])
    assert proc.returncode == 2 and "drop --matrix" in proc.stderr
