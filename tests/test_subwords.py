"""fastText's subword hashing: fixed examples taken from fastText 0.9.2 itself
(``model.get_subwords`` with minn 3, maxn 6, bucket 2,000,000), the numba table against the
plain Python one, and (when fasttext is installed) against fastText on a whole vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from mpidwe.core.subwords import build_table, char_ngrams, fnv1a, ngram_buckets

# fastText 0.9.2: get_subwords(w) ids minus nwords, for a model with bucket=2000000
FASTTEXT = {
    "where": (["<wh", "<whe", "<wher", "<where", "whe", "wher", "where", "where>", "her", "here", "here>",
               "ere", "ere>", "re>"],
              [167652, 989715, 1526707, 1071586, 420941, 312621, 969176, 121234, 1473420, 1540811, 114991,
               1529033, 1568469, 867498]),
    "café": (["<ca", "<caf", "<café", "<café>", "caf", "café", "café>", "afé", "afé>", "fé>"],
             [916747, 1991831, 794639, 17187, 369661, 454601, 761685, 960362, 1966012, 1609697]),
    "日本": (["<日本", "<日本>", "日本>"], [758587, 1313759, 196157]),
}


def test_fnv1a_is_fasttexts_hash_with_signed_bytes():
    assert fnv1a(b"") == 2166136261
    assert fnv1a("<wh".encode()) == 1048167652          # 1048167652 % 2e6 = 167652 (fastText)
    # 'é' is 0xC3 0xA9: xored as sign-extended chars, as fastText's int8_t cast does
    assert fnv1a("é>".encode()) == 4247996781
    unsigned = 2166136261
    for b in "é>".encode():
        unsigned = ((unsigned ^ b) * 16777619) & 0xFFFFFFFF
    assert unsigned != fnv1a("é>".encode())


@pytest.mark.parametrize("word", sorted(FASTTEXT))
def test_ngrams_and_buckets_match_fasttext(word):
    grams, buckets = FASTTEXT[word]
    assert char_ngrams(word, 3, 6) == grams
    assert ngram_buckets(word, 3, 6, 2_000_000) == buckets


def test_table_matches_the_python_ngrams_and_averages_rows():
    words = ["where", "café", "日本", "a", "the", "ab", "naïveté", "zürich"]
    for minn, maxn in [(3, 6), (1, 3), (2, 2), (4, 5)]:
        t = build_table(words, minn, maxn, 997)
        assert t.rows == len(words) + 997
        for w, word in enumerate(words):
            row = t.ids[t.ptr[w]:t.ptr[w + 1]]
            assert row[0] == w
            assert row[1:].tolist() == [len(words) + b for b in ngram_buckets(word, minn, maxn, 997)]
    # minn 1: single characters, but never a lone boundary mark
    assert char_ngrams("ab", 1, 1) == ["a", "b"]
    t = build_table(words, 3, 6, 997)
    w_in = np.random.default_rng(0).random((t.rows, 4), dtype=np.float32)
    vecs = t.word_vectors(w_in)
    for w in range(len(words)):
        np.testing.assert_allclose(vecs[w], w_in[t.ids[t.ptr[w]:t.ptr[w + 1]]].mean(0), rtol=1e-6)
    index = {w: i for i, w in enumerate(words)}
    np.testing.assert_allclose(t.vector(w_in, "where", index), vecs[0], rtol=1e-6)
    oov = t.vector(w_in, "wheres", index)
    rows = len(words) + np.array(ngram_buckets("wheres", 3, 6, 997))
    np.testing.assert_allclose(oov, w_in[rows].mean(0), rtol=1e-6)


def test_table_matches_fasttext_on_a_vocabulary(tmp_path):
    fasttext = pytest.importorskip("fasttext")
    text = tmp_path / "t.txt"
    text.write_text("the cat sat on the mat\nthe dog ate a café naïve 日本語 word zürich\n" * 20)
    m = fasttext.train_unsupervised(str(text), model="skipgram", minCount=1, dim=4, epoch=1, minn=3, maxn=6,
                                    bucket=5000, thread=1, verbose=0)
    words = [w for w in m.words if w != "</s>"]        # fastText's sentence end has no subwords
    t = build_table(m.words, 3, 6, 5000)
    for word in words:
        w = m.get_word_id(word)
        assert t.ids[t.ptr[w]:t.ptr[w + 1]].tolist() == m.get_subwords(word)[1].tolist(), word
    # an unseen word: fastText's vector is the mean of its n-gram rows
    unseen = "catdog"
    _, ids = m.get_subwords(unseen)
    assert (len(m.words) + np.array(ngram_buckets(unseen, 3, 6, 5000))).tolist() == ids.tolist()
    w_in = m.get_input_matrix()
    np.testing.assert_allclose(t.vector(w_in, unseen), m.get_word_vector(unseen), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t.word_vectors(w_in)[m.get_word_id("café")], m.get_word_vector("café"),
                               rtol=1e-5, atol=1e-6)


KERNEL_WORDS = [f"{a}{b}" for a in ("pre", "un", "re", "dis") for b in ("form", "do", "act", "play", "cover",
                                                                         "tie", "set", "mark", "view", "lock")]


@pytest.mark.parametrize("model,shared", [("skipgram", False), ("skipgram", True), ("cbow", False)])
@pytest.mark.parametrize("loss", ["ns", "hs"])
def test_numba_subwords_match_reference(model, shared, loss):
    from mpidwe.core.huffman import build_tree
    from mpidwe.kernels import cpu, reference
    from test_kernels import make_state, run, zipf_corpus

    tokens, starts, counts = zipf_corpus(1200, seed=3)
    table = build_table(KERNEL_WORDS, 3, 5, 60)
    sub = (table.ptr, table.ids)
    hs = build_tree(counts).tables() if loss == "hs" else None
    states = []
    for _ in range(2):
        st = make_state()
        extra = make_state(seed=9, vocab=60)
        st["w_in"] = np.concatenate([st["w_in"], extra["w_in"]])
        st["touched_in"] = np.zeros(len(st["w_in"]), np.uint8)
        states.append(st)
    fast, slow = states
    got = run(cpu, fast, tokens, starts, counts, model=model, shared=shared, hs=hs, subwords=sub)
    want = run(reference, slow, tokens, starts, counts, model=model, shared=shared, hs=hs, subwords=sub)
    assert got[1] == want[1] > 0
    assert got[0] == pytest.approx(want[0], rel=1e-4)
    assert np.array_equal(fast["rng_state"], slow["rng_state"])
    for name in ("touched_in", "touched_out"):
        assert np.array_equal(fast[name], slow[name]), name
    assert fast["touched_in"][40:].sum() > 20          # bucket rows were trained
    for name in ("w_in", "w_out"):
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-4, atol=2e-6, err_msg=name)
    # without subwords the same draws give other parameters (the inputs differ)
    plain = make_state()
    run(cpu, plain, tokens, starts, counts, model=model, shared=shared, hs=hs)
    assert np.array_equal(plain["rng_state"], fast["rng_state"])
    assert not np.allclose(plain["w_out"], fast["w_out"])
