"""``python -m mpidwe.train``: parse the options, then run (or follow a folder) on every rank."""

from __future__ import annotations

from ..core.config import TrainConfig, parse_command
from ..core.errors import EXIT_INTERRUPTED, EXIT_REQUEUE
from ..parallel.comm import Comm, run_main
from .progress import setup_cli_logging
from .rundir import PROG
from .runner import StopRequest, run


def _body(argv, comm: Comm, stop: StopRequest) -> int:
    cfg, given = comm.agree(parse_command, TrainConfig, argv, prog=PROG, config_file_flag=True,
                            return_given=True,
                            description="Train word embeddings (SGNS/CBOW) on every rank's shard.")
    if cfg.follow:
        from .follow import run_follow

        return run_follow(cfg, comm, stop)
    result = run(cfg, comm, stop=stop, given=given)
    if not result.stopped:
        return 0
    return EXIT_INTERRUPTED if stop.interrupted else EXIT_REQUEUE


def main(argv=None, *, as_command: bool = False) -> int:
    """The command. ``as_command`` (``python -m mpidwe.train``, the ``mpidwe`` console script):
    this process is the command, so once the run is over SIGTERM/SIGUSR1 are ignored
    until the process ends: one that arrives after the outputs are written (while MPI
    shuts down) changes nothing, and the exit status stays the run's (0, or 75 after a stop whose
    checkpoint was written) instead of the launcher's 15."""
    setup_cli_logging()
    # catch a time-limit signal that arrives while MPI and the corpus are still starting up
    stop = StopRequest()
    with stop:
        code = run_main(PROG, lambda a, c: _body(a, c, stop), argv)
        if as_command:
            stop.ignore_from_now()
    return code
