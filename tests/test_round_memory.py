"""The sharded store's round sized by a memory budget (issue 23, item 7): the arithmetic of
parallel/rows.py and train/plan.sharded_round. The run at 1.5M words that checks the bound on
real ranks is tests/test_sharded.py::test_defaults_hold_half_a_replica (slow)."""

from __future__ import annotations

import numpy as np
import pytest

from mpidwe.core.config import TrainConfig
from mpidwe.core.errors import ConfigError, MpidweError
from mpidwe.core.vocab import keep_probabilities
from mpidwe.parallel.rows import (DEFAULT_HEADROOM, RUNTIME_BYTES, VOCAB_BYTES_PER_WORD, MiB, RoundMemory,
                              default_budget, expected_working_set, fixed_bytes, round_bytes)
from mpidwe.train.plan import SYNC_EVERY_MIN, auto_sync_every, sharded_round
from mpidwe.train.rundir import summary_line


def flat_tail(words: int, tokens: int) -> np.ndarray:
    """Counts like the synthetic corpus of the benchmark: a Zipf head of 1,000 words over
    half the tokens and a flat tail over the other half."""
    head = 1.0 / np.arange(1, 1001)
    head *= tokens / 2 / head.sum()
    tail = np.full(words - 1000, tokens / 2 / (words - 1000))
    return np.maximum(1, np.round(np.concatenate((head, tail)))).astype(np.int64)


BIG, BIG_TOKENS = 200_000, 2_000_000     # a vocabulary the default budget binds on at 4 ranks, dim 100


def model(counts, dim=100, pipelined=False) -> RoundMemory:
    return RoundMemory(counts.astype(np.float64), keep_probabilities(counts, 1e-4), dim, 5, 5, True, pipelined)


def test_fixed_and_round_bytes_count_rows_of_both_matrices():
    # rank 0 owns ceil(V / P) rows of both matrices, 8 d bytes each
    assert fixed_bytes(10, 4, 3) == 4 * 8 * 4 + 10 * VOCAB_BYTES_PER_WORD + RUNTIME_BYTES
    assert round_bytes(10, 30, 8) == 4 * 8 * (3 * 10 + 5.5 * 30)
    assert round_bytes(10, 30, 8, pipelined=True) == 4 * 8 * (5 * 10 + 7.5 * 30)


def test_default_budget_is_half_a_replica_plus_500_mb_capped_by_the_node():
    v, d = 1_500_000, 100
    assert default_budget(v, d, 4) == 4 * v * d + DEFAULT_HEADROOM
    assert default_budget(v, d, 4, node_share=800 * MiB) == 800 * MiB
    # 1 and 2 ranks own 8 V d / P >= 4 V d: the budget leaves them 250 MB of working set
    for p in (1, 2):
        assert default_budget(v, d, p) == fixed_bytes(v, d, p) + DEFAULT_HEADROOM // 2


def test_words_within_is_the_largest_round_that_fits():
    counts = flat_tail(BIG, BIG_TOKENS)
    m = model(counts)
    room = 4 * BIG * 100 + DEFAULT_HEADROOM - fixed_bytes(BIG, 100, 4)
    words = m.words_within(room, 250_000, SYNC_EVERY_MIN)
    assert SYNC_EVERY_MIN <= words < 250_000
    assert m.peak(words) <= room < m.peak(words + 1)
    # the peak follows the expected working set
    t, w = expected_working_set(words, m.counts, m.keep_prob, 5, 5, True)
    assert m.peak(words) == round_bytes(t, w, 100)
    # where the interval fits it stays; where even the least round does not, least - 1
    assert m.words_within(m.peak(100_000) + 1, 100_000, SYNC_EVERY_MIN) == 100_000
    assert m.words_within(m.peak(SYNC_EVERY_MIN) - 1, 100_000, SYNC_EVERY_MIN) == SYNC_EVERY_MIN - 1
    # the pipeline's second working set leaves a shorter round
    assert model(counts, pipelined=True).words_within(room, 250_000, SYNC_EVERY_MIN) < words


def test_a_budget_that_does_not_bind_keeps_the_interval():
    """Small vocabularies: the whole vocabulary's working set fits, so the interval (and
    the model it trains) stays what it was before the budget existed."""
    counts = flat_tail(3_000, 300_000)
    cfg = TrainConfig(store="sharded", dim=16)
    for p in (1, 2, 3):
        interval = auto_sync_every(len(counts), p)
        assert sharded_round(cfg, counts, interval, p) == (interval, "interval", default_budget(3_000, 16, p))


def test_the_budget_binds_on_a_large_vocabulary_at_its_defaults():
    counts = flat_tail(BIG, BIG_TOKENS)
    cfg = TrainConfig(store="sharded")
    interval = auto_sync_every(len(counts), 4)
    words, bound, budget = sharded_round(cfg, counts, interval, 4)
    assert bound == "memory" and budget == default_budget(BIG, 100, 4)
    assert SYNC_EVERY_MIN <= words < interval
    assert fixed_bytes(len(counts), 100, 4) + model(counts).peak(words) <= budget
    # a larger budget, a longer round; enough of it, the interval
    more, _, _ = sharded_round(TrainConfig(store="sharded", memory_budget=700), counts, interval, 4)
    assert words < more
    assert sharded_round(TrainConfig(store="sharded", memory_budget=2000), counts, interval, 4)[:2] == (
        interval, "interval")


def test_too_small_a_budget_is_one_clear_error_or_the_least_round():
    counts = flat_tail(BIG, BIG_TOKENS)
    with pytest.raises(ConfigError, match="--memory-budget 300 MB does not hold a round of 5,000 words"):
        sharded_round(TrainConfig(store="sharded", memory_budget=300), counts, 250_000, 4)
    # derived from a small node: the least round, said so
    words, bound, _ = sharded_round(TrainConfig(store="sharded"), counts, 250_000, 4, share=300 * MiB)
    assert words == SYNC_EVERY_MIN and bound.startswith("memory (the node's share, 300 MB")


def test_memory_budget_option_is_checked():
    with pytest.raises(MpidweError, match="memory.budget"):
        TrainConfig(memory_budget=-1)


def test_summary_line_says_what_bounded_the_round():
    r = dict(loss="ns", negative=5, subwords=False, store="sharded", balance="off", model="skipgram", dim=100,
             window=5, epochs=1, words_total=8_000_000, vocab_size=1_526_844, corpus="c.h5", ranks=4, threads=1,
             kernel="numba", device="cpu", sync="sparse", sync_every=42_684, lr=0.025, lr_scale=4,
             round_bound="memory", memory_budget_mb=1_059, compute_choice="", exchange="mpi")
    line = summary_line(r, "run/config.json")
    assert "every 42,684 words (bounded by the memory; memory budget 1,059 MB per rank)" in line
    del r["round_bound"]
    assert "bounded" not in summary_line(dict(r, store="replicated"), "run/config.json")
