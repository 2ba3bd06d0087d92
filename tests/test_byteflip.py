"""Byte-flip campaign: one flipped byte anywhere in a corpus, a checkpoint or an SPPMI
cache must end, within 10 s, in a clean one-line refusal or (only where the byte provably
cannot matter) in the unchanged content. A hang inside HDF5 (it ignores SIGTERM) or a
crash would burn a whole Slurm allocation; a silent change would train or report wrong
numbers.

Every flip runs the reader entry points the commands use, in worker subprocesses that the
driver kills when one flip takes longer than the deadline:
  corpus      Corpus(path), verify(), shard + iter_blocks  (train, before training)
  checkpoint  checkpoint.load(path)                        (inspect, evaluate, train --resume)
  cache       refcache.read_reference(path, key)           (evaluate --pip-reference, train)

Standalone: ``python tests/test_byteflip.py [--kinds corpus,checkpoint,cache] [--stride K]
[--jobs N] [--masks ff,01] [--csv OUT]`` prints the outcomes per file kind and region.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

KINDS = ("corpus", "checkpoint", "cache")
SHARDED_KINDS = ("sharded", "sharded part")     # a sharded checkpoint and one of its parts
DEADLINE = 10.0                      # seconds one flip may take, reader included
OK = ("refused", "same")             # the only acceptable outcomes
CACHE_KEY = dict(corpus_id="c0ffee" * 10 + "c0ff", window=3, negatives=2, dim=4, top_n=40, alpha=0.5)


# ------------------------------------------------------------------ the three small files
def _text(directory: Path) -> Path:
    import random

    rng = random.Random(11)
    words = [f"w{i}" for i in range(50)] + ["naïve", "東京", "x" * 40]
    lines = [" ".join(rng.choice(words[: rng.randint(5, len(words))]) for _ in range(rng.randint(0, 25)))
             for _ in range(300)]
    p = directory / "text.txt"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def make_corpus(directory: Path) -> Path:
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import PreprocessConfig
    from mpidwe.preprocess import run

    out = directory / "corpus.h5"
    run(PreprocessConfig(inputs=(str(_text(directory)),), output=str(out), min_count=1, force=True), Comm.serial(), log=None)
    return out


def make_checkpoint(directory: Path) -> Path:
    from mpidwe.io import checkpoint

    rng = np.random.default_rng(3)
    v, d = 53, 8
    words = [f"w{i}" for i in range(50)] + ["naïve", "東京", "x" * 40]
    state = checkpoint.TrainingState(
        w_in=rng.standard_normal((v, d)).astype(np.float32), w_out=rng.standard_normal((v, d)).astype(np.float32),
        progress=checkpoint.Progress(round=4, rounds=10, words_done=4000, words_total=10000, world_size=2,
                                     positions=[2000, 2000], lr=0.0125),
        rng_state=np.array([[11, 12], [13, 2**63 + 7]], dtype=np.uint64),
        history=[{"step": r, "loss": 1.0 / (r + 1), "words": 1000 * r} for r in range(1, 5)])
    ck = checkpoint.Checkpoint(state=state, words=words, counts=np.arange(v, 0, -1) * 3,
                               config={"dim": d, "model": "skipgram", "window": 5, "lr": 0.025},
                               corpus_id="ab" * 32, corpus_path="corpus.h5")
    return Path(checkpoint.save(str(directory / "ckpts"), ck))


def make_cache(directory: Path) -> Path:
    from mpidwe.io import refcache

    rng = np.random.default_rng(5)
    key = refcache.ReferenceKey(**CACHE_KEY)
    words = [f"w{i}" for i in range(38)] + ["naïve", "東京"]
    path = Path(refcache.cache_path(str(directory / "corpus.h5")))
    refcache.write_reference(str(path), refcache.CachedReference(
        key, words, rng.standard_normal((40, 4)).astype(np.float32), np.array([4.0, 3.0, 2.0, 1.0]),
        {"pairs": 1234, "svd": "arpack", "seconds": 0.5}))
    return path


def make_sharded_part(directory: Path) -> Path:
    """Part 1 of a sharded checkpoint (the flips hit it; the reader loads its checkpoint)."""
    return make_sharded(directory).parent / "ckpt-000000004.part-00001-of-00002.h5"


MAKERS = {"corpus": make_corpus, "checkpoint": make_checkpoint, "cache": make_cache,
          "sharded": lambda d: make_sharded(d), "sharded part": lambda d: make_sharded_part(d)}


# ------------------------------------------------------------ what each reader returns
def _digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(str((p.dtype.str, p.shape)).encode())
            h.update(np.ascontiguousarray(p).tobytes())
        else:
            h.update(json.dumps(p, sort_keys=True, default=str).encode())
        h.update(b"|")
    return h.hexdigest()


def read_corpus(path: str) -> str:
    """What ``train`` does with a corpus before and while training (1 rank)."""
    from mpidwe.io.corpus import Corpus

    with Corpus(path) as c:
        c.verify()
        shard = c.shard(0, 1)
        blocks = [(t, s, o) for t, s, o in c.iter_blocks(shard, block_tokens=256)]
        tokens = np.concatenate([b[0] for b in blocks]) if blocks else np.zeros(0, np.int32)
        starts = np.concatenate([b[1] + b[2] for b in blocks]) if blocks else np.zeros(0, np.int64)
        return _digest(c.corpus_id, c.words, c.counts, tokens, starts, c.attrs, c.n_sentences)


def read_checkpoint(path: str) -> str:
    from mpidwe.io import checkpoint

    ck = checkpoint.load(path)
    return _digest(ck.words, ck.counts, ck.w_in, ck.w_out, ck.state.rng_state, ck.progress.__dict__,
                   ck.metrics, ck.config, ck.corpus_id, ck.corpus_path, ck.created, ck.tool_version, ck.complete)


def read_sharded(path: str) -> str:
    """A sharded checkpoint as its readers take it: whole (mpidwe.load, inspect), streamed
    (export) and by rank (a sharded resume on another number of ranks); its virtual datasets
    and part list included."""
    from mpidwe.io import checkpoint

    ck = checkpoint.load(path)
    streamed = [np.concatenate(m) for m in zip(*((i, o) for _, i, o in
                                                  checkpoint.iter_rows(checkpoint.load(path, params=False), 16)))]
    by_rank = [m for r in range(3) for m in checkpoint.read_rows(path, ck.parts, len(ck.words), r, 3, 16)]
    return _digest(read_checkpoint(path), *streamed, *by_rank)


def read_sharded_part(path: str) -> str:
    return read_sharded(os.path.join(os.path.dirname(path), "ckpt-000000004.h5"))


def read_cache(path: str) -> str:
    from mpidwe.io import refcache

    ref = refcache.read_reference(path, refcache.ReferenceKey(**CACHE_KEY))
    if ref is None:
        return "miss"      # the entry looks absent or stale: evaluate recomputes it
    return _digest(ref.words, ref.embedding, ref.singular_values, ref.info)


def read_corpus_pip(path: str) -> str:
    """``evaluate --pip-reference CORPUS``: the SPPMI reference, computed (the cache beside
    the corpus removed first) and cached; what the cache then holds."""
    from mpidwe.evaluate.sppmi import ReferenceSpec, reference_embedding
    from mpidwe.io import refcache

    cache = refcache.cache_path(path)
    if os.path.exists(cache):
        os.unlink(cache)
    spec = ReferenceSpec(window=3, negatives=2, dim=4, top_n=40)
    ref = reference_embedding(path, spec)
    stored = refcache.read_reference(cache, ref.key)
    return _digest(ref.key.corpus_id, ref.words, ref.vectors, stored.embedding if stored else None)


APPENDED_TEXT = "w1 w2 w3 w4 naïve\nw5 w6 東京 w7 w8 w9\n"


def read_corpus_append(path: str) -> str:
    """``preprocess NEW --append CORPUS`` on a copy: the grown corpus's id."""
    import shutil

    from mpidwe.core.config import PreprocessConfig
    from mpidwe.parallel.comm import Comm
    from mpidwe.io.corpus import Corpus
    from mpidwe.preprocess import run

    folder = os.path.dirname(path)
    text, grown = os.path.join(folder, "new.txt"), os.path.join(folder, "grown.h5")
    Path(text).write_text(APPENDED_TEXT, encoding="utf-8")
    shutil.copyfile(path, grown)
    run(PreprocessConfig(inputs=(text,), append=grown), Comm.serial(), log=None)
    with Corpus(grown) as c:
        return c.corpus_id


