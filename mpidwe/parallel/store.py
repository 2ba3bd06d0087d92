"""The boundary between the training loop and where the parameters live.

The round loop (mpidwe/train/loop.py) says "train these pieces, then sync"; a store decides
where the rows live and how the ranks combine them, and it is the only one that touches
them. Four stores implement :class:`Store`:

* :class:`~mpidwe.parallel.replicated.ReplicatedStore`: both matrices on every rank, trained by
  the numba kernel; a sync combines the ranks' changes by the scaled-mean rule (parallel/rule.py),
  sending touched rows (``--sync sparse``) or whole matrices (``dense``, ``average``);
* :class:`~mpidwe.parallel.device.DeviceStore`: the same model, its parameters resident on the
  torch device for the whole run (``--kernel torch``);
* :class:`~mpidwe.parallel.sharded.ShardedStore`: every rank owns every P-th row (``--store
  sharded``); a round pulls the rows it will touch, trains them and pushes the changes back
  to their owners;
* :class:`~mpidwe.parallel.blocks.BlockStore`: every rank owns a vocabulary block's input rows
  and the output blocks travel round a ring (``--store blocks``): one writer per row, nothing
  to combine.

A new combining scheme is a new store (or a new rule inside one), never a new trainer. Every
method of a store is a collective: all ranks call it in the same order.

The life of a store: the class gives the parameters a run starts from (``fresh_params``) or
reads them from a checkpoint (``read_params``); the trainer builds the store over them, then
per round calls :meth:`Store.train` and :meth:`Store.sync`; for evaluation, checkpoints and
the export it calls :meth:`Store.rows`, :meth:`Store.save` and :meth:`Store.write_vectors`;
at the end :meth:`Store.host`. A store that keeps its own copies of the rows it trains (the
block store: ``keeps_own_rows``) gets them from the parameters it is built over, which the
trainer then lets go, and returns the trained matrices from :meth:`Store.host`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..core.config import TrainConfig
from ..kernels.args import KernelArgs

Piece = tuple[np.ndarray, np.ndarray]          # (tokens, sentence starts)


@dataclass
class SyncStats:
    """Accumulated over the run on one rank: how many syncs, and their seconds split into
    communication (inside Comm) and the sync's own array work."""

    syncs: int = 0
    seconds: float = 0.0
    comm_seconds: float = 0.0
    bytes_sent: int = 0
    dense_syncs: int = 0      # --sync auto: matrices a sync sent dense (the others went sparse)
    steps: int = 0            # the syncs' latency steps (CommStats.steps: the collectives' message rounds)

    @property
    def array_seconds(self) -> float:
        return max(0.0, self.seconds - self.comm_seconds)


@dataclass(frozen=True)
class StoreSetup:
    """What a store needs to know of the run besides its parameters."""

    cfg: TrainConfig
    scale: int                     # every rank trains at scale x --lr (parallel/rule.py)
    device: str                    # where a device store keeps the parameters ("cpu", "cuda:N")
    vocab_size: int
    threads: int = 1               # the rank's threads (the kernel's, and the sync's array work)
    tiers: dict | None = None      # the plan's sync_tiers (full, hot, wire); None: every row at every sync
    counts: np.ndarray | None = None   # the vocabulary's counts (the block store splits the vocabulary by them)
    ring_pieces: int = 1           # the block store: pieces an output block travels in (--ring-overlap: 2)
    kernel: str = "numba"          # the plan's kernel (the block store: numba, or torch on ``device``)


@dataclass
class Work:
    """One round of this rank's words, as the trainer hands it to a store."""

    pieces: Iterable[Piece]        # sentence-aligned pieces of the rank's stream
    scale: float                   # global words one of this rank's words stands for
    position: int | None           # the rank's stream position at the end of the round (None:
                                   # known once the pieces, a lazy stream, have been read)


@dataclass
class Trained:
    """What a round of training did on this rank."""

    words: int
    loss: float
    examples: float
    compute_s: float               # seconds of kernel work (and the sharded store's planning)


def train_pieces(step: Callable[[np.ndarray, np.ndarray, KernelArgs], tuple], pieces: Iterable[Piece],
                 args: KernelArgs, on_piece: Callable[[int], None] | None) -> Trained:
    """The loop every store runs over a round: ``step(tokens, starts, args)`` trains one piece
    with the learning rate of the global progress at its start (``args`` is at the round's
    start; each piece moves it on by its words times ``args.words_scale``)."""
    words, loss, examples = 0, 0.0, 0.0
    t = time.perf_counter()
    for tokens, starts in pieces:
        l, n_ex, n_words = step(tokens, starts, args.at(args.words_done + args.words_scale * words,
                                                        args.words_scale))
        words += n_words
        loss += l
        examples += n_ex
        if on_piece is not None:
            on_piece(n_words)
    return Trained(words, loss, examples, time.perf_counter() - t)


