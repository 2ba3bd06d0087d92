"""The command ``python -m mpidwe.preprocess``: parse, start MPI, ``run``; report a failure
or an interruption as one line."""

from __future__ import annotations

import os
import sys

from ..core.config import PreprocessConfig, parse_command
from ..core.prog import prog
from ..parallel import deathwatch
from ..parallel.comm import Comm, run_main
from .output import h5_write_failed
from .pipeline import run
from .signals import Interrupted, Signals, report_interrupt

PROG = prog("preprocess")


def _body(argv, comm: Comm, signals: Signals) -> int:
    signals.comm = comm
    try:
        cfg = comm.agree(parse_command, PreprocessConfig, argv, prog=PROG,
                         description="Turn raw text into an mpidwe HDF5 corpus (vocabulary + token ids).")
        run(cfg, comm, log=print if comm.is_root else None)
    except Interrupted as e:
        return report_interrupt(e, comm, PROG)
    except Exception:
        if signals.got is None:
            raise
        # a failure caused by the stop while the signal waited for h5py to return (another
        # rank removed the temporary file this one was writing): the stop is what to report
        return report_interrupt(Interrupted(signals.got), comm, PROG)
    finally:
        signals.armed = False  # done (or stopping): a late signal changes nothing
    return 0


def _warm_up_in_background() -> None:
    """Import numba and pay its one-time set-up (about 0.35 s together) in a background
    thread, while MPI starts, rank 0 decompresses a gzip input for several ranks (which
    releases the GIL) and the other ranks wait for it, instead of inside the first call of
    the tokenizer. A kernel called before it ends waits for it (the import lock, numba's
    compiler lock); a failure here surfaces at that first call, as it would without it."""
    import threading

    def run():
        try:
            from ..kernels.tokenize import warm_up

            warm_up()
        except Exception:  # noqa: BLE001 - reported by the first real call
            pass

    threading.Thread(target=run, name="mpidwe-numba-warm-up", daemon=True).start()


def main(argv=None, *, as_command: bool = False) -> int:
    """The command. ``as_command`` (``python -m mpidwe.preprocess``, the ``mpidwe`` console
    script): this process is the command, so numba's set-up starts in the background at
    once (``_warm_up_in_background``), and after a failed HDF5 write the process ends without
    the interpreter's exit handlers: a file whose write failed (a full disk) stays open inside
    the HDF5 library, which flushes it again at interpreter exit and crashes (exit 139); the
    error was reported and every temporary file removed by then. (Ending every run that way
    would save the 0.2 s of the interpreter's teardown, but MPICH then SIGKILLs a rank that
    is still in MPI_Finalize in about one 8-rank run in ten, and Open MPI refuses a rank
    that skips MPI_Finalize.)"""
    if as_command:
        _warm_up_in_background()
    with Signals() as signals:
        try:
            rc = run_main(PROG, lambda a, c: _body(a, c, signals), argv)
        except Interrupted as e:  # while MPI was starting: nothing was written yet
            return report_interrupt(e, signals.comm, PROG)
    if h5_write_failed() and as_command:
        sys.stdout.flush()
        sys.stderr.flush()
        deathwatch.disarm()      # os._exit skips the exit handler that tells the watcher
        os._exit(rc)
    return rc