def read_corpus_inspect(path: str) -> str:
    """``python -m mpidwe.inspect CORPUS``: what it prints."""
    import contextlib
    import io

    from mpidwe import inspect

    from mpidwe.core.errors import MpidweError

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            inspect.run([path])
    except MpidweError as e:       # a corpus is no checkpoint: refused before its data is read
        return "refused: " + str(e).replace(path, "CORPUS")
    return _digest(out.getvalue())


READERS = {"corpus": read_corpus, "checkpoint": read_checkpoint, "cache": read_cache,
           "sharded": read_sharded, "sharded part": read_sharded_part,
           "corpus-pip": read_corpus_pip, "corpus-append": read_corpus_append,
           "corpus-inspect": read_corpus_inspect}
COMMANDS = {"train": "corpus", "evaluate --pip-reference": "corpus-pip", "preprocess --append": "corpus-append",
            "inspect": "corpus-inspect"}


# ------------------------------------------------------------------------- regions
def regions(path: str) -> list[tuple[int, int, str]]:
    """(start, end, label) of the raw data of every dataset and of the HDF5 structures
    found by their signatures; the rest is labelled 'metadata' (superblock, object
    headers) or 'seal' (the mpidwe header before the superblock)."""
    import h5py

    data = Path(path).read_bytes()
    out = []
    base = data.find(b"\x89HDF\r\n\x1a\n")
    if base > 0:
        out.append((0, base, "seal"))
    with h5py.File(path, "r", locking=False) as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for name in names:
            dsid = f[name].id
            if dsid.get_offset() is not None:
                out.append((dsid.get_offset(), dsid.get_offset() + dsid.get_storage_size(), f"data:{name}"))
            elif dsid.get_storage_size():
                for i in range(dsid.get_num_chunks()):
                    info = dsid.get_chunk_info(i)
                    out.append((info.byte_offset, info.byte_offset + info.size, f"data:{name}"))
    for sig, label in ((b"GCOL", "global heap"), (b"HEAP", "local heap"), (b"TREE", "B-tree"),
                       (b"SNOD", "symbol table"), (b"OHDR", "object header"), (b"FRHP", "fractal heap"),
                       (b"BTHD", "B-tree"), (b"BTLF", "B-tree")):
        at = data.find(sig)
        while at >= 0:
            if sig == b"GCOL":
                size = int.from_bytes(data[at + 8:at + 16], "little")
            elif sig == b"HEAP":
                size = 32 + int.from_bytes(data[at + 8:at + 16], "little")
            else:
                size = 16
            if 0 < size < len(data) and not any(a <= at < b for a, b, _ in out):
                out.append((at, min(at + size, len(data)), label))
            at = data.find(sig, at + 1)
    out.sort()
    return out


