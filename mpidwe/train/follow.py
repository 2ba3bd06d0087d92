"""``python -m mpidwe.train --follow DIR``: keep an embedding up to date with a growing text.

Rank 0 watches DIR; every new text file is appended to the corpus as a new segment
(``preprocess --append``, on every rank) and the model is trained on it, warm-started from
the previous step (``--init-from``, ``--segments new``). Each step is an ordinary run
directory, RUN_DIR/steps/NNNN, ending with a checkpoint and vectors.txt; after each step
RUN_DIR/current links to it and RUN_DIR/vectors.txt is its vectors (:func:`publish`), so
RUN_DIR reads as one live model. Without
``--init-from``, step 0 first trains on the corpus as it is.

RUN_DIR/follow.json (written atomically) records every file taken, with its size and
SHA-256, and how far its step got: ``appending`` (recorded before the corpus changes),
``appended`` (the corpus holds it: its id after the append) and ``trained`` (or
``rejected``: a file without any token, recorded with the reason and not retried). A restart
reads it and goes on: an ``appending`` step whose append landed (the corpus's last segment
was appended to the id recorded before) is not appended again; an ``appended`` step
resumes its run (``--resume auto``); a ``trained`` file is never taken again. So no file
is trained twice or skipped, whatever the moment of a crash. Layout: docs/lab/running-notes.md.

Every rank makes the same collectives: each poll, rank 0 decides (the next file, or none)
and broadcasts it with every rank's stop flag (SIGTERM/SIGUSR1). Stopped while waiting:
exit 0; stopped with a step unfinished (its checkpoint holds it): exit 75 (EXIT_REQUEUE).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

from .. import preprocess
from ..parallel.comm import Comm
from ..core.config import PreprocessConfig, TrainConfig
from ..io import checkpoint
from ..io.corpus import Corpus
from ..core.errors import EXIT_REQUEUE, InputError
from ..io.fsutil import DirLock, atomic_write, file_sha256
from ..io.text import binary_reason
from .rundir import PROG, remove_if_empty
from .runner import run

FORMAT = "mpidwe-follow"
FORMAT_VERSION = 1
STATE = "follow.json"
STEPS = "steps"
# names a writer uses while a file is not complete yet (rename it into DIR when done)
PARTIAL_SUFFIXES = (".tmp", ".part", ".partial", "~")
TICK_S = 0.1      # how often a waiting rank looks at its stop flag


def step_dir(out: str, step: int) -> str:
    return os.path.join(out, STEPS, f"{step:04d}")


def publish(out: str, run: str) -> None:
    """Rank 0: the live model of RUN_DIR is the step ``run``: ``RUN_DIR/current`` links to it
    (what ``mpidwe.load``, inspect and evaluate read for RUN_DIR) and ``RUN_DIR/vectors.txt``
    is its vectors file; each is replaced atomically, so a reader sees the old step or the
    new one, never a mix."""
    link = os.path.join(out, checkpoint.LIVE)
    tmp = os.path.join(out, f".{checkpoint.LIVE}.tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.relpath(run, out), tmp)
    os.replace(tmp, link)
    vectors = os.path.join(run, "vectors.txt")
    if os.path.exists(vectors):
        tmp = os.path.join(out, ".vectors.txt.tmp")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        try:
            os.link(vectors, tmp)          # the same bytes, no copy
        except OSError:                    # a filesystem without hard links
            shutil.copyfile(vectors, tmp)
        os.replace(tmp, os.path.join(out, "vectors.txt"))


def ready_files(folder: str, settle_s: float, now: float | None = None) -> list[tuple[str, int]]:
    """(name, size) of the complete text files in ``folder``, oldest first: regular files
    not hidden, not named as partial, untouched for ``settle_s`` seconds."""
    now = time.time() if now is None else now
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError as e:
        raise InputError(f"--follow {folder}: cannot list it: {e.strerror or e}") from None
    for e in entries:
        if e.name.startswith(".") or e.name.endswith(PARTIAL_SUFFIXES):
            continue
        try:
            st = e.stat()
        except OSError:         # gone meanwhile
            continue
        if e.is_file() and now - st.st_mtime >= settle_s:
            found.append((st.st_mtime_ns, e.name, st.st_size))
    return [(name, size) for _, name, size in sorted(found)]


def within(path: str, folder: str) -> bool:
    """Is the (real) ``path`` the (real) ``folder`` or under it?"""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class FollowState:
    """RUN_DIR/follow.json: the files taken, in order, and each step's progress."""

    def __init__(self, out: str, folder: str, corpus: str):
        self.path = os.path.join(out, STATE)
        self.folder, self.corpus = os.path.realpath(folder), os.path.realpath(corpus)
        self.steps: list[dict] = []

    def load(self) -> "FollowState":
        if not os.path.exists(self.path):
            return self
        try:
            with open(self.path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError) as e:
            raise InputError(f"{self.path} cannot be read ({e}); it records which files were trained") from None
        if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
            raise InputError(f"{self.path} is not an mpidwe follow state of version {FORMAT_VERSION}")
        for key, mine in (("folder", self.folder), ("corpus", self.corpus)):
            if data.get(key) != mine:
                raise InputError(f"{self.path} follows {key} {data.get(key)}, not {mine}; use another --out")
        self.steps = data["steps"]
        return self

    def save(self) -> None:
        data = {"format": FORMAT, "format_version": FORMAT_VERSION, "folder": self.folder,
                "corpus": self.corpus, "steps": self.steps}
        with atomic_write(self.path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(data, indent=1) + "\n")

    def taken(self) -> set[str]:
        return {s["file"] for s in self.steps if s.get("file")}


