"""Vectors files and ``python -m mpidwe.evaluate`` on tiny generated data."""

import json

import h5py
import numpy as np
import pytest

from mpidwe.core.errors import InputError
from mpidwe.evaluate import cli
from mpidwe.evaluate.sppmi import ReferenceSpec, reference_embedding
from mpidwe.io.vectors import load_vectors, read_word2vec, write_word2vec

from test_pip import make_corpus

WORDS = ["the", "café", "naïve", "x_y", "日本"]


def random_vectors(n=len(WORDS), d=7, seed=0):
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


# ------------------------------------------------------------------------ vectors files
@pytest.mark.parametrize("binary", [True, False])
def test_word2vec_round_trip(tmp_path, binary):
    vecs = random_vectors()
    path = str(tmp_path / "v.w2v")
    write_word2vec(path, WORDS, vecs, binary=binary)
    words, got = load_vectors(path)
    assert words == WORDS and got.dtype == np.float32
    np.testing.assert_array_equal(got, vecs)
    assert [p.name for p in tmp_path.iterdir()] == ["v.w2v"]  # no temporary left behind


def test_write_escapes_whitespace_inside_words(tmp_path):
    """A finished run is never lost to an export error: whitespace inside a word is written
    as a visible \\uXXXX escape, so the file keeps one word per token."""
    write_word2vec(str(tmp_path / "v"), ["a b"], np.zeros((1, 2)))
    assert (tmp_path / "v").read_text(encoding="utf-8").splitlines()[1].split()[0] == "a\\u0020b"


@pytest.mark.parametrize("binary", [True, False])
def test_gensim_files_load_both_ways(tmp_path, binary):
    gensim = pytest.importorskip("gensim")
    vecs = random_vectors(d=5, seed=1)
    kv = gensim.models.KeyedVectors(5)
    kv.add_vectors(WORDS, vecs)
    theirs = str(tmp_path / "gensim.w2v")
    kv.save_word2vec_format(theirs, binary=binary)
    words, got = read_word2vec(theirs)
    assert words == WORDS
    np.testing.assert_allclose(got, vecs, rtol=1e-6)
    ours = str(tmp_path / "ours.w2v")
    write_word2vec(ours, WORDS, vecs, binary=binary)
    back = gensim.models.KeyedVectors.load_word2vec_format(ours, binary=binary)
    assert list(back.index_to_key) == WORDS
    np.testing.assert_allclose(back.vectors, vecs, rtol=1e-6)


@pytest.mark.parametrize("text,msg", [
    ("2 3\na 1 2 3\nb 1 2\n", r"v.txt:3: expected a word and 3 numbers"),
    ("2 3\na 1 2 3\nb 1 x 3\n", r"v.txt:3: 'x' is not a number"),
    ("3 3\na 1 2 3\nb 1 2 3\n", r"v.txt:1: the header announces 3 vectors of dimension 3; the 16 bytes after it "
                                r"hold at most 2"),
    ("3 3\na 1 2 3\nb 1.0 2.0 3.0\n", r"v.txt:\d+: file ends after 2 of the 3 vectors"),
    ("1 3\na 1 2 3\nb 1 2 3\n", r"v.txt:3: more vectors than the 1"),
    ("a 1 2 3\n", r"v.txt: unknown vectors file"),
    ("", r"v.txt: unknown vectors file"),
])
def test_malformed_text_vectors(tmp_path, text, msg):
    (tmp_path / "v.txt").write_text(text)
    with pytest.raises(InputError, match=msg):
        load_vectors(str(tmp_path / "v.txt"))


def test_malformed_binary_vectors(tmp_path):
    path = tmp_path / "v.bin"
    write_word2vec(str(path), WORDS, random_vectors())
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    with pytest.raises(InputError, match=r"v.bin: entry 5 .*file ends inside the vector"):
        load_vectors(str(path))
    path.write_bytes(data.replace(b"5 7\n", b"5 6\n", 1))  # header dimension wrong
    with pytest.raises(InputError, match=r"v.bin"):
        load_vectors(str(path))
    path.write_bytes(data.replace(b"5 7\n", b"4 7\n", 1))
    with pytest.raises(InputError, match=r"data after the 4 vectors"):
        load_vectors(str(path))


