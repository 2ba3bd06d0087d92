"""The sync rules in one process; tests/mpi/test_mpi_sync.py runs the sync modes on 2 to 4
ranks."""

import numpy as np
import pytest

from mpidwe.parallel.comm import Comm
from mpidwe.core.errors import ConfigError
from mpidwe.parallel.replicated import Synchronizer
from mpidwe.parallel.rule import LONG_RUN_WORDS, _apply_rows, dense_pays, lr_scale, row_divisors


def test_lr_scale_is_linear_up_to_the_stable_cap():
    assert [lr_scale("sparse", p, 0.025, 0.2) for p in (1, 2, 4, 8, 16)] == [1, 2, 4, 8, 8]
    assert lr_scale("sparse", 16, 0.025, 0.1) == 4
    assert lr_scale("dense", 8, 0.05, 0.1) == 2
    assert lr_scale("sparse", 8, 0.2, 0.1) == 1          # --lr above the cap: no scaling
    assert lr_scale("average", 4, 0.025, 0.1) == 4
    assert [lr_scale("sparse", p, 0.025, 0.05) for p in (1, 2, 4, 8)] == [1, 2, 2, 2]   # --loss hs's default
    with pytest.raises(ConfigError, match="--sync average trains every rank at P x --lr.*use --sync auto"):
        lr_scale("average", 8, 0.025, 0.1)


def test_long_runs_on_5_ranks_and_more_train_at_a_lower_rate():
    """From LONG_RUN_WORDS words per rank on, s is at most max(4, ceil(P / 2)): 8 ranks over
    three enwiki epochs keep one rank's analogy at 4 x --lr and lose 2.4-3 points at 8 x
    (docs/lab/sync-modes.md); and no rank trains above LONG_RUN_MAX_LOCAL_LR (16 ranks at 8 x
    diverged over four epochs, at 6 x they did not): 6 x from 13 ranks on at the default
    --lr; shorter runs keep min(P, cap); average, HS's cap and 1-4 ranks are unchanged."""
    from mpidwe.parallel.rule import LONG_RUN_MAX_LOCAL_LR

    long = LONG_RUN_WORDS
    assert LONG_RUN_MAX_LOCAL_LR == 0.15
    assert [lr_scale("sparse", p, 0.025, 0.2, long) for p in (1, 2, 4, 5, 6, 8, 9, 12, 13, 15, 16, 32)] == [
        1, 2, 4, 4, 4, 4, 5, 6, 6, 6, 6, 6]
    assert [lr_scale("auto", p, 0.025, 0.2, long - 1) for p in (4, 6, 8, 16)] == [4, 6, 8, 8]
    assert lr_scale("auto", 16, 0.05, 0.2, long) == 3                             # 0.15 / 0.05
    assert lr_scale("auto", 16, 0.2, 0.2, long) == 1                              # --lr above it: no scaling
    assert lr_scale("auto", 8, 0.025, 0.05, 10 * long) == 2                       # --loss hs: its own cap
    assert lr_scale("average", 8, 0.025, 0.2, 10 * long) == 8


def test_row_divisors_keep_rare_rows_whole_and_hot_rows_near_the_mean():
    counts = np.array([0, 1, 2, 3, 8, 16])
    assert row_divisors(counts, 8, 8, "sparse").tolist() == [8] * 6          # s = P: the mean
    assert row_divisors(counts, 3, 16, "dense").tolist() == [3, 3, 3, 3, 4, 8]  # at most 2x the mean
    assert row_divisors(counts, 8, 8, "average").tolist() == [8] * 6


def test_apply_rows_matches_a_dense_reference():
    rng = np.random.default_rng(3)
    v, d, p, scale = 30, 5, 6, 2
    base = rng.standard_normal((v, d)).astype(np.float32)
    blocks = [np.sort(rng.choice(v, size=rng.integers(1, 20), replace=False)).astype(np.int32) for _ in range(p)]
    values = [rng.standard_normal((len(b), d)).astype(np.float32) for b in blocks]
    total = np.zeros((v, d), np.float64)
    counts = np.zeros(v, int)
    for b, x in zip(blocks, values):
        total[b] += x
        counts[b] += 1
    expected = base + total / np.maximum(counts / 2, scale)[:, None]
    longest = max(len(b) for b in blocks)
    rows = np.full((p, longest), -1, np.int32)       # padding is never read
    vals = np.full((p, longest, d), np.nan, np.float32)
    for r, (b, x) in enumerate(zip(blocks, values)):
        rows[r, :len(b)], vals[r, :len(b)] = b, x
    counts = np.array([len(b) for b in blocks], np.int64)
    got, param = base.copy(), np.zeros_like(base)
    senders = np.zeros(v, np.int32)
    biggest = _apply_rows(got, param, rows, vals, counts, scale, senders, 0, v)
    assert not senders.any()                  # the scratch is left clean for the next sync
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    union = np.unique(np.concatenate(blocks))
    assert np.array_equal(param[union], got[union]) and not param[np.setdiff1d(np.arange(v), union)].any()
    assert biggest == pytest.approx(np.abs(got[union]).max())


