"""Training: ``python -m mpidwe.train``, ``mpidwe.train.run(cfg, comm)`` and ``mpidwe.train(**options)``.

Every rank streams its shard of the corpus, the parameter store it was given (parallel/store.py)
trains the rank's words of a round and combines the ranks at its end; the number of rounds
is fixed before training from the largest shard, so every rank makes the same collectives in
the same order. The modules, in the order a run meets them:

* ``plan``:   device, kernel, threads, sync interval, learning-rate scale, rounds (pure)
* ``rundir``: the run directory's lock, its old run, config.json, metrics.jsonl
* ``resume``: find and check a checkpoint, load the state, re-plan a changed run
* ``warm``:   ``--init-from``: start from a trained model
* ``stream``: a rank's words, round after round
* ``loop``:   the :class:`~mpidwe.train.loop.Trainer`: rounds, guard, metrics, checkpoints
* ``runner``: :func:`run`, which wires the above to a store
* ``follow``: ``--follow DIR``: grow the corpus and train on each new file
* ``fit``, ``cli``: the Python call and the command line

Calling the module, ``mpidwe.train(**options)``, is :func:`mpidwe.fit` (a module's
``__class__`` may be set to a ModuleType subclass: Python's reference, "Customizing module
attribute access").
"""

import sys
import types

from .cli import main
from .loop import RunResult
from .runner import DEMO_DIR, run

__all__ = ["run", "main", "RunResult", "DEMO_DIR"]


class _CallableModule(types.ModuleType):
    def __call__(self, **options):
        from .fit import fit

        return fit(**options)


sys.modules[__name__].__class__ = _CallableModule
