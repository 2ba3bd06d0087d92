"""The Python API: mpidwe.load on every kind of input, queries against gensim, mpidwe.fit."""

import json
import subprocess
import sys

import numpy as np
import pytest

import mpidwe
from mpidwe.io import checkpoint
from mpidwe.io.corpus import Corpus
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import TrainConfig
from mpidwe.core.errors import ConfigError, InputError
from mpidwe.evaluate import evaluate_analogies, evaluate_similarity, read_analogies, read_similarity
from mpidwe.train import run as train

from conftest import ROOT, make_demo_corpus, mpi_env


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = make_demo_corpus(tmp_path_factory.mktemp("api"), tokens=120_000, seed=5)
    train(TrainConfig(corpus=str(d / "corpus.h5"), out=str(d / "run"), dim=16, threads=1, progress=False,
                      sync_every=40_000, checkpoint_every=60_000, epochs=2),
          Comm.serial(), log=None)
    return d


@pytest.fixture(scope="module")
def exported(run_dir):
    """The run's newest checkpoint, and its input vectors written as word2vec text and binary."""
    ck = checkpoint.list_checkpoints(str(run_dir / "run" / "checkpoints"))[-1]
    vecs = mpidwe.load(ck)
    vecs.save_word2vec_format(str(run_dir / "v.txt"))
    vecs.save_word2vec_format(str(run_dir / "v.bin"), binary=True)
    return {"ckpt": ck, "text": str(run_dir / "v.txt"), "binary": str(run_dir / "v.bin"),
            "run": str(run_dir / "run"), "run vectors.txt": str(run_dir / "run" / "vectors.txt")}


def test_every_input_gives_the_same_vectors(exported):
    ck = checkpoint.load(exported["ckpt"])
    assert ck.complete
    for kind, path in exported.items():
        vecs = mpidwe.load(path)
        assert vecs.words == ck.words, kind
        assert vecs.vectors.dtype == np.float32 and vecs.matrix == "input"
        np.testing.assert_array_equal(vecs.vectors, ck.w_in, err_msg=kind)  # 9 digits: exact
        if kind in ("ckpt", "run"):
            np.testing.assert_array_equal(vecs.counts, ck.counts)
            assert vecs.checkpoint.path == exported["ckpt"] and vecs.run_dir.endswith("run")
            assert vecs.counts[0] >= vecs.counts[-1] > 0
        else:
            assert vecs.counts is None and vecs.checkpoint is None
    assert len(vecs) == len(ck.words) and vecs.dim == 16 and ck.words[3] in vecs and "no-such" not in vecs
    np.testing.assert_array_equal(vecs[ck.words[3]], ck.w_in[3])
    assert list(vecs) == ck.words and "16" in repr(vecs)


def test_matrix_choice(exported):
    ck = checkpoint.load(exported["ckpt"])
    np.testing.assert_array_equal(mpidwe.load(exported["run"], matrix="output").vectors, ck.w_out)
    np.testing.assert_allclose(mpidwe.load(exported["ckpt"], matrix="sum").vectors, ck.w_in + ck.w_out)
    with pytest.raises(InputError, match="word2vec file, which holds only the input vectors"):
        mpidwe.load(exported["text"], matrix="sum")
    with pytest.raises(ValueError, match="matrix must be one of"):
        mpidwe.load(exported["ckpt"], matrix="context")


def test_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="not found"):
        mpidwe.load(tmp_path / "missing.bin")
    (tmp_path / "glove.txt").write_text("the 0.1 0.2\n")
    with pytest.raises(InputError, match="glove.txt is not an mpidwe checkpoint"):
        mpidwe.load(tmp_path / "glove.txt")  # no 'count dim' line: not word2vec
    with pytest.raises(InputError, match="no checkpoint in"):
        mpidwe.load(tmp_path)


def test_unknown_word_is_a_clear_key_error(exported):
    vecs = mpidwe.load(exported["text"])
    with pytest.raises(KeyError, match="word not in vocabulary: 'no-such-word'"):
        vecs["no-such-word"]
    with pytest.raises(KeyError, match="no-such-word"):
        vecs.most_similar(["no-such-word"])
    with pytest.raises(KeyError):
        vecs.similarity(vecs.words[0], "no-such-word")


