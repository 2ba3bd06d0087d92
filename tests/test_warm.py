"""``python -m mpidwe warm``: after it, a first preprocessing and training run (one rank and
two) compiles nothing: numba's cache files are left exactly as they were, while a run with a
``--dim`` that was not warmed adds to them (the check can fail)."""

import os
import subprocess
import sys

import pytest

from conftest import mpi_command, mpi_env

DIM = "24"        # not a dim other tests use: a kernel of its own in the cache


def _files(cache) -> dict:
    """Every cache file and its (size, mtime): numba writes an index (.nbi) and the code
    (.nbc) when it compiles, and only reads them when it loads."""
    out = {}
    for root, _, names in os.walk(cache):
        for name in names:
            st = os.stat(os.path.join(root, name))
            out[os.path.relpath(os.path.join(root, name), cache)] = (st.st_size, st.st_mtime_ns)
    return out


def _run(cmd, env, timeout=600):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow        # compiles every kernel of a default run from nothing: minutes on 2 busy cores
@pytest.mark.mpi
def test_after_warm_a_first_run_compiles_nothing(tmp_path, tiny_text):
    cache = tmp_path / "numba-cache"
    env = dict(mpi_env(), NUMBA_CACHE_DIR=str(cache))
    proc = _run([sys.executable, "-m", "mpidwe", "warm", "--dim", DIM], env)
    assert "cached in " + str(cache) in proc.stdout, proc.stdout
    warmed = _files(cache)
    names = " ".join(warmed)
    for kernel in ("train_chunk", "scan_block", "_max_abs_rows", "_gather_delta", "_apply_rows"):
        assert kernel in names, (kernel, sorted(warmed))
    corpus, py = tmp_path / "corpus.h5", [sys.executable, "-m", "mpidwe"]
    _run(py + ["preprocess", str(tiny_text), "--output", str(corpus), "--min-count", "1"], env)

    def train(out, dim=DIM):
        return ["train", "--corpus", str(corpus), "--dim", dim, "--epochs", "1", "--no-progress", "--no-export",
                "--out", str(tmp_path / out)]

    _run(py + train("one"), env)
    _run(mpi_command(2, ["-m", "mpidwe"] + train("two")), env)
    assert _files(cache) == warmed
    # the control: a --dim that was not warmed compiles, and the cache files show it
    _run(py + train("other", dim="26"), env)
    assert _files(cache) != warmed


def test_warm_takes_the_training_options_and_refuses_bad_ones_in_one_line():
    env = mpi_env()
    proc = subprocess.run([sys.executable, "-m", "mpidwe", "warm", "--dim", "0"], capture_output=True,
                          text=True, env=env, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "--dim" in lines[0] and "warm" in lines[0], proc.stderr
    proc = subprocess.run([sys.executable, "-m", "mpidwe", "--help"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0 and "warm" in proc.stdout


def test_warm_refuses_options_it_does_not_use_before_compiling(tmp_path, monkeypatch, capsys):
    """--corpus, --out, --resume ... were ignored (exit 0) and --device cuda without a GPU was
    refused only after the warm-up: now each is one line, exit 2, before anything compiles.
    A --config file shared with train may hold them."""
    from mpidwe import warm

    called = []
    monkeypatch.setattr(warm, "warm", lambda cfg, log=print: called.append(cfg) or {})
    for argv, said in [(["--corpus", "/nonexistent.h5"], "--corpus"), (["--out", str(tmp_path / "o")], "--out"),
                       (["--resume", "auto", "--dim", "20"], "--resume"),
                       (["--eval-sim", "x.tsv", "--force"], "--force, --eval-sim")]:
        assert warm.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and "not used by warm" in err[0], err
    assert not called
    toml = tmp_path / "train.toml"
    toml.write_text(f'corpus = "{tmp_path / "c.h5"}"\nout = "{tmp_path / "run"}"\ndim = 20\n')
    assert warm.main(["--config", str(toml)]) == 0 and called[-1].dim == 20
    import torch

    if not torch.cuda.is_available():
        assert warm.main(["--device", "cuda"]) == 2
        assert "--device cuda: no usable CUDA device" in capsys.readouterr().err
        assert len(called) == 1
