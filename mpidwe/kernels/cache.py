"""One freshness stamp for the compiled kernels' disk cache.

numba's ``cache=True`` stamps a compiled function with the source of the file that defines
it, and only that file: the chunk function inlines helpers from several modules, so an edit
to one of those would otherwise leave the stale machine code in use. ``stamp_sources`` gives
a dispatcher the hash of every module the compiled kernels are made of instead.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

# every module whose code the compiled kernels (chunk.chunk_function, plan._plan_chunk) inline
SOURCES = ("common", "sampling", "simd", "rows", "negative", "hsoftmax", "window", "inputs", "chunk", "plan", "pairs", "cache")


@functools.lru_cache(maxsize=1)
def sources_digest() -> bytes:
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((here / f"{name}.py").read_bytes())
    return digest.digest()


def stamp_sources(dispatcher) -> None:
    """Make the disk cache of a ``cache=True`` dispatcher fresh only for these sources. (It
    reaches into numba's cache object; should a numba release rename it, numba's own stamp,
    the defining file alone, stays in place.)"""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if cache_file is not None and hasattr(cache_file, "_source_stamp"):
        cache_file._source_stamp = sources_digest()
