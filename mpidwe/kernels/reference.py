"""The SGNS / CBOW update written for reading, not speed: plain Python and numpy.

It follows the random-number contract of kernels/common.py draw for draw, so with the same
inputs the numba kernel (threads=1) must produce the same parameters up to float rounding.
Tests use it on tiny corpora; it is far too slow for anything else.
"""

from __future__ import annotations

import numpy as np

from .common import (LCG_INCREMENT, LCG_MULTIPLIER, LR_REFRESH_WORDS, MAX_EXP, SIGMOID_BIN_SCALE, check_block,
    check_hs, learning_rate, sigmoid_tables)

SIGMOID, LOSS = sigmoid_tables()
MASK64 = (1 << 64) - 1


class Lcg:
    """word2vec's generator; every draw advances the state once and reads its high bits."""

    def __init__(self, state: int):
        self.state = int(state)

    def next(self) -> int:
        self.state = (self.state * LCG_MULTIPLIER + LCG_INCREMENT) & MASK64
        return self.state

    def below(self, n: int) -> int:
        return ((self.next() >> 32) * n) >> 32

    def uniform(self) -> float:
        return (self.next() >> 40) / 2.0**24

    def negative(self, table: np.ndarray) -> int:
        scaled = (self.next() >> 32) * len(table)
        bucket = scaled >> 32
        coin = scaled & 0xFFFFFFFF
        return bucket if coin < int(table[bucket, 0]) else int(table[bucket, 1])


def gradient(score, label: int, lr: float) -> tuple[np.float32, float]:
    """(label - sigmoid(score)) * lr from word2vec's table, and -log P(label | score)."""
    score = float(score)
    if score >= MAX_EXP:
        return np.float32((label - 1) * lr), (score if label == 0 else 0.0)
    if score <= -MAX_EXP:
        return np.float32(label * lr), (-score if label == 1 else 0.0)
    i = int((score + MAX_EXP) * SIGMOID_BIN_SCALE)
    return np.float32((label - float(SIGMOID[i])) * lr), float(LOSS[label, i])


def subsample(sentence, keep_prob, rng: Lcg, raw_base: int):
    """Kept word ids and their raw offsets; a word with keep < 1 costs one draw."""
    kept, raw_pos = [], []
    for offset, word in enumerate(sentence):
        keep = keep_prob[word]
        if keep < 1.0 and rng.uniform() > keep:
            continue
        kept.append(int(word))
        raw_pos.append(raw_base + offset)
    return kept, raw_pos


def draw_negatives(rng: Lcg, negative: int, center: int, table) -> list[int]:
    """word2vec drops (does not redraw) a noise word equal to the positive word."""
    draws = [rng.negative(table) for _ in range(negative)]
    return [w for w in draws if w != center]


def update_target(h, out_row, label, grad_h, lr) -> float:
    """Score h against one output row; grad_h collects the input gradient; out_row moves."""
    g, loss = gradient(np.dot(h, out_row), label, lr)
    grad_h += g * out_row
    out_row += g * h
    return loss


def skipgram_pair(w_in, w_out, context, center, negs, lr) -> float:
    h = w_in[context]
    grad_h = np.zeros_like(h)
    loss = update_target(h, w_out[center], 1, grad_h, lr)
    for neg in negs:
        loss += update_target(h, w_out[neg], 0, grad_h, lr)
    h += grad_h
    return loss


def skipgram_window_shared(w_in, w_out, contexts, outs, lr) -> float:
    """All gradients of the window from the rows before it, then applied (pWord2Vec)."""
    labels = [1] + [0] * (len(outs) - 1)
    grads = np.zeros((len(contexts), len(outs)), dtype=np.float32)
    loss = 0.0
    for i, c in enumerate(contexts):
        for j, o in enumerate(outs):
            grads[i, j], l_ = gradient(np.dot(w_in[c], w_out[o]), labels[j], lr)
            loss += l_
    grad_in = [sum((grads[i, j] * w_out[o] for j, o in enumerate(outs)),
                   np.zeros(w_in.shape[1], np.float32)) for i in range(len(contexts))]
    for j, o in enumerate(outs):
        for i, c in enumerate(contexts):
            w_out[o] += grads[i, j] * w_in[c]
    for i, c in enumerate(contexts):
        w_in[c] += grad_in[i]
    return loss


