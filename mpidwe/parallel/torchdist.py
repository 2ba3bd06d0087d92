"""The only module that imports torch.distributed: a process group beside MPI.

``--exchange torch`` moves the device store's rows between ranks with torch.distributed
(NCCL between CUDA devices, gloo between CPU tensors), so that they go from device to
device and never through host numpy. MPI stays the job's communicator: it starts the
ranks, numbers them and sets the group up (:meth:`TorchGroup.over`): rank 0 opens a
rendezvous store on a free port (the port is the operating system's choice, so no two jobs
race for it), the ranks learn its address over MPI, and each rank builds its backend
directly (no default group, nothing global: two runs in one process each have their own).

Every rank calls the same collectives in the same order (the store's sync does). A
collective that fails (a peer died, the timeout passed) raises on the ranks that see it;
like an MPI failure, this rank then leaves the blame to the dead peer's watcher
(parallel/deathwatch.py) and ``run_main`` aborts the whole job.
"""

from __future__ import annotations

import datetime
import socket
import time

import torch
import torch.distributed as dist

from ..core.errors import ConfigError
from . import deathwatch
from .comm import Comm, CommStats, latency_steps

# How long a collective may wait for the slowest rank: syncs wait only for the other ranks'
# rounds (evaluations and checkpoints wait on MPI), so this is a round's skew at most.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=30)
# How long the ranks wait for rank 0's rendezvous store when the group is set up.
CONNECT_TIMEOUT = datetime.timedelta(seconds=120)


def backend_for(device: str) -> str:
    """NCCL between CUDA devices, gloo between CPU tensors."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def rendezvous_host(hostnames: list[str]) -> str:
    """Where the ranks reach rank 0: the loopback when every rank runs on rank 0's host, else
    rank 0's hostname (as MPI launchers name hosts; each rank resolves it itself)."""
    return "127.0.0.1" if len(set(hostnames)) == 1 else hostnames[0]


def _open_root_store(host: str, size: int):
    """Rank 0: the rendezvous store, on a port the operating system picks."""
    try:
        return dist.TCPStore(host, 0, size, True, timeout=CONNECT_TIMEOUT, wait_for_workers=False)
    except (RuntimeError, OSError) as e:
        raise ConfigError(f"--exchange torch: rank 0 could not open torch.distributed's rendezvous on "
                          f"{host}: {e}; use --exchange mpi") from None


def _join_store(host: str, port: int, size: int):
    try:
        return dist.TCPStore(host, port, size, False, timeout=CONNECT_TIMEOUT)
    except (RuntimeError, OSError) as e:
        raise ConfigError(f"--exchange torch: could not reach rank 0's torch.distributed rendezvous at "
                          f"{host}:{port}: {e}; use --exchange mpi") from None


def _check_backend(backend: str) -> None:
    if not dist.is_available():
        raise ConfigError("--exchange torch needs PyTorch with torch.distributed; use --exchange mpi")
    if not (dist.is_nccl_available() if backend == "nccl" else dist.is_gloo_available()):
        raise ConfigError(f"--exchange torch on {'CUDA' if backend == 'nccl' else 'the CPU'} needs PyTorch "
                          f"built with {backend}; use --exchange mpi")


def _backend(backend: str, store, rank: int, size: int):
    """The backend itself (its constructor waits for every rank's)."""
    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options.is_high_priority_stream = False
        options._timeout = COLLECTIVE_TIMEOUT
        return dist.ProcessGroupNCCL(store, rank, size, options)
    return dist.ProcessGroupGloo(store, rank, size, COLLECTIVE_TIMEOUT)


class TorchGroup:
    """The ranks of a :class:`~mpidwe.parallel.comm.Comm` as a torch.distributed group, with the
    same byte and time accounting as ``Comm``. Tensors stay where they are: on the device
    with NCCL, on the CPU with gloo."""

    def __init__(self, backend: str, pg, rank: int, size: int, store):
        self.backend, self._pg, self.rank, self.size = backend, pg, rank, size
        self._store = store         # rank 0 serves the rendezvous while the group lives
        self.stats = CommStats()

    @classmethod
    def over(cls, comm: Comm, device: str) -> "TorchGroup":
        """Set a group up over ``comm``'s ranks (a collective of ``comm``)."""
        backend = backend_for(device)
        comm.agree(_check_backend, backend)
        host = rendezvous_host(comm.allgather(socket.gethostname()))
        root = comm.on_root(_open_root_store, host, comm.size, broadcast=False)
        port = comm.bcast(root.port if comm.is_root else None)
        store = comm.agree(lambda: root) if comm.is_root else comm.agree(_join_store, host, port, comm.size)
        pg = _backend(backend, dist.PrefixStore("mpidwe", store), comm.rank, comm.size)
        return cls(backend, pg, comm.rank, comm.size, store)

    def _wait(self, work) -> None:
        try:
            work.wait()
        except RuntimeError:
            deathwatch.stand_down()    # most likely a peer died: its own watcher names it
            raise

    def allgather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's equally shaped ``tensor``, stacked in rank order: [P, *shape], on
        ``tensor``'s device."""
        t = time.perf_counter()
        tensor = tensor.contiguous()
        out = torch.empty((self.size,) + tuple(tensor.shape), dtype=tensor.dtype, device=tensor.device)
        self._wait(self._pg.allgather([list(out.unbind(0))], [tensor]))
        self.stats.add(out.nbytes - tensor.nbytes, time.perf_counter() - t,
                       latency_steps("allgather", self.size, out.nbytes))
        return out

    def allreduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the ranks, in place; every rank ends with the same values (the
        backend's order of the sum: a ring's, so bit for bit like MPI's only at 2 ranks)."""
        t = time.perf_counter()
        self._wait(self._pg.allreduce([tensor]))
        # accounted as a bandwidth-optimal all-reduce, as Comm.allreduce_ accounts MPI's
        self.stats.add(2 * (self.size - 1) * tensor.nbytes // self.size, time.perf_counter() - t,
                       latency_steps("allreduce", self.size, tensor.nbytes))
        return tensor

    def close(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None and hasattr(pg, "shutdown"):
            pg.shutdown()
        self._store = None