def test_unknown_and_missing_vectors_files(tmp_path):
    with h5py.File(tmp_path / "ckpt.h5", "w") as f:
        f.attrs["format"] = "mpidwe-corpus"
    with pytest.raises(InputError, match="is an mpidwe corpus, not a checkpoint"):
        load_vectors(str(tmp_path / "ckpt.h5"))
    with pytest.raises(InputError, match="cannot read vectors file"):
        load_vectors(str(tmp_path / "missing.txt"))


# ------------------------------------------------------------------------------- CLI
@pytest.fixture
def planted(tmp_path):
    """Country -> capital is one fixed offset; similarity scores follow the cosines."""
    rng = np.random.default_rng(0)
    offset = rng.standard_normal(20)
    words, vecs = [], []
    for c, k in [("france", "paris"), ("italy", "rome"), ("spain", "madrid"), ("japan", "tokyo")]:
        base = 3 * rng.standard_normal(20)
        words += [c, k]
        vecs += [base, base + offset]
    for i in range(10):
        words.append(f"noise{i}")
        vecs.append(3 * rng.standard_normal(20))
    vecs = np.array(vecs, dtype=np.float32)
    vec_path = tmp_path / "vectors.txt"
    write_word2vec(str(vec_path), words, vecs, binary=False)
    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    pairs = [("france", "paris"), ("france", "italy"), ("rome", "noise3"), ("tokyo", "noise7")]
    sim = tmp_path / "sim.tsv"
    sim.write_text("".join(f"{a}\t{b}\t{10 * float(unit[words.index(a)] @ unit[words.index(b)]):.4f}\n"
                           for a, b in pairs) + "paris\tatlantis\t5\n")
    ana = tmp_path / "ana.txt"
    ana.write_text(": capital-common-countries\nFrance Paris Italy Rome\nspain madrid japan tokyo\n"
                   "italy rome france paris\nperu lima france paris\n")
    return tmp_path, str(vec_path), str(sim), str(ana)


def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_similarity_and_analogy_json(planted, capsys):
    _, vec, sim, ana = planted
    rc, out, err = run_cli(capsys, vec, "--similarity", sim, "--analogy", ana, "--analogy-method", "both", "--json")
    assert rc == 0 and err == ""
    r = json.loads(out)
    assert r["words"] == 18 and r["dim"] == 20
    (s,) = r["similarity"]
    assert s["pairs"] == 5 and s["covered"] == 4 and s["spearman"] == pytest.approx(1.0)
    assert [a["method"] for a in r["analogy"]] == ["add", "mul"]
    for a in r["analogy"]:
        assert a["questions"] == 4 and a["covered"] == 3 and a["correct"] == 3 and a["accuracy"] == 1.0
        assert a["semantic"]["accuracy"] == 1.0 and a["syntactic"]["total"] == 0
    assert r["pip"] is None and r["problems"] == []


def test_human_output(planted, capsys):
    _, vec, sim, ana = planted
    rc, out, _ = run_cli(capsys, vec, "--similarity", sim, "--analogy", ana)
    assert rc == 0
    assert "Spearman 1.0000" in out and "pairs 4/5" in out
    assert "3CosAdd  accuracy 100.00%" in out and "covered 3/4" in out


