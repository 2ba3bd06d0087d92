"""``python -m mpidwe.train``."""

import sys

from . import main

sys.exit(main(as_command=True))