def test_queries_match_gensim(exported):
    gensim = pytest.importorskip("gensim")
    kv = gensim.models.KeyedVectors.load_word2vec_format(exported["binary"], binary=True)
    vecs = mpidwe.load(exported["run"])
    w = vecs.words
    queries = [dict(positive=w[10]), dict(positive=[w[200]], topn=7),
               dict(positive=[w[40], w[42]], negative=[w[41]], topn=5),
               dict(positive=[w[5]], negative=[w[6], w[7]], topn=3), dict(negative=w[9], topn=4)]
    for q in queries:
        ours, theirs = vecs.most_similar(**q), kv.most_similar(**q)
        assert [x for x, _ in ours] == [x for x, _ in theirs], q
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], rtol=1e-5, atol=1e-6)
        asked = [x for key in ("positive", "negative") for x in np.atleast_1d(q.get(key, []))]
        assert not set(asked) & {x for x, _ in ours}, q
    assert vecs.similarity(w[1], w[2]) == pytest.approx(float(kv.similarity(w[1], w[2])), abs=1e-6)
    everything = vecs.most_similar(w[3], topn=None)
    np.testing.assert_allclose(everything, kv.most_similar(w[3], topn=None), rtol=1e-5, atol=1e-6)
    assert vecs.most_similar(w[3], topn=0) == []


def test_keyedvectors_methods_match_gensim(exported):
    """The rest of gensim's KeyedVectors questions, asked of both: vectors and row numbers as
    queries, weighted terms, restrict_vocab, 3CosMul, doesnt_match, rank, distances,
    get_vector(norm=True), key_to_index / index_to_key."""
    gensim = pytest.importorskip("gensim")
    kv = gensim.models.KeyedVectors.load_word2vec_format(exported["binary"], binary=True)
    vecs = mpidwe.load(exported["run"])
    w = vecs.words
    assert vecs.index_to_key == kv.index_to_key and vecs.key_to_index == kv.key_to_index

    def same(ours, theirs, q):
        assert [x for x, _ in ours] == [x for x, _ in theirs], q
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], rtol=1e-5, atol=1e-6)

    queries = [dict(positive=vecs[w[10]]),                       # a vector (a raw numpy error before)
               dict(positive=5, topn=4),                         # a row number ('int' not iterable before)
               dict(positive=[vecs[w[40]] * 3, w[42]], negative=[w[41]], topn=5),
               dict(positive=[(w[12], 2.0), w[13]], topn=5),     # (word, weight)
               dict(positive=[w[20]], topn=6, restrict_vocab=50),
               dict(positive=[w[30], w[31]], negative=[w[32]], topn=5, restrict_vocab=200)]
    for q in queries:
        same(vecs.most_similar(**q), kv.most_similar(**q), q)
    for q in [dict(positive=[w[40], w[42]], negative=[w[41]], topn=5), dict(positive=w[7], topn=3),
              dict(positive=[vecs[w[50]], w[51]], topn=4)]:
        same(vecs.most_similar_cosmul(**q), kv.most_similar_cosmul(**q), q)
    group = [w[60], w[61], w[62], w[900]]
    assert vecs.doesnt_match(group) == kv.doesnt_match(group)
    for a, b in [(w[3], w[4]), (w[100], w[7]), (w[5], w[400])]:
        assert vecs.rank(a, b) == kv.rank(a, b)
        assert vecs.closer_than(a, b) == kv.closer_than(a, b)
        assert vecs.distance(a, b) == pytest.approx(float(kv.distance(a, b)), abs=1e-6)
    np.testing.assert_allclose(vecs.distances(w[8]), kv.distances(w[8]), atol=1e-6)
    np.testing.assert_allclose(vecs.distances(vecs[w[8]], [w[1], w[2]]), kv.distances(vecs[w[8]], [w[1], w[2]]),
                               atol=1e-6)
    np.testing.assert_allclose(vecs.get_vector(w[9], norm=True), kv.get_vector(w[9], norm=True), rtol=1e-6)
    np.testing.assert_array_equal(vecs.get_vector(9), kv.get_vector(9))
    np.testing.assert_array_equal(vecs[9], vecs[w[9]])
    assert vecs.similarity(3, 4) == pytest.approx(float(kv.similarity(w[3], w[4])), abs=1e-6)
    with pytest.raises(ValueError, match="a query vector must have 16 numbers"):
        vecs.most_similar(np.ones(5))
    with pytest.raises(TypeError, match="a query is a word, a row number or a vector of 16 numbers, got 1.5"):
        vecs.most_similar([1.5, "x"])
    with pytest.raises(KeyError, match="row 99999 is out of range"):
        vecs.most_similar(99999)