def cbow_center(w_in, w_out, contexts, center, negs, lr) -> float:
    h = np.zeros(w_in.shape[1], np.float32)
    for c in contexts:
        h += w_in[c]
    h *= np.float32(1.0) / np.float32(len(contexts))
    grad_h = np.zeros_like(h)
    loss = update_target(h, w_out[center], 1, grad_h, lr)
    for neg in negs:
        loss += update_target(h, w_out[neg], 0, grad_h, lr)
    for c in contexts:
        w_in[c] += grad_h
    return loss


def hs_gradient(score, label: int, lr: float) -> tuple[np.float32, float]:
    """Hierarchical softmax: as gradient(), but a node beyond +-MAX_EXP gets no update."""
    score = float(score)
    if abs(score) >= MAX_EXP:
        return np.float32(0.0), gradient(score, label, lr)[1]
    return gradient(score, label, lr)


def hs_path(h, w_out, path, grad_h, lr) -> float:
    """Walk the centre's Huffman path [(node, code), ...]: label 1 - code at every node."""
    loss = 0.0
    for node, code in path:
        out_row = w_out[node]
        g, l_ = hs_gradient(np.dot(h, out_row), 1 - code, lr)
        loss += l_
        if g != 0.0:
            grad_h += g * out_row
            out_row += g * h
    return loss


def skipgram_pair_hs(w_in, w_out, context, path, lr) -> float:
    h = w_in[context]
    grad_h = np.zeros_like(h)
    loss = hs_path(h, w_out, path, grad_h, lr)
    h += grad_h
    return loss


def skipgram_window_hs(w_in, w_out, contexts, path, lr) -> float:
    """The window's contexts share the centre's path; gradients from the rows before it."""
    grads = np.zeros((len(contexts), len(path)), dtype=np.float32)
    loss = 0.0
    for i, c in enumerate(contexts):
        for j, (node, code) in enumerate(path):
            grads[i, j], l_ = hs_gradient(np.dot(w_in[c], w_out[node]), 1 - code, lr)
            loss += l_
    grad_in = [sum((grads[i, j] * w_out[node] for j, (node, _) in enumerate(path)),
                   np.zeros(w_in.shape[1], np.float32)) for i in range(len(contexts))]
    for j, (node, _) in enumerate(path):
        for i, c in enumerate(contexts):
            w_out[node] += grads[i, j] * w_in[c]
    for i, c in enumerate(contexts):
        w_in[c] += grad_in[i]
    return loss


def cbow_center_hs(w_in, w_out, contexts, path, lr) -> float:
    h = np.zeros(w_in.shape[1], np.float32)
    for c in contexts:
        h += w_in[c]
    h *= np.float32(1.0) / np.float32(len(contexts))
    grad_h = np.zeros_like(h)
    loss = hs_path(h, w_out, path, grad_h, lr)
    for c in contexts:
        w_in[c] += grad_h
    return loss


def train_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args):
    """Same arguments and results as kernels.cpu.train_block; one thread only."""
    check_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args)
    if args.threads != 1:
        raise ValueError("the reference kernel runs one thread")
    inputs = WordInputs(w_in, touched_in) if args.subwords is None else SubwordInputs(w_in, args.subwords, touched_in)
    outputs = Outputs(w_out, touched_out, args)
    kind = "cbow" if args.model == "cbow" else ("window" if args.shared_negatives else "pair")
    rng = Lcg(rng_state[0])
    loss, n_examples = 0.0, 0
    for center, contexts, lr in windows(tokens, sent_starts, rng, args):
        for group in ([[c] for c in contexts] if kind == "pair" else [contexts]):
            loss += update(inputs, outputs, kind, center, group, lr, rng)
        n_examples += 1 if kind == "cbow" else len(contexts)
    rng_state[0] = rng.state
    return loss, n_examples, len(tokens)


