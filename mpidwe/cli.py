"""The ``mpidwe`` console script: ``mpidwe COMMAND [ARGS]`` is ``python -m mpidwe.COMMAND [ARGS]``.

    mpidwe train|preprocess|evaluate|inspect|synth|demo|warm [ARGS]
    mpirun -np 4 mpidwe train --corpus corpus.h5

Only the chosen command's module is imported, so ``mpidwe inspect`` does not pay for torch
or MPI start-up.
"""

from __future__ import annotations

import importlib
import sys

from .version import __version__

COMMANDS = {
    "train": ("mpidwe.train", "train SGNS / CBOW on every rank's shard (under mpirun/srun for many ranks)"),
    "preprocess": ("mpidwe.preprocess", "raw text -> versioned HDF5 corpus (vocabulary + token ids)"),
    "evaluate": ("mpidwe.evaluate.cli", "word similarity, analogies and PIP loss of a vectors file"),
    "inspect": ("mpidwe.inspect", "summaries, neighbours, analogies, export and plots of a model"),
    "synth": ("mpidwe.synth", "a synthetic demo corpus with a planted answer key"),
    "demo": ("mpidwe.demo", "the whole pipeline on the demo corpus"),
    "warm": ("mpidwe.warm", "compile the kernels into numba's disk cache ahead of the first run"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: mpidwe COMMAND [ARGS]   (the same as python -m mpidwe COMMAND [ARGS] and "
             "python -m mpidwe.COMMAND [ARGS])", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    lines += ["", "mpidwe COMMAND --help shows a command's options; mpidwe --version its version."]
    return "\n".join(lines)


def main(argv: list[str] | None = None, *, as_command: bool = False) -> int:
    """Run ``mpidwe COMMAND ARGS``. ``as_command``: this process is the command (the console
    script), so a command that owns the process's ending does: preprocess ends it at once
    after a failed HDF5 write, train keeps its SIGTERM handler until it ends."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"mpidwe {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"mpidwe: error: unknown command {name!r}; choose from {', '.join(COMMANDS)} "
              f"(see mpidwe --help)", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    if as_command and name in ("preprocess", "train"):
        return module.main(rest, as_command=True)
    return module.main(rest)


def console() -> int:
    """The ``mpidwe`` console script."""
    return main(as_command=True)


if __name__ == "__main__":
    sys.exit(console())
