"""The tiered schedule (--sync-full, --sync-hot) and the wire encodings (--wire), as pure
arithmetic; under MPI in tests/mpi/test_mpi_tiers.py."""

import numpy as np
import pytest

from mpidwe.core.config import TrainConfig, parse_command
from mpidwe.core.errors import MpidweError
from mpidwe.parallel import wire
from mpidwe.parallel.replicated import Tiers


def test_hot_rows_every_sync_more_at_rarer_syncs_and_every_row_at_the_full_one():
    t = Tiers([1000, 1000], words=1000, hot=10, full=8, hot_last=[False, False])
    covered = [t.covered(k) for k in range(1, 17)]
    # levels: odd syncs 10 rows; sync 2: 10 x 100^(1/3); 4: 10 x 100^(2/3); 8 and 16: all
    assert covered[0::2] == [10] * 8
    assert covered[1] == round(10 * 100 ** (1 / 3)) and covered[3] == round(10 * 100 ** (2 / 3))
    assert covered[7] == covered[15] == 1000
    assert t.spans(1) == [(0, 10), (0, 10)] and t.spans(8) is None and t.spans(16) is None
    assert covered[0] < covered[1] < covered[3] < covered[7]


def test_a_huffman_trees_top_rows_are_its_last_and_ngram_rows_wait_for_the_full_sync():
    # w_in: 1000 words + 500 n-gram buckets; w_out of HS: 999 inner nodes, the root last
    t = Tiers([1500, 999], words=1000, hot=10, full=4, hot_last=[False, True])
    assert t.spans(1) == [(0, 10), (989, 999)]
    assert t.spans(4) is None


@pytest.mark.parametrize("ranks", [2, 3, 4, 5])
def test_doubling_tiers_combine_hot_times_two_to_the_trailing_zeros_and_every_row_once_reached(ranks):
    """pWord2Vec's schedule: sync k combines H x 2^t rows (t: k's trailing zero bits), and
    every row from the first level that reaches them, F = doubling_full; chosen at P ranks
    by --sync-schedule doubling, or by auto in a long run (the geometric schedule before)."""
    from mpidwe.core.config import DOUBLING_HOT, doubling_full, long_run_words, tier_schedule

    v = 9_000
    cfg = _cfg("--sync-full", "64", "--sync-schedule", "doubling")
    assert tier_schedule(cfg, ranks, 1) == "doubling"
    full = doubling_full(v, DOUBLING_HOT)
    assert full == 64 and DOUBLING_HOT * full >= v > DOUBLING_HOT * full // 2
    t = Tiers([v, v], words=v, hot=DOUBLING_HOT, full=full, hot_last=[False, False], schedule="doubling")
    for k in range(1, 3 * full + 1):
        zeros = (k & -k).bit_length() - 1
        want = v if k % full == 0 else min(v, DOUBLING_HOT << zeros)
        assert t.covered(k) == want, k
        assert t.spans(k) == (None if want == v else [(0, want), (0, want)])
    assert [t.covered(k) for k in (1, 2, 4, 8, 16, 32)] == [256, 512, 1024, 2048, 4096, 8192]
    geometric = Tiers([v, v], words=v, hot=DOUBLING_HOT, full=full, hot_last=[False, False])
    assert geometric.covered(2) != t.covered(2) and geometric.covered(16) != t.covered(16)
    # auto: doubling only in long runs of negative sampling whose tiers are automatic
    long = long_run_words(ranks)
    assert tier_schedule(_cfg(), ranks, long) == "doubling"
    assert tier_schedule(_cfg(), ranks, long - 1) == "geometric"
    assert tier_schedule(_cfg("--loss", "hs"), ranks, long) == "geometric"
    assert tier_schedule(_cfg("--sync-hot", "512"), ranks, long) == "geometric"
    assert tier_schedule(_cfg("--sync-schedule", "geometric"), ranks, long) == "geometric"


def test_the_first_log_line_and_config_name_the_doubling_schedule_only():
    from mpidwe.train.rundir import _tiers

    t = dict(hot=256, full=1024, wire="int4")
    assert "twice as many every 2nd" not in _tiers(dict(sync_tiers=t, wire_feedback="auto"))
    line = _tiers(dict(sync_tiers=dict(t, schedule="doubling"), wire_feedback="auto"))
    assert "256 most frequent rows every sync, twice as many every 2nd" in line and "all every 1,024" in line


def test_one_level_means_every_sync_is_full():
    t = Tiers([100], words=100, hot=10, full=1, hot_last=[False])
    assert all(t.spans(k) is None for k in range(1, 10))


