"""The option machinery under every command's config: fields with help text, argparse
from a dataclass, TOML files, validation, one-line errors with suggestions, and the same
errors in the words of the Python call (mpidwe/core/config.py holds the configs)."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import re
import typing
from dataclasses import field
from pathlib import Path

from .errors import ConfigError

try:
    import tomllib  # novermin (3.11+; tomli below on 3.10)
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib


def opt(default, help, *, choices=None, flag=None, positional=False, nargs=None):
    """A config field with its command-line help (``flag`` overrides ``--field-name``)."""
    meta = {"help": help, "choices": choices, "flag": flag, "positional": positional, "nargs": nargs}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def _flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _base_type(tp):
    """Unwrap ``X | None`` to X; tuples of str stay tuple."""
    args = typing.get_args(tp)
    if args and type(None) in args:
        return next(a for a in args if a is not type(None))
    return tp


def add_arguments(parser: argparse.ArgumentParser, cls, *, defaults_from_file: bool = False) -> None:
    """Add one argument per field of ``cls``. With ``defaults_from_file`` every default is
    SUPPRESS, so that only flags the user gave override a config file."""
    hints = typing.get_type_hints(cls)
    target = {}                   # a field's section of --help (HELP_GROUPS), else the options
    for title, names in getattr(cls, "HELP_GROUPS", {}).items():
        target.update(dict.fromkeys(names, parser.add_argument_group(title)))
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if "help" not in meta:
            continue
        tp = _base_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        kwargs = {"help": f"{meta['help']} (default: {default!r})" if not meta["positional"] else meta["help"]}
        if meta["choices"]:
            kwargs["choices"] = meta["choices"]
        if tp is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(tp) is tuple:
            kwargs["nargs"] = meta["nargs"] or "+"
            kwargs["type"] = typing.get_args(tp)[0]
            if not meta["positional"]:       # --eval-analogy a --eval-analogy b: both, as -I does
                kwargs["action"], default = "extend", list(default)
                kwargs["help"] += "; repeating the flag adds to the list"
        else:
            kwargs["type"] = tp
        if meta["positional"]:
            parser.add_argument(f.name, metavar=f.name.upper().rstrip("S"), **kwargs)
            continue
        kwargs["default"] = argparse.SUPPRESS if defaults_from_file else default
        target.get(f.name, parser).add_argument(_flag(f), dest=f.name, **kwargs)


def _optional(tp) -> bool:
    return type(None) in typing.get_args(tp)


def _check_type(f: dataclasses.Field, tp, v, source: str):
    """``v`` for field ``f`` of declared type ``tp``, checked strictly (a TOML file or a stored
    configuration bypasses argparse's conversions); int -> float and list -> tuple are the only
    conversions. A wrong type is a one-line ConfigError naming the flag, the value and ``source``."""
    name = f.name if f.metadata.get("positional") else _flag(f)

    def bad(what, hint=""):
        raise ConfigError(f"{name} must be {what}, got {v!r} ({type(v).__name__}) in {source}{hint}")

    if v is None and _optional(tp):
        return None
    base = _base_type(tp)
    if base is bool:
        if not isinstance(v, bool):
            bad("true or false")
    elif base is int:
        if not isinstance(v, int) or isinstance(v, bool):
            bad("an integer")
    elif base is float:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            bad("a number")
        try:
            v = float(v)
        except OverflowError:
            bad("a number in floating-point range")
    elif base is str:
        if not isinstance(v, str):
            bad("a string")
    elif typing.get_origin(base) is tuple:
        item = typing.get_args(base)[0]
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, item) and not isinstance(x, bool) for x in v):
            what = f"a list of {'strings' if item is str else item.__name__ + 's'}"
            bad(what, f"; write {f.name} = [{json.dumps(v)}]" if isinstance(v, str) else "")
        v = tuple(v)
    choices = f.metadata.get("choices")
    if choices and v not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, choices))}, got {v!r} in {source}")
    return v


def from_mapping(cls, values: dict, *, source: str = "options"):
    """Build ``cls`` from a mapping (command-line values, a TOML file or a stored configuration),
    refusing unknown keys, values of the wrong type and values outside a field's choices."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ConfigError(f"unknown option(s) in {source}: {', '.join(unknown)}")
    hints = typing.get_type_hints(cls)
    clean = {k: _check_type(fields[k], hints[k], v, source) for k, v in values.items()}
    try:
        return cls(**clean)
    except TypeError as e:
        raise ConfigError(f"bad {source}: {e}") from None


def to_dict(cfg) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(cfg).items()}