def label_of(offset: int, regs: list[tuple[int, int, str]]) -> str:
    for a, b, label in regs:
        if a <= offset < b:
            return label
    return "metadata"


def choose_offsets(path: str, stride: int) -> list[int]:
    """Every byte but the raw data of datasets over 1 KiB, of which every ``stride``-th byte
    and the first and last: all of HDF5's structures (superblock, object headers, B-trees,
    heaps, attributes), the small datasets and the seal flip byte by byte, the large
    arrays HDF5 only copies are sampled."""
    size = os.path.getsize(path)
    sampled = np.zeros(size, bool)
    chosen = set()
    for a, b, label in regions(path):
        if label.startswith("data:") and b - a > 1024:
            sampled[a:b] = True
            chosen.update(range(a, b, stride))
            chosen.update({a, b - 1})
    chosen.update(int(x) for x in np.flatnonzero(~sampled))
    return sorted(chosen)


# ------------------------------------------------------------------------- the worker
def _one_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


def worker(kind: str, original: str, expected: str, scratch: str, todo: str) -> None:
    """Reads ``offset mask`` lines from ``todo``; for each, flips the byte of a copy in
    ``scratch``, runs the reader and prints ``START offset`` before and ``offset outcome
    detail`` after."""
    from mpidwe.core.errors import MpidweError

    data = Path(original).read_bytes()
    reader = READERS[kind]
    target = os.path.join(scratch, os.path.basename(original))
    if kind.startswith("sharded"):      # the checkpoint and its parts beside the flipped one
        folder = os.path.dirname(original)
        for name in os.listdir(folder):
            if name.startswith("ckpt-") and name != os.path.basename(original):
                Path(scratch, name).write_bytes(Path(folder, name).read_bytes())
    Path(target).write_bytes(data)
    fd = os.open(target, os.O_RDWR)   # flipped and restored in place: rewriting costs 1 ms a flip
    previous = 0
    for line in Path(todo).read_text().splitlines():
        offset, mask = (int(x, 0) for x in line.split())
        os.pwrite(fd, data[previous:previous + 1], previous)
        os.pwrite(fd, bytes([data[offset] ^ mask]), offset)
        previous = offset
        print(f"START {offset}", flush=True)
        try:
            got = reader(target)
            outcome, detail = ("same", "") if got == expected else ("DIFFERENT", got[:12])
            if got == "miss":
                outcome = "miss"
        except MpidweError as e:
            msg = str(e)
            outcome, detail = ("refused", msg) if "\n" not in msg else ("multiline-error", _one_line(e))
        except Exception as e:  # noqa: BLE001 - the campaign records every traceback
            outcome, detail = "traceback", f"{type(e).__name__}: {_one_line(e)}"
        print(f"{offset} {outcome} {json.dumps(detail)}", flush=True)


