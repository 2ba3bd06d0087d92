"""``python -m mpidwe warm [TRAIN OPTIONS]``: compile ahead, into numba's disk cache, what a
first run compiles (docs/guide.md, "Compiled kernels").

numba compiles the kernels on their first use on a machine, once per CPU model, kernel mode
and ``--dim`` (up to a minute each under load), and caches the machine code on disk. ``warm``
pays that once, before any job: it preprocesses a small generated text (the tokenizer),
trains it for one epoch on one process with the training options given (the defaults:
skip-gram, negative sampling, ``--dim 100``; the kernel of that mode and dim, and the serial
guard's probe), and runs the multi-rank sync of ``--sync`` once over a world of two ranks in
this process whose other rank echoes this one (``Echo``: the combining rule's compiled
loops, with the types a real sync gives them, and the codec of ``--wire``).

Where the cache lives is numba's choice: ``NUMBA_CACHE_DIR`` when set, else ``__pycache__``
beside mpidwe's modules, or the user's cache folder where those are read-only. numba keeps
one entry per CPU model in the same files, so a cluster with several node types warms on
one node of each (or sets ``NUMBA_CPU_NAME=generic`` everywhere, which trades speed for
one portable entry).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time

import numpy as np

from .core.config import (TIERS_AUTO_MIN_RANKS, WIRE_AUTO_MIN_RANKS, PreprocessConfig, TrainConfig, block_blockers,
                          parse_command, wire_of)
from .core.errors import ConfigError, MpidweError
from .core.prog import prog
from .parallel.comm import Comm
from .kernels.tokenize import warm_up

PROG = prog("warm")
TEXT_WORDS, TEXT_LINES = 200, 2000


class Echo(Comm):
    """A world of two ranks in one process, the other rank an echo of this one: every
    collective the sync makes answers as if the other rank had sent what this one did."""

    def __init__(self):
        super().__init__(None)
        self.size = 2

    def allgather_array(self, arr: np.ndarray) -> np.ndarray:
        return np.stack([arr, arr])

    def allreduce_(self, arr: np.ndarray, algorithm: str = "mpi") -> np.ndarray:
        arr += arr
        return arr

    def reduce_parts_encoded(self, parts, wire: str, split=None) -> list:
        from .parallel.wire import decode_add, encode     # the codec's compiled loops

        out = []
        for arr, minus, counts, feedback, owner in parts:
            summed = None if counts is None else counts + counts       # the echo touched the same rows
            sent = encode(arr, wire, minus, feedback=feedback)
            mine = np.zeros(arr.shape, dtype=np.float32)
            decode_add(sent, wire, mine)
            decode_add(sent, wire, mine)
            if owner is not None and owner[1] is None:
                owner = (owner[0], (summed != 0).view(np.uint8))
            n = len(arr)              # the sum is "rank" 0's segment, "rank" 1's is empty
            out.append((np.stack([encode(mine, wire, feedback=owner), np.zeros_like(sent)]),
                        np.array([0, n, n], dtype=np.int64), summed))
        return out


def write_text(path: str) -> None:
    """A small seeded text whose every word passes the default --min-count."""
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for _ in range(TEXT_LINES):
            f.write(" ".join(f"w{i}" for i in rng.integers(0, TEXT_WORDS, rng.integers(3, 30))) + "\n")


def warm_sync(cfg: TrainConfig, dim: int) -> None:
    """One multi-rank sync of ``cfg.sync`` over the two ranks of an :class:`Echo` (``auto``:
    two, a third of the rows touched, which goes sparse, then every row, which goes dense)."""
    from .parallel.replicated import Synchronizer

    rng = np.random.default_rng(0)
    params = [rng.standard_normal((TEXT_WORDS, dim)).astype(np.float32) for _ in range(2)]
    wires = sorted({wire_of(cfg, p) for p in (2, WIRE_AUTO_MIN_RANKS, TIERS_AUTO_MIN_RANKS)})   # auto: each
    # encoded rows with and without error feedback (--wire-feedback: their own compiled loops)
    for wire, fed in [(w, f) for w in wires for f in ((False, True) if w in ("int8", "int4") else (False,))]:
        syncer = Synchronizer(Echo(), params, mode=cfg.sync, scale=2, allreduce=cfg.allreduce, wire=wire)
        if fed:
            syncer.keep_residuals()
        for step in ((3,) if cfg.sync != "auto" else (3, 1)):
            touched = [np.zeros(TEXT_WORDS, dtype=np.uint8) for _ in params]
            for p, t in zip(params, touched):
                p[::step] += 0.01
                t[::step] = 1
            syncer.sync(params, touched)


def warm(cfg: TrainConfig, log=print) -> dict:
    """Compile what a run with ``cfg``'s training options compiles; returns the seconds of
    each step. The corpus, run directory and evaluation options of ``cfg`` are not used."""
    from . import preprocess, train

    seconds = {}
    with tempfile.TemporaryDirectory(prefix="mpidwe-warm-") as tmp:
        t = time.perf_counter()
        write_text(os.path.join(tmp, "text.txt"))
        corpus = os.path.join(tmp, "corpus.h5")
        preprocess.run(PreprocessConfig(inputs=(os.path.join(tmp, "text.txt"),), output=corpus), Comm.serial(),
                       log=None)
        warm_up()            # what the preprocess command loads first, in a background thread
        seconds["preprocess"] = time.perf_counter() - t
        log(f"{PROG}: preprocessing's tokenizer ready ({seconds['preprocess']:.1f} s)")
        defaults = TrainConfig()
        run_cfg = dataclasses.replace(
            cfg, corpus=corpus, out=os.path.join(tmp, "run"), segments="all", epochs=1, export=False,
            progress=False, resume=None, init_from=None, force=True, follow=None, eval_every=0, eval_sim=(),
            eval_analogy=(), eval_pip=False, checkpoint_every=0, checkpoint_minutes=0.0,
            buckets=min(cfg.buckets, 1000), sync_every=defaults.sync_every)
        t = time.perf_counter()
        train.run(run_cfg, Comm.serial(), log=None)
        cpu = cfg.kernel in ("auto", "numba") and cfg.device in ("auto", "cpu")
        if cfg.store == "auto" and cpu and not block_blockers(cfg, "numba", "cpu"):   # long runs on many ranks
            train.run(dataclasses.replace(run_cfg, store="blocks", kernel="numba", device="cpu"), Comm.serial(),
                      log=None)
        seconds["train"] = time.perf_counter() - t
        log(f"{PROG}: the training kernel ready: {cfg.model}, --loss {cfg.loss}, --dim {cfg.dim}"
            f"{', --subwords' if cfg.subwords else ''} ({seconds['train']:.1f} s)")
    if cfg.store in ("replicated", "auto"):
        t = time.perf_counter()
        warm_sync(cfg, cfg.dim)
        seconds["sync"] = time.perf_counter() - t
        log(f"{PROG}: the multi-rank sync ready: --sync {cfg.sync} ({seconds['sync']:.1f} s)")
    where = os.environ.get("NUMBA_CACHE_DIR") or "numba's default (__pycache__ beside mpidwe's modules)"
    log(f"{PROG}: cached in {where}; runs with these options on this CPU model start without compiling")
    return seconds


# what warm does not use: the corpus, the run directory, checkpoints and evaluation (it trains a
# generated text in a folder of its own); one of them given as a flag is refused, a --config
# file shared with train may hold them
NOT_USED = ("corpus", "out", "segments", "verify_corpus", "follow", "follow_poll", "follow_settle", "follow_exit_idle",
            "init_from", "resume", "force", "checkpoint_every", "checkpoint_minutes", "keep_checkpoints", "eval_every",
            "eval_sim", "eval_analogy", "eval_pip", "eval_restrict_vocab", "export")


def refuse_unused(given, file_keys=()) -> None:
    """Refuse the options of ``given`` that warm does not use, unless they come from the
    --config file (``file_keys``), before anything compiles."""
    unused = [n for n in NOT_USED if n in given and n not in file_keys]
    if unused:
        raise ConfigError(f"{', '.join('--' + n.replace('_', '-') for n in unused)}: not used by warm, which "
                          f"compiles on a text of its own; give only training options (--dim, --model, --loss, "
                          f"--sync, --device, ...)")


def _config_file_keys(argv) -> set[str]:
    import argparse

    from .core.options import load_toml

    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config")
    path = parser.parse_known_args(argv)[0].config
    return {k.replace("-", "_") for k in load_toml(path)} if path else set()


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, given = parse_command(
            TrainConfig, argv, prog=PROG, config_file_flag=True, return_given=True,
            description="Compile the kernels a run with these training options uses into numba's disk cache, "
                        "so that the first run does not compile (once per machine, CPU model, mode and --dim; "
                        "NUMBA_CACHE_DIR chooses the folder). The corpus, run and evaluation options are "
                        "refused (not used).")
        refuse_unused(given, _config_file_keys(sys.argv[1:] if argv is None else argv))
        from .train.plan import choose_compute

        choose_compute(cfg, Comm.serial())      # --device cuda without a GPU: refused before any compiling
        warm(cfg)
    except MpidweError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
