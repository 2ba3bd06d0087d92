"""mpidwe: distributed word embeddings (SGNS) over MPI.

Python API (docs/api.md)::

    vecs = mpidwe.load("run")                  # a run directory, a checkpoint or a word2vec file
    vecs.most_similar("king", topn=5)
    vecs = mpidwe.train(corpus="corpus.h5", out="run", dim=100, epochs=5)   # train in this process
    mpidwe.preprocess("text.txt", output="corpus.h5", min_count=5)           # raw text -> corpus
    vecs = mpidwe.train(corpus="text.txt", out="run")     # raw text: preprocessed into run/corpus.h5

``load``, ``fit`` and ``WordVectors`` live in ``mpidwe.api`` and are imported on first use, so
``import mpidwe`` loads neither numpy nor h5py, torch or scipy. ``mpidwe.train`` is the
module of ``python -m mpidwe.train``, and calling it, ``mpidwe.train(**options)``, is
``mpidwe.fit(**options)``.
"""

from .version import __version__

_API = ("load", "fit", "WordVectors")
__all__ = [*_API, "__version__"]


def __getattr__(name):
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in ("train", "preprocess"):    # the modules, callable: mpidwe.train(**options) is
        import importlib                    # mpidwe.fit(**options); mpidwe.preprocess(text, ...)

        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_API))