class Follower:
    """The watch loop (see the module docstring); ``run`` returns the exit code."""

    def __init__(self, cfg: TrainConfig, comm: Comm, stop, log):
        self.cfg, self.comm, self.stop, self.log, self.prog = cfg, comm, stop, log, PROG
        self.state: FollowState | None = None
        self._seen: set[tuple] = set()     # (file, size, mtime) of taken files already compared

    # ------------------------------------------------------------ rank 0's decisions
    def _open(self) -> list[dict]:
        cfg = self.cfg
        if not os.path.isdir(cfg.follow):
            raise InputError(f"--follow {cfg.follow}: no such folder")
        if not cfg.corpus or not os.path.isfile(cfg.corpus):
            raise InputError("--follow needs --corpus, an existing corpus to grow (make one from the first "
                             "text with python -m mpidwe.preprocess TEXT --output CORPUS.h5)")
        self.state = FollowState(cfg.out, cfg.follow, cfg.corpus).load()
        return self.state.steps

    def _next_file(self) -> dict | None:
        """The oldest ready file not taken yet, recorded as ``appending``; None if none. A
        file that is not text is recorded as ``rejected`` and passed over. Files taken
        earlier that changed since are warned about first (``_check_taken``)."""
        st = self.state
        self._check_taken()
        taken = st.taken()
        for name, size in ready_files(self.cfg.follow, self.cfg.follow_settle):
            if name in taken:
                continue
            path = os.path.join(self.cfg.follow, name)
            try:
                stat = os.stat(path)
                digest = file_sha256(path, stat.st_size)
            except OSError:          # removed meanwhile: the next poll decides
                continue
            with Corpus(self.cfg.corpus) as c:
                before = c.corpus_id
            step = {"step": len(st.steps), "file": name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                    "sha256": digest, "corpus_id_before": before, "state": "appending",
                    "run": os.path.join(STEPS, f"{len(st.steps):04d}")}
            why = binary_reason(path)
            if why is not None:      # junk words would enter the vocabulary for good (appends keep ids)
                step.update(state="rejected", reason=f"not text: {why}")
                if self.log:
                    self.log(f"step {step['step']}: {path} not appended: not text: {why}")
            st.steps.append(step)
            st.save()
            if why is None:
                return step
        return None

    def _check_taken(self) -> None:
        """Rank 0, each poll (and so at every restart): compare every file taken with its
        recorded size, modification time and SHA-256. A file that grew or changed after it
        was taken is warned about, once per change and process, and the change is recorded
        in its step (``changed``): its new bytes are not trained."""
        for s in self.state.steps:
            name = s.get("file")
            if not name or s["state"] == "appending":
                continue
            path = os.path.join(self.cfg.follow, name)
            try:
                st = os.stat(path)
            except OSError:          # removed (or moved away) since: nothing left to train
                continue
            now = (name, st.st_size, st.st_mtime_ns)
            if (st.st_size, st.st_mtime_ns) == (s["size"], s.get("mtime_ns", st.st_mtime_ns)) or now in self._seen:
                continue
            self._seen.add(now)
            kept = st.st_size >= s["size"] and file_sha256(path, s["size"]) == s["sha256"]
            if kept and st.st_size == s["size"]:
                continue             # touched, not changed
            done = {"rejected": "were rejected", "trained": "were trained"}.get(s["state"], "were appended")
            what = (f"grew after it was taken: its first {s['size']:,} bytes {done}, the "
                    f"{st.st_size - s['size']:,} written since are not trained" if kept else
                    f"changed after it was taken: {s['size']:,} bytes of other content {done}, what it holds "
                    f"now ({st.st_size:,} bytes) is not trained")
            if self.log:
                self.log(f"warning: {path} {what}; put new text in a new file (write it elsewhere, then "
                         f"rename it into {self.cfg.follow})")
            s["changed"] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "grew": kept}
            self.state.save()

    def _landed(self, step: dict) -> bool:
        """Did an ``appending`` step's append reach the corpus (a crash after the rename)?"""
        with Corpus(self.cfg.corpus) as c:
            if c.corpus_id == step["corpus_id_before"]:
                return False
            info = c.segment_info[-1]
            got = [os.path.basename(i.get("path", "")) for i in info.get("inputs", [])]
            # its size may differ from the one taken: a file that grew meanwhile (_appended says so)
            if info.get("parent_corpus_id") == step["corpus_id_before"] and got == [step["file"]]:
                return True
        raise InputError(f"{self.cfg.corpus} changed since {step['file']} was taken (its id is no longer "
                         f"{step['corpus_id_before'][:12]}, and its last segment is not that file); "
                         f"--follow needs the corpus to itself")

    def _mark(self, index: int, **fields) -> None:
        self.state.steps[index].update(fields)
        self.state.save()

    def _lock(self) -> DirLock:
        cfg = self.cfg
        folder = os.path.realpath(cfg.follow)
        for opt, path in (("--out", cfg.out), ("--corpus", cfg.corpus)):
            if path and within(os.path.realpath(path), folder):   # it would train on its own files
                raise InputError(f"{opt} {path} is inside --follow {cfg.follow}, whose every new file is "
                                 f"taken as text; put it outside that folder")
        made = [] if os.path.exists(self.cfg.out) else [self.cfg.out]
        os.makedirs(self.cfg.out, exist_ok=True)
        try:
            lock = DirLock(self.cfg.out, "follow run", name=".mpidwe-follow.lock").acquire(warn=self.log)
        except BaseException:
            remove_if_empty(made)
            raise
        lock.made = made
        return lock

    # ------------------------------------------------------------ every rank
    def run(self) -> int:
        cfg, comm = self.cfg, self.comm
        lock = comm.on_root(self._lock, broadcast=False)
        try:
            steps = comm.on_root(self._open)
            if self.log:
                done = sum(s["state"] == "trained" and s["file"] is not None for s in steps)
                self.log(f"following {cfg.follow}: {done} file(s) trained so far; new files are appended "
                         f"to {cfg.corpus}")
            if not steps and not cfg.init_from:
                steps = comm.on_root(self._base_step)
            for step in steps:                   # a step a stop or crash left unfinished
                if step["state"] not in ("trained", "rejected"):
                    if self.do_step(step):
                        return EXIT_REQUEUE
            return self.watch()
        finally:
            if lock is not None:
                lock.release()
                remove_if_empty(lock.made)     # a failed start leaves no empty RUN_DIR

    def _base_step(self) -> list[dict]:
        with Corpus(self.cfg.corpus) as c:
            cid = c.corpus_id
        self.state.steps.append({"step": 0, "file": None, "corpus_id": cid, "state": "appended",
                                 "run": os.path.join(STEPS, "0000")})
        self.state.save()
        return self.state.steps

    def watch(self) -> int:
        cfg, comm = self.cfg, self.comm
        while True:
            stop = comm.allreduce_scalar(float(self.stop.requested), "max") > 0
            if stop:
                if self.log:
                    self.log("stop requested (SIGTERM/SIGUSR1) while waiting: every file taken is trained")
                return 0
            step = comm.on_root(self._next_file)
            if step is not None:
                if self.do_step(step):
                    return EXIT_REQUEUE
                continue
            if cfg.follow_exit_idle:
                if self.log:
                    self.log(f"no new file in {cfg.follow}: done (--follow-exit-idle)")
                return 0
            waited = 0.0
            while waited < cfg.follow_poll and not self.stop.requested:
                time.sleep(TICK_S)
                waited += TICK_S

    def do_step(self, step: dict) -> bool:
        """Append (unless done) and train one step; True when a stop interrupted it."""
        cfg, comm = self.cfg, self.comm
        if step["state"] == "appending":
            landed = comm.on_root(self._landed, step)
            if not landed:
                path = os.path.join(cfg.follow, step["file"])
                if self.log:
                    self.log(f"step {step['step']}: appending {path}")
                pcfg = PreprocessConfig(inputs=(path,), append=cfg.corpus)
                try:
                    preprocess.run(pcfg, comm, log=self.log)
                except InputError as e:
                    if not str(e).startswith("input "):     # the file itself is fine: stop
                        raise
                    # nothing to train in it (empty, only blanks): recorded, never retried
                    comm.on_root(self._mark, step["step"], state="rejected", reason=str(e), broadcast=False)
                    if self.log:
                        self.log(f"step {step['step']}: {path} not appended: {e}")
                    return False
            fields = comm.on_root(self._appended, step)
            comm.on_root(self._mark, step["step"], broadcast=False, **fields)
            step.update(fields)
        if comm.allreduce_scalar(float(self.stop.requested), "max") > 0:
            if self.log:
                self.log(f"stop requested: step {step['step']} is appended but not trained; run again to train it")
            return True
        result = self.train_step(step)
        if result.stopped:
            return True
        comm.on_root(self._mark, step["step"], state="trained", checkpoint=result.checkpoint, broadcast=False)
        comm.on_root(publish, cfg.out, step_dir(cfg.out, step["step"]), broadcast=False)
        step.update(state="trained")
        if self.log:
            self.log(f"step {step['step']} trained ({step.get('file') or 'the corpus as it was'}): "
                     f"{os.path.join(cfg.out, step['run'])}")
        return False

    def _model_before(self, k: int) -> str | None:
        """The newest trained step before step ``k`` (a rejected file trained nothing), else
        ``--init-from``."""
        done = [s for s in self.state.steps[:k] if s["state"] == "trained"]
        return step_dir(self.cfg.out, done[-1]["step"]) if done else self.cfg.init_from

    def _appended(self, step: dict) -> dict:
        """The fields of a step whose append landed: the corpus id, and, where the file
        changed between being taken and being read, the size and digest of what the segment
        holds (preprocess read the file as it was then)."""
        with Corpus(self.cfg.corpus) as c:
            fields = {"state": "appended", "corpus_id": c.corpus_id}
            inputs = c.segment_info[-1].get("inputs") or [{}]
        size = inputs[0].get("bytes", step["size"])
        if size != step["size"]:
            path = os.path.join(self.cfg.follow, step["file"])
            if self.log:
                self.log(f"note: {path} changed while it was appended: {size:,} bytes appended, not the "
                         f"{step['size']:,} taken")
            fields.update(size=size, sha256=file_sha256(path, size),
                          mtime_ns=os.stat(path).st_mtime_ns)
        return fields

    def train_step(self, step: dict):
        cfg = self.cfg
        k = step["step"]
        if k == 0 and step.get("file") is None:
            init, segments = None, "all"          # step 0: the corpus as it was
        else:
            init, segments = self.comm.on_root(self._model_before, k), "new"
        scfg = dataclasses.replace(cfg, out=step_dir(cfg.out, k), follow=None, segments=segments,
                                   init_from=init, resume="auto", force=False)
        return run(scfg, self.comm, log=self.log, stop=self.stop)


def run_follow(cfg: TrainConfig, comm: Comm, stop, log=print) -> int:
    """``--follow``: the exit code (0, or EXIT_REQUEUE when stopped inside a step)."""
    return Follower(cfg, comm, stop, log if comm.is_root else None).run()
