"""The only module that reads or writes character-model files (HDF5): the character
generator (core/charmodel.py) fitted to a checkpoint's vectors by ``inspect RUN fit-chars``
and stored beside it. Layout: docs/hdf5-format.md, "Character model".

A model belongs to the checkpoint beside it: its name, content checksum and vocabulary are
checked on every read, so a model is never used with another checkpoint. A training run
that continues a checkpoint with a model (``--resume``, ``--init-from``, every ``--follow``
step) carries it forward: each checkpoint it writes gets a copy that belongs to the new
checkpoint and names in ``fitted_on`` the checkpoint whose vectors it was fitted to; loading
such a copy says once that it was fitted on earlier vectors and how to refit it.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
from typing import NamedTuple

import h5py
import numpy as np

from ..version import __version__
from ..core.errors import InputError
from .checkpoint import (A_CONTENT, A_CHECKSUM, A_CREATED, A_FORMAT, A_TOOL_VERSION, A_VERSION, A_VOCAB_SHA,
                         Checkpoint, _write_sealed, char_model_path)
from .digests import _str, content_sha256, vocab_sha256
from .formats import check_format, check_seal, check_stored, unreadable
from .fsutil import reason

CHAR_FORMAT = "mpidwe-char-model"
CHAR_VERSION = 2            # 2: fitted_on, the checkpoint whose vectors it was fitted to (a model
                            #    carried forward to a later checkpoint names an earlier one)
CHAR_READ_VERSIONS = (1,)   # 1: always fitted to the checkpoint beside it
A_CHECKPOINT = "checkpoint"
A_CHECKPOINT_SHA = "checkpoint_content_sha256"
A_MATRIX = "matrix"
A_META = "model"
A_FITTED_ON = "fitted_on"
G_CHAR_PARAMS = "params"


class StoredChars(NamedTuple):
    """A character model as read from its file."""
    meta: dict                       # JSON-able: alphabet, dim, options, scale, info
    params: dict[str, np.ndarray]    # tensor name -> float32 array
    matrix: str                      # the vectors it was fitted to: input, output or sum
    fitted_on: dict                  # checkpoint (relative to ``path``'s folder), content_sha256, words_done
    path: str                        # the file
    carried: bool                    # fitted to an earlier checkpoint's vectors, carried to this one


def _content_attr(ckpt_path: str) -> str:
    with h5py.File(ckpt_path, "r", locking=False) as f:
        return _str(f.attrs.get(A_CONTENT, f.attrs.get(A_CHECKSUM, "")))


def save_char_model(ck: Checkpoint, meta: dict, params: dict[str, np.ndarray], matrix: str,
                    fitted_on: dict | None = None) -> str:
    """Write the character generator of checkpoint ``ck`` beside it, atomically and sealed;
    it names the checkpoint and its content checksum, so it is never used with another
    checkpoint. ``meta``: JSON-able (alphabet, options, ...); ``params``: name -> float32
    array; ``fitted_on``: the checkpoint whose vectors it was fitted to (None: ``ck`` itself;
    else as :func:`carry_char_model` gives it). The checkpoint itself is not touched."""
    path = char_model_path(ck.path)
    own = _content_attr(ck.path)
    fitted_on = fitted_on or {"checkpoint": os.path.basename(ck.path), "content_sha256": own,
                              "words_done": int(ck.progress.words_done)}

    def fill(f):
        f.attrs[A_FORMAT] = CHAR_FORMAT
        f.attrs[A_VERSION] = CHAR_VERSION
        f.attrs[A_TOOL_VERSION] = __version__
        f.attrs[A_CREATED] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        f.attrs[A_CHECKPOINT] = os.path.basename(ck.path)
        f.attrs[A_CHECKPOINT_SHA] = own
        f.attrs[A_VOCAB_SHA] = vocab_sha256(ck.words)
        f.attrs[A_MATRIX] = matrix
        f.attrs[A_META] = json.dumps(meta, sort_keys=True)
        f.attrs[A_FITTED_ON] = json.dumps(fitted_on, sort_keys=True)
        for name, value in sorted(params.items()):
            f.create_dataset(f"{G_CHAR_PARAMS}/{name}", data=np.asarray(value, dtype=np.float32))
        f.flush()
        f.attrs[A_CONTENT] = content_sha256(f)
        return []      # small: the seal covers every byte

    try:
        _write_sealed(path, fill)
    except OSError as e:
        raise InputError(f"cannot write character model {path}: {reason(e)}") from None
    return path


def carry_char_model(stored: StoredChars, ck: Checkpoint) -> str:
    """Copy ``stored`` (the model of the checkpoint a run continued) beside checkpoint ``ck``
    of that run, still naming the checkpoint it was fitted on; returns the new file."""
    fitted = os.path.normpath(os.path.join(os.path.dirname(stored.path), stored.fitted_on["checkpoint"]))
    here = os.path.dirname(char_model_path(ck.path))
    return save_char_model(ck, stored.meta, stored.params, stored.matrix,
                           dict(stored.fitted_on, checkpoint=os.path.relpath(fitted, here)))


def load_char_model(ck: Checkpoint, warn=None, say_carried: bool = True) -> StoredChars | None:
    """The character generator beside checkpoint ``ck``, or None when there is none, or when
    it cannot be used (damaged, of another format or version, fitted to another checkpoint):
    it is optional, so the checkpoint stays usable and only the words outside the vocabulary
    go unanswered; ``warn`` (default: the ``mpidwe`` logger) gets one line saying why. A model
    carried forward from an earlier checkpoint is used, and (``say_carried``) ``warn`` gets one
    line saying so and how to refit it."""
    warn = warn or logging.getLogger("mpidwe").warning
    try:
        stored = read_char_model(ck)
    except InputError as e:
        warn(f"warning: ignoring the character model: {e}; words outside the vocabulary have no vector")
        return None
    if stored is not None and stored.carried and say_carried:
        done = stored.fitted_on.get("words_done")
        warn(f"warning: the character model {stored.path} was fitted on the vectors of an earlier checkpoint "
             f"({stored.fitted_on['checkpoint']}{f', {done:,} words trained' if done is not None else ''}; "
             f"this one: {ck.progress.words_done:,}) and carried forward by the training that continued it; "
             f"words outside the vocabulary get vectors from it (refit it to these vectors: "
             f"python -m mpidwe.inspect {ck.path} fit-chars)")
    return stored


def read_char_model(ck: Checkpoint) -> StoredChars | None:
    """As :func:`load_char_model`, but a file that cannot be used is refused with one line,
    and a carried one is returned without a word."""
    path = char_model_path(ck.path)
    if not os.path.exists(path):
        return None
    check_seal(path, "character model")
    try:
        f = h5py.File(path, "r", locking=False)
    except OSError:
        raise unreadable(path, "character model") from None
    try:
        with f:
            check_format(f.attrs, path, CHAR_FORMAT, CHAR_VERSION, "character model", CHAR_READ_VERSIONS)
            check_stored(f, path, "character model")
            if content_sha256(f) != _str(f.attrs[A_CONTENT]):
                raise InputError(f"{path} is damaged: content checksum mismatch")
            own = _str(f.attrs[A_CHECKPOINT_SHA])
            if own != _content_attr(ck.path) or _str(f.attrs[A_VOCAB_SHA]) != vocab_sha256(ck.words):
                raise InputError(f"{path} was fitted to another checkpoint than {ck.path} (fit it again: "
                                 f"python -m mpidwe.inspect {ck.path} fit-chars --force)")
            fitted_on = (json.loads(_str(f.attrs[A_FITTED_ON])) if A_FITTED_ON in f.attrs else
                         {"checkpoint": _str(f.attrs[A_CHECKPOINT]), "content_sha256": own, "words_done": None})
            params = {}
            f[G_CHAR_PARAMS].visititems(lambda name, obj: params.__setitem__(name, obj[()])
                                        if isinstance(obj, h5py.Dataset) else None)
            return StoredChars(json.loads(_str(f.attrs[A_META])), params, _str(f.attrs[A_MATRIX]), fitted_on,
                               path, fitted_on["content_sha256"] != own)
    except InputError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise InputError(f"{path} is damaged: {e}") from None
