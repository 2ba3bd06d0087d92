"""SGNS / CBOW training on the CPU with numba: word2vec's algorithm, compiled.

``train_block`` (signature in kernels/__init__.py) trains one block of tokens in place.
Speed comes from five choices, each measured against gensim in benchmarks/kernel_speed.py:

* the embedding size is compiled in (numba ``literally``), so the loops over it become
  straight-line SIMD code instead of a generic loop with a long scalar tail (1.6x);
* negatives come from a small alias table (kernels stay in cache) and their rows are
  prefetched as soon as they are drawn, while the positive pair is being computed;
* dot, sigmoid-table lookup and both updates are fused in one pass per target row;
* optionally (``shared_negatives=True``, skip-gram only) one set of negatives serves the
  whole window of a centre word, as in Intel's pWord2Vec: the window is then a small
  [contexts x (1 + negative)] matrix product whose rows stay in L1;
* the row products are explicit vector code (simd.py): dot products in independent chains,
  four output rows scored per load of a context row, every score before any table lookup,
  an updated row's vectors held in registers across the window's rows, and the table
  gradient in float32 (issue 27: 1.5x the raw words/s of the plain loops on enwiki).

The compiled code is spread over modules named after what they hold: sampling.py (the
random draws), rows.py (the row-level steps), negative.py, hsoftmax.py and window.py (the
update rules), inputs.py (words or subwords as inputs) and chunk.py (the sentence loop). This
module is the Python entry: it checks the block, builds the chunk function's arguments and
runs one Python thread per chunk of the block (the compiled code releases the GIL; Hogwild:
no locks). The compiled code is cached on disk (``cache=True``, fresh while none of those
modules changes: cache.py), so only the first run on a machine pays the compile time, once
per (mode, dim).
"""

from __future__ import annotations

import threading

from numba import typeof, types

from .chunk import TRAIN_CHUNK, Schedule, chunks, mode_of, targets_of
from .common import check_block
from .rows import Params


def train_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args):
    """Train one block in place; returns (loss_sum, n_examples, words_processed).
    See kernels/__init__.py for the arguments and the determinism contract."""
    check_block(w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args)
    n_tokens = len(tokens)
    if n_tokens == 0:
        return 0.0, 0, 0
    mode, dim = mode_of(args), w_in.shape[1]
    params = Params(w_in, w_out, touched_in, touched_out)
    parts = chunks(tokens, sent_starts, rng_state, args)
    targets = targets_of(args, w_out.shape[0])
    schedule = Schedule(float(args.lr0), float(args.lr_min), float(args.words_done), float(args.words_scale),
                        float(args.words_total))
    subwords = None if args.subwords is None else tuple(args.subwords)
    compiled = _compiled_chunk(mode, dim, (params, parts[0], targets, schedule, subwords))

    def chunk(t):
        return compiled(dim, params, parts[t], targets, schedule, subwords)

    results = [chunk(0)] if args.threads == 1 else run_threads(chunk, args.threads)
    loss = sum(r[0] for r in results)
    n_examples = sum(int(r[1]) for r in results)
    return float(loss), n_examples, n_tokens


_COMPILED = {}


def _compiled_chunk(mode, dim, rest):
    """The machine code of the mode's chunk function (chunk.TRAIN_CHUNK) for dim (a
    compile-time constant) and the types of the other arguments ``rest``. Calling it directly
    skips numba's dispatcher, which would otherwise re-resolve the literal argument (seconds)
    on every call."""
    _, _, targets, _, subwords = rest
    key = (mode, dim, subwords is None, targets.neg_slots is None)   # check_block fixed the other types
    compiled = _COMPILED.get(key)
    if compiled is None:
        argtypes = (types.IntegerLiteral(dim),) + tuple(typeof(a) for a in rest)
        compiled = _COMPILED[key] = TRAIN_CHUNK[mode].compile(argtypes)
    return compiled


def run_threads(chunk, threads):
    """Hogwild: one Python thread per chunk; the compiled code releases the GIL."""
    results = [None] * threads
    errors = []

    def work(t):
        try:
            results[t] = chunk(t)
        except BaseException as e:   # re-raised in the caller's thread below
            errors.append(e)

    pool = [threading.Thread(target=work, args=(t,), name=f"sgns-{t}") for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    if errors:
        raise errors[0]
    return results


def kernel_ready(args, dim: int) -> bool:
    """Whether the first block of a run with ``args`` and ``dim`` starts without compiling:
    its chunk function is compiled in this process already, or numba's disk cache holds it
    for this mode, ``dim``, subwords or not, this CPU and these sources (the index entry
    numba's ``Dispatcher.compile`` would load). False where the cache cannot be read (a
    numba that renamed its internals): then the run says it may compile."""
    mode, subwords = mode_of(args), args.subwords is not None
    if any(k[:3] == (mode, dim, not subwords) for k in _COMPILED):
        return True
    dispatcher = TRAIN_CHUNK[mode]
    try:
        cache = dispatcher._cache
        _, magic, code = cache._index_key((), dispatcher.targetctx.codegen())
        index = cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - numba's private API: anything unexpected means "unknown"
        return False
    for key in index:
        try:
            sig, key_magic, key_code = key
            if (key_magic, key_code) == (magic, code) and sig[0] == types.IntegerLiteral(dim) \
                    and isinstance(sig[5], types.NoneType) != subwords:
                return True
        except (TypeError, ValueError, IndexError):
            continue
    return False
