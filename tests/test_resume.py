"""Checkpoints during training, exact resume, signals and faults (real mpiexec)."""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from mpidwe.io import checkpoint
from mpidwe.io.corpus import Corpus
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig
from mpidwe.preprocess import run as preprocess

from conftest import error_lines, make_demo_corpus, mpi_command, mpi_env, run_mpi

pytestmark = pytest.mark.mpi
FLAGS = ["--epochs", "1", "--dim", "16", "--threads", "1", "--no-progress", "--sync-every", "20000", "--keep-checkpoints", "100"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("resume"), tokens=300_000, seed=2) / "corpus.h5"


def final_params(run_dir) -> str:
    ck = checkpoint.load(checkpoint.list_checkpoints(os.path.join(run_dir, "checkpoints"))[-1])
    assert ck.complete
    return hashlib.sha256(ck.w_in.tobytes() + ck.w_out.tobytes()).hexdigest()


def train(ranks, corpus, out, *extra, check=True, timeout=180):
    return run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), *FLAGS, *extra],
                   check=check, timeout=timeout)


TIERS = ("--sync", "dense", "--wire", "int8", "--sync-full", "4", "--sync-hot", "64", "--sync-every", "5000")


# error feedback (on in tiers) keeps its residuals across the evaluations' flushes and drops
# them at checkpoints: evaluations between the checkpoints must not break exactness
EVALS = ("--eval-every", "60000", "--eval-sim", "{similarity}")


# the torch kernel's device store in tiers (CPU torch): int4 rows with error feedback, the
# spans' rows staged through the host
TORCH_TIERS = ("--kernel", "torch", "--device", "cpu", "--sync", "auto", "--wire", "int4", "--sync-full", "4",
               "--sync-hot", "64", "--sync-every", "5000")


@pytest.mark.parametrize("ranks,extra", [(2, ()), (4, ()), (8, ()), (3, TIERS), (3, TIERS + EVALS), (2, ("--overlap",)),
                                         (2, ("--sync-seconds", "0.005")), (3, TORCH_TIERS + EVALS)],
                         ids=["2", "4", "8", "3-tiers", "3-tiers-evaluating", "2-overlap", "2-sync-seconds",
                              "3-torch-tiers-evaluating"])
def test_resume_from_a_middle_checkpoint_is_exact(corpus, tmp_path, ranks, extra):
    if "torch" in extra:
        pytest.importorskip("torch")
    extra = [x.format(similarity=corpus.parent / "demo-similarity.tsv") for x in extra]
    full = tmp_path / "full"
    train(ranks, corpus, full, "--epochs", "2", "--checkpoint-every", "100000", *extra)
    cks = checkpoint.list_checkpoints(str(full / "checkpoints"))
    assert len(cks) >= 4
    # the same run, stopped after its second checkpoint: later checkpoints never happened
    part = tmp_path / "part"
    shutil.copytree(full, part)
    for p in checkpoint.list_checkpoints(str(part / "checkpoints"))[2:]:
        os.unlink(p)
    mid = checkpoint.load(checkpoint.list_checkpoints(str(part / "checkpoints"))[-1])
    assert not mid.complete and 0 < mid.progress.words_done < mid.progress.words_total
    proc = train(ranks, corpus, part, "--epochs", "2", "--checkpoint-every", "100000", "--resume", "auto", *extra)
    assert "resuming from" in proc.stdout
    assert final_params(part) == final_params(full)
    # the metrics history continues where it stopped
    ck = checkpoint.load(checkpoint.list_checkpoints(str(part / "checkpoints"))[-1])
    assert [m["step"] for m in ck.metrics] == list(range(1, ck.progress.rounds + 1))
    # and counts the restart: records before the resume say 0, after it 1
    restarts = [m["restarts"] for m in ck.metrics]
    assert restarts[0] == 0 and restarts[-1] == 1 and restarts == sorted(restarts)