def windows(tokens, sent_starts, rng: Lcg, args):
    """Every kept centre that has a context, in order, as (centre, its contexts, the learning
    rate), drawing subsampling and the shrunk windows from ``rng`` (the caller draws its noise
    words between two centres, as the contract orders)."""
    ends = list(sent_starts[1:]) + [len(tokens)]
    lr = learning_rate(args.lr0, args.lr_min, args.words_done, args.words_scale, 0, args.words_total)
    last_refresh, raw_done = 0, 0
    for beg, end in zip(sent_starts, ends):
        kept, raw_pos = subsample(tokens[beg:end], args.keep_prob, rng, raw_done)
        for pos, center in enumerate(kept):
            if raw_pos[pos] - last_refresh >= LR_REFRESH_WORDS:
                last_refresh = raw_pos[pos]
                lr = learning_rate(args.lr0, args.lr_min, args.words_done, args.words_scale, last_refresh,
                                   args.words_total)
            reach = args.window - rng.below(args.window)
            around = range(max(pos - reach, 0), min(pos + reach, len(kept) - 1) + 1)
            contexts = [kept[c] for c in around if c != pos]
            if contexts:
                yield center, contexts, lr
        raw_done += end - beg


# The update rules by kind, over (input rows, w_out, context rows, centre, noise words, lr)
# for negative sampling and (input rows, w_out, context rows, path, lr) for the Huffman path.
NOISE_RULES = {
    "pair": lambda w_in, w_out, ids, center, negs, lr: skipgram_pair(w_in, w_out, ids[0], center, negs, lr),
    "window": lambda w_in, w_out, ids, center, negs, lr: skipgram_window_shared(w_in, w_out, ids, [center] + negs,
                                                                               lr),
    "cbow": cbow_center,
}
PATH_RULES = {
    "pair": lambda w_in, w_out, ids, path, lr: skipgram_pair_hs(w_in, w_out, ids[0], path, lr),
    "window": skipgram_window_hs,
    "cbow": cbow_center_hs,
}


def update(inputs, outputs, kind: str, center: int, contexts: list[int], lr: float, rng: Lcg) -> float:
    """One update of ``kind`` (a pair, a shared window, a CBOW centre) for these contexts;
    returns its loss."""
    w_in, ids = inputs.open(contexts)
    if outputs.paths is not None:
        path = outputs.paths[center]
        loss = PATH_RULES[kind](w_in, outputs.w_out, ids, path, lr)
        outputs.touched[[node for node, _ in path]] = 1
    else:
        negs = draw_negatives(rng, outputs.negative, center, outputs.table)
        loss = NOISE_RULES[kind](w_in, outputs.w_out, ids, center, negs, lr)
        outputs.touched[negs] = 1
        outputs.touched[center] = 1
    inputs.close(contexts, w_in)
    return loss


class Outputs:
    """The output layer and how a centre's targets are chosen: ``negative`` noise words from
    the alias table, or (``hs``) its Huffman path [(node, code), ...]."""

    def __init__(self, w_out, touched_out, args):
        self.w_out, self.touched = w_out, touched_out
        self.negative, self.table = args.negative, args.neg_table
        self.paths = None
        if args.hs is not None:
            codes, points, lengths = check_hs(args.hs, w_out.shape[0])
            self.paths = [[(int(points[w, j]), int(codes[w, j])) for j in range(lengths[w])]
                          for w in range(len(lengths))]


class WordInputs:
    """word2vec's input layer: a word's input is its own row of w_in, trained in place."""

    def __init__(self, w_in, touched_in):
        self.w_in, self.touched_in = w_in, touched_in

    def open(self, words):
        """(the rows to train, the words' rows in them)."""
        return self.w_in, words

    def close(self, words, trained):
        self.touched_in[words] = 1


class SubwordInputs:
    """fastText's input layer over a word2vec update: a word's input is the mean of its rows
    (its own and its n-grams'); the update runs on a small matrix of such means, and every
    row of a word then receives the whole change of its mean."""

    def __init__(self, w_in, subwords, touched_in):
        self.w_in, (self.ptr, self.ids), self.touched_in = w_in, subwords, touched_in
        self.before = None

    def rows(self, word):
        return self.ids[self.ptr[word]:self.ptr[word + 1]]

    def open(self, words):
        """(the words' means, their rows 0, 1, ... in it); close() applies the change."""
        self.before = np.zeros((len(words), self.w_in.shape[1]), np.float32)
        for i, w in enumerate(words):
            for r in self.rows(w):
                self.before[i] += self.w_in[r]
            self.before[i] *= np.float32(1.0) / np.float32(len(self.rows(w)))
        return self.before.copy(), list(range(len(words)))

    def close(self, words, trained):
        for i, w in enumerate(words):
            change = trained[i] - self.before[i]
            for r in self.rows(w):
                self.w_in[r] += change
                self.touched_in[r] = 1
