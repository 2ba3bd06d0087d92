"""benchmarks/ranks.py's rows and table from a run's metrics (its own arithmetic; the runs
themselves are benchmarks, not tests)."""

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import ranks  # noqa: E402

NAMES = {"sim": "sim:ws.tsv", "analogy": "analogy:q.txt"}
CONFIG = {"lr_scale": 4, "sync_every": 15625, "sync_tiers": {"hot": 512, "full": 256, "wire": "int4"}}


def last_line(**extra):
    return {"eval": {"sim:ws.tsv": 0.49, "analogy:q.txt": 0.1014}, "loss": 2.6, "syncs": 129, "epoch": 1.0,
            "sync_dense": 250, "sync_bytes": [100, 300], "words_rank": [10, 20], "sync_steps": 1677,
            "sync_array_seconds": [0.5, 1.0], "compute_seconds": [2.0, 4.0], "sync_comm_seconds": [0.1, 0.3],
            "seconds": 8.3, **extra}


def test_a_row_averages_each_ranks_bytes_per_word_it_trained():
    row = ranks.row_of(last_line(), CONFIG, NAMES, 2, "auto")
    assert row["bytes_per_word"] == (100 / 10 + 300 / 20) / 2 == 12.5
    assert row["array_share"] == 0.25 and row["steps_per_sync"] == 13.0 and row["sync_array_s"] == 1.0
    assert "device_down_per_word" not in row                       # a numba run has no device copies
    assert "device to host" not in ranks.table([row])


def test_the_device_stores_copies_get_their_own_rows():
    line = last_line(device_down_bytes=[1000, 2200], device_up_bytes=[500, 1000], device_copy_seconds=[0.4, 0.5])
    row = ranks.row_of(line, CONFIG, NAMES, 2, "auto")
    assert row["device_down_per_word"] == (100 + 110) / 2 and row["device_up_per_word"] == 50
    assert row["device_copy_s"] == 0.5
    text = ranks.table([row, {"ranks": 16, "mode": "auto", "exit": 3, "error": "error: training diverged"},
                        {"ranks": 4, "mode": "average", "exit": 2, "error": "error: --sync average ..."}])
    assert "| 2 | auto | 105.0 | 50.0 | 0.50 |" in text
    assert "| 16 | auto | diverged (exit 3): error: training diverged |" in text
    assert "| 4 | average | refused (exit 2): error: --sync average ... |" in text
    assert "| 2 | auto, tiers 512/256 int4 | 4 | 15,625 | 129.0 | 250 / 258 |" in text


def test_train_flags_follow_a_double_dash():
    assert ranks.split_extra(["enwiki", "--ranks", "1", "2", "--", "--device", "cuda"]) == (
        ["enwiki", "--ranks", "1", "2"], ["--device", "cuda"])
    assert ranks.split_extra(["demo"]) == (["demo"], [])