def test_vectors_may_come_after_the_options(planted, capsys):
    """--similarity and --analogy take one or more files: VECTORS after them is still
    VECTORS (argparse gave it to the list and then said VECTOR was missing)."""
    _, vec, sim, ana = planted
    rc, first, _ = run_cli(capsys, vec, "--similarity", sim, "--analogy", ana, "--json")
    assert rc == 0
    for argv in (["--similarity", sim, vec], ["--analogy", ana, "--similarity", sim, vec, "--json"],
                 ["--json", "--similarity", sim, "--analogy", ana, vec]):
        rc, out, err = run_cli(capsys, *argv)
        assert rc == 0, (argv, err)
        if "--json" in argv:
            untimed = [[{k: v for k, v in r.items() if k != "seconds"} for r in json.loads(o)["similarity"]]
                       for o in (out, first)]
            assert untimed[0] == untimed[1]            # (how long each took is not the answer)
        assert "Spearman 1.0000" in out or '"spearman": 1.0' in out
    rc, _, err = run_cli(capsys, "--similarity", sim, ana)        # two test files and no vectors: as before
    assert rc == 2 and "required: VECTOR" in err


def test_malformed_test_file_names_file_and_line(planted, capsys):
    tmp, vec, _, _ = planted
    bad = tmp / "bad.tsv"
    bad.write_text("france paris 3\nfrance italy\n")
    rc, out, err = run_cli(capsys, vec, "--similarity", str(bad))
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and "bad.tsv:2: expected 3 columns" in err


def test_malformed_vectors_file_names_file_and_line(planted, capsys):
    tmp, _, sim, _ = planted
    bad = tmp / "bad.txt"
    bad.write_text("2 3\na 1 2 3\nb 1 2\n")
    rc, out, err = run_cli(capsys, str(bad), "--similarity", sim)
    assert rc == 2 and out == ""
    assert err.splitlines() == [f"python -m mpidwe.evaluate: error: {bad}:3: expected a word and 3 numbers "
                                f"(header dimension), got 2 number(s)"]


def test_no_coverage_is_an_error_not_nan(planted, capsys):
    tmp, vec, _, ana = planted
    sim = tmp / "other.tsv"
    sim.write_text("cat\tdog\t7\ncar\tbus\t6\n")
    rc, out, err = run_cli(capsys, vec, "--similarity", str(sim), "--analogy", ana, "--restrict-vocab", "1")
    assert rc == 2 and "nan" not in out.lower()
    assert "no pairs covered" in out and "no questions covered" in out
    (line,) = err.splitlines()
    assert "other.tsv: 0 of 2 word pairs are in the vectors" in line and "ana.txt: none of the 4 questions" in line
    rc, out, err = run_cli(capsys, vec, "--similarity", str(sim), "--json")
    assert rc == 2 and json.loads(out)["similarity"][0]["spearman"] is None and len(err.splitlines()) == 1


def test_bad_options(planted, capsys):
    _, vec, _, _ = planted
    rc, _, err = run_cli(capsys, vec)
    assert rc == 2 and "nothing to evaluate" in err and len(err.splitlines()) == 1
    rc, _, err = run_cli(capsys, vec, "--analogy-method", "sum", "--analogy", "x")
    assert rc == 2 and "invalid choice" in err


