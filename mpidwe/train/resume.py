"""Continuing a run: find and check the checkpoint, load the state, and re-plan a run
that continues on another number of ranks, for more epochs or at another interval.

A checkpoint continues exactly only with the plan that wrote it (the same ranks, words and
rounds); otherwise the rest of the run is re-planned (:func:`replan`), which continues the
run but is not bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os

import numpy as np

from ..core.config import TrainConfig, from_mapping, to_dict
from ..core.errors import InputError
from ..parallel.comm import Comm
from ..io import checkpoint
from ..io.corpus import Corpus, Shard
from .plan import SYNC_EVERY_MIN, Plan, learning_rate, rng_seeds, round_targets


# options that change what a resumed run would compute; the rest (logging, checkpoint and
# evaluation cadence, progress bar, guard limits) may change between runs. The number of
# ranks, --epochs and --sync-every may change too: the rest of the run is then re-planned
# (replan), which continues the run but is not bit-identical to an uninterrupted one.
RESUME_MUST_MATCH = ("model", "loss", "dim", "window", "negative", "sample", "lr", "min_lr_ratio",
                     "seed", "sync", "block_tokens", "kernel", "shared_negatives", "balance",
                     "segments", "subwords", "minn", "maxn", "buckets")


# what a resumed run may change when the user gives it: the ranks' local rate cap, so that a
# run the divergence guard stopped continues from its last checkpoint at a lower rate (the
# guard's line says how); a continuation at another rate, not the run the checkpoint would
# have finished (taken from the checkpoint when not given, as RESUME_ADOPTS)
RESUME_MAY_CHANGE = ("max_local_lr",)


# --batch-size decides which updates of the torch kernel share a parameter snapshot (and which
# windows of the triton kernel race), so a resumed run with another batch size computes other
# numbers; the numba kernel and
# --loss hs (its own batch, kernels/torch_hs.py) ignore it
RESUME_TORCH_MUST_MATCH = ("batch_size",)


# what a checkpoint written before an option existed ran with
RESUME_DEFAULTS = {"segments": "all", "loss": "ns", "subwords": False, "minn": 3, "maxn": 6, "buckets": 2_000_000,
                   "wire_feedback": "off", "sync_schedule": "geometric", "ring_overlap": "off"}


# what a resumed run takes from its checkpoint when the user does not give it (gensim's
# model.train() goes on with the model's own settings): everything that decides what it
# computes, the corpus, the length, the checkpoint cadence and the evaluation. Not the
# device, threads or logging, which belong to the machine and the session; --sync-every
# only on as many ranks as wrote the checkpoint (stored resolved, so on other ranks the
# default interval of those ranks applies).
RESUME_ADOPTS = RESUME_MUST_MATCH + RESUME_TORCH_MUST_MATCH + RESUME_MAY_CHANGE + (
    "corpus", "epochs", "store", "pipeline", "allreduce", "guard_loss_ratio", "guard_max_abs",
    "checkpoint_every", "checkpoint_minutes", "keep_checkpoints", "export", "eval_every", "eval_sim",
    "eval_analogy", "eval_pip", "eval_restrict_vocab", "sync_full", "sync_hot", "sync_schedule", "wire",
    "wire_feedback", "overlap", "ring_overlap",
    "sync_seconds")


def adopt_checkpoint_settings(cfg: TrainConfig, given, comm: Comm, log) -> TrainConfig:
    """``cfg`` with the settings of the checkpoint ``--resume`` names that the user did not
    give (``given``: the option names set on the command line, in a --config file or as
    keyword arguments; None: take nothing). One the user gives and the checkpoint differs
    on is refused later, by :func:`find_checkpoint`."""
    if not cfg.resume or given is None:
        return cfg
    changes, source = comm.on_root(_settings_to_adopt, cfg, frozenset(given), comm.size)
    if not changes:
        return cfg
    if log:
        log(f"resuming with {source}: " + ", ".join(
            f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in changes.items()))
    return from_mapping(TrainConfig, dict(to_dict(cfg), **changes), source="the checkpoint's configuration")


def _settings_to_adopt(cfg: TrainConfig, given: frozenset, world: int) -> tuple[dict, str]:
    """Rank 0: the stored settings that differ from ``cfg`` and the user did not give, and
    where they come from."""
    stored, source, adopts = _stored_config(cfg), "the checkpoint's settings", RESUME_ADOPTS
    if stored is None and cfg.resume == "auto" and not checkpoint.list_checkpoints(os.path.join(cfg.out, "checkpoints")):
        # a run stopped before its first checkpoint starts again as it was started (its warm
        # start included), not at the defaults
        stored, adopts = _run_config(cfg.out), RESUME_ADOPTS + ("init_from",)
        source = f"the settings of {os.path.join(cfg.out, 'config.json')} (no checkpoint yet)"
        if stored is not None and isinstance(stored.get("init_from"), dict):
            stored["init_from"] = stored["init_from"].get("path")
    if stored is None:            # none readable: find_checkpoint says why, or starts fresh
        return {}, source
    stored = {**RESUME_DEFAULTS, **stored}          # a checkpoint from before an option ran without it
    keys = [k for k in adopts if k not in given and k in stored]
    if "sync_every" not in given and stored.get("ranks") == world and "sync_every" in stored:
        keys.append("sync_every")
    current = to_dict(cfg)
    return {k: stored[k] for k in keys if stored[k] != current[k]}, source


def _run_config(out: str) -> dict | None:
    """RUN_DIR/config.json (None where there is none): the settings of a run that wrote no
    checkpoint yet, so that ``--resume auto`` starts it again as it was, not at the defaults."""
    path = os.path.join(out, "config.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            stored = json.load(fh)
    except (OSError, ValueError) as e:
        raise InputError(f"--resume auto: {out} has no checkpoint yet and its config.json cannot be read "
                         f"({e}); give the run's options again with --force, or choose another --out") from None
    if not isinstance(stored, dict):
        raise InputError(f"--resume auto: {path} is not a run's configuration; give the run's options again "
                         f"with --force, or choose another --out")
    return stored


def _stored_config(cfg: TrainConfig) -> dict | None:
    """The configuration of the checkpoint ``--resume`` names (auto: the newest that opens;
    unchecked here, find_checkpoint checks it), or None."""
    if cfg.resume == "auto":
        paths = list(reversed(checkpoint.list_checkpoints(os.path.join(cfg.out, "checkpoints"))))
    else:
        paths = [cfg.resume]
    for path in paths:
        try:
            return checkpoint.load(path, verify=False, params=False).config
        except InputError:
            continue
    return None


def resume_must_match(resolved: dict) -> tuple[str, ...]:
    """The options a resumed run must share with its checkpoint (resolved: this run's config)."""
    torch_ns = resolved.get("kernel") in ("torch", "triton") and resolved.get("loss", "ns") != "hs"
    return RESUME_MUST_MATCH + (RESUME_TORCH_MUST_MATCH if torch_ns else ())


def _check_resume(resolved: dict, ck: checkpoint.Checkpoint, corpus: Corpus, world: int) -> None:
    """Refuse a checkpoint that cannot continue this run, naming the mismatch."""
    if ck.corpus_id != corpus.corpus_id:
        raise InputError(f"cannot resume from {ck.path}: it was trained on another corpus "
                         f"({ck.config.get('corpus')}, id {ck.corpus_id[:12]}) than {corpus.path} "
                         f"(id {corpus.corpus_id[:12]})")
    if ck.progress.words_done > resolved["words_total"]:
        raise InputError(f"cannot resume from {ck.path}: it has trained {ck.progress.words_done:,} words, "
                         f"more than --epochs {resolved['epochs']} gives ({resolved['words_total']:,}); "
                         f"give at least --epochs {ck.config.get('epochs')} or start a new run from it "
                         f"with --init-from")
    for key in resume_must_match(resolved):
        old, new = ck.config.get(key, RESUME_DEFAULTS.get(key)), resolved.get(key)
        if old != new:
            raise InputError(f"cannot resume from {ck.path}: --{key.replace('_', '-')} is {new!r} "
                             f"but the checkpoint has {old!r}")
    old_scale = ck.config.get("lr_scale")
    same_plan = ck.config.get("ranks") == world and ck.progress.words_total == resolved["words_total"]
    same_cap = ck.config.get("max_local_lr") == resolved.get("max_local_lr")
    if same_plan and same_cap and old_scale is not None and old_scale != resolved.get("lr_scale"):
        # the same options, ranks and length, another scale: the rule changed since
        # (parallel/rule.py); continuing at another rate would silently change the run (a
        # re-planned run, on other ranks or with more epochs, takes its new plan's scale)
        raise InputError(f"cannot resume from {ck.path}: its {world} ranks trained at {old_scale} x --lr, and "
                         f"this mpidwe trains this run at {resolved.get('lr_scale')} x (the rule changed, "
                         f"docs/lab/sync-modes.md); resume it with the mpidwe that wrote it, or start a new run "
                         f"from it with --init-from")
    old_tiers = ck.config.get("sync_tiers")
    same_options = all(ck.config.get(k, RESUME_DEFAULTS.get(k)) == resolved.get(k)
                       for k in ("sync_full", "sync_hot", "sync_schedule", "wire", "sync_every"))
    if same_plan and same_options and "sync_tiers" in ck.config and old_tiers != resolved.get("sync_tiers"):
        # the same options, ranks and length, other tiers: the defaults changed since (--loss
        # hs combines in tiers from 4 ranks); another schedule would silently change the run
        keep = (f"--sync-full {old_tiers['full']} --sync-hot {old_tiers['hot']} --wire {old_tiers['wire']} "
                f"--sync-schedule {old_tiers.get('schedule', 'geometric')}" if old_tiers else "--sync-full 1")
        raise InputError(f"cannot resume from {ck.path}: its {world} ranks combined "
                         f"{_tiers_words(old_tiers)}, and this mpidwe would combine "
                         f"{_tiers_words(resolved.get('sync_tiers'))} (the defaults changed, "
                         f"docs/lab/sync-modes.md); give {keep} to continue it as it was")


def _tiers_words(tiers: dict | None) -> str:
    return (f"in {tiers.get('schedule', 'geometric')} tiers ({tiers['hot']:,} hot rows, all every "
            f"{tiers['full']:,} syncs)" if tiers else "every row at every sync")


def latest_to_resume(ckpt_dir: str, log, params: bool = True) -> checkpoint.Checkpoint | None:
    """--resume auto's checkpoint: the newest readable one in ``ckpt_dir``, None where there
    is none; refused where every one there is damaged or unreadable."""
    ck = checkpoint.latest_valid(ckpt_dir, warn=log, params=params)
    found = checkpoint.list_checkpoints(ckpt_dir)
    if ck is None and found:
        # maybe only unreadable for a moment (a network filesystem): never start over
        raise InputError(f"--resume auto: none of the {len(found)} checkpoint(s) in {ckpt_dir} "
                         f"can be read (damaged or unreadable); nothing was deleted; start over "
                         f"with --force, or resume from a copy with --resume PATH")
    return ck


def refuse_unresumable(cfg: TrainConfig) -> None:
    """Rank 0, before a run without --corpus makes the demo corpus: a --resume that
    find_checkpoint would refuse is refused here, so the refusal writes nothing."""
    if cfg.resume == "auto":
        latest_to_resume(os.path.join(cfg.out, "checkpoints"), None, params=False)
    elif cfg.resume:
        checkpoint.load(cfg.resume, params=False)


def find_checkpoint(cfg: TrainConfig, plan: Plan, corpus: Corpus, world: int, log,
                params: bool = True) -> checkpoint.Checkpoint | None:
    """Rank 0: the checkpoint --resume names (None for a fresh start), loaded and checked
    (``params=False``: without its matrices, as checkpoint.load)."""
    if not cfg.resume:
        return None
    if cfg.resume == "auto":
        ckpt_dir = os.path.join(cfg.out, "checkpoints")
        ck = latest_to_resume(ckpt_dir, log, params)
        if ck is None:
            if log:
                log(f"--resume auto: no checkpoint in {ckpt_dir}, nothing to resume: a new run starts")
            return None
    else:
        if os.path.realpath(cfg.resume) == os.path.realpath(corpus.path):
            raise InputError(f"--resume {cfg.resume} is the corpus, not a checkpoint (checkpoints are "
                             f"RUN_DIR/checkpoints/ckpt-*.h5; --resume auto finds the newest)")
        ck = checkpoint.load(cfg.resume, params=params)
    _check_resume(plan.resolved, ck, corpus, world)
    if log:
        log(f"resuming from {ck.path}: round {ck.progress.round}/{ck.progress.rounds}, "
            f"{ck.progress.words_done:,} words done")
        old_cap, cap = ck.config.get("max_local_lr"), plan.resolved.get("max_local_lr")
        old_scale, scale = ck.config.get("lr_scale"), plan.resolved.get("lr_scale")
        if old_cap is not None and old_cap != cap:
            log(f"--max-local-lr {cap:g} (the checkpoint's run: {old_cap:g}): " + (
                f"the ranks stay at {scale} x --lr, and the run continues as it would have" if scale == old_scale
                else f"the ranks train at {scale} x --lr from here, where it trained at {old_scale} x; a "
                     f"continuation at another rate, not the run the checkpoint would have finished"))
    return ck


def load_state(cfg: TrainConfig, plan: Plan, comm: Comm, corpus: Corpus, store, log
               ) -> tuple[checkpoint.TrainingState | None, dict | None, str | None]:
    """Rank 0 finds and checks the checkpoint to resume from; every rank gets the training
    state it holds, its parameters read as the store reads them (``store``: the store's class:
    rank 0 reads them and broadcasts, or every rank reads its own rows), the re-plan record
    of its run (None if it was never re-planned) and the checkpoint's path. (None, None,
    None): a fresh start."""
    def find():
        store.prepare_resume(os.path.join(cfg.out, "checkpoints"))
        return find_checkpoint(cfg, plan, corpus, comm.size, log, params=store.params_on_root)

    ck = comm.on_root(find, broadcast=False)
    header = comm.bcast(dict(ck.state.header(), replan=ck.config.get("replan"), path=ck.path, parts=ck.parts)
                        if comm.is_root and ck is not None else None)
    if header is None:
        return None, None, None
    record, where = header.pop("replan"), {"path": header.pop("path"), "parts": header.pop("parts")}
    w_in, w_out = store.read_params(ck, where, comm, cfg, corpus.n_words, corpus.counts)
    return checkpoint.TrainingState.from_header(header, w_in, w_out), record, where["path"]


def fresh_state(cfg: TrainConfig, plan: Plan, comm: Comm, store, vocab_size: int, counts=None
                ) -> checkpoint.TrainingState:
    """A new run's state: the store's fresh parameters, every rank's RNG streams, no progress
    (``counts``: the vocabulary's, for Store.fresh_params)."""
    w_in, w_out = store.fresh_params(cfg, comm, vocab_size, counts)
    rngs = np.stack([rng_seeds(cfg.seed, r, plan.threads) for r in range(comm.size)])
    progress = checkpoint.Progress(round=0, rounds=plan.rounds, words_done=0, words_total=plan.words_total,
                                   world_size=comm.size, positions=[0] * comm.size, lr=cfg.lr)
    return checkpoint.TrainingState(w_in, w_out, progress, rngs, [])


def needs_replan(progress: checkpoint.Progress, plan: Plan, world: int) -> bool:
    """A checkpoint continues exactly only with the plan that wrote it: the same ranks,
    words and rounds."""
    return (progress.world_size != world or progress.words_total != plan.words_total
            or progress.rounds != plan.rounds)


def snap_to_sentence(corpus: Corpus, shard: Shard, block_tokens: int, position: int) -> int:
    """The first sentence start at or after ``position`` in the shard's epoch-repeated
    stream (a position in the stream: epoch x shard tokens + offset)."""
    n = shard.n_tokens
    if n == 0:
        return 0
    epoch, offset = divmod(position, n)
    if offset == 0:
        return position
    target = shard.token_start + offset
    for start, end, local in corpus.block_spans(shard, block_tokens):
        if end <= target:
            continue
        k = int(np.searchsorted(local, target - start))
        if k < len(local):
            return epoch * n + int(start + local[k]) - shard.token_start
    return (epoch + 1) * n           # no sentence starts after it: the next epoch's start


def derived_seed(rng_state: np.ndarray, round_: int) -> int:
    """A seed for fresh RNG streams drawn from a checkpoint's streams (elastic resume)."""
    digest = hashlib.sha256(np.ascontiguousarray(rng_state, dtype=np.uint64).tobytes()
                            + round_.to_bytes(8, "little")).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def replan(cfg: TrainConfig, plan: Plan, comm: Comm, corpus: Corpus,
           state: checkpoint.TrainingState) -> Plan:
    """Continue a checkpoint written by another plan (other ranks, --epochs or --sync-every).

    The run's global progress f = words done / words of the new plan is re-derived over the
    new shards: rank r starts at f x (its shard's words over all epochs), moved to the next
    sentence start. The words done become the sum of those starts, so the run ends with
    exactly the plan's words. The rounds left split each rank's remaining words evenly, at
    the plan's --sync-every; every rank gets a fresh RNG stream derived from the
    checkpoint's. The learning rate, the words done and the history continue. Updates
    ``state.progress`` and ``state.rng_state`` in place and returns the new plan."""
    p = state.progress
    fraction = p.words_done / max(plan.words_total, 1)
    own = plan.shard.n_tokens * cfg.epochs
    start = min(snap_to_sentence(corpus, plan.shard, cfg.block_tokens, int(fraction * own)), own)
    starts, left = rounds_left(plan, comm, start, plan.resolved["sync_every"])
    rounds = p.round + left
    seed = derived_seed(state.rng_state, p.round)
    width = max(state.rng_state.shape[1], plan.threads)
    state.rng_state = np.stack([rng_seeds(seed, r, width) for r in range(comm.size)])
    record = {"from_ranks": p.world_size, "from_words_total": p.words_total, "round": p.round,
              "rounds": rounds, "starts": [int(s) for s in starts]}
    p.rounds, p.words_total, p.world_size = rounds, plan.words_total, comm.size
    p.words_done, p.positions = int(sum(starts)), [int(s) for s in starts]
    p.lr = learning_rate(cfg, p.words_done, plan.words_total)
    return with_replan(plan, comm, record)


def balanced_continuation(cfg: TrainConfig, plan: Plan, comm: Comm, state: checkpoint.TrainingState) -> Plan:
    """--balance speed: the stream position continues on any number of ranks; the rounds
    left split the remaining words (every rank gets fresh RNG streams if the ranks changed)."""
    p = state.progress
    cursor = int(p.positions[0])
    sync_every = plan.resolved["sync_every"]
    left = math.ceil((plan.words_total - cursor) / (comm.size * sync_every)) if cursor < plan.words_total else 0
    rounds = p.round + left
    targets = np.full(rounds, cursor, dtype=np.int64)
    if left:
        targets[p.round:] = cursor + round_targets(plan.words_total - cursor, left)
    if p.world_size != comm.size:
        seed = derived_seed(state.rng_state, p.round)
        width = max(state.rng_state.shape[1], plan.threads)
        state.rng_state = np.stack([rng_seeds(seed, r, width) for r in range(comm.size)])
    p.rounds, p.world_size, p.words_total, p.positions = rounds, comm.size, plan.words_total, [cursor] * comm.size
    p.lr = learning_rate(cfg, p.words_done, plan.words_total)
    return dataclasses.replace(plan, rounds=rounds, targets=targets, resolved=dict(plan.resolved, rounds=rounds))


def with_replan(plan: Plan, comm: Comm, record: dict) -> Plan:
    """The plan of a re-planned run (``record`` from :func:`replan`, stored in the run's
    configuration and so in every later checkpoint, which then resumes exactly)."""
    start, round0, rounds = record["starts"][comm.rank], record["round"], record["rounds"]
    targets = np.full(rounds, start, dtype=np.int64)
    if rounds > round0:
        targets[round0:] = start + round_targets(plan.shard.n_tokens * plan.resolved["epochs"] - start,
                                                 rounds - round0)
    resolved = dict(plan.resolved, rounds=rounds, replan=record)
    if "calibration" in record:       # --sync-seconds: the interval it chose
        resolved["sync_every"] = record["calibration"]["sync_every"]
    return dataclasses.replace(plan, rounds=rounds, targets=targets, resolved=resolved)


def rounds_left(plan: Plan, comm: Comm, start: int, every: int) -> tuple[list[int], int]:
    """(every rank's start, the rounds that train the rest): each rank continues its shard
    over all epochs from its own ``start`` in rounds of at most ``every`` words. A collective."""
    starts = [int(s) for s in comm.allgather(int(start))]
    sizes = comm.allgather(plan.shard.n_tokens)
    remaining = max(n * plan.resolved["epochs"] - s for n, s in zip(sizes, starts))
    return starts, (max(1, math.ceil(remaining / every)) if remaining > 0 else 0)


def calibrated_plan(plan: Plan, comm: Comm, progress: checkpoint.Progress, position: int, speed: float,
                    seconds: float) -> Plan:
    """--sync-seconds: the rest of the run at the interval that trains about ``seconds``
    between syncs at ``speed`` (the slowest rank's words per second, agreed by the caller).
    A collective, called by every rank after the same round; ``position``: this rank's
    local words so far. Stored as a re-plan record (with the interval and the speed), so a
    checkpoint written after it resumes exactly (:func:`continued_plan`); updates
    ``progress.rounds``."""
    every = max(SYNC_EVERY_MIN, int(speed * seconds))
    starts, left = rounds_left(plan, comm, position, every)
    calibration = {"words_per_s": float(speed), "seconds": seconds,
                   "sync_every_before": plan.resolved["sync_every"], "sync_every": every}
    record = {"from_ranks": comm.size, "from_words_total": progress.words_total, "round": progress.round,
              "rounds": progress.round + left, "starts": [int(s) for s in starts], "calibration": calibration}
    progress.rounds = record["rounds"]
    return with_replan(plan, comm, record)


def calibrated(plan: Plan) -> bool:
    """Whether --sync-seconds already set this run's interval."""
    return "calibration" in (plan.resolved.get("replan") or {})


def continued_plan(cfg: TrainConfig, plan: Plan, comm: Comm, corpus: Corpus,
                   state: checkpoint.TrainingState, record: dict | None, log) -> Plan:
    """The plan that continues ``state``: the fresh plan when the checkpoint was written by
    it, the checkpoint's own re-plan when it was written after one, else a new re-plan."""
    p = state.progress
    if cfg.balance == "speed":
        return balanced_continuation(cfg, plan, comm, state)
    if record and (record["rounds"] == p.rounds and len(record["starts"]) == comm.size == p.world_size
                   and p.words_total == plan.words_total):
        return with_replan(plan, comm, record)
    if not needs_replan(p, plan, comm.size):
        return plan
    old = (p.world_size, p.words_total)
    plan = replan(cfg, plan, comm, corpus, state)
    if log:
        log(f"re-planned the rest of the run: written by {old[0]} rank(s) for {old[1]:,} words, continued "
            f"on {comm.size} rank(s) for {plan.words_total:,} words from {p.words_done:,} "
            f"({plan.rounds - p.round} rounds left; not bit-identical to an uninterrupted run)")
    return plan
