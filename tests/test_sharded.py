"""--store sharded end to end (real mpiexec): the same model as the replicated store, rows on
one owner each, checkpoints in parts, exact resume, kill -9, and a memory cap that one full
matrix would not fit in."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

from mpidwe.io import checkpoint
from mpidwe.parallel import rows as store
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig, SynthConfig
from mpidwe.preprocess import run as preprocess
from mpidwe.synth import write_demo

from conftest import ROOT, error_lines, make_demo_corpus, mpi_command, mpi_env, run_mpi, run_py
from test_resume import _rank_pids, _wait_for_metrics

pytestmark = pytest.mark.mpi
# --sync sparse: the replicated runs compared with the sharded store use its rule's transport
# (auto may send a matrix dense, the same sums in MPI's order, or as int8 rows from 3 ranks)
FLAGS = ["--epochs", "1", "--dim", "16", "--threads", "1", "--no-progress", "--sync-every", "20000",
         "--keep-checkpoints", "100", "--log-seconds", "0", "--sync", "sparse"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("sharded"), tokens=300_000, seed=3) / "corpus.h5"


def train(ranks, corpus, out, *extra, check=True, timeout=240):
    return run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), *FLAGS, *extra],
                   check=check, timeout=timeout)


def last_checkpoint(run_dir) -> checkpoint.Checkpoint:
    return checkpoint.load(checkpoint.list_checkpoints(os.path.join(run_dir, "checkpoints"))[-1])


def digest(ck) -> str:
    return hashlib.sha256(ck.w_in.tobytes() + ck.w_out.tobytes()).hexdigest()


@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_sharded_and_replicated_train_the_same_model(corpus, tmp_path, ranks):
    """One thread per rank: the owners' rule is the replicated sparse sync restricted to each
    owner's rows, in the same float32 operations, so the models are bit-identical."""
    rep, sh = tmp_path / "rep", tmp_path / "sh"
    train(ranks, corpus, rep)
    proc = train(ranks, corpus, sh, "--store", "sharded")
    assert "wrote" in proc.stdout
    a, b = last_checkpoint(rep), last_checkpoint(sh)
    assert b.complete and len(b.parts) == ranks and not a.parts
    rows = b.metrics[-1]["working_set_rows"]
    assert len(rows) == ranks and all(0 < r <= len(b.words) for r in rows)
    assert np.array_equal(a.w_in, b.w_in) and np.array_equal(a.w_out, b.w_out)
    assert (rep / "vectors.txt").read_bytes() == (sh / "vectors.txt").read_bytes()
    # every row lives in exactly one part: rank r's part holds rows r, r + P, ...
    vocab = len(b.words)
    assert sum(p["rows"] for p in b.parts) == vocab
    for r, part in enumerate(b.parts):
        assert part["rows"] == store.owned_count(vocab, r, ranks)
        w_in, w_out = checkpoint.load_part(str(sh / "checkpoints"), part)
        assert np.array_equal(w_in, a.w_in[r::ranks]) and np.array_equal(w_out, a.w_out[r::ranks])
    with h5py.File(b.path) as f:
        assert f[checkpoint.D_W_IN].is_virtual
    if ranks > 1:   # they trained: not the initialisation
        assert np.abs(b.w_out).max() > 0.01
    # inspect export streams a sharded checkpoint piece by piece: the same file
    for matrix in ("input", "sum"):
        got, want = tmp_path / f"sh-{matrix}.txt", tmp_path / f"rep-{matrix}.txt"
        proc = run_py(["-m", "mpidwe.inspect", str(sh), "export", "-o", str(got), "--matrix", matrix])
        assert proc.returncode == 0 and "streamed from" in proc.stdout, proc.stderr
        assert run_py(["-m", "mpidwe.inspect", str(rep), "export", "-o", str(want), "--matrix", matrix]).returncode == 0
        assert got.read_bytes() == want.read_bytes()


@pytest.mark.parametrize("ranks", [2, 3])
def test_pipeline_trains_the_same_model(corpus, tmp_path, ranks):
    """--pipeline pulls round k+1 while round k trains and afterwards refreshes
    the rows k's push changed: every checkpoint equals the one of --no-pipeline, which pulls
    round k+1 after the push."""
    on, off = tmp_path / "on", tmp_path / "off"
    for out, extra in ((on, ["--pipeline"]), (off, [])):
        train(ranks, corpus, out, "--store", "sharded", "--checkpoint-every", "40000", *extra)
    a = checkpoint.list_checkpoints(str(on / "checkpoints"))
    b = checkpoint.list_checkpoints(str(off / "checkpoints"))
    assert len(a) == len(b) >= 3
    for x, y in zip(a, b):
        assert digest(checkpoint.load(x)) == digest(checkpoint.load(y))
    m_on, m_off = last_checkpoint(on).metrics[-1], last_checkpoint(off).metrics[-1]
    assert m_on["pipeline"] and not m_off["pipeline"]
    assert m_on["rows_pulled"] == m_off["rows_pulled"] and m_off["rows_refreshed"] == [0] * ranks
    # the refresh sent rows again, but not all: some prefetched rows were still current
    assert all(0 < r < p for r, p in zip(m_on["rows_refreshed"], m_on["rows_pulled"]))
    assert all(s > 0 for s in m_on["prefetch_seconds"]) and m_off["prefetch_seconds"] == [0] * ranks


