"""benchmarks/layouts.py's own arithmetic: layouts parsed, the threads' efficiency and the
ratios to 1 x cores computed from the runs' seconds (its runs are real mpiexec jobs,
measured on a 16-core node: docs/lab/scaling.md)."""

import argparse
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import layouts  # noqa: E402


def row(p, t, compute, train, wall=10.0, exit=0):
    return {"layout": f"{p}x{t}", "ranks": p, "threads": t, "exit": exit, "compute_s": compute, "train_s": train,
            "wall_s": wall, "words_per_s": 16e6 / train, "array_s": 0.1, "comm_s": 0.0, "syncs": 8,
            "bytes_per_word": 0.0, "sim": 0.5, "analogy": 0.13, "loss": 2.4}


def test_layouts_are_ranks_x_threads():
    assert layouts.parse_layout("16x1") == (16, 1) and layouts.parse_layout("2X8") == (2, 8)
    for bad in ("16", "0x4", "ax2", "2x"):
        with pytest.raises(argparse.ArgumentTypeError):
            layouts.parse_layout(bad)


def test_efficiency_and_ratios_come_from_the_runs():
    rows = [row(1, 1, 14.44, 14.6), row(1, 16, 2.19, 2.37, wall=7.27), row(16, 1, 2.07, 2.61, wall=7.37),
            {"layout": "2x8", "ranks": 2, "threads": 8, "exit": 1, "error": "boom"}]
    assert layouts.efficiencies(rows) == ["threads' efficiency e(16) = 0.41 (1 x 1 computes 14.44 s, 1 x 16 2.19 s)"]
    text = layouts.table(rows, "1x16")
    line = next(ln for ln in text.splitlines() if ln.startswith("| 16x1 |"))
    assert "| 6.13M | 0.91 | 7.4 | 0.99 |" in line        # 2.37 / 2.61 of the words/s, 7.27 / 7.37 of the wall
    assert "| 2x8 | failed (exit 1): boom |" in text
    assert layouts.efficiencies(rows[1:]) == []         # no 1 x 1: no efficiency
