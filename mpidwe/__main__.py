"""``python -m mpidwe COMMAND [ARGS]``: the ``mpidwe`` console script, where none is on PATH."""

import sys

from .cli import console

sys.exit(console())
