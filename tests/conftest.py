"""Shared test helpers: launching real MPI jobs and making tiny corpora."""

from __future__ import annotations

import faulthandler
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def mpiexec_path() -> str:
    exe = Path(sys.executable).parent / "mpiexec"
    return str(exe) if exe.exists() else (shutil.which("mpiexec") or "mpiexec")


def mpi_flavor() -> str:
    out = subprocess.run([mpiexec_path(), "--version"], capture_output=True, text=True).stdout
    return "openmpi" if "Open MPI" in out or "OpenRTE" in out else "mpich"


def mpi_command(n: int, args: list[str]) -> list[str]:
    cmd = [mpiexec_path(), "-n", str(n)]
    if mpi_flavor() == "openmpi":
        cmd += ["--oversubscribe"]
    return cmd + [sys.executable] + args


def rank_env(env) -> dict:
    """What a rank's environment adds to ``env``: this checkout first on the path, one
    OpenMP thread per rank, and root allowed for Open MPI."""
    return {"OMPI_ALLOW_RUN_AS_ROOT": env.get("OMPI_ALLOW_RUN_AS_ROOT", "1"),
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": env.get("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"),
            "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
            "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")}


def mpi_env() -> dict:
    env = dict(os.environ)
    env.update(rank_env(env))
    return env


def run_mpi(n: int, args: list[str], *, timeout: float = 180, cwd=None, input=None,
            check: bool = True) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` under ``mpiexec -n N``; fail the test on a hang."""
    proc = subprocess.run(mpi_command(n, args), capture_output=True, text=True, timeout=timeout,
                          env=mpi_env(), cwd=cwd, input=input)
    if check and proc.returncode != 0:
        raise AssertionError(f"mpiexec -n {n} {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def run_py(args: list[str], *, timeout: float = 180, input=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, timeout=timeout,
                          env=mpi_env(), input=input, cwd=cwd)


def error_lines(stderr: str) -> list[str]:
    """Our one-line errors, without MPI launcher noise."""
    return [ln for ln in stderr.splitlines() if ": error" in ln and ln.startswith("python -m mpidwe")]


# ---------------------------------------------------------------- the MPI suite (tests/mpi)
# A test marked @pytest.mark.parallel(nprocs=N) is a job of N ranks (the mpi-pytest plugin):
# the serial pytest sets up the test's fixtures, then runs `mpiexec -n N python -m pytest
# FILE::TEST`, and every rank runs the test. What follows keeps such a job from hanging, as
# `python -m mpi4py` does for a script: a rank whose test fails prints why and aborts the job
# (the other ranks may wait in a collective it will never join), and a rank still running
# at 80% of the test's time limit prints every thread's stack and exits, which ends the job;
# the serial pytest's own limit (pytest-timeout) then kills mpiexec if anything is left.
# The suite also runs inside one job: mpiexec -n 2 python -m pytest -m "parallel[match]" tests/mpi

MPI_TEST_TIMEOUT = 120      # seconds, for a parallel test without its own timeout mark
ABORT_BANNER = "aborting the job"


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def in_a_job() -> bool:
    """True on a rank of a job of several processes, False in the serial pytest."""
    return world().Get_size() > 1


