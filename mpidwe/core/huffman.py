"""word2vec's Huffman tree for hierarchical softmax, built from the word counts.

Pure and derived: every rank rebuilds the same tree from the corpus counts at every start
(never stored). The tree has V leaves (the words) and V - 1 inner nodes; inner node ``n``
owns row ``n`` of the output matrix, which keeps word2vec's (and gensim's) [V, dim] shape:
the last row is never used.

A word's path runs from the root down to its leaf: ``points[w, :lengths[w]]`` are the inner
nodes on the way (the root, V - 2, first) and ``codes[w, j]`` is the branch taken at
``points[w, j]`` (1 for the second-smaller child, as word2vec). Hierarchical softmax trains
``sigma(h . out[points[w, j]])`` towards ``1 - codes[w, j]``.

The construction is word2vec.c's ``CreateBinaryTree`` (two pointers over the counts sorted
in descending order; on a tie the inner node is taken first), so the paths are word2vec's own for
a vocabulary sorted as word2vec sorts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HuffmanTree:
    codes: np.ndarray      # uint8 [V, L]: branch bits, root first (padding 0)
    points: np.ndarray     # int32 [V, L]: inner-node ids on the path, root first (padding 0)
    lengths: np.ndarray    # int32 [V]: path length per word

    @property
    def vocab_size(self) -> int:
        return len(self.lengths)

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(codes, points, lengths), the kernels' ``hs`` argument."""
        return self.codes, self.points, self.lengths


def build_tree(counts) -> HuffmanTree:
    """The Huffman tree of ``counts`` (any order: words are sorted by descending count with a
    stable sort, so a vocabulary already in that order is used as is)."""
    counts = np.asarray(counts, dtype=np.int64)
    v = len(counts)
    if v < 2:
        raise ValueError(f"hierarchical softmax needs at least 2 words, got {v}")
    order = np.argsort(-counts, kind="stable")          # position -> word id
    weight = np.empty(2 * v - 1, dtype=np.int64)
    weight[:v] = counts[order]
    parent = np.zeros(2 * v - 1, dtype=np.int64)
    binary = np.zeros(2 * v - 1, dtype=np.uint8)
    leaf, node = v - 1, v                              # smallest unused leaf / inner node
    for a in range(v - 1):
        picked = []
        for _ in range(2):
            if leaf >= 0 and (node >= v + a or weight[leaf] < weight[node]):
                picked.append(leaf)
                leaf -= 1
            else:
                picked.append(node)
                node += 1
        weight[v + a] = weight[picked[0]] + weight[picked[1]]
        parent[picked[0]] = parent[picked[1]] = v + a
        binary[picked[1]] = 1
    root = 2 * v - 2
    paths = []
    for pos in range(v):
        bits, nodes, b = [], [], pos
        while b != root:
            bits.append(binary[b])
            b = parent[b]
            nodes.append(b - v)
        paths.append((bits[::-1], nodes[::-1]))
    longest = max(len(p[0]) for p in paths)
    codes = np.zeros((v, longest), dtype=np.uint8)
    points = np.zeros((v, longest), dtype=np.int32)
    lengths = np.zeros(v, dtype=np.int32)
    for pos, (bits, nodes) in enumerate(paths):
        w = order[pos]
        codes[w, :len(bits)] = bits
        points[w, :len(nodes)] = nodes
        lengths[w] = len(bits)
    return HuffmanTree(codes, points, lengths)