def to_json(cfg) -> str:
    return json.dumps(to_dict(cfg), sort_keys=True)


def from_json(cls, text: str):
    return from_mapping(cls, json.loads(text), source="stored configuration")


def load_toml(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a folder, not a TOML file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {e.start}), so not TOML") from None
    except OSError as e:
        raise ConfigError(f"config file {path} cannot be read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from None


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


def _positive(name: str, value, *, allow_zero=False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    _check(ok and not (isinstance(value, float) and not math.isfinite(value)),
           f"--{name.replace('_', '-')} must be {'>= 0' if allow_zero else '> 0'}, got {value}")


# Option names users bring from gensim (Word2Vec(...) keywords), word2vec's C tool (-size ...)
# and fastText (-dim ...), mapped to what mpidwe calls them, for the error that meets them.
FOREIGN_OPTIONS = {
    "train": {
        "size": "--dim", "vector_size": "--dim", "dim": "--dim",
        "iter": "--epochs", "epoch": "--epochs", "epochs": "--epochs",
        "alpha": "--lr", "lr": "--lr", "min_alpha": "--min-lr-ratio (min_alpha / alpha)",
        "cbow": "--model cbow (or --model skipgram)", "sg": "--model skipgram (or --model cbow)",
        "workers": "--threads", "thread": "--threads", "threads": "--threads",
        "ws": "--window", "window": "--window", "neg": "--negative", "negative": "--negative",
        "t": "--sample", "sample": "--sample", "seed": "--seed",
        "min_count": "python -m mpidwe.preprocess --min-count (the vocabulary is built there)",
        "mincount": "python -m mpidwe.preprocess --min-count (the vocabulary is built there)",
        "max_vocab_size": "python -m mpidwe.preprocess --max-vocab",
        "max_final_vocab": "python -m mpidwe.preprocess --max-vocab",
        "train": "--corpus (a corpus made by python -m mpidwe.preprocess TEXT)",
        "input": "--corpus (a corpus made by python -m mpidwe.preprocess TEXT)",
        "corpus_file": "--corpus (a corpus made by python -m mpidwe.preprocess TEXT)",
        "output": "--out (the run directory; vectors.txt is written there)",
        "binary": "python -m mpidwe.inspect RUN_DIR export --format word2vec-binary -o FILE after training",
        "hs": "--loss hs (hierarchical softmax; --loss ns is negative sampling)",
        "min_n": "--minn", "max_n": "--maxn", "bucket": "--buckets",
    },
    "preprocess": {
        "min_count": "--min-count", "mincount": "--min-count",
        "max_vocab_size": "--max-vocab (the final vocabulary's size; gensim's max_vocab_size bounds memory while counting)",
        "max_final_vocab": "--max-vocab", "train": "INPUT (a positional argument)",
        "input": "INPUT (a positional argument)", "output": "--output", "max_sentence_length":
        "--sentence-length", "lower": "--lowercase",
    },
}


def foreign_field(command: str, name: str) -> str | None:
    """The field a foreign option ``name`` stands for when the meaning is the same (its entry in
    FOREIGN_OPTIONS is one flag: ``vector_size`` -> ``dim``), else None: the Python call
    translates these and refuses the others with the entry's hint."""
    hint = FOREIGN_OPTIONS.get(command, {}).get(name.lower())
    if hint and re.fullmatch(r"--[a-z][a-z0-9-]*", hint):
        return hint[2:].replace("-", "_")
    return None


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a ConfigError (one line, no usage dump),
    with a suggestion for option names from gensim, word2vec and fastText (``foreign``)."""

    def __init__(self, *args, foreign: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.foreign = foreign or {}

    def error(self, message):
        hints = self.suggestions(message)
        tail = f"; {'; '.join(hints)}" if hints else ""
        raise ConfigError(f"{message}{tail} (see {self.prog} --help)")

    def suggestions(self, message: str) -> list[str]:
        """``did you mean`` for every unknown option word in an argparse message."""
        known = [s for a in self._actions for s in a.option_strings if s.startswith("--")]
        out = []
        for word in message.replace(",", " ").split():
            word = word.rstrip(":")            # "argument --wire: invalid choice": a known option
            if not word.startswith("-") or word in known or word in ("-h", "--help", "-"):
                continue
            name = word.lstrip("-").split("=", 1)[0]
            key = name.replace("-", "_").lower()
            if key in self.foreign:
                out.append(f"{word}: use {self.foreign[key]}")
                continue
            dashed = "--" + name.replace("_", "-")
            close = [dashed] if dashed in known else difflib.get_close_matches(dashed, known, n=1, cutoff=0.75)
            if close:
                out.append(f"{word}: did you mean {close[0]}?")
        return out


def parse_command(cls, argv, *, prog: str, description: str, config_file_flag: bool = False,
                  return_given: bool = False):
    """argv -> frozen ``cls``. With ``config_file_flag``, ``--config FILE`` (TOML) gives
    defaults and flags override them; ``return_given`` also returns the names of the
    options the user set (flags or the file), a frozenset (it needs ``config_file_flag``)."""
    parser = _Parser(prog=prog, description=description,
                     foreign=FOREIGN_OPTIONS.get(prog.split(".")[-1].split()[-1], {}))
    if config_file_flag:
        parser.add_argument("--config", help="TOML file with the same options (flags override it)")
    add_arguments(parser, cls, defaults_from_file=config_file_flag)
    ns = vars(parser.parse_args(argv))
    values = {}
    config_path = ns.pop("config", None)
    if config_path:
        values.update({k.replace("-", "_"): v for k, v in load_toml(config_path).items()})
    values.update(ns)
    cfg = from_mapping(cls, values, source=config_path or "options")
    return (cfg, frozenset(values)) if return_given else cfg


_FLAG_WORD = re.compile(r"--([a-z][a-z0-9-]*)(?: ('[^']*'|[\w.:/-]+))?")


def keyword_message(cls, message: str) -> str:
    """A command's error message in the words of its Python call: ``--force`` becomes
    ``force=True``, ``--no-progress`` ``progress=False``, ``--resume auto``
    ``resume='auto'``, ``--epochs 3`` ``epochs=3``, any other flag its keyword (``--dim
    must be`` -> ``dim must be``). Flags that are not fields of ``cls`` stay as they are."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)

    def keyword(m: re.Match) -> str:
        name, value = m.group(1).replace("-", "_"), m.group(2)
        negated = name.startswith("no_") and name[3:] in fields and hints[name[3:]] is bool
        key = name[3:] if negated else name
        if key not in fields or fields[key].metadata.get("positional"):
            return m.group(0)
        if hints[key] is bool:
            return f"{key}={not negated}" + (f" {value}" if value else "")
        if value is None:
            return key
        base = _base_type(hints[key])
        if base in (int, float) and re.fullmatch(r"-?[\d.e+-]+", value):
            return f"{key}={value}"
        if value.startswith("'") or value in (fields[key].metadata.get("choices") or ()) or value == "auto":
            return f"{key}={value if value.startswith(chr(39)) else repr(value)}"
        return f"{key} {value}"

    return _FLAG_WORD.sub(keyword, message)


def resolve_path(p: str) -> str:
    return str(Path(p).expanduser())