def test_nan_rows_are_never_answers_or_queries(exported):
    """A row that is not finite (a diverged run, a damaged file) is left out of every answer
    and refused as a query with one line, as python -m mpidwe.evaluate skips it."""
    good = mpidwe.load(exported["text"])
    vectors = good.vectors.copy()
    vectors[[3, 4]] = np.nan
    vectors[5, 0] = np.inf
    vecs = mpidwe.WordVectors(good.words, vectors)
    w = vecs.words
    for asked, answers in ((1, vecs.most_similar(w[0], topn=len(w))), (1, vecs.most_similar_cosmul(w[0], topn=len(w))),
                           (3, vecs.most_similar([w[0], w[1]], negative=w[2], topn=len(w)))):
        # every word but the three rows and the query words, all with finite scores
        assert {x for x, _ in answers}.isdisjoint(w[3:6]) and len(answers) == len(w) - 3 - asked
        assert all(np.isfinite(s) for _, s in answers)
    for query in (lambda: vecs.most_similar(w[3]), lambda: vecs.similarity(w[0], w[4]),
                  lambda: vecs.most_similar_cosmul([w[0], w[5]]), lambda: vecs.doesnt_match([w[0], w[1], w[3]])):
        with pytest.raises(InputError, match=r"has nan or inf values \(a diverged or damaged model\), so it "
                                             r"cannot be queried"):
            query()
    assert vecs.rank(w[0], w[1]) == good.rank(w[0], w[1]) - sum(1 for x in good.closer_than(w[0], w[1])
                                                                 if x in w[3:6])


def test_evaluations_match_the_evaluator_and_gensim(run_dir, exported):
    gensim = pytest.importorskip("gensim")
    vecs = mpidwe.load(exported["run"])
    sim, ana = str(run_dir / "demo-similarity.tsv"), str(run_dir / "demo-analogies.txt")
    pearson, spearman, oov = vecs.evaluate_word_pairs(sim)
    ref = evaluate_similarity(vecs.vectors, vecs.index, read_similarity(sim))
    assert spearman[0] == ref["spearman"] and spearman[0] > 0.3
    assert oov == pytest.approx(100 * (1 - ref["coverage"]))
    kv = gensim.models.KeyedVectors.load_word2vec_format(exported["binary"], binary=True)
    g_pearson, g_spearman, g_oov = kv.evaluate_word_pairs(sim)
    assert pearson[0] == pytest.approx(g_pearson[0], abs=1e-5)
    # cosines agree to float32 rounding (1.8e-7 here), but two of them equal in one tool can
    # differ by that rounding in the other, and a tie ranks differently from a near-tie: the
    # rank correlations then differ by a few 1e-5 (a seen case: 0.400760 against 0.400837)
    assert spearman[0] == pytest.approx(g_spearman[0], abs=5e-4) and oov == pytest.approx(g_oov)
    assert pearson[1] == pytest.approx(g_pearson[1], rel=1e-3) and spearman[1] == pytest.approx(g_spearman[1], rel=1e-3)

    accuracy, report = vecs.evaluate_word_analogies(ana, restrict_vocab=len(vecs))
    ref = evaluate_analogies(vecs.vectors, vecs.index, read_analogies(ana), restrict_vocab=len(vecs))
    assert report == ref and accuracy == ref["accuracy"] and report["covered"] > 50
    g_score, _ = kv.evaluate_word_analogies(ana, restrict_vocab=len(vecs))
    assert accuracy == pytest.approx(g_score, abs=1.5 / report["covered"])  # a tie at most