def test_serial_sync_clears_masks_and_reports_the_largest_value():
    p = [np.ones((3, 2), np.float32)]
    p[0][2, 1] = -7
    m = [np.array([0, 1, 1], np.uint8)]
    s = Synchronizer(Comm.serial(), p, mode="dense")
    assert s.sync(p, m) == 7.0
    assert p[0].sum() == -2 and m[0].sum() == 0 and s.stats.syncs == 1
    p[0][1, 0] = np.nan
    m[0][1] = 1
    assert s.sync(p, m) == np.inf



def test_auto_goes_dense_once_the_padded_blocks_walk_as_many_rows_as_the_matrix():
    assert not dense_pays([10, 20], 41) and dense_pays([10, 20], 40)     # 2 x 20 rows walked by sparse
    assert dense_pays(np.array([0, 0, 0, 25]), 100) and not dense_pays(np.array([24, 24, 24, 24]), 97)
    assert not dense_pays([0, 0], 0) and not dense_pays([0, 0], 10)      # nothing to combine: sparse's no-op
    # in tiers, by bytes too: int4 rows of d = 100 (54 bytes and a count) against float32 rows and ids
    assert dense_pays([10, 10, 10, 10], 100, 55, 404) and not dense_pays([10, 10, 10, 10], 100)
    # 2 x 100 x 55 = 11,000 bytes dense against 4 x longest x 404: 9,696 at 6 rows, 11,312 at 7
    assert not dense_pays([6, 0, 0, 0], 100, 55, 404) and dense_pays([7, 0, 0, 0], 100, 55, 404)
    assert not dense_pays([0, 0, 0, 0], 100, 55, 404) and not dense_pays([5, 5], 0, 55, 404)
    assert dense_pays([30, 0], 100, 404, 404) == dense_pays([30, 0], 100)     # float32 both ways: rows decide


def test_the_wire_of_auto_is_int8_where_syncs_go_dense_from_3_ranks_int4_in_tiers_and_fp32_elsewhere():
    from mpidwe.core.config import TrainConfig, wire_of

    def cfg(**kw):
        return TrainConfig(corpus="c.h5", out="o", **kw)

    assert cfg().wire == "auto" and wire_of(cfg(), 3) == wire_of(cfg(), 7) == "int8"     # the defaults
    assert wire_of(cfg(), 8) == wire_of(cfg(), 32) == "int4"         # from 8 ranks in tiers
    assert wire_of(cfg(), 2) == wire_of(cfg(), 1) == "fp32"          # up to 2 ranks: few syncs per epoch
    assert wire_of(cfg(sync="dense"), 4) == "int8" and wire_of(cfg(sync="dense", sync_full=8), 4) == "int4"
    assert wire_of(cfg(sync="dense", sync_full=1), 16) == "int8"     # every row at every sync
    assert wire_of(cfg(sync="sparse"), 4) == wire_of(cfg(sync="average"), 4) == wire_of(cfg(sync="sparse"), 16) == "fp32"
    assert wire_of(cfg(wire="fp32"), 4) == "fp32" and wire_of(cfg(sync="dense", wire="bf16"), 2) == "bf16"


