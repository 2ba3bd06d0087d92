"""Hierarchical softmax: the Huffman tree against a plain reference and the properties of an
optimal prefix code; the numba kernel against the numpy reference; HS learning."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from mpidwe.core.huffman import build_tree
from mpidwe.kernels import cpu, reference
from test_kernels import VARIANTS, make_state, run, zipf_corpus


def word2vec_tree(counts):
    """word2vec.c's CreateBinaryTree, transcribed line by line (counts sorted descending):
    returns {word: (codes, points)}."""
    v = len(counts)
    count = list(counts) + [10**15] * (v - 1)
    binary = [0] * (2 * v - 1)
    parent = [0] * (2 * v - 1)
    pos1, pos2 = v - 1, v
    for a in range(v - 1):
        mins = []
        for _ in range(2):
            if pos1 >= 0 and count[pos1] < count[pos2]:
                mins.append(pos1)
                pos1 -= 1
            else:
                mins.append(pos2)
                pos2 += 1
        count[v + a] = count[mins[0]] + count[mins[1]]
        parent[mins[0]] = parent[mins[1]] = v + a
        binary[mins[1]] = 1
    out = {}
    for a in range(v):
        code, point, b = [], [], a
        while True:
            code.append(binary[b])
            point.append(b)
            b = parent[b]
            if b == v * 2 - 2:
                break
        n = len(code)
        codes = [0] * n
        points = [0] * (n + 1)
        points[0] = v - 2
        for b in range(n):
            codes[n - b - 1] = code[b]
            points[n - b] = point[b] - v
        out[a] = (codes, points[:n])
    return out


def huffman_cost(counts):
    """The optimal weighted code length, by the textbook heap construction."""
    heap = [int(c) for c in counts]
    heapq.heapify(heap)
    cost = 0
    while len(heap) > 1:
        a, b = heapq.heappop(heap), heapq.heappop(heap)
        cost += a + b
        heapq.heappush(heap, a + b)
    return cost


SMALL = [25, 13, 13, 9, 7, 7, 4, 3, 1, 1]


def test_codes_and_points_match_word2vec_on_a_small_vocabulary():
    tree = build_tree(SMALL)
    want = word2vec_tree(SMALL)
    for w, (codes, points) in want.items():
        n = tree.lengths[w]
        assert tree.codes[w, :n].tolist() == codes, w
        assert tree.points[w, :n].tolist() == points, w
    # fixed by hand from the construction: the most frequent word sits one node below the
    # root's right child... and the two rarest share their last inner node (node 0)
    assert tree.lengths.tolist() == [2, 3, 3, 3, 3, 3, 4, 5, 6, 6]
    assert tree.points[8, 5] == tree.points[9, 5] == 0
    assert {tree.codes[8, 5], tree.codes[9, 5]} == {0, 1}


def test_tree_is_an_optimal_prefix_code_in_any_vocabulary_order():
    rng = np.random.default_rng(4)
    counts = rng.integers(1, 1000, size=300)
    tree = build_tree(counts)
    v = len(counts)
    assert int((tree.lengths * counts).sum()) == huffman_cost(counts)
    paths = {tuple(tree.codes[w, :tree.lengths[w]]) for w in range(v)}
    assert len(paths) == v                                                  # distinct
    assert sum(2.0 ** -int(n) for n in tree.lengths) == pytest.approx(1.0)  # full tree (Kraft)
    assert (tree.points[:, 0] == v - 2).all()                                # root first
    for w in range(v):     # every (node, branch) leads to one child: a consistent tree
        n = tree.lengths[w]
        assert tree.points[w, :n].max() <= v - 2 and len(set(tree.points[w, :n])) == n
    # a sorted vocabulary gives the same paths as word2vec's own construction
    order = np.argsort(-counts, kind="stable")
    want = word2vec_tree(counts[order])
    for pos, w in enumerate(order):
        assert tree.codes[w, :tree.lengths[w]].tolist() == want[pos][0]


def test_tree_refuses_a_single_word():
    with pytest.raises(ValueError, match="at least 2 words"):
        build_tree([5])


@pytest.mark.parametrize("model,shared", VARIANTS)
def test_numba_hs_matches_reference(model, shared):
    tokens, starts, counts = zipf_corpus(1500, seed=1)
    hs = build_tree(counts).tables()
    fast, slow = make_state(), make_state()
    got = run(cpu, fast, tokens, starts, counts, model=model, shared=shared, hs=hs)
    want = run(reference, slow, tokens, starts, counts, model=model, shared=shared, hs=hs)
    assert got[1] == want[1] > 0 and got[2] == want[2] == len(tokens)
    assert got[0] == pytest.approx(want[0], rel=1e-4)
    assert np.array_equal(fast["rng_state"], slow["rng_state"])
    for name in ("touched_in", "touched_out"):
        assert np.array_equal(fast[name], slow[name]), name
    # the inner nodes are rows 0..V-2: the last output row is never touched
    assert fast["touched_out"][-1] == 0 and fast["touched_out"][:-1].sum() > 5
    for name in ("w_in", "w_out"):
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-4, atol=2e-6, err_msg=name)


def test_hs_draws_no_negatives_and_learns():
    """Only subsampling and window draws: the RNG advances as with negative=0, and the loss
    of a second pass over the same text is lower than the first."""
    tokens, starts, counts = zipf_corpus(3000, seed=5)
    hs = build_tree(counts).tables()
    a, b = make_state(), make_state()
    run(cpu, a, tokens, starts, counts, hs=hs, negative=9)
    run(cpu, b, tokens, starts, counts, negative=0)
    assert np.array_equal(a["rng_state"], b["rng_state"])
    # a text where each word's neighbours are fixed: the loss must fall well below its start
    cyclic = (np.arange(3000) % 40).astype(np.int32)
    state = make_state()
    losses = [run(cpu, state, cyclic, starts, counts, hs=hs, sample=0, lr0=0.1, lr_min=0.1)
              for _ in range(5)]
    per_example = [loss / n for loss, n, _ in losses]
    chance = np.log(2) * hs[2][cyclic].mean()       # every node at sigma = 1/2
    assert per_example[-1] < 0.9 * per_example[0] and per_example[-1] < 0.65 * chance


def test_hs_tables_are_checked():
    tokens, starts, counts = zipf_corpus(200, seed=1)
    codes, points, lengths = build_tree(counts).tables()
    bad = points.copy()
    bad[0, 0] = len(counts) - 1         # the unused last row is not an inner node
    with pytest.raises(ValueError, match="hs paths"):
        run(cpu, make_state(), tokens, starts, counts, hs=(codes, bad, lengths))
    with pytest.raises(ValueError, match="rows for a vocabulary"):
        run(cpu, make_state(), tokens, starts, counts, hs=(codes[:5], points[:5], lengths[:5]))


@pytest.mark.parametrize("model", ["skipgram", "cbow"])
def test_torch_hs_matches_reference_one_example_at_a_time(model):
    """Without subsampling, with window 1 and batches of one example, the torch kernel's
    examples are the reference's, in the same order: the results agree up to word2vec's
    sigmoid table (the torch kernel uses the exact sigmoid)."""
    pytest.importorskip("torch")
    from mpidwe.kernels import torch_hs

    tokens, starts, counts = zipf_corpus(400, seed=7)
    hs = build_tree(counts).tables()
    fast, slow = make_state(), make_state()
    kw = dict(model=model, sample=0.0, window=1, lr0=0.1, lr_min=0.1)
    got = run(torch_hs, fast, tokens, starts, counts, batch_size=1, hs=hs, **kw)
    want = run(reference, slow, tokens, starts, counts, hs=hs, **kw)
    assert got[1] == want[1] > 100
    assert got[0] == pytest.approx(want[0], rel=2e-2)
    for name in ("touched_in", "touched_out"):
        assert np.array_equal(fast[name], slow[name]), name
    for name in ("w_in", "w_out"):
        moved = np.abs(slow[name] - make_state()[name]).max()
        assert moved > 1e-3
        np.testing.assert_allclose(fast[name], slow[name], atol=0.06 * moved, err_msg=name)
