"""train --follow DIR: files dropped into a folder are appended and trained on, and a restart
trains no file twice and skips none (mpidwe.train.follow)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

import mpidwe
from mpidwe.io import checkpoint
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig
from mpidwe.io.corpus import Corpus
from mpidwe.train.follow import Follower, FollowState, ready_files
from mpidwe.preprocess import run as preprocess

from conftest import error_lines, make_demo_corpus, mpi_command, mpi_env, run_py

FLAGS = ["--dim", "16", "--threads", "1", "--no-progress", "--log-seconds", "0", "--epochs", "1",
         "--follow-poll", "0.2", "--follow-settle", "0.2"]


@pytest.fixture
def setup(tmp_path):
    d = make_demo_corpus(tmp_path / "demo", tokens=60_000, seed=5)
    lines = (d / "demo.txt").read_text().splitlines(keepends=True)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    parts = [lines[i::4] for i in range(4)]
    return d / "corpus.h5", inbox, ["".join(p) for p in parts[:3]]


def drop(inbox, name: str, text: str) -> None:
    """As a writer should: write aside, then rename into the folder."""
    tmp = inbox / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, inbox / name)


def state(out) -> list[dict]:
    p = out / "follow.json"
    return json.loads(p.read_text())["steps"] if p.exists() else []


def wait_for(proc, cond, timeout=150):
    t = time.time()
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"--follow ended early ({proc.returncode}): {proc.communicate()}")
        assert time.time() - t < timeout, "timed out"
        time.sleep(0.1)


def trained(out) -> list[str]:
    return [s["file"] for s in state(out) if s["state"] == "trained"]


@pytest.mark.mpi
def test_follow_picks_up_dropped_files_and_a_restart_does_not_train_them_again(setup, tmp_path):
    corpus, inbox, texts = setup
    out = tmp_path / "run"
    args = ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), "--follow", str(inbox), *FLAGS]
    proc = subprocess.Popen(mpi_command(2, args), env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for(proc, lambda: trained(out) == [None])           # step 0: the corpus as it was
        drop(inbox, "a.txt", texts[0])
        drop(inbox, "b.txt", texts[1])
        (inbox / "c.txt.tmp").write_text(texts[2])               # still being written: not taken
        wait_for(proc, lambda: trained(out) == [None, "a.txt", "b.txt"])
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "stop requested" in stdout and "Traceback" not in stderr
    steps = state(out)
    assert [s["sha256"] for s in steps[1:]] == [hashlib.sha256(t.encode()).hexdigest() for t in texts[:2]]
    with Corpus(str(corpus)) as c:
        assert len(c.segments) == 3
        assert [s["corpus_id"] for s in steps] == [steps[1]["corpus_id_before"], steps[2]["corpus_id_before"],
                                                   c.corpus_id]
        seg_b = c.segments[2]
    # each step trained its new segment once, warm-started from the step before
    for k in (1, 2):
        run = out / "steps" / f"{k:04d}"
        cfg = json.loads((run / "config.json").read_text())
        assert cfg["segments"] == "new" and cfg["init_from"]["path"].startswith(str(out / "steps" / f"{k - 1:04d}"))
        ck = checkpoint.load(checkpoint.list_checkpoints(str(run / "checkpoints"))[-1])
        assert ck.complete
    assert ck.progress.words_done == seg_b.n_tokens

    # a restart trains nothing again; the file renamed in meanwhile is the only new step
    os.replace(inbox / "c.txt.tmp", inbox / "c.txt")
    time.sleep(0.3)
    proc = subprocess.run(mpi_command(2, args + ["--follow-exit-idle"]), env=mpi_env(), capture_output=True,
                          text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    assert trained(out) == [None, "a.txt", "b.txt", "c.txt"]
    assert proc.stdout.count("appending") == 1 and "inbox/c.txt" in proc.stdout
    with Corpus(str(corpus)) as c:
        assert len(c.segments) == 4
    # one live model: RUN_DIR reads as the newest step, for the API, inspect and its vectors file
    newest = out / "steps" / "0003"
    assert os.readlink(out / "current") == os.path.join("steps", "0003")
    assert (out / "vectors.txt").read_bytes() == (newest / "vectors.txt").read_bytes()
    ck = checkpoint.load(checkpoint.list_checkpoints(str(newest / "checkpoints"))[-1])
    live = mpidwe.load(str(out))
    assert np.array_equal(live.vectors, ck.w_in) and live.index_to_key == ck.words
    summary = run_py(["-m", "mpidwe.inspect", str(out), "summary"])
    assert summary.returncode == 0 and "ckpt-" in summary.stdout, summary.stderr


def test_a_crash_after_the_append_does_not_append_again(setup, tmp_path):
    """follow.json says ``appending`` but the corpus holds the file (a crash after the rename):
    the restart trains it without a second append. A stop between append and training
    exits 75 and the next run trains the step."""
    corpus, inbox, texts = setup
    out = tmp_path / "run"
    drop(inbox, "a.txt", texts[0])
    time.sleep(0.3)
    with Corpus(str(corpus)) as c:
        before = c.corpus_id
    st = FollowState(str(out), str(inbox), str(corpus))
    os.makedirs(out)
    st.steps = [{"step": 0, "file": "a.txt", "size": len(texts[0]), "sha256": "x", "corpus_id_before": before,
                 "state": "appending", "run": "steps/0000"}]
    st.save()
    preprocess(PreprocessConfig(inputs=(str(inbox / "a.txt"),), append=str(corpus)), Comm.serial(), log=None)
    init = tmp_path / "init"
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(init), "--dim", "16", "--epochs", "1",
                   "--threads", "1", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), "--follow", str(inbox),
                   "--init-from", str(init), "--follow-exit-idle", *FLAGS])
    assert proc.returncode == 0, proc.stderr
    assert "appending" not in proc.stdout
    with Corpus(str(corpus)) as c:
        assert len(c.segments) == 2
    assert trained(out) == ["a.txt"]

    class Stopped:
        requested = True

    # stopped right after an append: exit 75, appended but not trained; the next run trains it
    drop(inbox, "b.txt", texts[1])
    time.sleep(0.3)
    from mpidwe.core.config import TrainConfig

    cfg = TrainConfig(corpus=str(corpus), out=str(out), follow=str(inbox), dim=16, epochs=1, threads=1,
                      progress=False, follow_settle=0.2)
    f = Follower(cfg, Comm.serial(), Stopped(), None)
    f.state = FollowState(str(out), str(inbox), str(corpus)).load()
    step = f._next_file()
    assert f.do_step(step) is True
    assert [s["state"] for s in state(out)] == ["trained", "appended"]
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), "--follow", str(inbox),
                   "--init-from", str(init), "--follow-exit-idle", *FLAGS])
    assert proc.returncode == 0, proc.stderr
    assert trained(out) == ["a.txt", "b.txt"] and "appending" not in proc.stdout
    with Corpus(str(corpus)) as c:
        assert len(c.segments) == 3

    # a file without a token is recorded as rejected, not retried; the next one warm-starts
    # from the last trained step
    drop(inbox, "empty.txt", "  \n\n")
    time.sleep(0.3)
    drop(inbox, "z.txt", texts[2])
    time.sleep(0.3)
    for _ in range(2):
        proc = run_py(["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), "--follow", str(inbox),
                       "--follow-exit-idle", *FLAGS])
        assert proc.returncode == 0, proc.stderr
    steps = state(out)
    assert [(s["file"], s["state"]) for s in steps[2:]] == [("empty.txt", "rejected"), ("z.txt", "trained")]
    assert "no tokens" in steps[2]["reason"]
    cfg = json.loads((out / "steps" / "0003" / "config.json").read_text())
    assert cfg["init_from"]["path"].startswith(str(out / "steps" / "0001"))
    with Corpus(str(corpus)) as c:
        assert len(c.segments) == 4


def test_ready_files_skip_hidden_partial_and_fresh_files(tmp_path):
    for name in ("a.txt", ".hidden", "b.part", "c.tmp"):
        (tmp_path / name).write_text("x y\n")
    os.utime(tmp_path / "a.txt", (1, 1))
    (tmp_path / "d.txt").write_text("fresh\n")
    assert ready_files(str(tmp_path), 5.0) == [("a.txt", 4)]
    assert [n for n, _ in ready_files(str(tmp_path), 0.0)] == ["a.txt", "d.txt"]


def test_follow_refuses_bad_setups(setup, tmp_path):
    corpus, inbox, _ = setup
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(corpus), "--follow", str(tmp_path / "nope"),
                   "--out", str(tmp_path / "r")])
    assert proc.returncode == 2 and "no such folder" in error_lines(proc.stderr)[0]
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(tmp_path / "none.h5"), "--follow", str(inbox),
                   "--out", str(tmp_path / "r")])
    assert proc.returncode == 2 and "--follow needs --corpus" in error_lines(proc.stderr)[0]
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(corpus), "--follow", str(inbox), "--segments", "new"])
    assert proc.returncode == 2 and "leave out --segments" in error_lines(proc.stderr)[0]


def test_follow_refuses_an_out_or_corpus_inside_the_watched_folder(setup, tmp_path):
    """Its own vectors.txt and follow.json (or the corpus) would be taken as new text."""
    corpus, inbox, texts = setup
    drop(inbox, "a.txt", texts[0])
    inner = inbox / "corpus.h5"
    inner.write_bytes(corpus.read_bytes())
    for out, corp in ((inbox, corpus), (inbox / "run", corpus), (tmp_path / "r", inner)):
        proc = run_py(["-m", "mpidwe.train", "--corpus", str(corp), "--follow", str(inbox), "--out", str(out),
                       *FLAGS, "--follow-exit-idle"], timeout=60)
        lines = error_lines(proc.stderr)
        assert proc.returncode == 2 and len(lines) == 1 and "inside --follow" in lines[0], proc.stderr
    assert sorted(os.listdir(inbox)) == ["a.txt", "corpus.h5"] and not (tmp_path / "r").exists()


@pytest.mark.mpi
def test_sigterm_during_a_step_exits_75_and_the_restart_finishes_that_step(setup, tmp_path):
    corpus, inbox, texts = setup
    out = tmp_path / "run"
    flags = ["--dim", "16", "--threads", "1", "--no-progress", "--log-seconds", "0", "--epochs", "8",
             "--follow-poll", "0.2", "--follow-settle", "0.2", "--checkpoint-every", "5000", "--sync-every", "5000"]
    args = ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), "--follow", str(inbox), *flags]
    proc = subprocess.Popen(mpi_command(2, args), env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for(proc, lambda: trained(out) == [None])
        drop(inbox, "a.txt", "".join(texts))
        wait_for(proc, lambda: bool(checkpoint.list_checkpoints(str(out / "steps" / "0001" / "checkpoints"))))
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 75, stderr
    assert [(s["file"], s["state"]) for s in state(out)] == [(None, "trained"), ("a.txt", "appended")]
    proc = subprocess.run(mpi_command(2, args + ["--follow-exit-idle"]), env=mpi_env(), capture_output=True,
                          text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr
    assert "resuming from" in proc.stdout and "appending" not in proc.stdout
    assert trained(out) == [None, "a.txt"]
    ck = checkpoint.load(checkpoint.list_checkpoints(str(out / "steps" / "0001" / "checkpoints"))[-1])
    with Corpus(str(corpus)) as c:
        assert len(c.segments) == 2 and ck.complete and ck.progress.words_done == 8 * c.segments[1].n_tokens


def test_files_that_grow_after_being_taken_or_are_not_text_are_never_lost_silently(setup, tmp_path):
    """A file that grows after it was taken is warned about at the next look and at every
    restart (its new bytes are not trained; follow.json records the change); a file that
    grows between being taken and being appended is recorded as appended; a binary file,
    a text that keeps no token and a copy of a text already appended are recorded as
    rejected, and nothing of them enters the corpus."""
    from mpidwe.core.config import TrainConfig

    corpus, inbox, texts = setup
    out = tmp_path / "run"
    first = texts[0][:len(texts[0]) // 2]
    old = time.time() - 60
    for k, (name, data) in enumerate([("grow.txt", first.encode()), ("binary.txt", bytes(range(256)) * 12),
                                      ("rare.txt", b"qq1 qq2 qq3\n"), ("copy.txt", first.encode())]):
        (inbox / name).write_bytes(data)
        os.utime(inbox / name, (old + k, old + k))

    class Running:
        requested = False

    def follower():
        lines = []
        cfg = TrainConfig(corpus=str(corpus), out=str(out), follow=str(inbox), dim=16, epochs=1, threads=1,
                          progress=False, follow_settle=0.2, follow_exit_idle=True, log_seconds=0)
        return Follower(cfg, Comm.serial(), Running(), lines.append), lines

    f, lines = follower()
    assert f.run() == 0
    steps = state(out)
    assert [(s["file"], s["state"]) for s in steps] == [(None, "trained"), ("grow.txt", "trained"),
                                                        ("binary.txt", "rejected"), ("rare.txt", "rejected"),
                                                        ("copy.txt", "rejected")]
    assert "NUL bytes" in steps[2]["reason"] and "keeps no token" in steps[3]["reason"]
    assert "already in" in steps[4]["reason"]
    with Corpus(str(corpus)) as c:
        assert len(c.segments) == 2 and c.segment_info[1]["inputs"][0]["bytes"] == len(first.encode())
    assert not any("warning" in ln for ln in lines)

    # the writer goes on after a pause: warned at the next look, once, and again at a restart
    with open(inbox / "grow.txt", "a") as fh:
        fh.write(texts[0][len(first):])
    grown = os.path.getsize(inbox / "grow.txt")
    for restart in range(2):
        f, lines = follower()
        assert f.run() == 0
        f._check_taken()
        warned = [ln for ln in lines if ln.startswith("warning:")]
        assert len(warned) == 1 and "grow.txt grew after it was taken: its first " \
            f"{len(first.encode()):,} bytes were trained, the {grown - len(first.encode()):,} written since " \
            "are not trained" in warned[0] and "rename it into" in warned[0], lines
    assert state(out)[1]["changed"]["size"] == grown and state(out)[1]["changed"]["grew"]

    # a file that grows between being taken and being read: what was appended is recorded
    (inbox / "late.txt").write_text(texts[1][:2000])
    os.utime(inbox / "late.txt", (old + 10, old + 10))
    f, lines = follower()
    f.state = FollowState(str(out), str(inbox), str(corpus)).load()
    step = f._next_file()
    assert step["file"] == "late.txt" and step["size"] == len(texts[1][:2000].encode())
    with open(inbox / "late.txt", "a") as fh:
        fh.write(texts[1][2000:4000])
    assert f.do_step(step) is False
    late = state(out)[-1]
    assert late["state"] == "trained" and late["size"] == os.path.getsize(inbox / "late.txt")
    assert late["sha256"] == hashlib.sha256((inbox / "late.txt").read_bytes()).hexdigest()
    f._check_taken()
    assert not [ln for ln in lines if "late.txt" in ln and ln.startswith("warning:")]
    assert any("late.txt changed while it was appended" in ln for ln in lines)