def test_tiers_are_automatic_from_8_ranks_where_they_apply_with_64_hot_rows_a_rank():
    from mpidwe.core.config import TIERS_AUTO_FULL, TrainConfig, tiers_of

    def cfg(**kw):
        return TrainConfig(corpus="c.h5", out="o", **kw)

    assert (cfg().sync_full, cfg().sync_hot) == (0, 0)                 # auto, resolved per run
    assert tiers_of(cfg(), 7)[0] == 1 and tiers_of(cfg(), 2) == (1, 128)
    assert tiers_of(cfg(), 8) == (TIERS_AUTO_FULL, 512) and tiers_of(cfg(), 16) == (TIERS_AUTO_FULL, 1024)
    assert tiers_of(cfg(sync_hot=1024), 16) == (TIERS_AUTO_FULL, 1024)
    assert tiers_of(cfg(sync_full=1), 16)[0] == 1 and tiers_of(cfg(sync_full=8), 2) == (8, 128)   # as given
    for off in (dict(store="sharded"), dict(sync="average", max_local_lr=0.4), dict(kernel="torch", exchange="torch")):
        assert tiers_of(cfg(**off), 16)[0] == 1, off                  # where tiers do not apply: every row
        if "store" not in off:                                           # (sharded: negative sampling only)
            assert tiers_of(cfg(loss="hs", **off), 16, full_hs=64)[0] == 1, off
    for on in (dict(kernel="torch"), dict(device="cuda")):             # the device store's host exchange
        assert tiers_of(cfg(**on), 16, kernel="torch") == (TIERS_AUTO_FULL, 1024), on
        assert tiers_of(cfg(loss="hs", **on), 16, kernel="torch", full_hs=64)[0] == 1, on    # HS: numba only
    assert tiers_of(cfg(loss="hs", sync_full=64), 16, kernel="torch")[0] == 64                 # unless given


def test_hs_combines_in_tiers_from_4_ranks_at_its_own_interval():
    """--loss hs: the 64 hottest rows (the tree's top) every 20,000 / P words per rank up to 8
    ranks and 160,000 / P^2 beyond (at least 500), every row
    about as often as the rule's interval; a given --sync-every sets the hot interval, and
    one over 1 / sqrt(2) of the rule's combines every row at every sync, as before."""
    from mpidwe.core.config import TIERS_AUTO_HOT_HS, TrainConfig, tiers_of, wire_of
    from mpidwe.train.plan import HS_TIERS_RANKS, HS_TIERS_SHARE, auto_sync_every, hs_tiers

    hs = TrainConfig(corpus="c.h5", out="o", loss="hs")
    assert TIERS_AUTO_HOT_HS == 64 and HS_TIERS_SHARE == 100 and HS_TIERS_RANKS == 8
    # enwiki (W = 2M): the hot rows every 20,000 / P words per rank, 8 / P of that beyond 8
    # ranks; the rule: 250k, 62.5k, 15.6k, 5k
    assert [hs_tiers(69_103, p) for p in (4, 8, 16, 32)] == [(5_000, 64), (2_500, 32), (625, 32), (500, 8)]
    for p in (2, 4, 8, 16, 32, 64):
        every, full = hs_tiers(69_103, p)
        assert 0.7 < auto_sync_every(69_103, p) / (every * full) < 1.42  # every row about as often as the rule's
    assert hs_tiers(69_103, 8, 20_000) == (20_000, 4) and hs_tiers(69_103, 8, 50_000) == (50_000, 1)
    assert hs_tiers(69_103, 8, 1_000) == (1_000, 64)
    assert hs_tiers(2_724, 4) == (544, 64) and hs_tiers(2_724, 16) == (500, 8)    # small W: at least 500
    assert tiers_of(hs, 3, full_hs=128)[0] == 1 and tiers_of(hs, 4, full_hs=128) == (128, TIERS_AUTO_HOT_HS)
    assert tiers_of(hs, 16, full_hs=8) == (8, 64) and tiers_of(hs, 16, full_hs=1)[0] == 1
    assert tiers_of(TrainConfig(corpus="c.h5", out="o", loss="hs", sync_hot=256), 8, full_hs=32) == (32, 256)
    # the wire follows the tiers as the plan resolved them
    assert wire_of(hs, 8, True) == "int4" and wire_of(hs, 8, False) == "int8" and wire_of(hs, 2, True) == "fp32"


def test_the_first_log_line_says_when_a_run_combines_in_tiers():
    from mpidwe.train.rundir import summary_line

    r = dict(loss="ns", negative=5, subwords=False, store="replicated", balance="off", model="skipgram", dim=100,
             window=5, epochs=1, words_total=16_000_000, vocab_size=69_103, corpus="c.h5", ranks=16, threads=1,
             kernel="numba", device="cpu", sync="auto", sync_every=15_625, lr=0.025, lr_scale=8,
             compute_choice="", exchange="mpi", sync_tiers=dict(full=256, hot=1024, wire="int4"))
    line = summary_line(r, "run/config.json")
    assert ("sync auto every 15,625 words in tiers (1,024 most frequent rows every sync, all every 256, "
            "wire int4), lr 0.025 x 8") in line
    assert "tiers" not in summary_line(dict(r, sync_tiers=None), "run/config.json")
    assert "tiers" not in summary_line({k: v for k, v in r.items() if k != "sync_tiers"}, "run/config.json")