@pytest.mark.parametrize("pipeline", ["--no-pipeline", "--pipeline"])
def test_sharded_resume_from_a_middle_checkpoint_is_exact(corpus, tmp_path, pipeline):
    full = tmp_path / "full"
    train(2, corpus, full, "--store", "sharded", "--epochs", "2", "--checkpoint-every", "100000", pipeline)
    cks = checkpoint.list_checkpoints(str(full / "checkpoints"))
    assert len(cks) >= 4
    part = tmp_path / "part"
    shutil.copytree(full, part)
    for p in checkpoint.list_checkpoints(str(part / "checkpoints"))[2:]:
        os.unlink(p)          # their part files stay behind as orphans: removed at the start
    proc = train(2, corpus, part, "--store", "sharded", "--epochs", "2", "--checkpoint-every", "100000",
                 "--resume", "auto", pipeline)
    assert "resuming from" in proc.stdout
    assert digest(last_checkpoint(part)) == digest(last_checkpoint(full))
    kept = {os.path.basename(p)[:14] for p in checkpoint.list_checkpoints(str(part / "checkpoints"))}
    parts = [f for f in os.listdir(part / "checkpoints") if ".part-" in f]
    assert parts and all(f[:14] in kept for f in parts)


def test_replicated_checkpoint_resumes_sharded_and_vice_versa(corpus, tmp_path):
    """The store may change at a resume: each rank reads its rows in pieces of any checkpoint,
    and the replicated store reads a sharded checkpoint through its virtual datasets; at the
    same rank count the rest of the run is the same computation."""
    full = tmp_path / "full"
    train(2, corpus, full, "--epochs", "2", "--checkpoint-every", "100000")
    for first, then in (("replicated", "sharded"), ("sharded", "replicated")):
        run = tmp_path / f"{first}-{then}"
        train(2, corpus, run, "--store", first, "--epochs", "2", "--checkpoint-every", "100000")
        for p in checkpoint.list_checkpoints(str(run / "checkpoints"))[2:]:
            os.unlink(p)
        train(2, corpus, run, "--store", then, "--epochs", "2", "--checkpoint-every", "100000", "--resume", "auto")
        assert digest(last_checkpoint(run)) == digest(last_checkpoint(full)), (first, then)


def test_sharded_resume_on_another_rank_count(corpus, tmp_path):
    run = tmp_path / "r"
    train(2, corpus, run, "--store", "sharded", "--epochs", "2", "--checkpoint-every", "100000")
    for p in checkpoint.list_checkpoints(str(run / "checkpoints"))[2:]:
        os.unlink(p)
    proc = train(3, corpus, run, "--store", "sharded", "--epochs", "2", "--checkpoint-every", "100000",
                 "--resume", "auto")
    assert "re-planned" in proc.stdout
    ck = last_checkpoint(run)
    assert ck.complete and len(ck.parts) == 3 and np.isfinite(ck.w_in).all()


