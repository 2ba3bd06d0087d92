"""The run directory: rank 0 locks it for the run, refuses to mix two runs in it, clears
what a killed run left, and writes config.json and metrics.jsonl (crash-safe)."""

from __future__ import annotations

import json
import os

from ..core.config import TrainConfig, feedback_of
from ..core.errors import InputError
from ..core.prog import prog
from ..parallel import deathwatch
from ..io import checkpoint
from ..io.fsutil import DirLock, atomic_write, reason, remove_leftovers
from ..version import __version__

PROG = prog("train")


def _check_writable(cfg: TrainConfig) -> list[str]:
    """RUN_DIR and RUN_DIR/checkpoints must be folders this process can write, checked before
    any training (or the run trains for hours and then cannot save). Returns the folders it
    made, innermost first (``remove_if_empty`` takes them back after a failed start)."""
    ckpt_dir = os.path.join(cfg.out, "checkpoints")
    for path in (cfg.out, ckpt_dir):
        if os.path.exists(path) and not os.path.isdir(path):
            raise InputError(f"--out {cfg.out}: {path} exists and is not a folder")
    made = [p for p in (ckpt_dir, os.path.abspath(cfg.out)) if not os.path.exists(p)]
    try:
        os.makedirs(ckpt_dir, exist_ok=True)
        probe = os.path.join(ckpt_dir, f".write-test-{os.getpid()}")
        with open(probe, "wb") as fh:
            fh.write(b"x")
        os.unlink(probe)
    except OSError as e:
        remove_if_empty(made)
        raise InputError(f"--out {cfg.out} is not writable: {reason(e)}") from None
    return made


def remove_if_empty(folders: list[str]) -> None:
    """Remove the folders a run made (innermost first) where nothing was written in them: a
    run that failed before it started leaves no empty RUN_DIR behind."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:        # something is in it (or it is gone): keep it
            pass


def take_back(cfg: TrainConfig, lock: DirLock) -> None:
    """After a run failed on bad input before its first checkpoint: remove config.json and
    metrics.jsonl where this run wrote them first, then the folders it made where they are
    empty. Nothing that was there before the run is touched."""
    if not checkpoint.list_checkpoints(os.path.join(cfg.out, "checkpoints")):
        for path in lock.new_files:
            try:
                os.unlink(path)
            except OSError:
                pass
    remove_if_empty(lock.made)


def _old_run(cfg: TrainConfig) -> list[str]:
    """The files of an earlier run in RUN_DIR: its checkpoints and metrics log."""
    metrics = os.path.join(cfg.out, "metrics.jsonl")
    old = checkpoint.list_checkpoints(os.path.join(cfg.out, "checkpoints"))
    return old + ([metrics] if os.path.exists(metrics) else [])


def _take_run_dir(cfg: TrainConfig, log) -> DirLock:
    """Rank 0 locks RUN_DIR for the whole run (a second run into it is refused), then removes
    the temporary files a killed run left there: under the lock none can be a live one."""
    made = _check_writable(cfg)
    try:
        lock = DirLock(cfg.out, "training run").acquire(warn=log)
    except BaseException:
        remove_if_empty(made)
        raise
    lock.made = made          # the folders to take back if the run fails before it starts
    # and the files of a run that are not there yet (a failed start takes them back too)
    lock.new_files = [p for p in (os.path.join(cfg.out, n) for n in ("config.json", "metrics.jsonl"))
                      if not os.path.exists(p)]
    deathwatch.clear(cfg.out)
    for folder in (cfg.out, os.path.join(cfg.out, "checkpoints")):
        gone = remove_leftovers(folder)
        if gone and log:
            log(f"removed {len(gone)} temporary file(s) that a killed run left in {folder}")
    return lock


def _check_run_dir(cfg: TrainConfig, resuming: bool) -> None:
    """Never mix two runs in one RUN_DIR: a fresh start needs one without a run in it,
    ``--force`` (which clears the old metrics and checkpoints) or ``--resume auto`` (which
    found no checkpoint). Checked, like everything else, before anything is written."""
    if resuming or not _old_run(cfg) or cfg.force or cfg.resume == "auto":
        return
    if not checkpoint.list_checkpoints(os.path.join(cfg.out, "checkpoints")):
        raise InputError(f"{cfg.out} holds the metrics of a run that wrote no checkpoint, so there is nothing "
                         f"to resume; start over with --force, or choose another --out")
    raise InputError(f"{cfg.out} already holds a run; continue it with --resume auto, start over "
                     f"with --force, or choose another --out")


def _metrics_until(path: str, history: list[dict]) -> list[str]:
    """The lines of metrics.jsonl up to the resumed checkpoint's last step: the file's own
    (the checkpoint may hold a thinned history), or the history where the file is missing,
    damaged or does not reach that far."""
    last = history[-1]["step"] if history else 0
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [ln if ln.endswith("\n") else ln + "\n" for ln in fh if ln.strip()]
        kept = [ln for ln in lines if json.loads(ln)["step"] <= last]
        if not history or (kept and json.loads(kept[-1])["step"] == last):
            return kept
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return [json.dumps(r, sort_keys=True) + "\n" for r in history]


def _start_run_dir(cfg: TrainConfig, resolved: dict, history: list[dict] | None, log) -> None:
    """``history``: the resumed checkpoint's metrics (None for a fresh start, which first
    clears what an earlier run left: _check_run_dir allowed it). metrics.jsonl is rewritten
    from the history, so lines logged after that checkpoint do not appear twice."""
    if history is None:
        for path in _old_run(cfg):
            os.unlink(path)
    else:
        lines = _metrics_until(os.path.join(cfg.out, "metrics.jsonl"), history)
        with atomic_write(os.path.join(cfg.out, "metrics.jsonl"), "w", encoding="utf-8") as fh:
            fh.writelines(lines)
    write_config(cfg.out, resolved)
    if log:
        log(summary_line(resolved, os.path.join(cfg.out, "config.json")))


def write_config(out: str, resolved: dict) -> None:
    """config.json: the configuration as run (at the start, and again if the run re-plans
    itself: --sync-seconds)."""
    with atomic_write(os.path.join(out, "config.json"), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(resolved, indent=2, sort_keys=True))


def summary_line(r: dict, config_json: str) -> str:
    """The run's first log line: what trains on what, on how many ranks (the whole
    configuration, some 1,400 characters of JSON, is in config.json)."""
    loss = "hierarchical softmax" if r["loss"] == "hs" else f"negative {r['negative']}"
    why = f" ({r['compute_choice']})" if r["compute_choice"] else ""      # why this device and kernel
    extras = "".join((", subwords" if r["subwords"] else "", _store(r),
                      f", balance {r['balance']}" if r["balance"] != "off" else "",
                      f", exchange {r['exchange']}" if r["exchange"] != "mpi" else ""))
    return (f"{PROG} {__version__}: {r['model']}, dim {r['dim']}, window {r['window']}, {loss}{extras}, "
            f"{r['epochs']} epoch(s) of {r['words_total'] // max(r['epochs'], 1):,} words (vocabulary "
            f"{r['vocab_size']:,}) from {r['corpus']}; {r['ranks']} rank(s) x {r['threads']} thread(s), "
            f"{r['kernel']} on {r['device']}{why}, {_combining(r)}, lr {r['lr']:g} x "
            f"{r['lr_scale']}; every setting: {config_json}")


def _store(r: dict) -> str:
    """The store where it is not the replicated one or --store auto chose (and why)."""
    why = r.get("store_choice") or ""
    if r["store"] == "replicated" and not why:
        return ""
    return f", store {r['store']}" + (f" ({why})" if why else "")


def _combining(r: dict) -> str:
    """How the ranks combine: the sync and its interval, or the block store's ring."""
    if r["store"] != "blocks":
        return f"sync {r['sync']} every {r['sync_every']:,} words{_bound(r)}{_tiers(r)}"
    if r["ranks"] == 1:
        return "one block (plain skip-gram)"
    return (f"{r['ranks']} vocabulary blocks, each rank the only writer of its input block, the output blocks "
            f"round a ring ({r.get('block_wire', 'fp32')}) in passes of {r['sync_every']:,} words per rank, "
            f"no averaging")


