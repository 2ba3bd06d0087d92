"""What a run directory survives: damaged checkpoints, resumes, failed starts, bad --out."""

import json
import os
import shutil
import time

import pytest

from mpidwe.io import checkpoint
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import TrainConfig
from mpidwe.core.errors import InputError
from mpidwe.train import run as train

from conftest import make_demo_corpus


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("rundir"), tokens=120_000, seed=3)


def cfg(demo, out, **kw):
    base = dict(corpus=str(demo / "corpus.h5"), out=str(out), dim=16, epochs=2, threads=1, progress=False,
                sync_every=20_000, checkpoint_every=60_000, keep_checkpoints=100, export=False)
    base.update(kw)
    return TrainConfig(**base)


def steps(out):
    return [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_resume_auto_refuses_when_every_checkpoint_is_damaged_and_deletes_nothing(demo, tmp_path):
    out = tmp_path / "r"
    train(cfg(demo, out), Comm.serial(), log=None)
    cks = checkpoint.list_checkpoints(str(out / "checkpoints"))
    for p in cks:
        with open(p, "r+b") as fh:
            fh.seek(0)
            fh.write(b"garbage!")
    before = {p: open(p, "rb").read() for p in cks + [str(out / "metrics.jsonl")]}
    with pytest.raises(InputError, match=r"none of the \d+ checkpoint\(s\).*nothing was deleted"):
        train(cfg(demo, out, resume="auto"), Comm.serial(), log=None)
    assert {p: open(p, "rb").read() for p in before} == before


def test_a_resume_that_cannot_go_on_writes_no_demo_corpus_first(demo, tmp_path, monkeypatch):
    # without --corpus a run trains on the demo corpus, made in ./demo: a --resume whose
    # checkpoints are all damaged is refused before that, and leaves the directory as it was
    out = tmp_path / "r"
    train(cfg(demo, out), Comm.serial(), log=None)
    cks = checkpoint.list_checkpoints(str(out / "checkpoints"))
    for p in cks:
        with open(p, "r+b") as fh:
            fh.write(b"garbage!")
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    with pytest.raises(InputError, match=r"none of the \d+ checkpoint\(s\).*nothing was deleted"):
        train(cfg(demo, out, corpus=None, resume="auto"), Comm.serial(), log=None)
    with pytest.raises(InputError, match="garbage|damaged|not an HDF5|checkpoint"):
        train(cfg(demo, out, corpus=None, resume=cks[-1]), Comm.serial(), log=None)
    assert list(here.iterdir()) == []


def test_metrics_after_a_resume_hold_every_step_once(demo, tmp_path):
    full = tmp_path / "full"
    res = train(cfg(demo, full), Comm.serial(), log=None)
    rounds = len(res.metrics)
    # as if the run died after its second checkpoint, having logged every round
    part = tmp_path / "part"
    shutil.copytree(full, part)
    for p in checkpoint.list_checkpoints(str(part / "checkpoints"))[2:]:
        os.unlink(p)
    assert steps(part) == list(range(1, rounds + 1))
    train(cfg(demo, part, resume="auto"), Comm.serial(), log=None)
    assert steps(part) == list(range(1, rounds + 1))
    final = checkpoint.latest_valid(str(part / "checkpoints"))
    assert [m["step"] for m in final.metrics] == steps(part)


def test_a_failed_start_leaves_nothing_that_blocks_the_corrected_rerun(demo, tmp_path):
    out = tmp_path / "f"
    with pytest.raises(InputError):
        train(cfg(demo, out, eval_sim=(str(tmp_path / "missing.tsv"),)), Comm.serial(), log=None)
    assert not (out / "metrics.jsonl").exists() and not (out / "config.json").exists()
    train(cfg(demo, out), Comm.serial(), log=None)       # no --force needed
    assert (out / "metrics.jsonl").exists()


def test_an_unusable_out_is_refused_before_training(demo, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(InputError, match="exists and is not a folder"):
        train(cfg(demo, a_file), Comm.serial(), log=None)
    out = tmp_path / "o"
    out.mkdir()
    (out / "checkpoints").write_text("not a folder")
    with pytest.raises(InputError, match="checkpoints exists and is not a folder"):
        train(cfg(demo, out), Comm.serial(), log=None)
    assert not (out / "metrics.jsonl").exists()


def test_resume_from_the_corpus_itself_is_named_as_such(demo, tmp_path):
    with pytest.raises(InputError, match="is the corpus, not a checkpoint"):
        train(cfg(demo, tmp_path / "x", resume=str(demo / "corpus.h5")), Comm.serial(), log=None)


@pytest.mark.parametrize("failure", ["eval file", "resume a corpus", "init from the corpus",
                                     "init from another corpus", "fit resume"])
def test_a_failed_start_leaves_no_empty_out_folder(demo, tmp_path, failure):
    """A start that fails (a missing evaluation file, --resume or --init-from naming a corpus,
    the API's fit(resume=...)) leaves neither OUT/ nor OUT/checkpoints/ behind; a folder the
    user made stays, and a corpus given as --init-from is named as such."""
    out, other = tmp_path / "new" / "run", tmp_path / "other.h5"
    shutil.copyfile(demo / "corpus.h5", other)
    corpus = str(demo / "corpus.h5")
    options, match = {"eval file": ({"eval_analogy": (str(tmp_path / "missing.txt"),)}, "missing.txt"),
                      "resume a corpus": ({"resume": corpus}, "is the corpus, not a checkpoint"),
                      "init from the corpus": ({"init_from": corpus}, "--init-from .* is the corpus, not a checkpoint"),
                      "init from another corpus": ({"init_from": str(other)}, "is an mpidwe corpus, not a checkpoint"),
                      "fit resume": ({"resume": str(tmp_path / "nope.h5")}, "nope.h5")}[failure]
    (tmp_path / "new").mkdir()
    with pytest.raises(InputError, match=match):
        if failure == "fit resume":
            import mpidwe

            mpidwe.fit(**{k: v for k, v in vars(cfg(demo, out)).items() if k in ("corpus", "out", "dim", "epochs",
                                                                               "threads", "progress")},
                       log=None, **options)
        else:
            train(cfg(demo, out, **options), Comm.serial(), log=None)
    assert os.listdir(tmp_path / "new") == []
    assert os.path.exists(other)


def test_a_start_that_fails_on_bad_input_while_training_takes_back_what_it_wrote(demo, tmp_path):
    """A damaged token id read with --no-verify-corpus is found in the first round, after
    config.json was written: the run takes back config.json and the folders it made (before,
    OUT/config.json stayed); a file that was there before the run stays."""
    import h5py

    from mpidwe.io.formats import reseal

    bad = tmp_path / "bad.h5"
    shutil.copyfile(demo / "corpus.h5", bad)
    with h5py.File(bad, "a") as f:
        f["tokens"][5] = 10 ** 6
    reseal(str(bad))
    out = tmp_path / "new" / "run"
    (tmp_path / "new").mkdir()
    with pytest.raises(InputError, match="damaged"):
        train(cfg(demo, out, corpus=str(bad), verify_corpus=False), Comm.serial(), log=None)
    assert os.listdir(tmp_path / "new") == []
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(InputError, match="damaged"):
        train(cfg(demo, mine, corpus=str(bad), verify_corpus=False), Comm.serial(), log=None)
    assert sorted(os.listdir(mine)) == ["notes.txt"]
    (mine / "config.json").write_text("{}")       # written before this run: not its to remove
    with pytest.raises(InputError, match="damaged"):
        train(cfg(demo, mine, corpus=str(bad), verify_corpus=False, force=True), Comm.serial(), log=None)
    assert sorted(os.listdir(mine)) == ["config.json", "notes.txt"]


@pytest.mark.mpi
def test_sigterm_after_a_finished_two_rank_run_changes_nothing(demo, tmp_path):
    """SIGTERM to the launcher right after the last output is written (while the ranks shut
    MPI down): the job still exits 0, everything written, nothing on standard error."""
    import signal
    import subprocess

    from conftest import mpi_command, mpi_env

    for trial, delay in enumerate((0.0, 0.05, 0.15)):
        out = tmp_path / f"r{trial}"
        proc = subprocess.Popen(mpi_command(2, ["-m", "mpidwe.train", "--corpus", str(demo / "corpus.h5"),
                                                "--out", str(out), "--dim", "8", "--epochs", "1", "--threads", "1",
                                                "--no-progress"]),
                                env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sent = False
        try:
            for line in proc.stdout:
                if line.startswith("wrote ") and "vectors.txt" in line:
                    time.sleep(delay)
                    proc.send_signal(signal.SIGTERM)
                    sent = True
                    break
            _, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert sent and proc.returncode == 0 and not stderr.strip(), (delay, proc.returncode, stderr)
        assert (out / "vectors.txt").exists() and checkpoint.list_checkpoints(str(out / "checkpoints"))


def test_an_absurd_negative_count_is_refused_up_front(tmp_path):
    from mpidwe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--negative must be <= 1000, got 100000"):
        TrainConfig(out=str(tmp_path / "n"), negative=100_000)
    assert TrainConfig(out=str(tmp_path / "n"), negative=25).negative == 25


def test_the_checkpoint_history_stays_bounded_and_resume_keeps_the_full_log(demo, tmp_path, monkeypatch):
    """A tiny interval makes many rounds: the checkpoint embeds a thinned history, while
    metrics.jsonl keeps every line, also across a resume."""
    import mpidwe.train.rundir as t
    from mpidwe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--sync-every must be 0 \\(automatic\\) or >= 500"):
        TrainConfig(out=str(tmp_path / "s"), sync_every=1)
    monkeypatch.setattr(t, "MAX_HISTORY", 8)
    full = tmp_path / "full"
    train(cfg(demo, full, sync_every=5_000, checkpoint_every=60_000), Comm.serial(), log=None)
    rounds = len(steps(full))
    assert steps(full) == list(range(1, rounds + 1)) and rounds > 16
    cks = checkpoint.list_checkpoints(str(full / "checkpoints"))
    last = checkpoint.load(cks[-1])
    assert len(last.metrics) <= 8 and last.metrics[-1]["step"] == rounds
    part = tmp_path / "part"
    shutil.copytree(full, part)
    for p in checkpoint.list_checkpoints(str(part / "checkpoints"))[2:]:
        os.unlink(p)
    train(cfg(demo, part, sync_every=5_000, checkpoint_every=60_000, resume="auto"), Comm.serial(), log=None)
    assert steps(part) == list(range(1, rounds + 1))


def test_a_round_without_examples_logs_no_loss(demo, tmp_path):
    """Sentences longer than the interval leave rounds with nothing to train: their loss is
    null, not 0.0, and the summary and plot still work."""
    import subprocess
    import sys

    out = tmp_path / "e"
    res = train(cfg(demo, out, sync_every=1_000, epochs=1, checkpoint_every=0, block_tokens=1_000),
                Comm.serial(), log=None)
    losses = [m["loss"] for m in res.metrics]
    assert all(x is None or x > 0 for x in losses)
    proc = subprocess.run([sys.executable, "-m", "mpidwe.inspect", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_second_run_into_the_same_out_is_refused_while_the_first_runs(demo, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "busy"
    args = [sys.executable, "-m", "mpidwe.train", "--corpus", str(demo / "corpus.h5"), "--out", str(out),
            "--dim", "16", "--threads", "1", "--no-progress", "--epochs", "200", "--no-export"]
    first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = out / ".mpidwe.lock"
        for _ in range(300):
            if (out / "metrics.jsonl").exists():
                break
            time.sleep(0.05)
        assert lock.exists()
        second = subprocess.run(args + ["--force"], capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert "is in use by another training run" in second.stderr and f"pid {first.pid}" in second.stderr
    finally:
        first.terminate()
        first.communicate(timeout=60)
    assert first.returncode == 75                     # SIGTERM: checkpoint and requeue exit
    assert not (out / ".mpidwe.lock").exists()        # released on the way out


def test_a_stale_lock_is_taken_over_and_leftovers_are_removed(demo, tmp_path):
    import subprocess
    import sys

    from mpidwe.io.fsutil import DirLock

    out = tmp_path / "stale"
    (out / "checkpoints").mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    me = DirLock(str(out), "x").me
    (out / ".mpidwe.lock").write_text(json.dumps(dict(me, pid=dead.pid)))
    (out / "checkpoints" / ".ckpt-000000003.h5.tmp-4242").write_bytes(b"half a checkpoint")
    (out / ".config.json.tmp-4242").write_text("{")
    logs = []
    train(cfg(demo, out, epochs=1), Comm.serial(), log=logs.append)
    assert any("taking over the lock" in x and "is gone" in x for x in logs)
    assert any("removed 1 temporary file(s)" in x for x in logs)
    assert not list(out.glob(".*.tmp-*")) and not list((out / "checkpoints").glob(".*.tmp-*"))
    assert not (out / ".mpidwe.lock").exists()


def test_lock_of_another_host_is_respected_until_it_goes_silent(tmp_path):
    from mpidwe.io.fsutil import DirLock

    other = {"host": "node-17", "pid": 1, "slurm_job": "", "since": "then"}
    (tmp_path / ".mpidwe.lock").write_text(json.dumps(other))
    with pytest.raises(InputError, match="in use by another run .*host node-17"):
        DirLock(str(tmp_path), "run").acquire()
    old = time.time() - 3600
    os.utime(tmp_path / ".mpidwe.lock", (old, old))
    warned = []
    lock = DirLock(str(tmp_path), "run").acquire(warn=warned.append)
    assert "has not touched it" in warned[0]
    lock.release()
    assert not (tmp_path / ".mpidwe.lock").exists()


@pytest.fixture
def tiny_disk(tmp_path):
    """A 256 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    import subprocess

    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_gives_one_line_and_leaves_no_partial_file(demo, tmp_path, tiny_disk):
    out = tiny_disk / "run"
    with pytest.raises(InputError, match=r"cannot write checkpoint .*: No space left on device; the earlier") as e:
        train(cfg(demo, out, dim=64), Comm.serial(), log=None)
    assert "\n" not in str(e.value)
    assert not list((out / "checkpoints").glob(".*")) and not list(out.glob(".*.tmp-*"))   # no partial file
    for p in checkpoint.list_checkpoints(str(out / "checkpoints")):
        checkpoint.load(p)                                      # what was written is whole
    assert not (out / ".mpidwe.lock").exists()


def test_a_changed_corpus_is_refused_before_training(demo, tmp_path):
    """A flipped token or sentence start used to train silently: the stored corpus id was
    never checked against the content."""
    import h5py

    from mpidwe.io.corpus import D_SENTENCES, D_TOKENS, Corpus

    for dataset in (D_TOKENS, D_SENTENCES):
        bad = tmp_path / f"bad-{dataset.replace('/', '_')}.h5"
        shutil.copy(demo / "corpus.h5", bad)
        with h5py.File(bad, "r+") as f:
            f[dataset][5] = f[dataset][5] + 1
        what = "token ids" if dataset == D_TOKENS else "sentence starts"
        with pytest.raises(InputError, match=f"damaged: chunk 0 of its {what} .* does not match its digest"):
            train(cfg(demo, tmp_path / "t", corpus=str(bad)), Comm.serial(), log=None)
        assert not (tmp_path / "t" / "metrics.jsonl").exists()
    Corpus(str(demo / "corpus.h5")).verify()                   # the real one passes
    train(cfg(demo, tmp_path / "u", corpus=str(bad), verify_corpus=False, epochs=1), Comm.serial(), log=None)


def test_the_first_log_line_is_a_short_summary_and_config_json_keeps_everything(demo, tmp_path):
    """It was the whole configuration as one 1,400-character JSON line."""
    lines = []
    train(TrainConfig(corpus=str(demo / "corpus.h5"), out=str(tmp_path / "run"), dim=24, epochs=1, threads=1,
                      window=3, progress=False), Comm.serial(), log=lines.append)
    first = next(ln for ln in lines if ln.startswith("python -m mpidwe.train "))
    assert len(first) < 400 and "{" not in first, first
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    for part in ("skipgram, dim 24, window 3, negative 5, 1 epoch(s) of ", f"(vocabulary {config['vocab_size']:,})",
                 "1 rank(s) x 1 thread(s), numba on cpu (auto: no NVIDIA GPU found), sync auto every ",
                 f"every setting: {tmp_path / 'run' / 'config.json'}"):
        assert part in first, first
    assert config["dim"] == 24 and config["window"] == 3 and len(json.dumps(config)) > 1000
    assert not [ln for ln in lines if ln.startswith("evaluation")]     # nothing to evaluate: no line