def test_kill_9_one_rank_and_resume_auto(corpus, tmp_path):
    out = tmp_path / "k"
    cmd = mpi_command(2, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), *FLAGS,
                          "--store", "sharded", "--epochs", "30", "--checkpoint-every", "50000"])
    proc = subprocess.Popen(cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_metrics(proc, out, lines=4, timeout=120)
    victim = _rank_pids(proc.pid)[-1]
    t = time.time()
    os.kill(victim, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode != 0 and time.time() - t < 60
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    assert ck is not None and not ck.complete and len(ck.parts) == 2
    train(2, corpus, out, "--store", "sharded", "--epochs", "30", "--checkpoint-every", "50000",
          "--resume", "auto", timeout=600)
    final = checkpoint.latest_valid(str(out / "checkpoints"))
    assert final.complete and final.progress.words_done == final.progress.words_total


def test_sharded_with_balance_speed(corpus, tmp_path):
    """--balance speed divides each round's words by measured speed; the sharded round takes
    whatever pieces it is given."""
    out = tmp_path / "b"
    train(2, corpus, out, "--store", "sharded", "--balance", "speed")
    ck = last_checkpoint(out)
    assert ck.complete and ck.progress.words_done == ck.progress.words_total and len(ck.parts) == 2


def test_sharded_refuses_what_it_cannot_do(corpus, tmp_path):
    for extra, msg in ((["--sync", "dense"], "--store sharded"), (["--kernel", "torch"], "--store sharded")):
        proc = train(2, corpus, tmp_path / "x", "--store", "sharded", *extra, check=False, timeout=60)
        lines = error_lines(proc.stderr)
        assert proc.returncode == 2 and len(lines) == 1 and msg in lines[0], proc.stderr


# -------------------------------------------------------------------------- memory budget
def test_memory_budget_bounds_the_round(corpus, tmp_path):
    """A --memory-budget that a round of the interval's words would not fit in cuts the round
    where its expected peak fits (train/plan.sharded_round), and the log says so."""
    import json
    import math

    from mpidwe.core.config import TrainConfig
    from mpidwe.core.vocab import keep_probabilities
    from mpidwe.train.plan import sharded_round

    with h5py.File(corpus) as f:
        counts = np.asarray(f["vocab/counts"])
    memory = store.RoundMemory(counts.astype(np.float64), keep_probabilities(counts, 1e-4), 16, 5, 5, True)
    budget_mb = math.ceil((store.fixed_bytes(len(counts), 16, 2) + memory.peak(10_000)) / store.MiB * 1000) / 1000
    words, bound, _ = sharded_round(TrainConfig(store="sharded", dim=16, memory_budget=budget_mb), counts, 20_000, 2)
    assert bound == "memory" and 10_000 <= words < 20_000
    proc = train(2, corpus, tmp_path / "sh", "--store", "sharded", "--memory-budget", str(budget_mb))
    resolved = json.loads((tmp_path / "sh" / "config.json").read_text())
    assert (resolved["sync_every"], resolved["round_bound"]) == (words, "memory")
    assert resolved["memory_budget_mb"] == pytest.approx(budget_mb, abs=1e-3)
    assert f"every {words:,} words (bounded by the memory; memory budget {budget_mb:,.0f} MB per rank)" in proc.stdout
    # the largest shard holds at least half the words, and no rank trains more than `words` a round
    ck = last_checkpoint(tmp_path / "sh")
    assert ck.progress.rounds == resolved["rounds"] >= math.ceil(resolved["words_total"] / 2 / words)


@pytest.mark.slow
def test_defaults_hold_half_a_replica(tmp_path):
    """Issue 23: at its defaults on a 1.5M-word vocabulary, dim 100, 4 ranks, every rank of
    the sharded store peaks at most at half of one replica's two matrices (4 V d bytes) plus
    500 MB, and the planted clusters and relations are recovered (benchmarks/sharded.py
    budget; about 15 minutes on 2 shared cores, docs/lab/benchmarks.md)."""
    import json

    proc = run_py([str(ROOT / "benchmarks" / "sharded.py"), "budget", "--workdir", str(tmp_path)], timeout=3600)
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["exit"] == 0 and r["vocab_size"] > 1_500_000 and len(r["rss_mb"]) == 4, r
    assert r["round_bound"] == "memory" and r["within"], r
    assert r["sim"] > 0.8 and r["analogy"] > 0.95, r


# -------------------------------------------------------------------------- memory cap
@pytest.mark.slow
def test_no_rank_allocates_a_full_matrix(tmp_path):
    """A vocabulary of ~258k words at dim 400: one V x d matrix is 413 MB. Every rank's data
    segment is capped at its baseline (after imports and MPI start) plus 90% of that: the
    replicated store fails at once (it needs four such matrices), the sharded store trains,
    checkpoints and exports the vectors as text (streamed to rank 0 in pieces, written row
    by row) under the cap on 8 ranks (its own rows: 103 MB; numba's compiled kernels take
    about 100 MB of the rest)."""
    demo = tmp_path / "big"
    write_demo(SynthConfig(output=str(demo), tokens=1_000_000, rare_words=300_000, rare_share=0.6, rare_zipf=0.0))
    corpus = demo / "corpus.h5"
    preprocess(PreprocessConfig(inputs=(str(demo / "demo.txt"),), output=str(corpus), min_count=1),
               Comm.serial(), log=None)
    with h5py.File(corpus) as f:
        vocab = len(f["vocab/words"])
    dim = 400
    matrix = vocab * dim * 4
    assert matrix > 350e6
    budget = int(0.9 * matrix)
    args = ["--corpus", str(corpus), "--dim", str(dim), "--epochs", "1", "--threads", "1", "--sync-every", "2000",
            "--no-progress", "--log-seconds", "0", "--checkpoint-every", "300000"]
    capped = str(ROOT / "tests" / "mpi" / "capped_train.py")
    run_mpi(1, ["-m", "mpidwe.train", *args, "--out", str(tmp_path / "warm"), "--store", "sharded",
                "--sync-every", "500000", "--no-export"], timeout=900)   # compiles the kernels for this dim
    proc = run_mpi(8, [capped, str(budget), *args, "--out", str(tmp_path / "rep")], check=False, timeout=900)
    assert proc.returncode != 0 and "MemoryError" in proc.stderr
    proc = run_mpi(8, [capped, str(budget), *args, "--out", str(tmp_path / "sh"), "--store", "sharded"],
                   timeout=1800)
    assert proc.stdout.count("baseline") == 8
    ck = last_checkpoint(tmp_path / "sh")
    assert ck.complete and len(ck.parts) == 8 and ck.progress.words_done == ck.progress.words_total
    with open(tmp_path / "sh" / "vectors.txt", "rb") as fh:
        assert fh.readline() == f"{vocab} {dim}\n".encode()
        first = fh.readline().split()
        assert first[0].decode() == ck.words[0] and np.array_equal(np.array(first[1:], np.float32), ck.w_in[0])
    assert sum(1 for _ in open(tmp_path / "sh" / "vectors.txt", "rb")) == vocab + 1
