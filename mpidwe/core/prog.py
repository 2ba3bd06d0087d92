"""The name a command goes by in its usage line and its messages: the one the user typed.

As argparse does, it is read from ``sys.argv[0]``: ``mpidwe train`` under the ``mpidwe``
console script, ``python -m mpidwe train`` under ``python -m mpidwe``, and
``python -m mpidwe.train`` otherwise (that module, the Python API, the tests).
"""

from __future__ import annotations

import os
import sys


def prog(command: str, argv0: str | None = None) -> str:
    """``command`` (train, preprocess, evaluate, inspect, synth, demo) as started."""
    argv0 = sys.argv[0] if argv0 is None and sys.argv else (argv0 or "")
    name = os.path.splitext(os.path.basename(argv0))[0]
    if name == "mpidwe":                    # the console script (mpidwe, mpidwe.exe)
        return f"mpidwe {command}"
    if name == "__main__" and os.path.basename(os.path.dirname(argv0)) == "mpidwe":
        return f"python -m mpidwe {command}"
    return f"python -m mpidwe.{command}"