@pytest.mark.parametrize("name", wire.WIRES)
def test_every_wire_decodes_close_to_what_it_encoded_with_its_documented_size(name):
    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((50, 16)) * rng.uniform(1e-4, 10, (50, 1))).astype(np.float32)
    rows[3] = 0.0                                           # an all-zero row stays zero (int8's scale 0)
    data = wire.encode(rows, name)
    assert data.dtype == np.uint8 and data.shape == (50, wire.row_bytes(name, 16))
    back = wire.decode(data, name, 16)
    assert back.dtype == np.float32 and back.shape == rows.shape and not back[3].any()
    peak = np.abs(rows).max(axis=1, keepdims=True)
    err = np.abs(back - rows)
    bound = {"fp32": 0.0, "bf16": 2 ** -8 * np.abs(rows), "int8": 0.5 / 127 * peak * (1 + 1e-6),
             "int16": 0.5 / 32767 * peak * (1 + 1e-6),
             "int4": 0.5 / 7 * peak * (1 + 1e-6)}[name]
    assert (err <= bound).all(), (name, float((err - bound).max()))
    assert np.array_equal(wire.decode(wire.encode(back, name), name, 16), back), "decoding is a fixed point"


def test_bf16_rounds_to_nearest_even_and_keeps_nan_and_inf():
    x = np.array([[1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, np.inf, np.nan]], np.float32)
    back = wire.decode(wire.encode(x, "bf16"), "bf16", 4)
    assert back[0, 0] == 1.0 and back[0, 1] == 1.0 + 2 ** -6
    assert np.isinf(back[0, 2]) and np.isnan(back[0, 3])


def _cfg(*flags):
    return parse_command(TrainConfig, ["--corpus", "c.h5", "--out", "o", *flags], prog="t", description="")


@pytest.mark.parametrize("flags,msg", [
    (["--sync-full", "3"], "--sync-full must be a power of 2"),
    (["--sync-full", "-1"], "--sync-full must be a power of 2"),
    (["--sync-full", "6"], "--sync-full must be a power of 2"),
    (["--sync-hot", "-1", "--sync-full", "4"], "--sync-hot must be >= 1"),
    (["--wire", "int8", "--sync", "sparse"], "--wire bf16, int8, int16 or int4 encodes the rows of --sync dense"),
    (["--wire", "int4", "--sync", "sparse"], "--wire bf16, int8, int16 or int4 encodes the rows of --sync dense"),
    (["--sync-full", "4", "--store", "sharded"], "--sync-full > 1 combines rows in tiers"),
    (["--sync-full", "4", "--sync", "average"], "--sync-full > 1 combines rows in tiers"),
    (["--sync-seconds", "0.1", "--store", "sharded"], "--sync-seconds re-plans the rounds of the replicated"),
    (["--sync-seconds", "0.1", "--balance", "speed"], "--sync-seconds re-plans the rounds of the replicated"),
    (["--sync-seconds", "-1"], "--sync-seconds must be >= 0"),
    (["--wire", "fp32", "--wire-feedback", "on"], "--wire-feedback on keeps what int8 and int4 rows round away"),
    (["--wire", "bf16", "--wire-feedback", "on"], "give --wire int8 or int4, or leave --wire-feedback at auto"),
    (["--wire", "int16", "--wire-feedback", "on"], "int16 sends rows to 1/65534 of their largest value, without"),
    (["--wire-feedback", "yes"], "invalid choice: 'yes' (choose from 'auto', 'on', 'off') (see"),
])
def test_the_options_refuse_what_they_cannot_do(flags, msg):
    with pytest.raises(MpidweError) as e:
        _cfg(*flags)
    assert msg in str(e.value)


def test_the_options_take_what_they_can_do():
    cfg = _cfg("--sync", "dense", "--wire", "int8", "--sync-full", "64", "--sync-hot", "512")
    assert (cfg.wire, cfg.sync_full, cfg.sync_hot) == ("int8", 64, 512)
    assert _cfg("--wire-feedback", "on").wire_feedback == "on" and _cfg().wire_feedback == "auto"


def test_error_feedback_is_on_in_negative_samplings_tiers_by_default():
    from mpidwe.core.config import feedback_of

    assert feedback_of("auto", True) and not feedback_of("auto", False) and not feedback_of("auto", True, "hs")
    assert feedback_of("on", False, "hs") and not feedback_of("off", True)


@pytest.mark.parametrize("name", ["int8", "int16", "int4"])
def test_a_row_with_nan_or_inf_decodes_as_nan_so_the_divergence_guard_sees_it(name):
    rows = np.ones((3, 5), np.float32)
    rows[1, 2], rows[2, 0] = np.nan, np.inf
    back = wire.decode(wire.encode(rows, name), name, 5)
    assert np.array_equal(back[0], rows[0]) and np.isnan(back[1]).all() and np.isnan(back[2]).all()


