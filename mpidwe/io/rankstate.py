"""The only module that reads or writes rank-state files (HDF5): what each rank holds beyond a
stop checkpoint's parameters when its run combines rows in tiers, with error feedback or
with ``--overlap`` (its own parameters, touched flags, the sync's base and residuals, an
exchange in flight), so that a run stopped by SIGTERM/SIGUSR1 resumes on as many ranks
exactly as it would have gone on. Beside the checkpoint,
``ckpt-<round>.rank-<rank>-of-<P>.h5``, sealed and checksummed; removed with it
(checkpoint.remove_stale_parts). Layout: docs/hdf5-format.md."""

from __future__ import annotations

import os

import h5py
import numpy as np

from ..core.errors import InputError
from .checkpoint import A_CONTENT, A_FORMAT, A_RANK, A_VERSION, A_WORLD, _write_sealed
from .digests import _str, content_sha256
from .formats import check_format, check_seal, check_stored
from .fsutil import reason

RANK_FORMAT = "mpidwe-rank-state"
RANK_VERSION = 1


def rank_state_name(round_: int, rank: int, world: int) -> str:
    return f"ckpt-{round_:09d}.rank-{rank:05d}-of-{world:05d}.h5"


def save_rank_state(directory: str, round_: int, rank: int, world: int, arrays: dict[str, np.ndarray]) -> str:
    """Rank ``rank`` of ``world``'s state beside the checkpoint of round ``round_`` (written
    atomically and sealed, before that checkpoint)."""
    path = os.path.join(directory, rank_state_name(round_, rank, world))

    def fill(f):
        f.attrs[A_FORMAT] = RANK_FORMAT
        f.attrs[A_VERSION] = RANK_VERSION
        f.attrs[A_RANK], f.attrs[A_WORLD] = rank, world
        for name, value in sorted(arrays.items()):
            f.create_dataset(f"state/{name}", data=value)
        f.flush()
        f.attrs[A_CONTENT] = content_sha256(f)
        return []

    try:
        _write_sealed(path, fill)
    except OSError as e:
        raise InputError(f"cannot write {path}: {reason(e)}") from None
    return path


def load_rank_state(directory: str, round_: int, rank: int, world: int) -> dict[str, np.ndarray] | None:
    """The arrays :func:`save_rank_state` wrote (checked: seal, format, checksum); None where
    there is none."""
    path = os.path.join(directory, rank_state_name(round_, rank, world))
    if not os.path.exists(path):
        return None
    check_seal(path, "rank state")
    try:
        with h5py.File(path, "r", locking=False) as f:
            check_format(f.attrs, path, RANK_FORMAT, RANK_VERSION, "rank state")
            check_stored(f, path, "rank state")
            if content_sha256(f) != _str(f.attrs[A_CONTENT]):
                raise InputError(f"{path} is damaged: content checksum mismatch")
            return {name: f["state"][name][()] for name in f["state"]}
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise InputError(f"{path} is damaged: {e}") from None
