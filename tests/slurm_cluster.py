"""A real one-node Slurm cluster on this machine, for the tests of ``jobs/*.slurm``.

    with SlurmCluster() as cluster:        # or the ``slurm_cluster`` pytest fixture
        subprocess.run(["sbatch", "--wait", "jobs/train.slurm"], env=cluster.env())

    python tests/slurm_cluster.py          # bring one up by hand; prints its SLURM_CONF

Debian's ``slurm-wlm`` (slurmctld + slurmd) and ``munge`` (``make test`` installs them
where it can). Everything lives under one temporary directory: munged runs on its own key
and socket, slurm.conf points at that socket (``AuthInfo=socket=...``) and uses free TCP
ports, so nothing system-wide (``/etc/slurm``, ``/run/munge``, ports 6817/6818) is used or
disturbed. The daemons run in the foreground as our children and are stopped, together
with any ``slurmstepd`` they left behind, when the cluster is closed.

Jobs inherit the submitting environment (sbatch's default ``--export=ALL``), so
``cluster.env()`` with the virtual environment's ``bin`` on ``PATH`` is all a job needs.
Without the binaries, or without root (slurmd must be root to start job steps), the
fixture skips the tests that use it and says why.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "sinfo", "squeue", "scontrol", "scancel")
NODE = "localhost"
PARTITION = "test"
START_TIMEOUT = 60.0      # seconds for the node to register and become idle
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


class SlurmUnavailable(RuntimeError):
    """This machine cannot run the test cluster (the reason is the message)."""


def unavailable_reason() -> str | None:
    """Why a test cluster cannot be started here, or None."""
    missing = [b for b in DAEMONS + CLIENTS if not shutil.which(b, path=_sbin_path())]
    if missing:
        return (f"Slurm test cluster needs Debian's slurm-wlm and munge (missing: {' '.join(missing)}; "
                f"`make test` installs them as root, or: apt-get install slurm-wlm munge)")
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "Slurm test cluster needs root (slurmd starts job steps as the submitting user)"
    return None


def _sbin_path() -> str:
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _hardware() -> dict[str, str]:
    """This machine as ``slurmd -C`` sees it (CPUs, sockets, cores, threads, memory)."""
    out = subprocess.run([shutil.which("slurmd", path=_sbin_path()), "-C"], capture_output=True,
                         text=True, timeout=30).stdout
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    hw = {k: fields[k] for k in keep if k in fields}
    if "CPUs" not in hw:
        hw = {"CPUs": str(os.cpu_count() or 1)}
    # a little below the total, so that memory the kernel reserves never drains the node
    mem = int(fields.get("RealMemory", "1024"))
    hw["RealMemory"] = str(max(1, mem - mem // 20))
    return hw


class SlurmCluster:
    """munged + slurmctld + slurmd on localhost, in a private temporary directory."""

    def __init__(self, *, keep_dir: bool = False):
        self.keep_dir = keep_dir
        self.dir: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}

    # ---------------------------------------------------------------- paths
    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.dir / "munge" / "munge.socket"

    def log(self, name: str) -> Path:
        return self.dir / "log" / f"{name}.log"

    def env(self, base: dict | None = None) -> dict:
        """An environment whose Slurm commands talk to this cluster."""
        env = dict(os.environ if base is None else base)
        env["SLURM_CONF"] = str(self.conf)
        env["PATH"] = _sbin_path() if base is None else env.get("PATH", "") + os.pathsep + "/usr/sbin"
        for key in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_"))]:
            if key != "SLURM_CONF":  # a cluster we may be running inside must not leak in
                del env[key]
        return env

    # ---------------------------------------------------------------- start
    def __enter__(self) -> "SlurmCluster":
        reason = unavailable_reason()
        if reason:
            raise SlurmUnavailable(reason)
        self.dir = Path(tempfile.mkdtemp(prefix="mpidwe-slurm-"))
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        for sub in ("munge", "log", "state", "spool"):
            (self.dir / sub).mkdir(mode=0o700)
        self._start_munge()
        self._write_conf()
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-N", NODE, "-f", str(self.conf)])
        self.wait_idle()

    def _spawn(self, name: str, argv: list[str], env: dict | None = None) -> None:
        argv = [shutil.which(argv[0], path=_sbin_path())] + argv[1:]
        out = open(self.dir / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env or self.env(), cwd=self.dir, start_new_session=True)
        out.close()

    def _start_munge(self) -> None:
        key = self.dir / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={key}", f"--pid-file={self.dir / 'munge' / 'munged.pid'}",
                               f"--seed-file={self.dir / 'munge' / 'munged.seed'}",
                               f"--log-file={self.log('munged')}"])
        deadline = time.monotonic() + 20
        while not self.munge_socket.exists():
            self._check_alive("munged")
            if time.monotonic() > deadline:
                raise RuntimeError("munged did not create its socket\n" + self.logs())
            time.sleep(0.1)

    def _write_conf(self) -> None:
        hw = _hardware()
        d = self.dir
        lines = [
            "# generated by tests/slurm_cluster.py for one test session",
            "ClusterName=mpidwe-test",
            f"SlurmctldHost={NODE}",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire: a requeued job may start again only once its old credential has
            # expired (default 120 s, then up to 60 s more until the next scheduling pass)
            f"AuthInfo=socket={self.munge_socket},cred_expire=5",
            f"StateSaveLocation={d / 'state'}",
            f"SlurmdSpoolDir={d / 'spool'}",
            f"SlurmctldPidFile={d / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'slurmd.pid'}",
            f"SlurmctldLogFile={self.log('slurmctld')}",
            f"SlurmdLogFile={self.log('slurmd')}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            f"PlugStackConfig={d / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin",
            "SchedulerParameters=sched_interval=2",     # look at pending jobs every 2 s, not 60
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            # no accounting database (no sacct): one line per run of a job instead, requeues too
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={d / 'jobcomp.txt'}",
            "JobRequeue=1",
            # job ids unlike any earlier test cluster's: MPICH names its shared memory after them
            f"FirstJobId={secrets.randbelow(50_000_000) + 1_000_000}",
            "ReturnToService=2",
            "SlurmctldTimeout=10",
            "SlurmdTimeout=10",
            "MessageTimeout=10",
            "InactiveLimit=0",
            "KillWait=5",
            "MinJobAge=600",                            # scontrol shows ended jobs for 10 min
            "WaitTime=0",
            f"NodeName={NODE} " + " ".join(f"{k}={v}" for k, v in hw.items()) + " State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
        ]
        (d / "plugstack.conf").write_text("")
        self.conf.write_text("\n".join(lines) + "\n")

    def wait_idle(self, timeout: float = START_TIMEOUT) -> None:
        """Until sinfo shows the node idle (registered, no jobs)."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            for name in self.procs:
                self._check_alive(name)
            state = self.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], check=False).stdout.strip()
            if state == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Slurm node is {state or 'unknown'!r}, not idle, after {timeout:.0f} s\n"
                           + self.logs())

    def _check_alive(self, name: str) -> None:
        rc = self.procs[name].poll()
        if rc is not None:
            raise RuntimeError(f"{name} exited with code {rc}\n" + self.logs())

    # ---------------------------------------------------------------- use
    def run(self, argv: list[str], *, check: bool = True, timeout: float = 60,
            **kwargs) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=kwargs.pop("env", None) or self.env(), **kwargs)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return proc

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (JobState, Restarts, ExitCode, ...)."""
        out = self.run(["scontrol", "show", "job", "--oneliner", str(job_id)]).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    def job_runs(self, job_id: str) -> list[dict[str, str]]:
        """One record per run of the job that has ended, from jobcomp/filetxt (this cluster
        has no accounting database, so no sacct): a run that was requeued is recorded with
        JobState=PENDING, the last one with its final state."""
        path = self.dir / "jobcomp.txt"
        runs = []
        for line in path.read_text().splitlines() if path.exists() else []:
            rec = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if rec.get("JobId") == str(job_id):
                runs.append(rec)
        return runs

    def wait_job(self, job_id: str, timeout: float) -> dict[str, str]:
        """Until the job has ended for good (requeues included); its final record."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") in FINAL_STATES:
                return info
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {info.get('JobState')} after {timeout:.0f} s\n"
                                     + self.logs())
            time.sleep(0.5)

    def logs(self, tail: int = 40) -> str:
        """The last lines of every daemon log, for failure messages."""
        if self.dir is None:
            return ""
        out = []
        for path in sorted((self.dir / "log").glob("*")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {path.name}\n" + "\n".join(lines))
        return "\n".join(out)

    # ---------------------------------------------------------------- stop
    def close(self) -> None:
        """Cancel every job, stop the daemons and their leftover step daemons, remove the directory."""
        if self.dir is None:
            return
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            self.run(["scancel", "--partition", PARTITION], check=False, timeout=20)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                queue = self.run(["squeue", "-h", "-o", "%i"], check=False, timeout=20)
                if queue.returncode != 0 or not queue.stdout.strip():
                    break
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self._kill_stepds()
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def _kill_stepds(self) -> None:
        """slurmstepd daemonises away from slurmd; ours carry our SLURM_CONF in their environment."""
        marker = f"SLURM_CONF={self.conf}".encode()
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                if not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"slurmstepd"):
                    continue
                if marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                continue


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running test cluster for the whole session; skips where none can be started."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    with SlurmCluster() as cluster:
        yield cluster


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main() -> int:
    """Bring a cluster up by hand and keep it until Ctrl-C."""
    try:
        with SlurmCluster() as cluster:
            print(f"export SLURM_CONF={cluster.conf}\n# daemon logs: {cluster.dir / 'log'}\n"
                  f"# Ctrl-C (or SIGTERM) stops the cluster", flush=True)
            signal.signal(signal.SIGTERM, _interrupt)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except SlurmUnavailable as e:
        print(f"slurm_cluster: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