@pytest.mark.parametrize("d", [1, 2, 7, 100])
def test_int4_packs_two_values_a_byte_low_nibble_first_for_odd_and_even_dims(d):
    rows = np.zeros((2, d), np.float32)
    rows[0, ::2], rows[0, 1::2] = 7.0, -7.0                 # scale 1: +7 then -7, alternately
    rows[1, -1] = 3.0                                       # the last value alone: scale 3/7, code +7
    data = wire.encode(rows, "int4")
    assert data.shape == (2, (d + 1) // 2 + 4)
    assert data[0, 4] == (15 if d == 1 else 15 | (1 << 4)), "+7 -> 15 in the low nibble, -7 -> 1 in the high"
    back = wire.decode(data, "int4", d)
    np.testing.assert_array_equal(back[0], rows[0])
    assert back[1, -1] == pytest.approx(3.0) and not back[1, :-1].any()


@pytest.mark.parametrize("name", ["int4", "int16"])
def test_a_subnormal_row_rounds_to_zero_without_overflow(name):
    rows = np.full((1, 4), 1e-44, np.float32)
    back = wire.decode(wire.encode(rows, name), name, 4)
    assert np.isfinite(back).all() and np.abs(back - rows).max() <= 1e-44


def test_int16_keeps_16_bits_a_value_little_endian_after_the_rows_float32_scale():
    rows = np.array([[32767.0, -1.0, 0.5, -32767.0]], np.float32)      # scale 1
    data = wire.encode(rows, "int16")
    assert data.shape == (1, 12) and data[0, :4].view(np.float32)[0] == 1.0
    assert data[0, 4:].view("<i2").tolist() == [32767, -1, 0, -32767]  # 0.5 rounds to even
    with pytest.raises(ValueError, match="error feedback needs an int8 or int4 wire, not int16"):
        wire.encode(rows, "int16", feedback=(np.zeros_like(rows), np.ones(1, np.uint8)))


def test_decode_add_sums_into_its_target():
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    total = np.ones((3, 4), np.float32)
    for name in wire.WIRES:
        got = wire.decode_add(wire.encode(rows, name), name, total.copy())
        atol = 0.5 / 7 * 11 if name == "int4" else 0.06              # half a step of the largest row's
        np.testing.assert_allclose(got, rows + 1, rtol=0.01, atol=atol)
        np.testing.assert_allclose(got, wire.decode(wire.encode(rows, name), name, 4) + 1, rtol=1e-6)


@pytest.mark.parametrize("name,levels", [("int8", 127.0), ("int16", 32767.0), ("int4", 7.0)])
def test_the_scale_is_the_rows_largest_magnitude_over_the_levels_exactly(name, levels):
    """The encoders find the largest |value| on the float32 bits (parallel/wire.py _scale): it
    must be the float maximum itself, whichever sign holds it, down to subnormal rows."""
    rng = np.random.default_rng(3)
    rows = (rng.standard_normal((200, 37)) * rng.uniform(1e-30, 1e3, (200, 1))).astype(np.float32)
    rows[0] = -rows[0] * 0 - 5.0                    # all negative: the peak is a negative value's magnitude
    rows[1, 7] = -1e4                               # a negative peak among positive values
    rows[2] = 1e-41                                 # subnormal
    scales = wire.encode(rows, name)[:, :4].copy().view(np.float32)[:, 0]
    want = (np.abs(rows).max(axis=1) / np.float32(levels)).astype(np.float32)
    np.testing.assert_array_equal(scales, want)


@pytest.mark.parametrize("name", wire.WIRES)
@pytest.mark.parametrize("d", [1, 2, 7, 100])
def test_encoding_a_difference_gives_the_bytes_of_the_difference(name, d):
    """The sync encodes its changes, param - base, row by row without writing them out
    (wire.encode's ``minus``): the bytes must be those of numpy's float32 difference, for
    rows with NaN, infinities, zeros (equal rows) and subnormal differences too."""
    rng = np.random.default_rng(d)
    param = (rng.standard_normal((40, d)) * rng.uniform(1e-3, 10, (40, 1))).astype(np.float32)
    base = (param + rng.standard_normal((40, d)).astype(np.float32) * np.float32(0.01)).astype(np.float32)
    base[3] = param[3]                                      # untouched row: a zero change
    param[5, 0], param[6, -1] = np.nan, -np.inf
    base[7] = param[7] - np.float32(1e-42)                  # subnormal changes
    got = wire.encode(param, name, minus=base)
    want = wire.encode(param - base, name)
    assert np.array_equal(got, want)
    assert not wire.decode(got, name, d)[3].any()


@pytest.mark.parametrize("name", ["bf16", "int8", "int4"])
@pytest.mark.parametrize("d", [1, 7, 100])
def test_applying_encoded_sums_gives_the_bits_of_decoding_them_first(name, d):
    """The sync applies the summed changes as it decodes them (rule.apply_encoded): the same
    float32 parameters, bases and largest value as decoding into a zeroed array and applying
    that (rule._apply_dense), for rows with a NaN, zero rows and rows no rank touched."""
    from mpidwe.parallel.rule import _apply_dense, apply_encoded, row_divisors

    rng = np.random.default_rng(d)
    n = 60
    sums = (rng.standard_normal((n, d)) * rng.uniform(1e-3, 1, (n, 1))).astype(np.float32)
    sums[4] = 0.0
    sums[9, 0] = np.nan
    data = wire.encode(sums, name)
    counts = rng.integers(0, 5, n).astype(np.uint8)
    counts[4] = counts[9] = 3
    divisors = row_divisors(counts, 2, 4, "auto")
    base = rng.standard_normal((n, d)).astype(np.float32)
    param = base + np.float32(0.5)
    want_base, want_param = base.copy(), param.copy()
    zeroed = np.zeros((n, d), np.float32)
    want = _apply_dense(want_base, want_param, wire.decode_add(data, name, zeroed), divisors, counts)
    got = apply_encoded(data, name, base, param, divisors, counts)
    assert got == want or (np.isnan(got) and np.isnan(want))
    assert np.isinf(got)                                     # the NaN row is reported
    assert base.tobytes() == want_base.tobytes() and param.tobytes() == want_param.tobytes()
    untouched = counts == 0
    assert (param[untouched] == base[untouched] + np.float32(0.5)).all()


@pytest.mark.parametrize("name", ["int8", "int4"])
@pytest.mark.parametrize("d", [1, 7, 100])
def test_error_feedback_sends_later_what_an_encoding_left_out(name, d):
    """wire.encode's ``feedback``: a flagged row is encoded with its residual added, and its
    residual becomes what that encoding left out, so over many encodings what was decoded
    differs from what was sent by the residual alone (bounded), where without feedback the
    rounding accumulates; rows the mask does not flag are encoded as without feedback and
    keep their residual; a row with a NaN resets its residual to 0."""
    rng = np.random.default_rng(d)
    n = 30
    resid = np.zeros((n, d), np.float32)
    mask = np.ones(n, np.uint8)
    mask[::4] = 0
    change = (rng.standard_normal((n, d)) * np.float32(0.01)).astype(np.float32)
    change[:, 0] = 1.0                                       # the scale: small values round to 0
    plain = wire.encode(change, name)
    assert np.array_equal(wire.encode(change, name, feedback=(resid, mask)), plain)   # no residual yet
    left = change - wire.decode(plain, name, d)
    np.testing.assert_array_equal(resid[mask == 1], left[mask == 1])
    assert not resid[mask == 0].any()
    before = resid.copy()
    resid[mask == 0] = 7.0                                    # not flagged: neither added nor updated
    got = wire.encode(change, name, feedback=(resid, mask))
    want = wire.encode(np.where(mask[:, None] == 1, change + before, change).astype(np.float32), name)
    assert np.array_equal(got, want) and (resid[mask == 0] == 7.0).all()

    resid[:] = 0
    mask[:] = 1
    sent = np.zeros((n, d), np.float64)
    fed = np.zeros((n, d), np.float64)
    lost = np.zeros((n, d), np.float64)
    for _ in range(200):
        sent += change
        fed += wire.decode(wire.encode(change, name, feedback=(resid, mask)), name, d)
        lost += wire.decode(wire.encode(change, name), name, d)
    np.testing.assert_allclose(fed + resid, sent, rtol=0, atol=1e-3)
    levels = 127 if name == "int8" else 7
    assert np.abs(resid).max() <= 1.0 / levels + 1e-6          # at most one level per value
    if d > 1:                                                  # without it the small values never move
        assert np.abs(fed - sent).max() < 0.1 * np.abs(lost - sent).max()
    bad = change.copy()
    bad[2, 0] = np.nan
    resid[2] = 1.0
    wire.encode(bad, name, feedback=(resid, mask))
    assert not resid[2].any()
    with pytest.raises(ValueError, match="int8 or int4"):
        wire.encode(change, "bf16", feedback=(resid, mask))
