"""benchmarks/scaling_perword.py's own arithmetic: the cluster model's terms per word and the
efficiency they give (its inputs are real runs' metrics; docs/lab/scaling.md)."""

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import scaling_perword as model  # noqa: E402


def cost(steps=48e-6 * 130, b=127.4, a=0.12, s=130e-6, p=32):
    return {"P": p, "b": b, "s": s, "steps": steps, "a": a, "eval": {}, "flags": ""}


def test_the_terms_are_compute_array_network_and_latency_per_word():
    r, threads, e = 958_887, 16, 0.534           # 8.19M words/s a node
    t = model.terms(cost(), r, threads, e, 25, 16)
    assert t["compute"] == pytest.approx(1 / (threads * e * r)) == pytest.approx(122e-9, rel=0.01)
    assert t["array"] == pytest.approx(0.12 / (16 * e * r))
    assert t["network"] == pytest.approx(127.4 * 8 / 25e9)               # 41 ns
    assert t["latency"] == pytest.approx(48 * 130e-6 * 20e-6)            # 125 ns at the assumed alpha
    assert model.efficiency(cost(), r, threads, e, 25, 16) == pytest.approx(t["compute"] / sum(t.values()))


def test_alpha_scales_only_the_latency_and_old_runs_assume_two_steps_per_peer():
    r, e = 958_887, 0.534
    at = {us: model.terms(cost(), r, 16, e, 25, 16, us * 1e-6) for us in (0, 2, 20)}
    assert at[0]["latency"] == 0 and at[20]["latency"] == pytest.approx(10 * at[2]["latency"])
    assert all(at[0][k] == at[20][k] for k in ("compute", "array", "network"))
    assert model.efficiency(cost(), r, 16, e, 25, 16, 0) > model.efficiency(cost(), r, 16, e, 25, 16, 2e-6) \
        > model.efficiency(cost(), r, 16, e, 25, 16)
    old = model.terms(cost(steps=None), r, 16, e, 25, 16)
    assert old["latency"] == pytest.approx(130e-6 * 2 * 31 * 20e-6)
    one = model.terms(cost(), r, 16, e, 25, 1)              # the array work on one core, not threaded
    assert one["array"] == pytest.approx(0.12 / r)


def test_an_overlapped_ring_costs_only_the_bytes_its_compute_does_not_hide():
    r, e = 958_887, 0.534
    plain = model.terms(cost(b=58.0), r, 16, e, 25, 16)
    hidden = model.terms({**cost(b=58.0), "ring": 30.0}, r, 16, e, 25, 16)
    assert hidden["network"] == pytest.approx(28.0 * 8 / 25e9)                  # 30 bytes hidden
    assert plain["network"] == pytest.approx(58.0 * 8 / 25e9)
    slow = model.terms({**cost(b=58.0), "ring": 30.0}, r, 16, e, 0.5, 16)     # 0.5 Gb/s: 480 ns of ring
    assert slow["network"] == pytest.approx(28.0 * 8 / 0.5e9 + 30.0 * 8 / 0.5e9 - slow["compute"])