def test_to_gensim(exported):
    gensim = pytest.importorskip("gensim")
    vecs = mpidwe.load(exported["ckpt"])
    kv = vecs.to_gensim()
    assert isinstance(kv, gensim.models.KeyedVectors)
    assert kv.index_to_key == vecs.words
    np.testing.assert_array_equal(kv.vectors, vecs.vectors)
    assert kv.get_vecattr(vecs.words[0], "count") == vecs.counts[0]
    assert [x for x, _ in kv.most_similar(vecs.words[20])] == [x for x, _ in vecs.most_similar(vecs.words[20])]
    kv.vectors[0] += 1  # a copy: the mpidwe vectors stay as they were
    assert not np.array_equal(kv.vectors[0], vecs.vectors[0])


def test_to_gensim_without_gensim(exported, monkeypatch):
    monkeypatch.setitem(sys.modules, "gensim", None)
    monkeypatch.setitem(sys.modules, "gensim.models", None)
    with pytest.raises(ImportError, match=r"needs gensim, which is not installed \(pip install gensim\)"):
        mpidwe.load(exported["text"]).to_gensim()


def test_unit_rows_are_computed_once(exported):
    vecs = mpidwe.load(exported["text"])
    vecs.most_similar(vecs.words[1])
    unit = vecs.unit
    vecs.similarity(vecs.words[1], vecs.words[2])
    vecs.most_similar(vecs.words[2], topn=3)
    assert vecs.unit is unit
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1, rtol=1e-5)


def test_fit_trains_in_this_process_and_returns_the_vectors(tmp_path):
    d = make_demo_corpus(tmp_path, tokens=30_000, seed=2)
    lines = []
    vecs = mpidwe.fit(corpus=str(d / "corpus.h5"), out=str(tmp_path / "run"), dim=8, threads=1,
                      progress=False, epochs=2, eval_sim=[str(d / "demo-similarity.tsv")], log=lines.append)
    assert isinstance(vecs, mpidwe.WordVectors) and vecs.run_dir == str(tmp_path / "run")
    assert not vecs.result.stopped and vecs.result.words_total > 50_000 and lines
    assert "sim:demo-similarity.tsv" in vecs.result.metrics[-1]["eval"]
    back = mpidwe.load(tmp_path / "run")
    assert back.words == vecs.words and vecs.vectors.shape == (len(back), 8)
    np.testing.assert_array_equal(back.vectors, vecs.vectors)
    np.testing.assert_array_equal(back.counts, vecs.counts)
    assert vecs.most_similar(vecs.words[0], topn=3)[0][0] != vecs.words[0]
    with pytest.raises(ConfigError, match="unknown option.*dimension"):
        mpidwe.fit(corpus=str(d / "corpus.h5"), out=str(tmp_path / "r2"), dimension=8)
    with pytest.raises(ConfigError, match="dim must be an integer, got '8'"):
        mpidwe.fit(corpus=str(d / "corpus.h5"), out=str(tmp_path / "r2"), dim="8")
    with pytest.raises(InputError, match="already holds a run"):  # the command's own checks
        mpidwe.fit(corpus=str(d / "corpus.h5"), out=str(tmp_path / "run"), dim=8, progress=False, log=None)


def test_train_takes_paths_and_raw_text_and_speaks_python(tmp_path):
    """gensim's corpus_file: mpidwe.train takes a pathlib.Path and raw text (preprocessed
    into OUT/corpus.h5, the same corpus mpidwe.preprocess makes); its errors name the
    keywords (resume='auto', force=True) and mpidwe.train, not the flags or fit."""
    from mpidwe.synth import write_demo
    from mpidwe.core.config import SynthConfig

    write_demo(SynthConfig(output=str(tmp_path / "demo"), tokens=30_000, seed=4))
    text = tmp_path / "demo" / "demo.txt"
    corpus = mpidwe.preprocess(text, output=tmp_path / "corpus.h5", log=None)
    assert corpus == str(tmp_path / "corpus.h5")
    vecs = mpidwe.train(corpus=text, out=tmp_path / "run", dim=8, threads=1, epochs=1, progress=False, log=None)
    with Corpus(str(tmp_path / "run" / "corpus.h5")) as made, Corpus(corpus) as direct:
        assert made.corpus_id == direct.corpus_id and made.words == vecs.words
    assert vecs.run_dir == str(tmp_path / "run") and len(vecs) > 100
    # again into the same folder: refused in Python's words
    with pytest.raises(InputError) as e:
        mpidwe.train(corpus=text, out=tmp_path / "run", dim=8, threads=1, progress=False, log=None)
    assert "continue it with resume='auto', start over with force=True" in str(e.value), e.value
    with pytest.raises(ConfigError, match=r"dim must be an integer, got '8' \(str\) in mpidwe.train\(\) arguments"):
        mpidwe.train(corpus=text, out=tmp_path / "r2", dim="8")
    with pytest.raises(ConfigError, match="min_count must be"):
        mpidwe.preprocess(text, output=tmp_path / "c2.h5", min_count=-1, log=None)
    # resumed with the keywords alone: the checkpoint's settings, two epochs in all
    more = mpidwe.train(corpus=text, out=tmp_path / "run", resume="auto", epochs=2, threads=1, progress=False,
                        log=None)
    assert more.dim == 8 and more.result.words_total == 2 * vecs.result.words_total