def time_limit(item) -> float:
    mark = item.get_closest_marker("timeout")
    return float(mark.args[0] if mark.args else mark.kwargs.get("timeout", MPI_TEST_TIMEOUT))


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("parallel"):
            item.add_marker(pytest.mark.mpi)          # `make test-fast` leaves them out
            if item.get_closest_marker("timeout") is None:
                # its own limit, not the suite's: seconds for most checks
                item.add_marker(pytest.mark.timeout(MPI_TEST_TIMEOUT))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("parallel") and in_a_job():
        # a C-level watchdog: it fires even while the main thread waits inside MPI
        faulthandler.dump_traceback_later(0.8 * time_limit(item), exit=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and in_a_job():
        comm = world()
        sys.stdout.flush()
        sys.stderr.write(f"\n{'=' * 30} rank {comm.Get_rank()} of {comm.Get_size()}: {item.nodeid} failed in "
                         f"{report.when}; {ABORT_BANNER} {'=' * 30}\n{report.longreprtext}\n")
        sys.stderr.flush()
        comm.Abort(1)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    # in the serial pytest, the call of a parallel test is mpi-pytest's `mpiexec ...`: report
    # what the failing rank said, not where subprocess raised
    try:
        return (yield)
    except subprocess.CalledProcessError as e:
        if not pyfuncitem.get_closest_marker("parallel") or in_a_job():
            raise
        failed = e
    ranks = sum(int(failed.cmd[i + 1]) for i, arg in enumerate(failed.cmd[:-1]) if arg == "-n")
    pytest.fail(f"the job of {ranks} ranks ended with exit status {failed.returncode}: "
                f"{what_the_ranks_said(pyfuncitem)}", pytrace=False)


def what_the_ranks_said(item) -> str:
    """The failing rank's banner and error lines, or the watchdog's first lines, from the
    job's output (which stays in the captured output, shown below the failure)."""
    capman = item.config.pluginmanager.getplugin("capturemanager")
    if capman is None or not capman.is_globally_capturing():
        return "see the ranks' output above"
    out, err = capman.read_global_capture()
    sys.stdout.write(out)
    sys.stderr.write(err)
    lines = err.splitlines()
    for i, line in enumerate(lines):
        if ABORT_BANNER in line:
            said = [ln for ln in lines[i + 1:] if ln.startswith("E ")][:6]
            return line.strip("= ") + "\n" + "\n".join(said)
        if line.startswith("Timeout ("):
            return "a rank reached 80% of the time limit; its stacks:\n" + "\n".join(lines[i:i + 6])
    return "no rank said why (killed?); the ranks' output is under 'Captured stdout/stderr call'"


@pytest.fixture(autouse=True)
def _rank_environment(request, monkeypatch):
    """The ranks of a parallel test inherit the serial pytest's environment: give them
    what run_mpi gives its ranks, and the mpiexec beside this Python first on PATH."""
    if request.node.get_closest_marker("parallel") and not in_a_job():
        for key, value in rank_env(os.environ).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("PATH", str(Path(mpiexec_path()).parent) + os.pathsep + os.environ.get("PATH", ""))
    yield


@pytest.fixture
def torch_one_thread():
    """torch on one thread for the test (the kernels' op counts and sums do not depend on
    the machine's cores), restored after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def made_once(key: str, make, setenv=os.environ.__setitem__) -> Path:
    """A file or folder that every rank of a job reads: in the serial pytest, ``make()``'s
    result, whose path its ranks then find in the environment variable ``key``; on a rank
    launched without it (an outer ``mpiexec -n N python -m pytest``), rank 0 makes it and
    tells the others. Call it from a fixture: the serial pytest sets up a parallel test's
    fixtures before it launches the ranks."""
    if not in_a_job():
        path = Path(make())
        setenv(key, str(path))
        return path
    if key in os.environ:
        return Path(os.environ[key])
    comm = world()
    return Path(comm.bcast(str(make()) if comm.Get_rank() == 0 else None))


@pytest.fixture
def job_tmp(tmp_path, monkeypatch):
    """A fresh folder that every rank of the job sees (the serial pytest's tmp_path)."""
    return made_once("MPIDWE_TEST_JOB_TMP", lambda: tmp_path, monkeypatch.setenv)


@pytest.fixture
def tiny_text(tmp_path):
    """A small multi-line text with a known vocabulary."""
    import random

    rng = random.Random(7)
    words = [f"w{i}" for i in range(60)]
    lines = []
    for _ in range(400):
        n = rng.randint(0, 30)
        lines.append(" ".join(rng.choice(words[: rng.randint(5, 60)]) for _ in range(n)))
    p = tmp_path / "tiny.txt"
    p.write_text("\n".join(lines) + "\n")
    return p


def make_demo_corpus(directory, *, tokens: int, seed: int):
    """The demo text with its answer key, preprocessed into DIR/corpus.h5; returns DIR."""
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import PreprocessConfig, SynthConfig
    from mpidwe.preprocess import run as preprocess
    from mpidwe.synth import write_demo

    write_demo(SynthConfig(output=str(directory), tokens=tokens, seed=seed))
    preprocess(PreprocessConfig(inputs=(str(directory / "demo.txt"),), output=str(directory / "corpus.h5")),
               Comm.serial(), log=None)
    return directory


def train_small_demo(demo, out, **options):
    """One serial run on a small demo corpus (dim 32, 2 epochs, 1 thread) with ``options``
    on top; returns the run's result. The unseen-word tests train their models this way."""
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import TrainConfig
    from mpidwe.train import run as train

    cfg = TrainConfig(corpus=str(demo / "corpus.h5"), out=str(out), dim=32, epochs=2, threads=1, progress=False,
                      sync_every=50_000, sample=1e-3, **options)
    return train(cfg, Comm.serial(), log=None)


def clusters(demo) -> dict:
    """word -> cluster id of the demo's content words (DIR/demo-clusters.tsv)."""
    return dict(line.split() for line in open(demo / "demo-clusters.tsv"))


def misspelt(vecs, labels, n=40):
    """(changed word, original) for cluster words with one middle character replaced."""
    out = []
    for w in [w for w in labels if len(w) >= 6 and w in vecs][:n]:
        i = len(w) // 2
        changed = w[:i] + ("x" if w[i] != "x" else "q") + w[i + 1:]
        if changed not in vecs:
            out.append((changed, w))
    return out


def misspelt_neighbours(vecs, labels, pairs, topn=5) -> tuple[int, int]:
    """Over (changed, original) pairs: how often the original is among the changed word's
    ``topn`` nearest neighbours, and how many of those neighbours share its cluster."""
    found = same = 0
    for changed, original in pairs:
        near = [w for w, _ in vecs.most_similar(changed, topn=topn)]
        found += original in near
        same += sum(labels.get(w) == labels[original] for w in near)
    return found, same
