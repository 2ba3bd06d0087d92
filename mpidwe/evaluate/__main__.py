"""``python -m mpidwe.evaluate``: see :mod:`mpidwe.evaluate.cli`."""

import sys

from .cli import main

sys.exit(main())