def _tiers(r: dict) -> str:
    t = r.get("sync_tiers")        # absent in a config.json written before tiers could be automatic
    fed = ", error feedback" if t and feedback_of(r.get("wire_feedback", "off"), True, r.get("loss", "ns")) else ""
    more = ", twice as many every 2nd, 4 times every 4th, ..." if t and t.get("schedule") == "doubling" else ""
    return (f" in tiers ({t['hot']:,} most frequent rows every sync{more}, all every {t['full']:,}, wire "
            f"{t['wire']}{fed})" if t else "")


def _bound(r: dict) -> str:
    """The sharded store's round: what bounded it (the interval or the memory budget)."""
    if "round_bound" not in r:
        return ""
    return f" (bounded by the {r['round_bound']}; memory budget {r['memory_budget_mb']:,.0f} MB per rank)"


# ------------------------------------------------------------------ outputs
class MetricsLog:
    """JSON lines in RUN_DIR/metrics.jsonl, appended and flushed line by line (rank 0). The
    file is opened at the first record, so a run that fails before its first round leaves
    no metrics behind to make its corrected rerun look like a run in progress."""

    def __init__(self, path: str | None):
        self._path, self._fh = path, None

    def write(self, record: dict) -> None:
        if self._path is None:
            return
        if self._fh is None:
            self._fh = open(self._path, "a", encoding="utf-8")
        self._fh.write(json.dumps(record, sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh:
            self._fh.close()


# Metrics records a checkpoint embeds at most (metrics.jsonl keeps every line).
MAX_HISTORY = 10_000


def thin_history(history: list[dict]) -> None:
    """Keep the checkpoint's history bounded: past MAX_HISTORY records drop every other one
    (the last is always kept), so the curves keep their shape at half the resolution."""
    if len(history) > MAX_HISTORY:
        history[:] = history[:-1:2] + history[-1:]