def test_resume_refuses_incompatible_runs(corpus, tmp_path):
    run = tmp_path / "r"
    train(2, corpus, run, "--checkpoint-every", "100000")
    ck_path = checkpoint.list_checkpoints(str(run / "checkpoints"))[0]
    other = tmp_path / "other.h5"
    (tmp_path / "o.txt").write_text("a b c a b a\n" * 50)
    preprocess(PreprocessConfig(inputs=(str(tmp_path / "o.txt"),), output=str(other), min_count=1),
               Comm.serial(), log=None)
    for ranks, extra, msg in [(2, ["--dim", "32"], "--dim is 32 but the checkpoint has 16"),
                              (2, ["--model", "cbow"], "--model is 'cbow'")]:
        proc = run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(run), *FLAGS, *extra,
                               "--resume", ck_path], check=False, timeout=60)
        lines = error_lines(proc.stderr)
        assert proc.returncode == 2 and len(lines) == 1 and msg in lines[0], proc.stderr
    proc = run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(other), "--out", str(run), *FLAGS, "--resume",
                       ck_path], check=False, timeout=60)
    assert proc.returncode == 2 and "another corpus" in error_lines(proc.stderr)[0]


def test_resume_takes_the_checkpoints_settings_and_trains_more(corpus, tmp_path):
    """--resume auto alone continues a run as it was set up (as gensim's model.train goes on
    with the model's settings): model settings, corpus, epochs and evaluation come from the
    checkpoint; --epochs N on a finished run trains more; a finished run says so."""
    run = tmp_path / "r"
    pairs = tmp_path / "pairs.tsv"
    with Corpus(str(corpus)) as c:
        words = list(c.words)
        pairs.write_text("".join(f"{a}\t{b}\t{i}\n" for i, (a, b) in enumerate(zip(words[:20], words[20:40]))))
    train(2, corpus, run, "--dim", "12", "--window", "3", "--eval-sim", str(pairs))
    first = checkpoint.load(checkpoint.list_checkpoints(str(run / "checkpoints"))[-1])
    assert first.complete and first.config["epochs"] == 1

    # only the run directory and more epochs: no --corpus, --dim, --window, --sync-every
    proc = run_mpi(2, ["-m", "mpidwe.train", "--out", str(run), "--resume", "auto", "--epochs", "2",
                       "--threads", "1", "--no-progress"], timeout=120)
    assert "resuming with the checkpoint's settings: " in proc.stdout and "--dim 12" in proc.stdout
    more = checkpoint.load(checkpoint.list_checkpoints(str(run / "checkpoints"))[-1])
    assert more.complete and more.w_in.shape == first.w_in.shape
    assert (more.config["dim"], more.config["window"], more.config["epochs"]) == (12, 3, 2)
    assert more.config["sync_every"] == 20000 and more.config["corpus"] == first.config["corpus"]
    assert more.progress.words_done == 2 * first.progress.words_done
    assert not np.array_equal(more.w_in, first.w_in)
    # the evaluation goes on after the resume
    assert "sim:pairs.tsv" in more.metrics[-1]["eval"], more.metrics[-1]

    # again with nothing left to train (epochs 2 from the checkpoint): says so, exit 0
    proc = run_mpi(2, ["-m", "mpidwe.train", "--out", str(run), "--resume", "auto", "--threads", "1",
                       "--no-progress"], timeout=120)
    assert "nothing to train: the run in" in proc.stdout and "give --epochs 3 or more" in proc.stdout
    assert "checkpoint None" not in proc.stdout and "trained 0 words" not in proc.stdout
    assert checkpoint.list_checkpoints(str(run / "checkpoints"))[-1] == more.path

    # a setting the user gives that differs is still refused
    proc = run_mpi(2, ["-m", "mpidwe.train", "--out", str(run), "--resume", "auto", "--dim", "16",
                       "--epochs", "3"], check=False, timeout=60)
    assert proc.returncode == 2 and "--dim is 16 but the checkpoint has 12" in error_lines(proc.stderr)[0]


