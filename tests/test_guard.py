"""The divergence guard: healthy curves pass, the symptoms of divergence trip it."""

import math

from mpidwe.core.guard import DivergenceGuard


def feed(guard, losses, max_abs=1.0):
    for i, loss in enumerate(losses):
        why = guard.check(loss, max_abs)
        if why:
            return i, why
    return None


def test_a_falling_or_noisy_loss_passes():
    g = DivergenceGuard()
    assert feed(g, [4.1, 3.0, 2.6, 2.5, 2.45, 2.6, 2.4, 2.35, 2.5, 2.3]) is None
    assert g.best < 2.6


def test_a_climbing_loss_trips_after_warmup_only():
    # the shape of summed stale updates at 4 ranks: falls, then climbs from round 3
    losses = [4.0, 2.9, 2.7, 3.5, 6.0, 12.0, 40.0, 300.0]
    hit = feed(DivergenceGuard(loss_ratio=2.0), losses)
    assert hit is not None and hit[0] in (5, 6) and "its best" in hit[1]
    # the random model's first losses are no baseline: a drop after them is fine
    assert feed(DivergenceGuard(), [9.0, 1.0, 1.0, 1.1, 1.0]) is None


def test_non_finite_or_huge_parameters_trip_at_once():
    assert "NaN" in DivergenceGuard().check(2.0, math.inf)
    assert "loss became nan" in DivergenceGuard().check(math.nan, 1.0)
    assert "limit 100" in DivergenceGuard(max_abs=100).check(2.0, 150.0)
    assert DivergenceGuard(max_abs=100).check(2.0, 99.0) is None


def test_rounds_without_examples_and_the_off_switch():
    g = DivergenceGuard()
    assert feed(g, [3.0, 2.5, 2.4, 2.3]) is None
    assert g.check(None, 1.0) is None and g.best > 0   # no loss: nothing to judge
    assert feed(DivergenceGuard(loss_ratio=0), [3.0, 2.0, 2.0, 2.0, 50.0, 500.0]) is None
