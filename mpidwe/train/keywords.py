"""gensim's keywords in ``mpidwe.train(**options)``: ``vector_size=50``, ``workers=4``,
``sg=1``, ``hs=1``, ``alpha``, ``min_alpha``, ``iter``, ``min_n``/``max_n``/``bucket``,
``min_count``, ``max_final_vocab``, ``corpus_file`` and ``sentences``.

A name whose meaning is mpidwe's is translated: the names come from the table behind the
command's hints (core/options.py, FOREIGN_OPTIONS; an entry that is one flag means the same
thing); ``sg``, ``hs`` and ``min_alpha`` change a value as well as a name. Any other name from
that table is refused with its hint, and an unknown name with the nearest option. Options that
build a corpus from text (``min_count``, ``max_vocab``, ``lowercase``, ``normalize``,
``strip_doc_tags``, ``sentence_length``) are split off for preprocessing.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable

from ..core.config import FOREIGN_OPTIONS, PreprocessConfig, TrainConfig, from_mapping
from ..core.errors import ConfigError
from ..core.options import foreign_field

# the preprocessing options a text corpus given to mpidwe.train is built with
TEXT_OPTIONS = ("min_count", "max_vocab", "lowercase", "normalize", "strip_doc_tags", "sentence_length")
SOURCE = "mpidwe.train() arguments"


@dataclasses.dataclass
class Keywords:
    """``mpidwe.train``'s keywords sorted out: the training options, the text options (for a
    corpus built from text) and gensim's ``sentences`` (an iterable of token lists, or None)."""

    train: dict
    text: dict
    sentences: Iterable | None = None


def _set(out: dict, field: str, value, name: str, origin: dict) -> None:
    """``out[field] = value``, refused when two keywords give the field different values."""
    if field in out and out[field] != value:
        raise ConfigError(f"{origin.get(field, field)}={out[field]!r} and {name}={value!r} both set {field} "
                          f"in {SOURCE}; give one")
    out[field] = value
    origin[field] = name


def _flag(value, name: str) -> bool:
    if isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise ConfigError(f"{name} must be 0 or 1 (as gensim's), got {value!r} in {SOURCE}")


def _hs(options: dict, out: dict, origin: dict) -> None:
    """gensim's ``hs=1``: hierarchical softmax (mpidwe's ``loss='hs'``). gensim adds negative
    sampling to it unless ``negative=0``; mpidwe trains one output layer, so ``hs=1`` with a
    positive ``negative`` is refused."""
    hs = _flag(options.pop("hs"), "hs") if "hs" in options else None
    negative = options.get("negative")
    if negative == 0 and not isinstance(negative, bool):
        if hs is False or (hs is None and out.get("loss", options.get("loss")) != "hs"):
            raise ConfigError(f"negative=0 leaves no output layer: give hs=1 (loss='hs') in {SOURCE}")
        options.pop("negative")
        hs = True
    if hs is None:
        return
    if hs and isinstance(negative, int) and negative > 0:
        raise ConfigError(f"hs=1 with negative={negative}: mpidwe trains one output layer, hierarchical softmax "
                          f"(hs=1, negative=0, or loss='hs') or negative sampling (loss='ns') in {SOURCE}")
    _set(out, "loss", "hs" if hs else "ns", "hs", origin)


def _unknown(name: str) -> ConfigError:
    known = ([f.name for f in dataclasses.fields(TrainConfig)] + list(TEXT_OPTIONS) + ["sentences", "sg", "hs",
             "min_alpha"] + list(FOREIGN_OPTIONS["train"]) + list(FOREIGN_OPTIONS["preprocess"]))
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]}?" if close else " (python -m mpidwe.train --help lists them)"
    return ConfigError(f"unknown option(s) in {SOURCE}: {name}{hint}")


def translate(options: dict) -> Keywords:
    """Split and translate ``mpidwe.train``'s keywords (see the module's docstring); a
    ConfigError names any keyword that cannot be taken."""
    options = dict(options)
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    out, text, origin = {}, {}, {}
    sentences = options.pop("sentences", None)
    if "corpus_file" in options:
        _set(out, "corpus", options.pop("corpus_file"), "corpus_file", origin)
    if "sg" in options:
        _set(out, "model", "skipgram" if _flag(options.pop("sg"), "sg") else "cbow", "sg", origin)
    _hs(options, out, origin)
    min_alpha = options.pop("min_alpha", None)
    for name, value in options.items():
        key = name.lower()
        if name in train_fields:
            _set(out, name, value, name, origin)
        elif name in TEXT_OPTIONS:
            _set(text, name, value, name, origin)
        elif foreign_field("train", key) in train_fields:
            _set(out, foreign_field("train", key), value, name, origin)
        elif foreign_field("preprocess", key) in TEXT_OPTIONS:
            _set(text, foreign_field("preprocess", key), value, name, origin)
        elif key in FOREIGN_OPTIONS["preprocess"]:     # in the words of this call: --max-vocab -> max_vocab
            hint = re.sub(r"--([a-z-]+)", lambda m: m.group(1).replace("-", "_"), FOREIGN_OPTIONS["preprocess"][key])
            raise ConfigError(f"mpidwe.train() takes no {name}=: use {hint}")
        elif key in FOREIGN_OPTIONS["train"]:
            raise ConfigError(f"mpidwe.train() takes no {name}=: use {FOREIGN_OPTIONS['train'][key]}")
        else:
            raise _unknown(name)
    if min_alpha is not None:     # gensim's final rate; mpidwe's is a fraction of the first
        lr = out.get("lr", TrainConfig.lr)
        if not isinstance(min_alpha, (int, float)) or isinstance(min_alpha, bool) or not 0 < min_alpha <= lr:
            raise ConfigError(f"min_alpha must be a number in (0, alpha], got {min_alpha!r} in {SOURCE}")
        _set(out, "min_lr_ratio", min_alpha / lr, "min_alpha", origin)
    if sentences is not None and "corpus" in out:
        raise ConfigError(f"sentences= and {origin['corpus']}= both give the corpus in {SOURCE}; give one")
    return Keywords(out, text, sentences)


def text_config(text: dict, **fixed) -> PreprocessConfig:
    """The preprocessing of a text corpus given to mpidwe.train: ``text`` over the defaults."""
    return from_mapping(PreprocessConfig, {**text, **fixed}, source=SOURCE)