# ------------------------------------------------------------------------- the driver
def _spawn(kind, original, expected, scratch, todo):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", HDF5_USE_FILE_LOCKING="FALSE")
    return subprocess.Popen([sys.executable, __file__, "--worker", kind, original, expected, scratch, todo],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env, cwd=scratch)


class _Worker:
    """One worker process, the flips it has still to answer, and the one it is on."""

    def __init__(self, kind, original, expected, scratch, batch):
        todo = os.path.join(scratch, "flips.txt")     # a file, not a pipe: no deadlock on big batches
        Path(todo).write_text("".join(f"{off} {mask}\n" for off, mask in batch))
        self.proc = _spawn(kind, original, expected, scratch, todo)
        self.queue = collections.deque(batch)
        self.busy_since = None                          # set while a flip is running
        self.buffer = b""

    def lines(self) -> list[str] | None:
        """The complete lines now readable (unbuffered, so none hides from select), or
        None at the end of its output."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        *done, self.buffer = self.buffer.split(b"\n")
        return [ln.decode() for ln in done]


def campaign(kind: str, original: str, flips: list[tuple[int, int]], *, jobs: int = 4,
             deadline: float = DEADLINE) -> dict[tuple[int, int], tuple[str, str, float]]:
    """Run every (offset, mask) flip of ``original``; returns (outcome, detail, seconds)
    per flip. Outcomes: refused, same, DIFFERENT, miss, traceback, multiline-error,
    crash (the worker died), timeout (no answer within ``deadline``: the worker is killed
    and a new one goes on with the rest)."""
    expected = READERS[kind](original)
    results: dict[tuple[int, int], tuple[str, str, float]] = {}
    pending = collections.deque(flips)
    sel = selectors.DefaultSelector()
    per = -(-len(flips) // jobs)        # one batch per worker: it starts once (imports take 0.5 s)
    with tempfile.TemporaryDirectory(prefix="byteflip-") as tmp:
        workers: list[_Worker] = []

        def finish(w: _Worker, outcome: str) -> None:
            sel.unregister(w.proc.stdout)
            workers.remove(w)
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait()
            if w.busy_since is not None:               # the flip it was on
                results[w.queue.popleft()] = (outcome, f"exit {w.proc.returncode}" if outcome == "crash" else "",
                                              time.monotonic() - w.busy_since)
            pending.extendleft(reversed(w.queue))

        while pending or workers:
            while pending and len(workers) < jobs:
                batch = [pending.popleft() for _ in range(min(per, len(pending)))]
                w = _Worker(kind, original, expected, tempfile.mkdtemp(dir=tmp), batch)
                workers.append(w)
                sel.register(w.proc.stdout, selectors.EVENT_READ, w)
            for key, _ in sel.select(timeout=0.5):
                w = key.data
                lines = w.lines()
                if lines is None:
                    finish(w, "crash")
                    continue
                for line in lines:
                    if line.startswith("START "):
                        w.busy_since = time.monotonic()
                        continue
                    off, outcome, detail = line.split(" ", 2)
                    flip = w.queue.popleft()
                    assert flip[0] == int(off)
                    results[flip] = (outcome, json.loads(detail), time.monotonic() - w.busy_since)
                    w.busy_since = None
            now = time.monotonic()
            for w in list(workers):
                if w.busy_since is not None and now - w.busy_since > deadline:
                    finish(w, "timeout")
    return results


def summarize(kind: str, path: str, results: dict) -> str:
    regs = regions(path)
    table = collections.defaultdict(collections.Counter)
    for (off, _), (outcome, _, _) in results.items():
        table[label_of(off, regs)][outcome] += 1
    total = collections.Counter(o for o, _, _ in results.values())
    slowest = max((s for _, _, s in results.values()), default=0.0)
    lines = [f"{kind}: {os.path.getsize(path)} bytes, {len(results)} flips, slowest {slowest:.2f} s: "
             + ", ".join(f"{k} {v}" for k, v in sorted(total.items()))]
    for label in sorted(table):
        lines.append(f"  {label:28s} " + ", ".join(f"{k} {v}" for k, v in sorted(table[label].items())))
    return "\n".join(lines)


def bad(results: dict) -> list:
    return sorted((off, mask, o, d) for (off, mask), (o, d, _) in results.items() if o not in OK)


# ------------------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp(kind)
        out[kind] = str(MAKERS[kind](d))
    return out


MASKS = (0xFF, 0x01, 0x80, 0x10)


@pytest.mark.parametrize("kind", KINDS)
def test_every_region_fails_fast(files, kind):
    """Every byte of every HDF5 structure and small dataset, and every 64th byte of the large
    arrays, each with one of four masks: every flip is refused in one line or leaves the
    content unchanged, each within 10 s."""
    path = files[kind]
    flips = [(off, MASKS[i % len(MASKS)]) for i, off in enumerate(choose_offsets(path, 64))]
    results = campaign(kind, path, flips, jobs=2)
    print(summarize(kind, path, results))
    assert len(results) == len(flips)
    assert not bad(results), summarize(kind, path, results) + f"\nfirst bad: {bad(results)[:10]}"
    assert max(s for _, _, s in results.values()) < DEADLINE
    regs = regions(path)
    assert {label_of(off, regs) for off, _ in flips} >= {"seal", "metadata", "global heap", "B-tree", "local heap"}


@pytest.mark.parametrize("kind", SHARDED_KINDS)
def test_sharded_checkpoint_flips_fail_fast(tmp_path, kind):
    """A sharded checkpoint (its virtual datasets' mapping and part list included) and one of
    its parts, every 5th byte and every byte that names a part file: each flip is refused in
    one line or leaves what every reader gives (whole, streamed, by rank) unchanged."""
    path = str(MAKERS[kind](tmp_path))
    data = Path(path).read_bytes()
    names = {i for at in range(len(data)) if data.startswith(b".part-0000", at) for i in range(at - 14, at + 25)}
    offsets = sorted(set(choose_offsets(path, 64)[::5]) | names)
    flips = [(off, MASKS[i % len(MASKS)]) for i, off in enumerate(offsets)]
    results = campaign(kind, path, flips, jobs=2)
    assert len(results) == len(flips)
    assert not bad(results), summarize(kind, path, results) + f"\nfirst bad: {bad(results)[:10]}"
    assert kind == "sharded part" or len(names) >= 4 * 39


@pytest.mark.parametrize("command", COMMANDS)
def test_corpus_data_flips_are_refused_by_every_command(files, command):
    """A byte of the token ids or the sentence starts (the ranges the seal leaves to the
    corpus id) flipped: every command that reads the corpus refuses it in one line. Nothing
    is computed, cached or appended from damaged tokens under the unchanged corpus id."""
    path = files["corpus"]
    data = [(a, b) for a, b, label in regions(path) if label in ("data:tokens", "data:sentences")]
    assert len(data) == 2
    flips = [(off, MASKS[i % len(MASKS)]) for a, b in data for i, off in enumerate(range(a, b, 97))]
    results = campaign(COMMANDS[command], path, flips, jobs=2)
    outcomes = collections.Counter(o for o, _, _ in results.values())
    if command == "inspect":       # refuses any corpus, intact or not, before reading its data
        assert READERS["corpus-inspect"](path) == "refused: CORPUS is an mpidwe corpus, not a checkpoint"
        assert outcomes == {"same": len(flips)}, (outcomes, bad(results)[:5])
    else:
        assert outcomes == {"refused": len(flips)}, (outcomes, bad(results)[:5])


# ------------------------------------------------------------- crafted dataset shapes
HUGE_ROWS = 2_000_000_000
MEMORY_LIMIT = 3 << 30        # bytes of address space a reader of a crafted file may take


def make_sharded(directory: Path) -> Path:
    """A sharded checkpoint of 2 parts (its parameters in part files)."""
    from mpidwe.io import checkpoint

    ck_path = make_checkpoint(directory)
    ck = checkpoint.load(str(ck_path))
    d = str(directory / "sharded")
    parts = [checkpoint.save_part(d, 4, r, 2, len(ck.words), ck.w_in[r::2], ck.w_out[r::2]) for r in range(2)]
    return Path(checkpoint.save(d, ck, parts=parts))


def make_char_model(directory: Path) -> Path:
    from mpidwe.io import charfile, checkpoint

    ck = checkpoint.load(str(make_checkpoint(directory)))
    params = {"embed.weight": np.ones((10, 4), np.float32), "out.bias": np.zeros(8, np.float32)}
    return Path(charfile.save_char_model(ck, {"alphabet": "abc"}, params, "input"))


# file kind -> (maker, the file whose dataset is replaced (relative to the made one), dataset)
CRAFTED = {
    "corpus": (make_corpus, ".", "tokens"),
    "checkpoint": (make_checkpoint, ".", "params/w_in"),
    "checkpoint part": (make_sharded, "ckpt-000000004.part-00001-of-00002.h5", "params/w_out"),
    "sharded checkpoint": (make_sharded, ".", "params/w_in"),
    "character model": (make_char_model, ".", "params/embed.weight"),
    "PIP reference cache": (make_cache, ".", "references/" + "window=3,negatives=2,dim=4,top_n=40,"
                            "alpha=0.5/embedding"),
}

# what reads each kind (as the commands do), in a process whose memory is capped
CRAFTED_READERS = {
    "corpus": "from mpidwe.io.corpus import Corpus\nCorpus(PATH).verify()",
    "checkpoint": "import mpidwe\nmpidwe.load(PATH)",
    "checkpoint part": "from mpidwe.io import checkpoint\ncheckpoint.load(PATH)",
    "sharded checkpoint": "import mpidwe\nmpidwe.load(PATH)",
    "character model": "from mpidwe.io import charfile, checkpoint\ncharfile.read_char_model(checkpoint.load("
                       "PATH.replace('.chars.h5', '.h5')))",
    "PIP reference cache": "from mpidwe.io import refcache\nfrom test_byteflip import CACHE_KEY\n"
                           "refcache.read_reference(PATH, refcache.ReferenceKey(**CACHE_KEY))",
}


def craft_huge(path: str, name: str) -> None:
    """Replace dataset ``name`` by a chunked one of HUGE_ROWS rows (nothing stored: it reads
    as its fill value), same dtype and row shape, and seal the file again: the seal no longer
    tells, only a check of the shape against the header does."""
    import h5py

    from mpidwe.io.formats import reseal

    with h5py.File(path, "a") as f:
        old = f[name]
        dtype, row = old.dtype, old.shape[1:]
        del f[name]
        f.create_dataset(name, shape=(HUGE_ROWS,) + row, dtype=dtype, chunks=(1024,) + row)
        if name == "tokens":           # the counts add up to the tokens, as the reader checks
            counts = f["vocab/counts"][:]
            counts[0] += HUGE_ROWS - counts.sum()
            f["vocab/counts"][:] = counts
            f["segments"][-1, 0] = HUGE_ROWS
    reseal(path)


def _limited():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.mark.parametrize("kind", CRAFTED)
def test_a_crafted_huge_dataset_shape_is_refused_before_it_is_read(tmp_path, kind):
    """A dataset replaced by a (2,000,000,000, ...) one and the file resealed: the reader
    checks every shape against the header before reading, and refuses in one line instead
    of allocating gigabytes (here capped at 3 GiB: MemoryError would be a traceback)."""
    maker, target, name = CRAFTED[kind]
    made = maker(tmp_path)
    path = str(made if target == "." else made.parent / target)
    craft_huge(path, name)
    code = ("import sys\nfrom mpidwe.core.errors import MpidweError\nPATH = sys.argv[1]\ntry:\n"
            + "".join(f"    {line}\n" for line in CRAFTED_READERS[kind].replace("PATH", "PATH").split("\n"))
            + "except MpidweError as e:\n    print('REFUSED', e)\n    sys.exit(2)\n")
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}", OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", NUMBA_DISABLE_JIT="0")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(made)], capture_output=True, text=True, timeout=60,
                          env=env, preexec_fn=_limited)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("REFUSED ") and "\n" not in line and "damaged" in line and "shape" in line, line
    assert time.monotonic() - t0 < 30


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_every_byte_every_mask(files, kind):
    """The full sweep: every byte of the file with each of the four masks (minutes)."""
    path = files[kind]
    flips = [(off, mask) for off in range(os.path.getsize(path)) for mask in MASKS]
    results = campaign(kind, path, flips, jobs=os.cpu_count() or 2)
    print(summarize(kind, path, results))
    assert not bad(results), summarize(kind, path, results) + f"\nfirst bad: {bad(results)[:10]}"


# ------------------------------------------------------------------------------- CLI
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", nargs=5, metavar=("KIND", "FILE", "EXPECTED", "SCRATCH", "TODO"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--kinds", default=",".join(KINDS + SHARDED_KINDS))
    ap.add_argument("--stride", type=int, default=64, help="large arrays: every K-th byte (the rest: every byte)")
    ap.add_argument("--every-byte", action="store_true", help="flip every byte of the file")
    ap.add_argument("--masks", default="ff", help="comma-separated XOR masks, hex")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--deadline", type=float, default=DEADLINE)
    ap.add_argument("--dir", help="keep the files here (default: a temporary folder)")
    ap.add_argument("--csv", help="write every flip's outcome here")
    a = ap.parse_args(argv)
    if a.worker:
        worker(*a.worker)
        return 0
    masks = [int(m, 16) for m in a.masks.split(",")]
    with tempfile.TemporaryDirectory(prefix="byteflip-files-") as tmp:
        base = Path(a.dir or tmp)
        failed = 0
        rows = []
        for kind in a.kinds.split(","):
            (base / kind).mkdir(parents=True, exist_ok=True)
            path = str(MAKERS[kind](base / kind))
            offsets = range(os.path.getsize(path)) if a.every_byte else choose_offsets(path, a.stride)
            flips = [(o, m) for o in offsets for m in masks]
            t0 = time.monotonic()
            results = campaign(kind, path, flips, jobs=a.jobs, deadline=a.deadline)
            print(summarize(kind, path, results) + f"\n  ({time.monotonic() - t0:.1f} s)", flush=True)
            regs = regions(path)
            for (off, mask), (o, d, s) in sorted(results.items()):
                rows.append((kind, off, f"{mask:02x}", label_of(off, regs), o, f"{s:.3f}", d))
                if o not in OK:
                    failed += 1
            for off, mask, o, d in bad(results)[:8]:
                print(f"    {o:10s} offset {off} ({label_of(off, regs)}) mask {mask:02x}: {d}")
        if a.csv:
            import csv

            with open(a.csv, "w", newline="", encoding="utf-8", errors="backslashreplace") as fh:
                csv.writer(fh).writerows([("kind", "offset", "mask", "region", "outcome", "seconds", "detail")]
                                         + rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