def test_pip_against_the_reference(tmp_path, capsys):
    corpus = make_corpus(tmp_path)
    spec = ReferenceSpec(window=3, negatives=2, dim=4, top_n=30)
    ref = reference_embedding(corpus, spec)
    # the reference itself, with its rows shuffled and two words dropped: PIP 0 on the rest
    order = np.random.default_rng(0).permutation(len(ref.words))[2:]
    vec = tmp_path / "ref.bin"
    write_word2vec(str(vec), [ref.words[i] for i in order], ref.vectors[order])
    args = [str(vec), "--pip-reference", corpus, "--window", "3", "--negative", "2", "--pip-top-n", "30"]
    rc, out, err = run_cli(capsys, *args, "--json")
    assert rc == 0, err
    p = json.loads(out)["pip"]
    assert p["reference"]["cached"] and p["reference"]["dim"] == 4
    assert p["covered"] == 28 and p["missing"] == 2
    assert sorted(p["missing_examples"]) == sorted(ref.words[i] for i in np.random.default_rng(0).permutation(30)[:2])
    assert p["pip"] == pytest.approx(0, abs=1e-5 * p["norm"])
    # noise vectors: a real loss, against a new reference of their dimension
    noise = random_vectors(n=30, d=3, seed=3)
    write_word2vec(str(vec), ref.words, noise)
    rc, out, err = run_cli(capsys, *args, "--pip-dim", "3")
    assert rc == 0, err
    assert "computing the SPPMI reference" in err and "reference: SPPMI window 3, k 2, top 30, dimension 3" in out
    rc, out, _ = run_cli(capsys, *args, "--json")
    p = json.loads(out)["pip"]
    assert p["reference"]["cached"] and p["dim"] == 3 and p["reference_dim"] == 3
    e2 = reference_embedding(corpus, ReferenceSpec(window=3, negatives=2, dim=3, top_n=30)).vectors
    from mpidwe.evaluate.pip import pip_loss_dense
    assert p["pip"] == pytest.approx(pip_loss_dense(noise, e2), rel=1e-6)
    # vectors whose dimension differs from the requested reference's are refused
    write_word2vec(str(vec), ref.words, random_vectors(n=30, d=6, seed=3))
    rc, out, err = run_cli(capsys, *args, "--pip-dim", "3")
    assert rc == 2 and "has dimension 6" in err and "--pip-dim" in err


def test_pip_without_common_words(tmp_path, capsys):
    corpus = make_corpus(tmp_path)
    vec = tmp_path / "v.txt"
    write_word2vec(str(vec), ["zz", "yy"], random_vectors(n=2, d=3), binary=False)
    rc, out, err = run_cli(capsys, str(vec), "--pip-reference", corpus, "--pip-dim", "3", "--no-pip-cache")
    assert rc == 2 and out == ""
    assert err.strip().endswith("none of the 40 reference words of " + corpus + " is in the vectors (PIP needs "
                                "the same words)")


def test_pip_refuses_vectors_of_another_dimension(tmp_path):
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import PreprocessConfig
    from mpidwe.io.vectors import write_word2vec
    from mpidwe.preprocess import run as preprocess

    from conftest import run_py

    (tmp_path / "t.txt").write_text("a b c d e f g h a b c d a b a\n" * 40)
    preprocess(PreprocessConfig(inputs=(str(tmp_path / "t.txt"),), output=str(tmp_path / "c.h5"), min_count=1),
               Comm.serial(), log=None)
    write_word2vec(str(tmp_path / "v.txt"), list("abcdefgh"), np.ones((8, 3), np.float32), binary=False)
    proc = run_py(["-m", "mpidwe.evaluate", str(tmp_path / "v.txt"), "--pip-reference", str(tmp_path / "c.h5"),
                   "--pip-dim", "2"])
    assert proc.returncode == 2 and "dimension 3" in proc.stderr and proc.stderr.count("error") == 1


# ------------------------------------------------- nan / inf rows (issue 15, item 8)
@pytest.mark.parametrize("binary", [True, False])
def test_nonfinite_rows_are_skipped_and_reported(planted, capsys, binary):
    tmp, vec, sim, ana = planted
    words, vecs = load_vectors(vec)
    vecs[words.index("noise0")] = np.nan   # would be everybody's nearest neighbour
    vecs[words.index("noise1"), 2] = np.inf
    bad = str(tmp / "bad.w2v")
    write_word2vec(bad, words, vecs, binary=binary)
    assert np.isnan(load_vectors(bad)[1]).any()  # the reader keeps the rows (and their order)
    rc, out, err = run_cli(capsys, bad, "--similarity", sim, "--analogy", ana, "--analogy-method", "both",
                           "--json")
    assert rc == 0, err
    (line,) = err.splitlines()
    assert "warning" in line and bad in line and "2 of 18" in line and "nan or inf" in line
    r = json.loads(out)
    assert r["nonfinite_skipped"] == 2
    for a in r["analogy"]:
        assert a["covered"] == 3 and a["accuracy"] == 1.0
    s = r["similarity"][0]
    assert s["covered"] == 4 and s["spearman"] == pytest.approx(1.0)
    rc, out, err = run_cli(capsys, bad, "--analogy", ana)
    assert rc == 0 and "2 with nan or inf skipped" in out and "accuracy 100.00%" in out