def test_calling_mpidwe_train_trains_like_fit(tmp_path):
    """mpidwe.train is the module (python -m mpidwe.train) and, called, trains like fit."""
    d = make_demo_corpus(tmp_path, tokens=30_000, seed=3)
    code = f"""
import mpidwe
vecs = mpidwe.train(corpus={str(d / "corpus.h5")!r}, out={str(tmp_path / "run")!r}, dim=8, threads=1,
                    progress=False, epochs=1, log=None)
import mpidwe.train as t
assert t is mpidwe.train and callable(t) and hasattr(t, "run")
print(len(vecs), vecs.dim)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=mpi_env(),
                          cwd=str(tmp_path), timeout=180)
    assert proc.returncode == 0, proc.stderr
    back = mpidwe.load(tmp_path / "run")
    assert proc.stdout.split() == [str(len(back)), "8"]


def test_import_is_light_and_train_stays_the_module():
    code = """
import sys, mpidwe
heavy = ("numpy", "h5py", "torch", "scipy", "mpi4py", "numba")
assert not [m for m in heavy if m in sys.modules], [m for m in heavy if m in sys.modules]
assert mpidwe.load and "load" in dir(mpidwe)
assert not [m for m in heavy[1:] if m in sys.modules], [m for m in heavy if m in sys.modules]
from mpidwe import train
import mpidwe.train as t
assert train is t and hasattr(t, "run") and callable(mpidwe.fit)
try:
    mpidwe.nothing
except AttributeError as e:
    print(e)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=mpi_env(),
                          cwd=str(ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "has no attribute 'nothing'" in proc.stdout


def test_readme_example_runs(exported):
    """The README's Python API lines, on this run."""
    vecs = mpidwe.load(exported["run"])
    word = vecs.words[30]
    assert json.loads(json.dumps(vecs.most_similar(word, topn=5)))[0][0] in vecs
    assert vecs[word].shape == (16,) and -1 <= vecs.similarity(word, vecs.words[31]) <= 1


# -------------------------------------------------------------------- gensim's keywords
def test_gensims_keywords_are_translated_or_refused_with_mpidwes_name():
    from mpidwe.train.keywords import translate

    kw = translate(dict(vector_size=50, workers=2, window=3, negative=7, sg=0, epochs=2, alpha=0.05,
                        min_alpha=0.0005, sample=1e-3, seed=9, min_count=2, max_final_vocab=100,
                        corpus_file="t.txt", min_n=2, max_n=4, bucket=1000))
    assert kw.train == dict(dim=50, threads=2, window=3, negative=7, model="cbow", epochs=2, lr=0.05,
                            min_lr_ratio=pytest.approx(0.01), sample=1e-3, seed=9, corpus="t.txt", minn=2,
                            maxn=4, buckets=1000)
    assert kw.text == dict(min_count=2, max_vocab=100) and kw.sentences is None
    assert translate(dict(sg=1, hs=1, negative=0)).train == dict(model="skipgram", loss="hs")
    assert translate(dict(size=8, iter=3, hs=0)).train == dict(dim=8, epochs=3, loss="ns")
    refused = {
        "vector_size=5 and dim=6 both set dim": dict(vector_size=5, dim=6),
        "hs=1 with negative=5: mpidwe trains one output layer": dict(hs=1, negative=5),
        "negative=0 leaves no output layer: give hs=1": dict(negative=0),
        "takes no output=: use out": dict(output="x"),
        "takes no max_vocab_size=: use max_vocab": dict(max_vocab_size=10),
        "takes no binary=: use .*export --format word2vec-binary": dict(binary=True),
        "unknown option.*vectr_size; did you mean vector_size": dict(vectr_size=5),
        "sg must be 0 or 1": dict(sg=2),
        "sentences= and corpus_file= both give the corpus": dict(sentences=[["a"]], corpus_file="t"),
    }
    for message, options in refused.items():
        with pytest.raises(ConfigError, match=message):
            translate(options)


def _sentences(n=600, seed=0):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(40)]
    return [[words[j] for j in rng.integers(0, 40, 10)] for _ in range(n)] + [["Once", "only"]]