class Store(ABC):
    """Where the parameters live and how ranks combine them (module docstring)."""

    #: True: rank 0 reads a checkpoint's parameters whole (then :meth:`read_params` shares them)
    params_on_root = True
    #: True: :meth:`rows` serves the rows it is asked for, never the whole matrix at once
    partial_rows = False
    #: True: :meth:`train` reads a round's pieces twice (plans, then trains): it gets them as a list
    plans_rounds = False
    #: True: :meth:`train` wants the next round's work too (``ahead``), to fetch its rows early
    looks_ahead = False
    #: True: the store copies the rows it trains out of the parameters it is built over, and
    #: the trainer lets go of those; :meth:`host` returns the trained matrices
    keeps_own_rows = False
    stats: SyncStats

    # ---------------------------------------------------------------- where a run starts
    @staticmethod
    def fresh_params(cfg, comm, vocab_size: int, counts=None) -> tuple[np.ndarray, np.ndarray]:
        """This rank's parameters at the start of a new run (``counts``: the vocabulary's, for
        a store whose rows depend on them; None: the whole matrices, for a warm start)."""
        raise NotImplementedError

    @staticmethod
    def read_params(found, where: dict, comm, cfg, vocab_size: int, counts=None) -> tuple[np.ndarray, np.ndarray]:
        """This rank's parameters from the checkpoint at ``where`` (``path``, ``parts``);
        ``found``: rank 0's loaded checkpoint (None on the other ranks); ``counts`` as for
        :meth:`fresh_params`."""
        raise NotImplementedError

    @staticmethod
    def prepare_resume(directory: str) -> None:
        """Rank 0, before it looks in ``directory`` for a checkpoint to resume from."""

    # ---------------------------------------------------------------- a run
    @abstractmethod
    def train(self, work: Work, ahead: Work | None, rng: np.ndarray, args: KernelArgs,
              on_piece: Callable[[int], None] | None = None) -> Trained:
        """Train this rank's pieces of the round (``rng``: the rank's kernel RNG states,
        advanced in place; ``args`` at the round's start)."""

    @abstractmethod
    def sync(self, rnd: int) -> float:
        """Combine the ranks' changes of round ``rnd`` (counted over the whole run); the
        largest |value| that changed (inf for NaN), the divergence guard's probe."""

    @abstractmethod
    def rows(self, ids: np.ndarray | None) -> np.ndarray | None:
        """Rank 0: rows ``ids`` (sorted, unique; None: all) of the input matrix; None elsewhere."""

    @abstractmethod
    def save(self, directory: str, ck, keep: int) -> str | None:
        """Write checkpoint ``ck`` (an io.checkpoint.Checkpoint whose state holds this rank's
        parameters) into ``directory``; every rank gets its path."""

    def save_exact(self, directory: str, round_: int) -> None:
        """Before a stop checkpoint of round ``round_`` (SIGTERM/SIGUSR1), which flushes: every
        rank keeps what it holds beyond the flushed parameters, for :meth:`restore_exact`
        (a collective). Nothing by default: a store whose flush changes nothing."""

    def restore_exact(self, directory: str, round_: int) -> bool:
        """A run resumed on as many ranks from the stop checkpoint of round ``round_``: take
        back what :meth:`save_exact` kept, where every rank has it (a collective); whether it did."""
        return False

    @abstractmethod
    def write_vectors(self, path: str, words: list[str], vectors_of: Callable) -> str | None:
        """Rank 0 writes the word vectors (``vectors_of``: input matrix -> word vectors) as
        word2vec text; returns why it failed (rank 0), else None."""

    def flush(self) -> None:
        """Combine every change a sync left waiting (a collective): afterwards every rank holds
        the same parameters. :meth:`rows`, :meth:`save` and :meth:`write_vectors` flush first."""

    def host(self) -> tuple[np.ndarray, np.ndarray] | None:
        """After this the run's host arrays hold the trained parameters; a store that
        :attr:`keeps_own_rows` returns them instead (w_in, w_out)."""
        return None

    def report(self) -> dict:
        """This rank's store-specific metrics (rank 0 lists them per rank in metrics.jsonl)."""
        return {}

    def settings(self) -> dict:
        """Store-specific values every metrics record states once."""
        return {}

    def extra_comm_bytes(self) -> int:
        """Bytes this rank sent on communicators other than the run's."""
        return 0

    def close(self) -> None:
        """Release what the store holds beyond the parameters (threads, communicators)."""
