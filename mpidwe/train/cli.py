"""``python -m mpidwe.train``: parse the options, then run (or follow a folder) on every rank."""

from __future__ import annotations

from ..core.config import TrainConfig, parse_command
from ..core.errors import EXIT_REQUEUE
from ..dist.comm import Comm, run_main
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
    return EXIT_REQUEUE if result.stopped else 0


def main(argv=None) -> int:
    setup_cli_logging()
    # catch a time-limit signal that arrives while MPI and the corpus are still starting up
    with StopRequest() as stop:
        return run_main(PROG, lambda a, c: _body(a, c, stop), argv)
