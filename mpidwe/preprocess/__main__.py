"""``python -m mpidwe.preprocess``."""

import sys

from . import main

sys.exit(main(as_command=True))