def test_train_on_sentences_with_gensims_names(tmp_path):
    """sentences= (token lists, as gensim's Word2Vec takes) become the run's corpus, with
    min_count applied and the tokens kept as written; gensim's names set the options."""
    sentences = _sentences()
    vecs = mpidwe.train(sentences=iter(sentences), out=tmp_path / "run", vector_size=12, workers=1, window=3,
                        min_count=2, sg=0, epochs=1, seed=4, progress=False, log=None)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["dim"], config["threads"], config["window"], config["model"], config["seed"]) == \
        (12, 1, 3, "cbow", 4)
    assert sorted(vecs.words) == sorted({w for s in sentences[:-1] for w in s})    # "Once" < min_count
    with Corpus(str(tmp_path / "run" / "corpus.h5")) as corpus:
        assert corpus.counts.sum() == sum(len(s) for s in sentences[:-1])
    assert [p.name for p in tmp_path.joinpath("run").iterdir() if p.name.startswith(".sentences")] == []
    # into the same folder again: refused before its corpus is rebuilt from other sentences
    made = (tmp_path / "run" / "corpus.h5").stat().st_mtime_ns
    with pytest.raises(InputError, match="already holds a run; continue it with resume='auto'"):
        mpidwe.train(sentences=[["other", "words"]] * 50, out=tmp_path / "run", min_count=1, log=None)
    assert (tmp_path / "run" / "corpus.h5").stat().st_mtime_ns == made
    with pytest.raises(ConfigError, match=r"sentences\[1\] holds the token 'a b'"):
        mpidwe.train(sentences=[["x"], ["a b"]], out=tmp_path / "r2", log=None)
    with pytest.raises(ConfigError, match="min_count build a corpus from text"):
        mpidwe.train(corpus=tmp_path / "run" / "corpus.h5", out=tmp_path / "r3", min_count=3, log=None)


def test_raw_text_that_wants_normalising_gets_a_hint_and_the_choice(tmp_path):
    """corpus_file= raw WikiExtractor text: a hint names strip_doc_tags and lowercase; given
    them (or normalize='text8'), <doc tags are gone and The and the are one word."""
    lines = []
    for d in range(30):
        lines.append(f'<doc id="{d}" url="x" title="T{d}">')
        lines += [" ".join(s) + " The end ." for s in _sentences(20, seed=d)[:-1]] + ["the end", "</doc>"]
    text = tmp_path / "wiki.txt"
    text.write_text("\n".join(lines) + "\n")
    said = []
    vecs = mpidwe.train(corpus_file=text, out=tmp_path / "raw", dim=8, threads=1, epochs=1, progress=False,
                        log=said.append)
    hint = [line for line in said if line.startswith("hint:")]
    assert len(hint) == 1 and "doc tags and mixed case" in hint[0], said
    assert "strip_doc_tags=True" in hint[0] and "lowercase=True" in hint[0]
    assert "<doc" in vecs and "The" in vecs and "the" in vecs
    said.clear()
    vecs = mpidwe.train(corpus_file=text, out=tmp_path / "clean", dim=8, threads=1, epochs=1, progress=False,
                        strip_doc_tags=True, lowercase=True, log=said.append)
    assert not [line for line in said if line.startswith("hint:")]
    assert "<doc" not in vecs and "The" not in vecs and "the" in vecs
    vecs = mpidwe.train(corpus_file=text, out=tmp_path / "text8", dim=8, threads=1, epochs=1, progress=False,
                        normalize="text8", log=None)
    assert "The" not in vecs and "the" in vecs and "w1" not in vecs and "w" in vecs