def test_all_nonfinite_vectors_are_refused(planted, capsys):
    tmp, _, sim, ana = planted
    bad = tmp / "nan.txt"
    write_word2vec(str(bad), ["a", "b", "c"], np.full((3, 4), np.nan, np.float32), binary=False)
    with pytest.raises(InputError, match="nan or inf"):
        load_vectors(str(bad))
    rc, out, err = run_cli(capsys, str(bad), "--similarity", sim, "--analogy", ana)
    assert rc == 2 and out == ""
    assert err.splitlines() == [f"python -m mpidwe.evaluate: error: {bad}: all 3 vectors contain nan or inf "
                                f"(diverged training?): nothing to evaluate"]


# ------------------------------------------- test files that are not UTF-8 (item 11)
def test_test_files_not_utf8_are_one_line_errors(planted, capsys):
    tmp, vec, sim, _ = planted
    latin = tmp / "latin1.tsv"
    latin.write_bytes("café\tthé\t5\n".encode("latin-1"))
    rc, out, err = run_cli(capsys, vec, "--similarity", str(latin))
    assert rc == 2 and out == ""
    (line,) = err.splitlines()
    assert f"{latin}:1: not UTF-8 text" in line and "similarity" in line
    binary = tmp / "q.bin"
    binary.write_bytes(np.random.default_rng(0).bytes(3000))
    rc, out, err = run_cli(capsys, vec, "--similarity", sim, "--analogy", str(binary))
    assert rc == 2 and out == ""
    (line,) = err.splitlines()
    assert f"{binary}:" in line and "not UTF-8 text" in line and "analogy" in line


def test_a_checkpoint_file_is_evaluated(tmp_path, capsys):
    """A sealed checkpoint file (the magic of HDF5 after the seal's user block), as
    inspect, load and a run directory take it."""
    from mpidwe.io import checkpoint
    from test_checkpoint import make

    ck = make(v=12, d=5)
    path = checkpoint.save(str(tmp_path), ck)
    words, vectors = load_vectors(path)
    assert words == ck.words and np.array_equal(vectors, ck.w_in)
    sim = tmp_path / "sim.tsv"
    sim.write_text("w1\tw2\t3\nw3\tw4\t2\nw5\tw6\t1\n")
    rc, out, err = run_cli(capsys, path, "--similarity", str(sim))
    assert rc == 0, err
    assert "unknown vectors file" not in err


@pytest.mark.parametrize("binary", [False, True])
def test_a_duplicate_word_keeps_its_first_vector_with_a_warning(tmp_path, capsys, binary):
    """As gensim reads such files: the first vector of a word given twice, one warning line
    (before, both rows were kept and a word's nearest neighbour was itself)."""
    import mpidwe

    vecs = random_vectors(n=6, d=4)
    words = ["a", "b", "c", "b", "d", "a"]
    path = tmp_path / "dup.vec"
    write_word2vec(str(path), words, vecs, binary=binary)
    said = []
    got_words, got = load_vectors(str(path), said.append)
    assert got_words == ["a", "b", "c", "d"]
    assert np.array_equal(got, vecs[[0, 1, 2, 4]])
    assert len(said) == 1 and "2 duplicate word(s)" in said[0] and "'b', entries 2 and 4" in said[0]
    wv = mpidwe.load(str(path), warn=said.append)
    assert wv.words == ["a", "b", "c", "d"] and len(said) == 2
    assert wv.most_similar("b", topn=3)[0][0] != "b"
    sim = tmp_path / "sim.tsv"
    sim.write_text("a\tb\t3\nb\tc\t2\nc\td\t1\n")
    rc, out, err = run_cli(capsys, str(path), "--similarity", str(sim))
    assert rc == 0 and err.count("duplicate word(s)") == 1, err
