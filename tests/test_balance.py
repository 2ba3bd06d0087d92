"""--balance speed: one stream divided by measured speed (mpidwe.balance), and a real run
with a rank on a shared core."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from mpidwe import checkpoint
from mpidwe.balance import EpochStream, SpeedWeights, split_points
from mpidwe.corpus import Corpus

from conftest import make_demo_corpus, mpi_env, mpiexec_path, run_mpi
import sys


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("balance"), tokens=200_000, seed=8)


def test_pieces_cover_the_stream_exactly_and_start_at_sentences(demo):
    with Corpus(str(demo / "corpus.h5")) as c:
        st = EpochStream(c, 3, 5000)
        everything = c.read_tokens(0, c.n_tokens)
        sentence = np.zeros(c.n_tokens + 1, bool)
        sentence[st.sentences] = True
        rng = np.random.default_rng(0)
        cuts = sorted({st.snap(int(x)) for x in rng.integers(0, st.total, 12)} | {0, st.total})
        got = []
        for lo, hi in zip(cuts, cuts[1:]):
            for tokens, starts in st.pieces(lo, hi):
                assert len(tokens) and starts[0] == 0 and np.all(np.diff(starts) > 0)
                assert len(tokens) <= 5000 or len(starts) == 1
                got.append(tokens)
        assert np.array_equal(np.concatenate(got), np.tile(everything, 3))
        for x in rng.integers(0, st.total, 50):
            s = st.snap(int(x))
            assert s >= x and (s == st.total or sentence[s % c.n_tokens])


def test_split_follows_the_weights_at_sentence_starts(demo):
    with Corpus(str(demo / "corpus.h5")) as c:
        st = EpochStream(c, 1, 1 << 20)
        lo, hi = st.snap(1000), st.snap(61_000)
        pts = split_points(lo, hi, np.array([1.0, 1.0, 2.0]), st.snap)
        assert pts[0] == lo and pts[-1] == hi and pts == sorted(pts)
        shares = np.diff(pts) / (hi - lo)
        assert np.allclose(shares, [0.25, 0.25, 0.5], atol=0.01)
        assert all(p == st.snap(p) for p in pts)


def test_speed_weights_follow_measurements_and_never_starve_a_rank():
    w = SpeedWeights(3)
    assert np.allclose(w.weights(), 1)
    w.update(np.array([100.0, 100.0, 200.0]))
    assert np.allclose(w.weights(), [0.75, 0.75, 1.5])
    w.update(np.array([0.0, 100.0, 200.0]))      # rank 0 trained nothing: its speed is kept
    assert np.allclose(w.weights(), [0.75, 0.75, 1.5])
    for _ in range(20):
        w.update(np.array([0.001, 100.0, 100.0]))
    assert w.weights()[0] >= 0.1


def _pinned_job(corpus, out, balance: str) -> list[str]:
    """3 ranks: 0 and 1 share core 0, rank 2 has core 1 to itself (MPMD launch)."""
    args = ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), "--dim", "50", "--threads", "1",
            "--no-progress", "--log-seconds", "0", "--epochs", "2", "--balance", balance,
            "--checkpoint-every", "200000", "--keep-checkpoints", "100"]
    exe = [sys.executable] + args
    return [mpiexec_path(), "-n", "2", "taskset", "-c", "0", *exe, ":", "-n", "1", "taskset", "-c", "1", *exe]


@pytest.mark.mpi
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 or not shutil.which("taskset"),
                    reason="needs 2 cores and taskset")
def test_a_rank_on_a_shared_core_gets_fewer_words(demo, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(_pinned_job(demo / "corpus.h5", out, "speed"), capture_output=True, text=True,
                          timeout=300, env=mpi_env())
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    words = records[-1]["words_rank"]
    assert sum(words) == records[-1]["words"]
    assert words[2] > 1.25 * max(words[0], words[1]), words
    ck = checkpoint.load(checkpoint.list_checkpoints(str(out / "checkpoints"))[-1])
    assert ck.complete and ck.progress.words_done == ck.progress.words_total


@pytest.mark.mpi
def test_a_balanced_run_resumes_on_another_rank_count(demo, tmp_path):
    flags = ["--dim", "16", "--threads", "1", "--no-progress", "--log-seconds", "0", "--epochs", "2",
             "--balance", "speed", "--checkpoint-every", "100000", "--keep-checkpoints", "100",
             "--eval-sim", str(demo / "demo-similarity.tsv")]
    run = tmp_path / "run"
    run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(demo / "corpus.h5"), "--out", str(run), *flags])
    for p in checkpoint.list_checkpoints(str(run / "checkpoints"))[2:]:
        os.unlink(p)
    run_mpi(3, ["-m", "mpidwe.train", "--corpus", str(demo / "corpus.h5"), "--out", str(run), *flags,
                "--resume", "auto"])
    ck = checkpoint.load(checkpoint.list_checkpoints(str(run / "checkpoints"))[-1])
    assert ck.complete and ck.progress.world_size == 3
    assert ck.progress.words_done == ck.progress.words_total
    assert ck.metrics[-1]["eval"]["sim:demo-similarity.tsv"] > 0.6
