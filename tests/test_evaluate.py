import numpy as np
import pytest

from mpidwe.core.errors import InputError
from mpidwe.evaluate import evaluate_analogies, evaluate_similarity, read_analogies, read_similarity


def planted_embeddings():
    """Words on known directions: country->capital is one fixed offset."""
    rng = np.random.default_rng(0)
    countries = ["france", "italy", "spain", "japan", "peru"]
    capitals = ["paris", "rome", "madrid", "tokyo", "lima"]
    offset = rng.standard_normal(50)
    vecs, words = [], []
    for c, k in zip(countries, capitals):
        base = rng.standard_normal(50) * 3
        vecs += [base, base + offset]
        words += [c, k]
    for i in range(40):
        vecs.append(rng.standard_normal(50) * 3)
        words.append(f"noise{i}")
    return np.array(vecs, dtype=np.float32), {w: i for i, w in enumerate(words)}


def test_analogies_on_planted_offsets(tmp_path):
    vecs, index = planted_embeddings()
    f = tmp_path / "q.txt"
    f.write_text(": capital-common-countries\nFrance Paris Italy Rome\nspain madrid japan tokyo\n"
                 "peru lima france paris\nperu lima atlantis nowhere\n"
                 ": gram1-adjective-to-adverb\nparis france rome italy\n")
    sections = read_analogies(str(f))
    for method in ("add", "mul"):
        r = evaluate_analogies(vecs, index, sections, method=method)
        assert r["questions"] == 5 and r["covered"] == 4
        assert r["semantic"]["accuracy"] == 1.0 and r["syntactic"]["accuracy"] == 1.0
        assert r["accuracy"] == 1.0
    # restricting the search to the first 4 words keeps only the questions made of them
    r = evaluate_analogies(vecs, index, sections, restrict_vocab=4)
    assert r["covered"] == 2 and r["accuracy"] == 1.0


def test_analogy_answer_excludes_question_words():
    # d == b would win 3CosAdd if b were not excluded
    vecs = np.array([[1, 0], [1, 0.01], [0.9, 0.1], [0, 1]], dtype=np.float32)
    index = {"a": 0, "b": 1, "c": 2, "d": 3}
    r = evaluate_analogies(vecs, index, [("s", [("a", "b", "c", "d")])])
    assert r["correct"] == 1


def test_similarity_spearman_and_coverage(tmp_path):
    vecs = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0]], dtype=np.float32)
    index = {"a": 0, "b": 1, "c": 2, "d": 3}
    f = tmp_path / "sim.tsv"
    f.write_text("# comment\nA\tb\t9\na c 5\na\td\t0\na\tzzz\t3\n")
    r = evaluate_similarity(vecs, index, read_similarity(str(f)))
    assert r["covered"] == 3 and r["pairs"] == 4 and r["spearman"] == pytest.approx(1.0)
    r = evaluate_similarity(vecs, {}, read_similarity(str(f)))
    assert r["covered"] == 0 and r["spearman"] is None


@pytest.mark.parametrize("text,msg", [("a b\n", ":1: expected 3 columns"), ("a b c\n", "not a number"),
                                      ("# only\n", "no word pairs")])
def test_bad_similarity_files(tmp_path, text, msg):
    f = tmp_path / "s.tsv"
    f.write_text(text)
    with pytest.raises(InputError, match=msg):
        read_similarity(str(f))


def test_bad_analogy_files(tmp_path):
    f = tmp_path / "q.txt"
    f.write_text(": s\na b c d\na b c\n")
    with pytest.raises(InputError, match=r"q.txt:3: expected 4 words"):
        read_analogies(str(f))
    with pytest.raises(InputError, match="cannot read"):
        read_analogies(str(tmp_path / "missing.txt"))


def test_google_questions_file_parses():
    from conftest import SHARED_DATA

    path = SHARED_DATA / "questions-words.txt"
    if not path.exists():
        pytest.skip("shared data not present")
    sections = read_analogies(str(path))
    assert len(sections) == 14 and sum(len(q) for _, q in sections) == 19544


# ------------------------------------------------- nan / inf rows (issue 15, item 8)
def test_nonfinite_rows_are_out_of_vocabulary_for_analogies():
    vecs, index = planted_embeddings()
    vecs[index["noise0"], 3] = np.nan   # a NaN row must not be the nearest neighbour of everything
    vecs[index["noise1"], :] = np.inf
    vecs[index["japan"], 0] = -np.inf   # a question using it is not covered, the others still score
    sections = [("capital-common-countries", [("france", "paris", "italy", "rome"),
                                              ("spain", "madrid", "peru", "lima"),
                                              ("spain", "madrid", "japan", "tokyo")])]
    for method in ("add", "mul"):
        r = evaluate_analogies(vecs, index, sections, method=method)
        assert r["covered"] == 2 and r["correct"] == 2 and r["accuracy"] == 1.0, method
        assert r["sections"]["capital-common-countries"]["accuracy"] == 1.0


def test_nonfinite_rows_are_out_of_vocabulary_for_similarity():
    vecs = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0], [np.nan, 0], [np.inf, 1]], dtype=np.float32)
    index = {"a": 0, "b": 1, "c": 2, "d": 3, "n": 4, "i": 5}
    pairs = [("a", "b", 9), ("a", "c", 5), ("a", "d", 0), ("a", "n", 7), ("i", "b", 1)]
    r = evaluate_similarity(vecs, index, pairs)
    assert r["covered"] == 3 and r["spearman"] == pytest.approx(1.0)


# ------------------------------------------- test files that are not UTF-8 (item 11)
def test_similarity_file_not_utf8(tmp_path):
    f = tmp_path / "s.tsv"
    f.write_bytes("tea\tcoffee\t7\ncafé\tthé\t5\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"s.tsv:2: not UTF-8 text") as e:
        read_similarity(str(f))
    assert "\n" not in str(e.value)


def test_analogy_file_not_utf8(tmp_path):
    f = tmp_path / "q.txt"
    f.write_bytes(b": s\na b c d\n" * 2000 + "é f g h\n".encode("latin-1"))  # past the first read buffer
    with pytest.raises(InputError, match=r"q.txt:4001: not UTF-8 text"):
        read_analogies(str(f))
    f.write_bytes(bytes(range(256)) * 4)  # a binary file
    with pytest.raises(InputError, match=r"q.txt:\d+: not UTF-8 text"):
        read_analogies(str(f))


def test_evaluation_keys_tell_files_of_the_same_name_apart(tmp_path):
    """Two analogy files named alike in different folders get two metrics keys (the second
    overwrote the first); a name that is unique stays the base name."""
    from mpidwe.core.config import TrainConfig
    from mpidwe.evaluate.suite import Evaluator

    vecs, index = planted_embeddings()
    words = sorted(index, key=index.get)
    for folder, text in (("en", ": capital-common-countries\nfrance paris italy rome\n"),
                         ("de", ": capital-common-countries\nfrance paris italy nowhere\nfrance paris spain madrid\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "q.txt").write_text(text)
    (tmp_path / "sim.tsv").write_text("france italy 5\nparis rome 6\nperu lima 9\n")
    cfg = TrainConfig(eval_analogy=(str(tmp_path / "en" / "q.txt"), str(tmp_path / "de" / "q.txt")),
                      eval_sim=(str(tmp_path / "sim.tsv"),))
    out = Evaluator(cfg, words)(vecs)
    assert set(out) == {"analogy:en/q.txt", "analogy:de/q.txt", "sim:sim.tsv"}
    assert out["analogy:en/q.txt"] == 1.0 and out["analogy:de/q.txt"] == 1.0
