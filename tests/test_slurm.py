"""jobs/preprocess.slurm and jobs/train.slurm on a real one-node Slurm cluster.

The first tests check pieces of jobs/common.sh with fake ``mpiexec`` and ``srun``. The
others submit the jobs to a private cluster (tests/slurm_cluster.py: slurmctld, slurmd and
munged on this machine; without Debian's slurm-wlm and munge, or without root, they skip).
The jobs start the MPI on PATH as on a real cluster: ``srun --mpi=pmi2`` for MPICH,
``srun --mpi=pmix`` for Open MPI where Slurm's PMIx plugin loads (Debian's needs
libpmix-dev), else ``mpiexec`` inside the allocation.

The time-limit warning is simulated with ``scancel --batch --signal=USR1``, the same signal
to the same process (the batch shell only) that ``#SBATCH --signal=B:USR1@120`` sends 120 s
before the limit, but sent when the test knows training is under way, so the run is
interrupted mid-training every time. ``test_train_job_time_limit`` (marked slow) lets
slurmctld send it at a real one-minute limit instead.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mpidwe.io import checkpoint
from mpidwe.io.corpus import Corpus

from conftest import ROOT, mpi_env, mpi_flavor, run_py
from slurm_cluster import slurm_cluster  # noqa: F401  (the fixture)

JOBS = ROOT / "jobs"
TRAIN_ARGS = ["--dim", "16", "--sync-every", "20000", "--seed", "3"]
JOB_TIMEOUT = 180


@functools.cache
def launcher(cluster) -> str:
    """The launcher the jobs should pick for the MPI on PATH (2 tasks x 1 CPU)."""
    if mpi_flavor() == "mpich":
        return "srun --mpi=pmi2 --cpus-per-task=1"
    if cluster.run(["srun", "--mpi=pmix", "-n", "1", "true"], check=False).returncode == 0:
        return "srun --mpi=pmix --cpus-per-task=1"
    return "mpiexec -n 2"        # Debian's Slurm without libpmix-dev


def job_env(cluster, workdir: Path, **extra) -> dict:
    """What a user's shell would have: the virtual environment first on PATH, SLURM_CONF,
    and a site directory of our own (a developer's jobs/site/*.env must not leak in)."""
    env = cluster.env(mpi_env())
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    env["PYTHON"] = sys.executable
    env.pop("OMP_NUM_THREADS", None)          # the job sets it from --cpus-per-task
    site = workdir / "site"
    site.mkdir(exist_ok=True)
    (site / "test.env").write_text("export MPIDWE_TEST_SITE=loaded\n")
    env["MPIDWE_SITE_DIR"] = str(site)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def sbatch(cluster, script: str, args: list[str], workdir: Path, *, wait: bool, options=(),
           tasks=("--ntasks=2",), cpus=("--cpus-per-task=1",), **env):
    """Submit ``jobs/SCRIPT ARGS`` on 2 tasks x 1 CPU (TASKS: how the 2 tasks are asked for,
    CPUS: how the CPUs); returns the job id and, with ``wait``, its final ``scontrol show
    job`` record (polled here: ``sbatch --wait`` backs off to half a minute between looks)."""
    cmd = ["sbatch", "--parsable", *tasks, *cpus, "--nodes=1", "--time=10",
           f"--chdir={workdir}", f"--output={workdir}/%x-%j.out", *options, str(JOBS / script), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=job_env(cluster, workdir, **env))
    job_id = proc.stdout.strip().split(";")[0]
    assert proc.returncode == 0 and job_id.isdigit(), f"sbatch failed:\n{proc.stdout}\n{proc.stderr}"
    return job_id, (cluster.wait_job(job_id, JOB_TIMEOUT) if wait else None)


def node_cpus(cluster) -> int:
    line = cluster.run(["scontrol", "show", "node", "--oneliner"]).stdout
    return int(re.search(r"CPUTot=(\d+)", line).group(1))


def job_log(workdir: Path, name: str, job_id: str) -> str:
    return (workdir / f"{name}-{job_id}.out").read_text(errors="replace")


def mpich_shm_name(job_id: str, step: int, node: int = 0) -> Path:
    """The node-local shared memory MPICH makes for an srun step (FNV-1a of "JOB.STEP")."""
    h = 2166136261
    for byte in f"{job_id}.{step}".encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return Path(f"/dev/shm/mpich_shm_{h:x}_{node}")


# ------------------------------------------------------------------ job scripts, no cluster
def common_sh(tmp_path: Path, snippet: str, mpiexec_says: str, **env) -> str:
    """Run SNIPPET after sourcing jobs/common.sh, with a fake mpiexec and srun on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "mpiexec").write_text(f"#!/bin/sh\necho '{mpiexec_says}'\n")
    (bin_dir / "srun").write_text(  # lists plugins; any step ends with $FAKE_SRUN_RC
        "#!/bin/sh\n[ \"$1\" = --mpi=list ] || exit ${FAKE_SRUN_RC:-0}\n"
        "printf 'MPI plugin types are...\\n\\tnone\\n\\tpmi2\\n\\tpmix\\n'\n")
    for exe in bin_dir.iterdir():
        exe.chmod(0o755)
    full = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", **env}
    proc = subprocess.run(["bash", "-c", f"set -euo pipefail; source {JOBS / 'common.sh'}; {snippet}"],
                          capture_output=True, text=True, env=full, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.parametrize("mpiexec_says, env, expected", [
    ("HYDRA build details:\n    Version: 4.2.0", {}, "srun --mpi=pmi2"),
    ("mpiexec (Open MPI) 5.0.6", {"SLURM_CPUS_PER_TASK": "4"}, "srun --mpi=pmix --cpus-per-task=4"),
    ("mpiexec (Open MPI) 5.0.6", {"FAKE_SRUN_RC": "1", "SLURM_NTASKS": "4"}, "mpiexec -n 4 --bind-to none"),
    ("mpiexec (Open MPI) 5.0.6", {"MPIDWE_LAUNCHER": "mpirun", "SLURM_NTASKS": "2"}, "mpiexec -n 2 --bind-to none"),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.11", {}, "srun --mpi=pmi2"),
    ("something else", {}, "srun"),
    ("HYDRA", {"MPIDWE_LAUNCHER": "mpirun", "SLURM_NTASKS": "6"}, "mpiexec -n 6"),
    ("HYDRA", {"MPIDWE_LAUNCHER": "srun --mpi=pmix_v4 --exclusive"}, "srun --mpi=pmix_v4 --exclusive"),
    # no --cpus-per-task: the CPUs the allocation gives each task, for srun to give them again
    ("HYDRA", {"SLURM_NTASKS": "4", "SLURM_JOB_CPUS_PER_NODE": "32(x4)", "SLURM_TASKS_PER_NODE": "1(x4)"},
     "srun --mpi=pmi2 --cpus-per-task=32"),
    # sbatch --nodes=4 alone: one rank per node, as srun starts them, under mpiexec too
    ("HYDRA", {"MPIDWE_LAUNCHER": "mpirun", "SLURM_JOB_NUM_NODES": "4"}, "mpiexec -n 4 -ppn 1"),
    ("mpiexec (Open MPI) 5.0.6", {"MPIDWE_LAUNCHER": "mpirun", "SLURM_JOB_NUM_NODES": "4"},
     "mpiexec -n 4 --bind-to none --map-by ppr:1:node"),
])
def test_launcher_choice(tmp_path, mpiexec_says, env, expected):
    assert common_sh(tmp_path, 'mpidwe_launcher 2>/dev/null; echo "${MPIDWE_LAUNCH[*]}"', mpiexec_says,
                     **env) == expected


@pytest.mark.parametrize("env, expected", [
    ({}, "1"),
    ({"SLURM_CPUS_PER_TASK": "3"}, "3"),
    ({"SLURM_CPUS_ON_NODE": "16", "SLURM_NTASKS_PER_NODE": "4"}, "4"),
    ({"SLURM_CPUS_PER_TASK": "3", "MPIDWE_THREADS": "2"}, "2"),
    # no --cpus-per-task: the fewest CPUs per task over the nodes
    ({"SLURM_NTASKS": "4", "SLURM_JOB_CPUS_PER_NODE": "32(x2),16", "SLURM_TASKS_PER_NODE": "1(x2),2"}, "8"),
    ({"SLURM_NTASKS": "4", "SLURM_JOB_CPUS_PER_NODE": "32(x4)", "SLURM_TASKS_PER_NODE": "1(x4)"}, "32"),
    # no task count (sbatch --nodes=2 on --exclusive nodes): one task per node, all its CPUs
    ({"SLURM_JOB_CPUS_PER_NODE": "16(x2)", "SLURM_TASKS_PER_NODE": "16(x2)"}, "16"),
])
def test_threads_per_rank(tmp_path, env, expected):
    assert common_sh(tmp_path, "mpidwe_threads", "HYDRA", **env) == expected


def test_mpich_shm_names_match_python(tmp_path):
    """The job's clean-up removes the names MPICH uses (FNV-1a of "JOB.STEP", as above)."""
    out = common_sh(tmp_path, "srun() { printf '%s\\n' \"$@\"; }; MPIDWE_LAUNCH=(srun); mpidwe_clean_mpich_shm",
                    "HYDRA", SLURM_JOB_ID="4242", SLURM_RESTART_COUNT="1")
    removed = out.splitlines()
    for step in range(16):
        assert str(mpich_shm_name("4242", step))[:-1] + "*" in removed     # every node: *
    # a first start has nothing to clean and runs no extra step
    assert common_sh(tmp_path, "srun() { echo called; }; MPIDWE_LAUNCH=(srun); mpidwe_clean_mpich_shm",
                     "HYDRA", SLURM_JOB_ID="4242") == ""


# ------------------------------------------------------------------ jobs on a real cluster
@pytest.mark.parametrize("script", ["train.slurm", "preprocess.slurm"])
@pytest.mark.parametrize("tasks", [
    ["--ntasks=2"],
    ["--nodes=1", "--ntasks-per-node=2"],        # the form docs and jobs/README.md show
    ["--ntasks-per-node=2"],
    [],                                          # the script's own defaults: one task
])
def test_job_takes_the_ranks_it_is_given(slurm_cluster, tmp_path, script, tasks):  # noqa: F811
    """Either way of asking for tasks is accepted and gives that many: the scripts fix no
    node or task count (a fixed --ntasks would win over --ntasks-per-node, and Slurm then
    refused ``--nodes=1 --ntasks-per-node=2`` with "Requested node configuration is not
    available")."""
    proc = subprocess.run(["sbatch", "--test-only", *tasks, "--cpus-per-task=1", str(JOBS / script)],
                          capture_output=True, text=True, timeout=60, env=job_env(slurm_cluster, tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # train.slurm is --exclusive: whole nodes, whatever the tasks
    processors = node_cpus(slurm_cluster) if script == "train.slurm" else 2 if tasks else 1
    assert f"using {processors} processors on nodes" in proc.stderr, proc.stderr


def test_train_job_asks_for_no_cpu_count_a_node_could_lack(slurm_cluster, tmp_path):  # noqa: F811
    """2 tasks on one node of this machine's CPUs, no --cpus-per-task: accepted (the script
    once fixed --cpus-per-task=4, and such a job stayed pending for ever on a 2-CPU node)."""
    proc = subprocess.run(["sbatch", "--test-only", "--nodes=1", "--ntasks-per-node=2", str(JOBS / "train.slurm")],
                          capture_output=True, text=True, timeout=60, env=job_env(slurm_cluster, tmp_path))
    assert proc.returncode == 0 and "to start at" in proc.stderr, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def corpus_job(slurm_cluster, tmp_path_factory):  # noqa: F811
    """The demo text, preprocessed by jobs/preprocess.slurm on 2 ranks."""
    work = tmp_path_factory.mktemp("slurm-preprocess")
    synth = run_py(["-m", "mpidwe.synth", "--output", str(work / "demo"), "--tokens", "200000"])
    assert synth.returncode == 0, synth.stderr
    job_id, info = sbatch(slurm_cluster, "preprocess.slurm", ["--min-count", "3"], work, wait=True,
                          INPUTS="demo/demo.txt", CORPUS="corpus.h5")
    return work, job_id, info


@pytest.mark.mpi
def test_preprocess_job(corpus_job, slurm_cluster):  # noqa: F811
    work, job_id, info = corpus_job
    log = job_log(work, "mpidwe-preprocess", job_id)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log + slurm_cluster.logs()
    assert "site settings: " in log and "test.env" in log
    assert f"2 rank(s) x 1 thread(s); launcher: {launcher(slurm_cluster)}\n" in log, log
    assert "(2 rank(s)," in log, log          # preprocess itself saw a 2-rank world
    # the same corpus as one process makes (the output does not depend on the ranks)
    serial = run_py(["-m", "mpidwe.preprocess", str(work / "demo" / "demo.txt"), "--output",
                     str(work / "serial.h5"), "--min-count", "3"])
    assert serial.returncode == 0, serial.stderr
    with Corpus(str(work / "corpus.h5")) as a, Corpus(str(work / "serial.h5")) as b:
        assert a.corpus_id == b.corpus_id
        assert a.n_tokens > 150_000


def wait_for(condition, cluster, job_id: str, log_path: Path, timeout: float = 90) -> None:
    """Poll ``condition()`` while the job is still queued or running."""
    deadline = time.monotonic() + timeout
    while not condition():
        state = cluster.job(job_id)["JobState"]
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
        assert state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED"), f"job {state}\n{log}"
        assert time.monotonic() < deadline, log + cluster.logs()
        time.sleep(0.1)


def final_checkpoint(run_dir: Path) -> checkpoint.Checkpoint:
    names = checkpoint.list_checkpoints(str(run_dir / "checkpoints"))
    assert names, f"no checkpoint in {run_dir}"
    return checkpoint.load(names[-1])


@pytest.mark.mpi
def test_train_job(corpus_job, slurm_cluster, tmp_path):  # noqa: F811
    work = corpus_job[0]
    # the ranks asked for as jobs/README.md shows: nodes x tasks per node
    job_id, info = sbatch(slurm_cluster, "train.slurm", TRAIN_ARGS, tmp_path, wait=True,
                          tasks=("--ntasks-per-node=2",), CORPUS=work / "corpus.h5", RUN_DIR="run")
    log = job_log(tmp_path, "mpidwe-train", job_id)
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "0"), \
        log + slurm_cluster.logs()
    assert f"launcher: {launcher(slurm_cluster)}\n" in log, log
    ck = final_checkpoint(tmp_path / "run")
    assert ck.complete
    assert ck.progress.world_size == 2 and ck.progress.round == ck.progress.rounds
    assert ck.progress.words_done == ck.progress.words_total
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["ranks"], config["threads"], config["resume"]) == (2, 1, "auto")
    assert (tmp_path / "run" / "vectors.txt").exists()


@pytest.mark.mpi
def test_train_job_checkpoints_and_requeues_on_usr1(corpus_job, slurm_cluster, tmp_path):  # noqa: F811
    """USR1 to the batch shell mid-training: checkpoint, exit 75, scontrol requeue, and the
    second run resumes and finishes (the jobcomp log records both runs)."""
    work = corpus_job[0]
    run_dir = tmp_path / "run"
    # enough epochs that training runs for seconds after its first sync round
    job_id, _ = sbatch(slurm_cluster, "train.slurm", TRAIN_ARGS + ["--epochs", "50"], tmp_path, wait=False,
                       CORPUS=work / "corpus.h5", RUN_DIR="run")
    log_path = tmp_path / f"mpidwe-train-{job_id}.out"
    wait_for(lambda: (run_dir / "metrics.jsonl").exists() and (run_dir / "metrics.jsonl").stat().st_size,
             slurm_cluster, job_id, log_path)
    slurm_cluster.run(["scancel", "--batch", "--signal=USR1", job_id])
    # While the job waits to start again: the shared memory that ranks killed mid-run would
    # have left behind (see mpidwe_clean_mpich_shm); without the clean-up the restarted
    # job would attach to it and hang in MPI_Init.
    wait_for(lambda: slurm_cluster.job(job_id)["Restarts"] == "1", slurm_cluster, job_id, log_path)
    stale = [mpich_shm_name(job_id, step) for step in (0, 1)]
    try:
        for path in stale:
            path.write_bytes(np.random.default_rng(0).bytes(4 << 20))
        info = slurm_cluster.wait_job(job_id, JOB_TIMEOUT)
        log = log_path.read_text(errors="replace")
        assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), log + slurm_cluster.logs()
        if launcher(slurm_cluster).startswith("srun"):   # mpiexec's own job names are new every run
            assert not any(path.exists() for path in stale)
    finally:
        for path in stale:
            path.unlink(missing_ok=True)

    runs = slurm_cluster.job_runs(job_id)
    assert [r["JobState"] for r in runs] == ["PENDING", "COMPLETED"], runs    # requeued, then done
    assert "] SIGUSR1: asking the ranks to checkpoint and stop" in log
    assert "stop requested (SIGTERM/SIGUSR1): wrote" in log
    assert "requeueing the job" in log and "run 2]" in log and "run 3]" not in log
    assert re.search(r"resuming from run/checkpoints/ckpt-\d+\.h5: round [1-9]\d*/", log), log

    ckpts = checkpoint.list_checkpoints(str(run_dir / "checkpoints"))
    first = checkpoint.load(ckpts[0])
    assert not first.complete and 0 < first.progress.round < first.progress.rounds
    final = final_checkpoint(run_dir)
    assert final.complete and final.progress.words_done == final.progress.words_total
    # every sync round was trained and logged exactly once over the two runs
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, final.progress.rounds + 1))