def _rank_pids(root_pid):
    """Python rank processes under an mpiexec."""
    found, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        try:
            kids = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    kids += [int(x) for x in fh.read().split()]
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if b"mpidwe.train" in cmd and b"mpiexec" not in cmd.split(b"\0")[0]:
            found.append(pid)
        todo += kids
    return found


def _start(ranks, corpus, out, *extra):
    cmd = mpi_command(ranks, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), *FLAGS, *extra])
    return subprocess.Popen(cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_metrics(proc, out, lines=1, timeout=60):
    t = time.time()
    path = out / "metrics.jsonl"
    while time.time() - t < timeout:
        if path.exists() and len(path.read_text().splitlines()) >= lines:
            return
        if proc.poll() is not None:
            raise AssertionError(f"training ended early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError("no metrics in time")


def test_sigterm_checkpoints_exits_75_and_resume_completes(corpus, tmp_path):
    out = tmp_path / "t"
    proc = _start(2, corpus, out, "--epochs", "30")
    _wait_for_metrics(proc, out)
    pids = _rank_pids(proc.pid)
    assert len(pids) == 2
    for pid in pids:  # as Slurm does: every task gets the signal
        os.kill(pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 75, stderr
    assert "stop requested" in stdout
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    assert ck is not None and not ck.complete and ck.progress.round < ck.progress.rounds
    train(2, corpus, out, "--epochs", "30", "--resume", "auto", timeout=300)
    final = checkpoint.latest_valid(str(out / "checkpoints"))
    assert final.complete and final.progress.words_done == final.progress.words_total


def test_ctrl_c_checkpoints_exits_130_and_resume_completes(corpus, tmp_path):
    """Ctrl-C (SIGINT) checkpoints as SIGTERM does, at the next sync, and exits 130; the
    next run continues from that checkpoint. (Before, it died without one and the next run
    was told to continue a run that had nothing to continue.)"""
    out = tmp_path / "c"
    cmd = [sys.executable, "-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), *FLAGS,
           "--epochs", "30"]
    # a shell that starts the suite in the background ignores SIGINT for its children
    proc = subprocess.Popen(cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for_metrics(proc, out, timeout=180)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 130, stderr
    assert "interrupted: a checkpoint is written at the next sync" in stderr and "stop requested (Ctrl-C)" in stdout
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    assert ck is not None and not ck.complete and ck.progress.round < ck.progress.rounds
    again = train(1, corpus, out, "--epochs", "30", check=False)
    assert again.returncode == 2 and "continue it with --resume auto" in error_lines(again.stderr)[0]
    done = train(1, corpus, out, "--epochs", "30", "--resume", "auto", timeout=300)
    assert f"resuming from {ck.path}" in done.stdout
    assert checkpoint.latest_valid(str(out / "checkpoints")).complete


def test_a_run_without_a_checkpoint_is_not_offered_a_resume(corpus, tmp_path):
    """A run dir with metrics but no checkpoint (a run killed before its first one): the
    next run is not told to continue it, and --resume auto says it starts a new run."""
    out = tmp_path / "n"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 1, "words": 20000}\n')
    proc = train(1, corpus, out, check=False)
    assert proc.returncode == 2
    line = error_lines(proc.stderr)[0]
    assert "wrote no checkpoint, so there is nothing to resume" in line and "--resume auto" not in line, line
    proc = train(1, corpus, out, "--resume", "auto")
    assert f"--resume auto: no checkpoint in {out / 'checkpoints'}, nothing to resume: a new run starts" in proc.stdout
    assert checkpoint.latest_valid(str(out / "checkpoints")).complete


def test_kill_9_one_rank_ends_job_and_resume_finishes(corpus, tmp_path):
    out = tmp_path / "k"
    proc = _start(2, corpus, out, "--epochs", "30", "--checkpoint-every", "50000")
    _wait_for_metrics(proc, out, lines=4)
    victim = _rank_pids(proc.pid)[-1]
    t = time.time()
    os.kill(victim, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode != 0 and time.time() - t < 30
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    assert ck is not None and not ck.complete
    train(2, corpus, out, "--epochs", "30", "--checkpoint-every", "50000", "--resume", "auto", timeout=300)
    assert checkpoint.latest_valid(str(out / "checkpoints")).complete


def test_divergence_stops_with_exit_3_and_keeps_checkpoint(corpus, tmp_path):
    out = tmp_path / "nan"
    proc = train(2, corpus, out, "--lr", "1e30", "--checkpoint-every", "20000", check=False)
    assert proc.returncode == 3, proc.stderr
    assert "diverged" in error_lines(proc.stderr)[0]
    for p in checkpoint.list_checkpoints(str(out / "checkpoints")):
        ck = checkpoint.load(p)
        assert np.isfinite(ck.w_in).all() and np.isfinite(ck.w_out).all()


def test_a_checkpoint_from_before_wire_feedback_resumes_without_it(monkeypatch):
    """--wire-feedback came later: a checkpoint without the key ran without it, so a resume
    that does not give the flag continues without it; one that has it, or a flag given on
    the command line, keeps what it says."""
    from mpidwe.core.config import TrainConfig
    from mpidwe.train import resume

    cfg = TrainConfig(corpus="c.h5", out="o", resume="auto")
    assert cfg.wire_feedback == "auto"
    stored = {"corpus": "c.h5", "ranks": 4, "wire": "auto"}
    monkeypatch.setattr(resume, "_stored_config", lambda c: dict(stored))
    old = {"sync_schedule": "geometric", "ring_overlap": "off"}     # the tiers' schedule and the halves came later too
    assert resume._settings_to_adopt(cfg, frozenset(), 4)[0] == {"wire_feedback": "off", **old}
    assert resume._settings_to_adopt(cfg, frozenset({"wire_feedback"}), 4)[0] == old
    stored["wire_feedback"] = "auto"
    assert resume._settings_to_adopt(cfg, frozenset(), 4)[0] == old


def test_resume_auto_before_the_first_checkpoint_starts_the_run_again_as_it_was(corpus, tmp_path, monkeypatch):
    """A run that stopped before its first checkpoint (a rank died, the guard tripped) has a
    config.json and no checkpoint: the hint's ``--resume auto --out RUN`` starts it again with
    that run's settings (corpus, dim, window, epochs), on the command line and in the Python
    call, never the demo corpus at the defaults; a damaged config.json is one line."""
    import json

    import mpidwe
    from mpidwe.train import runner

    run = tmp_path / "r"
    train(1, corpus, run, "--dim", "12", "--window", "3", "--epochs", "2")
    for p in checkpoint.list_checkpoints(str(run / "checkpoints")):
        os.unlink(p)                              # as if it died before its first checkpoint
    proc = run_mpi(1, ["-m", "mpidwe.train", "--out", str(run), "--resume", "auto", "--threads", "1",
                       "--no-progress"], cwd=tmp_path, timeout=120)
    assert "no checkpoint yet" in proc.stdout and not (tmp_path / "demo").exists()
    cfg = json.loads((run / "config.json").read_text())
    assert (cfg["corpus"], cfg["dim"], cfg["window"], cfg["epochs"]) == (str(corpus), 12, 3, 2)
    ck = checkpoint.load(checkpoint.list_checkpoints(str(run / "checkpoints"))[-1])
    assert ck.complete and ck.w_in.shape[1] == 12

    for p in checkpoint.list_checkpoints(str(run / "checkpoints")):
        os.unlink(p)
    monkeypatch.setattr(runner, "ensure_demo_corpus", lambda *a, **k: pytest.fail("trained the demo corpus"))
    model = mpidwe.train(out=str(run), resume="auto", threads=1, progress=False)
    assert model.vectors.shape[1] == 12
    assert json.loads((run / "config.json").read_text())["window"] == 3

    for p in checkpoint.list_checkpoints(str(run / "checkpoints")):
        os.unlink(p)
    (run / "config.json").write_bytes(b"{ not json")
    proc = run_mpi(1, ["-m", "mpidwe.train", "--out", str(run), "--resume", "auto"], cwd=tmp_path, check=False,
                   timeout=60)
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and "config.json cannot be read" in lines[0], proc.stderr
    assert (run / "config.json").read_bytes() == b"{ not json"


STOP_TIERS = ("--sync", "dense", "--wire", "int4", "--sync-full", "4", "--sync-hot", "64", "--sync-every", "5000")


@pytest.mark.parametrize("ranks,extra", [(3, STOP_TIERS), (2, ("--overlap", "--sync-every", "5000")),
                                         (3, ("--store", "blocks", "--wire", "int8", "--ring-overlap", "on",
                                              "--sync-every", "5000"))],
                         ids=["3-tiers-int4-feedback", "2-overlap", "3-blocks-int8-ring-in-halves"])
def test_sigterm_then_resume_is_exact_in_tiers_and_with_overlap(corpus, tmp_path, ranks, extra):
    """A stop (SIGTERM, Slurm's requeue) flushes its checkpoint, which a run in tiers (changes
    waiting, error-feedback residuals) or with --overlap (an exchange in flight) would not have
    done there: every rank keeps what the flush changes beside the checkpoint, and the resume
    on as many ranks takes it back, so the run ends bit-identical to an uninterrupted one."""
    flags = ("--epochs", "4", *extra)
    full = tmp_path / "full"
    train(ranks, corpus, full, *flags, timeout=300)
    out = tmp_path / "stopped"
    proc = _start(ranks, corpus, out, *flags)
    _wait_for_metrics(proc, out)
    for pid in _rank_pids(proc.pid):
        os.kill(pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 75, stderr
    stop = checkpoint.latest_valid(str(out / "checkpoints"))
    assert 0 < stop.progress.round < stop.progress.rounds
    names = sorted(os.listdir(out / "checkpoints"))
    assert [n for n in names if ".rank-" in n] == [f"ckpt-{stop.progress.round:09d}.rank-{r:05d}-of-{ranks:05d}.h5"
                                                   for r in range(ranks)]
    proc = train(ranks, corpus, out, *flags, "--resume", "auto", timeout=300)
    assert "resuming exactly" in proc.stdout
    assert final_params(out) == final_params(full)


def test_a_resumed_run_keeps_the_store_auto_chose(monkeypatch):
    """--store auto is stored resolved: a resume that does not give --store goes on on the
    store the run trained on (blocks, or replicated as every checkpoint before auto), even on
    a rank count where auto would choose otherwise; a --store given on the command line wins."""
    from mpidwe.core.config import TrainConfig
    from mpidwe.train import resume

    cfg = TrainConfig(corpus="c.h5", out="o", resume="auto")
    assert cfg.store == "auto"
    for was in ("blocks", "replicated"):
        stored = {"corpus": "c.h5", "ranks": 16, "store": was}
        monkeypatch.setattr(resume, "_stored_config", lambda c: dict(stored))
        assert resume._settings_to_adopt(cfg, frozenset(), 4)[0].get("store") == was
        assert "store" not in resume._settings_to_adopt(cfg, frozenset({"store"}), 4)[0]


def test_a_stop_keeps_rank_state_only_where_the_uninterrupted_run_would_not_checkpoint():
    """A stop on a round where a checkpoint was due anyway writes that checkpoint as the
    uninterrupted run does (a flush, the lossy ring's residuals dropped), so a resume from it
    is exact without the ranks' state, and restoring that state would make it differ."""
    from mpidwe.train.loop import keeps_rank_state

    assert keeps_rank_state(stop=True, last=False, due=False)
    assert not keeps_rank_state(stop=True, last=False, due=True)
    assert not keeps_rank_state(stop=True, last=True, due=False)
    assert not keeps_rank_state(stop=False, last=False, due=True)
