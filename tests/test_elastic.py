"""Resuming on another number of ranks or for more epochs (re-planned runs), and warm starts
(--init-from) on a grown corpus (real mpiexec)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from mpidwe.io import checkpoint
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig, SynthConfig
from mpidwe.evaluate import evaluate_similarity, read_similarity
from mpidwe.preprocess import run as preprocess
from mpidwe.synth import write_demo
from mpidwe.train.warm import carried_rows

from conftest import error_lines, make_demo_corpus, run_mpi

pytestmark = pytest.mark.mpi
FLAGS = ["--dim", "16", "--threads", "1", "--no-progress", "--log-seconds", "0", "--sync-every", "20000",
         "--keep-checkpoints", "100", "--checkpoint-every", "100000"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("elastic"), tokens=300_000, seed=4) / "corpus.h5"


def train(ranks, corpus, out, *extra, check=True):
    return run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), *FLAGS, *extra],
                   check=check, timeout=240)


def newest(run) -> checkpoint.Checkpoint:
    return checkpoint.load(checkpoint.list_checkpoints(str(run / "checkpoints"))[-1])


def cut_after(run, keep: int) -> checkpoint.Checkpoint:
    """Delete the checkpoints after the first ``keep``: the run stopped there."""
    for p in checkpoint.list_checkpoints(str(run / "checkpoints"))[keep:]:
        os.unlink(p)
    return newest(run)


@pytest.fixture(scope="module")
def two_rank_run(corpus, tmp_path_factory):
    run = tmp_path_factory.mktemp("two") / "run"
    train(2, corpus, run, "--epochs", "2")
    return run


@pytest.mark.parametrize("ranks", [1, 3])
def test_resume_on_another_number_of_ranks_finishes_the_plan(corpus, two_rank_run, tmp_path, ranks):
    run = tmp_path / "run"
    shutil.copytree(two_rank_run, run)
    mid = cut_after(run, 3)
    assert not mid.complete and mid.progress.world_size == 2
    proc = train(ranks, corpus, run, "--epochs", "2", "--resume", "auto")
    assert "re-planned the rest of the run: written by 2 rank(s)" in proc.stdout
    ck = newest(run)
    p = ck.progress
    assert ck.complete and p.world_size == ranks and p.words_done == p.words_total == mid.progress.words_total
    # the history goes on from the checkpoint: steps rise, the restart is counted
    steps = [m["step"] for m in ck.metrics]
    assert steps == sorted(set(steps)) and steps[0] == 1 and steps[-1] == p.rounds
    assert [m["restarts"] for m in ck.metrics if m["step"] > mid.progress.round] == \
        [1] * sum(m["step"] > mid.progress.round for m in ck.metrics)
    assert ck.metrics[-1]["words"] == p.words_total
    config = json.loads((run / "config.json").read_text())
    assert config["ranks"] == ranks and config["replan"]["from_ranks"] == 2
    assert np.isfinite(ck.w_in).all() and 0 < np.abs(ck.w_in).max() < 10


def test_a_replanned_run_resumes_exactly(corpus, two_rank_run, tmp_path):
    full = tmp_path / "full"
    shutil.copytree(two_rank_run, full)
    cut_after(full, 2)
    train(3, corpus, full, "--epochs", "2", "--resume", "auto", "--checkpoint-every", "40000")  # re-planned
    part = tmp_path / "part"
    shutil.copytree(full, part)
    mid = cut_after(part, len(checkpoint.list_checkpoints(str(part / "checkpoints"))) - 4)
    assert mid.progress.world_size == 3 and not mid.complete and "replan" in mid.config
    proc = train(3, corpus, part, "--epochs", "2", "--resume", "auto", "--checkpoint-every", "40000")
    assert "re-planned" not in proc.stdout
    a, b = newest(full), newest(part)
    assert a.progress == b.progress
    assert np.array_equal(a.w_in, b.w_in) and np.array_equal(a.w_out, b.w_out)


def test_more_epochs_continue_a_finished_run_and_fewer_are_refused(corpus, two_rank_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two_rank_run, run)
    done = newest(run)
    assert done.complete and done.config["epochs"] == 2
    proc = train(2, corpus, run, "--epochs", "3", "--resume", "auto")
    assert "for 6" not in proc.stderr
    ck = newest(run)
    assert ck.complete and ck.progress.words_done == ck.progress.words_total == done.progress.words_total * 3 // 2
    assert ck.metrics[-1]["epoch"] == pytest.approx(3.0)
    proc = train(2, corpus, run, "--epochs", "2", "--resume", "auto", check=False)
    assert proc.returncode == 2 and "give at least --epochs 3" in error_lines(proc.stderr)[0]


def test_carried_rows_match_words_not_ids():
    new, old = carried_rows(["a", "b", "c"], ["c", "x", "a", "y"])
    assert new.tolist() == [0, 2] and old.tolist() == [2, 0]


def test_warm_start_on_a_grown_corpus_learns_the_new_words(tmp_path):
    """Part one is a demo corpus; the grown corpus adds a second demo part with its own words
    and planted clusters. A warm start from part one's model carries its rows over and learns
    the new part's clusters."""
    write_demo(SynthConfig(output=str(tmp_path / "a"), tokens=300_000, seed=11))
    write_demo(SynthConfig(output=str(tmp_path / "b"), tokens=300_000, seed=12))
    grown = tmp_path / "grown.txt"
    grown.write_bytes((tmp_path / "a" / "demo.txt").read_bytes() + (tmp_path / "b" / "demo.txt").read_bytes())
    for text, out in ((tmp_path / "a" / "demo.txt", tmp_path / "a.h5"), (grown, tmp_path / "ab.h5")):
        preprocess(PreprocessConfig(inputs=(str(text),), output=str(out)), Comm.serial(), log=None)
    first = tmp_path / "first"
    train(2, tmp_path / "a.h5", first, "--epochs", "2", "--dim", "32")
    old = newest(first)
    warm = tmp_path / "warm"
    proc = train(3, tmp_path / "ab.h5", warm, "--epochs", "1", "--dim", "32", "--init-from", str(first),
                 "--eval-sim", str(tmp_path / "a" / "demo-similarity.tsv"),
                 str(tmp_path / "b" / "demo-similarity.tsv"))
    assert "warm start from" in proc.stdout
    config = json.loads((warm / "config.json").read_text())
    info = config["init_from"]
    assert info["rows_carried"] == len(old.words) and info["rows_new"] > 1000
    ck = newest(warm)
    assert ck.progress.words_done == ck.progress.words_total       # a new run with its own schedule
    index = {w: i for i, w in enumerate(ck.words)}
    for part in ("a", "b"):                                       # both parts' clusters are there
        r = evaluate_similarity(ck.w_in, index, read_similarity(str(tmp_path / part / "demo-similarity.tsv")))
        assert r["coverage"] > 0.9 and r["spearman"] > 0.6, (part, r)
    # it started from the old model: the carried words keep their direction (two runs from
    # scratch agree only up to a rotation, so their rows' cosines would be near 0)
    new_ids, old_ids = carried_rows(old.words, ck.words)
    a, b = ck.w_in[new_ids], old.w_in[old_ids]
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert np.median(cos) > 0.5, np.median(cos)


def test_warm_start_refuses_a_model_of_another_dimension(corpus, two_rank_run, tmp_path):
    proc = train(2, corpus, tmp_path / "r", "--dim", "32", "--init-from", str(two_rank_run), check=False)
    assert proc.returncode == 2 and "its vectors have 16 dimensions, --dim is 32" in error_lines(proc.stderr)[0]
    assert not (tmp_path / "r" / "config.json").exists()