# -------------------------------------------------------------------- the rest of KeyedVectors
def test_the_rest_of_keyedvectors_matches_gensim(exported, tmp_path):
    """n_similarity, vector_size, fill_norms/norms, get_normed_vectors, most_similar_to_given,
    words_closer_than, save/load and add_vectors, asked of both on the same vectors."""
    gensim = pytest.importorskip("gensim")
    kv = gensim.models.KeyedVectors.load_word2vec_format(exported["binary"], binary=True)
    vecs = mpidwe.load(exported["run"])
    w = vecs.words
    assert vecs.vector_size == kv.vector_size == 16
    for ws1, ws2 in [([w[1], w[2]], [w[3]]), ([w[10], w[20], w[30]], [w[11], w[500]]), ([w[4]], [w[4]])]:
        assert vecs.n_similarity(ws1, ws2) == pytest.approx(float(kv.n_similarity(ws1, ws2)), abs=1e-6)
    with pytest.raises(ZeroDivisionError):
        vecs.n_similarity([], [w[1]])
    assert vecs.norms is None
    vecs.fill_norms()
    kv.fill_norms()
    np.testing.assert_allclose(vecs.norms, kv.norms, rtol=1e-6)
    np.testing.assert_allclose(vecs.get_normed_vectors(), kv.get_normed_vectors(), rtol=1e-5, atol=1e-7)
    for key, keys in [(w[5], [w[6], w[7], w[300], w[8]]), (w[40], [w[41], w[42], w[43]])]:
        assert vecs.most_similar_to_given(key, keys) == kv.most_similar_to_given(key, keys)
    assert vecs.words_closer_than(w[3], w[40]) == kv.closer_than(w[3], w[40])
    # save / load: word2vec binary, read by gensim and by both loaders, exactly
    vecs.save(tmp_path / "saved.bin")
    back = mpidwe.WordVectors.load(tmp_path / "saved.bin")
    assert back.words == vecs.words
    np.testing.assert_array_equal(back.vectors, vecs.vectors)
    np.testing.assert_array_equal(mpidwe.load(tmp_path / "saved.bin").vectors, vecs.vectors)
    np.testing.assert_array_equal(
        gensim.models.KeyedVectors.load_word2vec_format(str(tmp_path / "saved.bin"), binary=True).vectors,
        vecs.vectors)
    # add_vectors: new words appended, known ones kept unless replace, queries see them
    rng = np.random.default_rng(1)
    new = rng.normal(size=(3, 16)).astype(np.float32)
    keys = ["brand-new", w[2], "other-new"]
    before = vecs.vectors.copy()
    vecs.add_vectors(keys, new)
    kv.add_vectors(keys, new)
    assert vecs.index_to_key == kv.index_to_key and vecs.key_to_index == kv.key_to_index
    np.testing.assert_array_equal(vecs.vectors, kv.vectors)
    np.testing.assert_array_equal(vecs[w[2]], before[2])
    assert vecs.counts[-2:].tolist() == [0, 0] and len(vecs.counts) == len(vecs)
    assert vecs.most_similar(positive=new[0], topn=1) == [("brand-new", pytest.approx(1.0, abs=1e-6))]
    vecs.add_vectors(w[2], new[1], replace=True)
    kv.add_vectors(w[2], new[1], replace=True)
    np.testing.assert_array_equal(vecs[w[2]], kv[w[2]])
    assert vecs.similarity(w[2], "brand-new") == pytest.approx(float(kv.similarity(w[2], "brand-new")), abs=1e-6)
    np.testing.assert_array_equal(mpidwe.load(exported["run"]).vectors, before)      # the checkpoint untouched
    with pytest.raises(ValueError, match=r"2 words need a \(2, 16\) array"):
        vecs.add_vectors(["a", "b"], np.ones((3, 16)))


def test_an_unknown_capitalised_word_gets_the_lowercase_hint(exported):
    vecs = mpidwe.load(exported["run"])
    word = vecs.words[5]
    assert word == word.lower() and word.capitalize() not in vecs
    with pytest.raises(KeyError, match=rf"word not in vocabulary: '{word.capitalize()}'.*did you mean '{word}'\?"):
        vecs[word.capitalize()]
    with pytest.raises(KeyError) as e:
        vecs["zzz-no-such"]
    assert "did you mean" not in str(e.value)
