"""Shared test helpers: launching real MPI jobs and making tiny corpora."""

from __future__ import annotations

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


def mpi_env() -> dict:
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
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
    from mpidwe.dist.comm import Comm
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
    from mpidwe.dist.comm import Comm
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