@pytest.mark.mpi
@pytest.mark.slow
def test_train_job_time_limit(corpus_job, slurm_cluster, tmp_path):  # noqa: F811
    """A real one-minute time limit: slurmctld sends B:USR1 40 s before it, or up to a minute
    earlier (its checks are coarse), so at times in the first seconds of a run, before the
    ranks are ready; each run checkpoints and requeues, the last one finishes."""
    work = corpus_job[0]
    run_dir = tmp_path / "run"
    job_id, _ = sbatch(slurm_cluster, "train.slurm", TRAIN_ARGS + ["--epochs", "400"], tmp_path, wait=False,
                       options=["--time=1", "--signal=B:USR1@40"], CORPUS=work / "corpus.h5", RUN_DIR="run")
    info = slurm_cluster.wait_job(job_id, 600)
    log = job_log(tmp_path, "mpidwe-train", job_id)
    assert info["JobState"] == "COMPLETED", log + slurm_cluster.logs()
    assert int(info["Restarts"]) >= 1
    assert "TIME LIMIT" not in log
    final = final_checkpoint(run_dir)
    assert final.complete and final.progress.words_done == final.progress.words_total
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, final.progress.rounds + 1))



@pytest.mark.mpi
@pytest.mark.parametrize("tasks, cpus, ranks", [
    (("--nodes=1", "--ntasks-per-node=1"), ("--cpus-per-task=2",), 1),    # threads: --cpus-per-task
    (("--nodes=1", "--ntasks-per-node=2"), (), 2),     # once pending for ever: the node's CPUs / 2
    ((), (), 1),                                        # the script's defaults: one rank, a whole node
])
def test_train_job_takes_its_threads_from_the_allocation(corpus_job, slurm_cluster, tmp_path, tasks, cpus,
                                                         ranks):  # noqa: F811
    """The job trains with the CPUs Slurm gives each task as threads, whatever the form the
    allocation was asked in, and starts (no CPU count fixed in the script)."""
    total = node_cpus(slurm_cluster)
    if total < 2:
        pytest.skip("needs a node of 2 CPUs or more")
    threads = 2 if cpus else total // ranks
    job_id, info = sbatch(slurm_cluster, "train.slurm", TRAIN_ARGS + ["--epochs", "1"], tmp_path, wait=True,
                          tasks=tasks, cpus=cpus, CORPUS=corpus_job[0] / "corpus.h5", RUN_DIR="run")
    log = job_log(tmp_path, "mpidwe-train", job_id)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log + slurm_cluster.logs()
    assert f"{ranks} rank(s) x {threads} thread(s); launcher: " in log, log
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (config["ranks"], config["threads"]) == (ranks, threads)
    assert f"{ranks} rank(s) x {threads} thread(s)," in log, log      # the run's own first line
