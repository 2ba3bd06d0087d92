"""SIGTERM and SIGINT: the first one stops the run (``Interrupted``) where Python can take
an exception, the run removes its temporary files, and the job reports one line and exits
with 128 + the signal's number."""

from __future__ import annotations

import os
import signal
import sys

from ..parallel.comm import Comm


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException (like KeyboardInterrupt), so that no
    ``except Exception`` on the way, nor ``Comm.agree``, takes it for a failure of the step
    it interrupted: it unwinds ``run`` (which removes the run's temporary files) up to
    the command (``cli``)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.exit_code = 128 + signum     # what the shell reports for a process killed by it
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class Signals:
    """Turns the first SIGTERM or SIGINT into ``Interrupted`` in the main thread; later ones
    are ignored while the run cleans up, and all are once the output is in place.

    Python runs the handler between two bytecodes of whatever the main thread executes,
    and two places there cannot take an exception: h5py runs Python callbacks for HDF5
    (type conversion, logging) and turns an exception in them into an unrelated HDF5 error
    (seen: "TypeError: Operation not defined for data type class", exit 1), and a weakref
    callback or ``__del__`` (h5py releasing an object) only prints it and goes on. So the
    handler does not raise while any h5py frame is on the stack, and an exception that went
    unraisable is noted; either way the process signals itself again 10 ms later, until
    the handler lands in ordinary code."""

    SIGNALS = ("SIGTERM", "SIGINT")
    RETRY_S = 0.01

    def __init__(self):
        import h5py

        self.armed = True
        self.got = self.fired = None    # a signal arrived / was raised as Interrupted
        self.comm: Comm | None = None   # set once the job's communicator exists
        self._old, self._again, self._pending = {}, None, False
        self._h5py = os.path.dirname(os.path.abspath(h5py.__file__)) + os.sep

    def __enter__(self):
        import threading

        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                sig = getattr(signal, name)
                self._old[sig] = signal.signal(sig, self._handle)
        if self._old:
            self._old_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        return self

    def _handle(self, signum, frame):
        if not self.armed or self.fired is not None:
            return
        self.got = self.got or signum
        f = frame
        while f is not None:
            if f.f_code.co_filename.startswith(self._h5py):
                self._later(signum)
                return
            f = f.f_back
        self.fired = signum
        raise Interrupted(signum)

    def _later(self, signum: int) -> None:
        """The signal again in RETRY_S (from a thread: signalled from the handler or the
        hook, Python would run the handler at once, in the same place)."""
        import threading

        if not self._pending:
            self._pending = True
            self._again = threading.Timer(self.RETRY_S, self._signal_again, (signum,))
            self._again.daemon = True
            self._again.start()

    def _signal_again(self, signum: int) -> None:
        self._pending = False   # first: the handler may run, and defer again, before kill returns
        os.kill(os.getpid(), signum)

    def _unraisable(self, u):
        if isinstance(u.exc_value, Interrupted):
            self.fired = None
            self._later(u.exc_value.signum)
            return
        self._old_hook(u)

    def __exit__(self, *exc):
        if self._again is not None:
            self._again.cancel()
            self._again.join()
        for sig, old in self._old.items():
            signal.signal(sig, old)
        if self._old:
            sys.unraisablehook = self._old_hook


# A launcher (mpiexec, srun, scancel) signals every rank at once: then every rank arrives at
# report_interrupt within about this long, all agree on it, rank 0 says it and every rank ends
# on its own with the signal's exit code; a rank that finds the others do not arrive (it alone
# got the signal, or another rank is stuck waiting for it in a collective) says it and aborts.
OTHER_RANK_REPORT_DELAY_S = 2.0


def report_interrupt(e: Interrupted, comm: Comm | None, prog: str) -> int:
    """Say that the run stopped (one line for the job) and end the job; its exit code.

    Not MPI_Abort where every rank stopped: the launcher kills the ranks an abort leaves
    behind with SIGKILL, and then MPICH's mpiexec sometimes reports that (exit 9) rather than
    the abort's code (seen once in 15 two-rank runs on a loaded machine)."""
    msg = f"{e}; this run's temporary files were removed"
    if comm is None or comm.size == 1:
        # comm is None while MPI starts: then every rank of a job has the signal; rank 0 says so
        if comm is not None or os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == "0":
            print(f"{prog}: error: {msg}", file=sys.stderr, flush=True)
        return e.exit_code
    if comm.all_arrive_within(OTHER_RANK_REPORT_DELAY_S):
        if comm.is_root:
            print(f"{prog}: error: {msg}", file=sys.stderr, flush=True)
        return e.exit_code
    where = "" if comm.is_root else f" (rank {comm.rank})"
    print(f"{prog}: error{where}: {msg}", file=sys.stderr, flush=True)
    comm.abort(e.exit_code)
    return e.exit_code
