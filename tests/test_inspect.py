"""python -m mpidwe.inspect on a real (small) run, and evaluate on checkpoints."""

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mpidwe import checkpoint
from mpidwe.comm import Comm
from mpidwe.config import TrainConfig
from mpidwe.train import run as train

from conftest import make_demo_corpus, mpi_env, run_py


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = make_demo_corpus(tmp_path_factory.mktemp("inspect"), tokens=200_000, seed=3)
    train(TrainConfig(corpus=str(d / "corpus.h5"), out=str(d / "run"), dim=16, threads=1, progress=False,
                      sync_every=50_000, checkpoint_every=100_000, eval_sim=(str(d / "demo-similarity.tsv"),)),
          Comm.serial(), log=None)
    return d


def inspect(*args):
    return run_py(["-m", "mpidwe.inspect", *map(str, args)])


def test_summary_text_and_json(run_dir):
    proc = inspect(run_dir / "run")
    assert proc.returncode == 0, proc.stderr
    assert "checksum ok" in proc.stdout and "complete" in proc.stdout and "dim 16" in proc.stdout
    s = json.loads(inspect(run_dir / "run", "--json").stdout)
    assert s["progress"]["words_done"] == s["progress"]["words_total"] > 190_000
    assert s["config"]["dim"] == 16 and s["complete"] and s["metrics_records"] >= 4
    assert "sim:demo-similarity.tsv" in s["last_metrics"]["eval"]
    # an older checkpoint of the same run
    older = checkpoint.list_checkpoints(str(run_dir / "run" / "checkpoints"))[0]
    s = json.loads(inspect(older, "--json").stdout)
    assert not s["complete"] and s["progress"]["words_done"] < s["progress"]["words_total"]


def test_neighbors_and_analogy(run_dir):
    ck = checkpoint.load(checkpoint.list_checkpoints(str(run_dir / "run" / "checkpoints"))[-1])
    word = ck.words[50]
    res = json.loads(inspect(run_dir / "run", "--json", "neighbors", word, "-k", "3").stdout)
    assert len(res) == 3 and word not in [r["word"] for r in res]
    unit = ck.w_in / np.linalg.norm(ck.w_in, axis=1, keepdims=True)
    sims = unit @ unit[ck.words.index(word)]
    sims[ck.words.index(word)] = -2
    assert res[0]["word"] == ck.words[int(np.argmax(sims))]
    a, b, c = ck.words[40:43]
    res = json.loads(inspect(run_dir / "run", "--json", "analogy", a, b, c).stdout)
    assert len(res) == 5 and not {a, b, c} & {r["word"] for r in res}
    proc = inspect(run_dir / "run", "neighbors", "no-such-word")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "not in vocabulary" in proc.stderr


@pytest.mark.parametrize("fmt,matrix", [("word2vec-text", "input"), ("word2vec-binary", "sum")])
def test_export_loads_in_gensim_and_evaluate(run_dir, tmp_path, fmt, matrix):
    gensim = pytest.importorskip("gensim")
    out = tmp_path / "v.out"
    proc = inspect(run_dir / "run", "export", "--format", fmt, "--matrix", matrix, "-o", out)
    assert proc.returncode == 0, proc.stderr
    ck = checkpoint.load(checkpoint.list_checkpoints(str(run_dir / "run" / "checkpoints"))[-1])
    kv = gensim.models.KeyedVectors.load_word2vec_format(str(out), binary=fmt.endswith("binary"))
    expected = ck.w_in if matrix == "input" else ck.w_in + ck.w_out
    assert kv.index_to_key == ck.words
    np.testing.assert_allclose(kv.vectors, expected, rtol=1e-6, atol=1e-7)
    proc = inspect(run_dir / "run", "export", "--format", fmt, "-o", out)
    assert proc.returncode == 2 and "--force" in proc.stderr
    ev = run_py(["-m", "mpidwe.evaluate", str(out), "--similarity", str(run_dir / "demo-similarity.tsv"), "--json"])
    assert ev.returncode == 0, ev.stderr
    ev_ck = run_py(["-m", "mpidwe.evaluate", str(run_dir / "run"), "--similarity",
                    str(run_dir / "demo-similarity.tsv"), "--json"])
    assert ev_ck.returncode == 0, ev_ck.stderr
    if matrix == "input":  # the run directory stands for its newest checkpoint's input vectors
        assert (json.loads(ev.stdout)["similarity"][0]["spearman"]
                == pytest.approx(json.loads(ev_ck.stdout)["similarity"][0]["spearman"]))


def test_plot(run_dir, tmp_path):
    out = tmp_path / "curves.png"
    proc = inspect(run_dir / "run", "plot", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_bad_paths(tmp_path):
    proc = inspect(tmp_path / "missing.h5")
    assert proc.returncode == 2 and "checkpoint not found" in proc.stderr
    proc = inspect(tmp_path)
    assert proc.returncode == 2 and "no checkpoint" in proc.stderr
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    proc = inspect(bad)
    assert proc.returncode == 2 and "not a readable HDF5" in proc.stderr


# --- issue 15, items 2 and 10: export of any vocabulary; unusable output paths -------------
def _leftovers(folder):
    return [os.path.join(d, f) for d, _, files in os.walk(folder) for f in files if ".tmp-" in f]


def _checkpoint_with_words(directory, words, dim=4):
    rng = np.random.default_rng(0)
    state = checkpoint.TrainingState(
        w_in=rng.standard_normal((len(words), dim)).astype(np.float32),
        w_out=rng.standard_normal((len(words), dim)).astype(np.float32),
        progress=checkpoint.Progress(round=1, rounds=1, words_done=10, words_total=10, world_size=1,
                                     positions=[10], lr=0.0),
        rng_state=np.zeros((1, 1), dtype=np.uint64))
    ck = checkpoint.Checkpoint(state=state, words=words, counts=np.ones(len(words), dtype=np.int64),
                               config={}, corpus_id="0" * 64, corpus_path="corpus.h5", complete=True)
    return checkpoint.save(str(directory), ck)


@pytest.mark.parametrize("fmt", ["word2vec-text", "word2vec-binary"])
def test_export_of_words_with_unicode_whitespace(tmp_path, fmt):
    """A vocabulary word holding U+3000, U+00A0 or U+0085 (a corpus from before the tokenizer
    split there) is exported with the character escaped, and gensim reads the file."""
    gensim = pytest.importorskip("gensim")
    words = ["a\u3000b", "nbsp\xa0", "\x85", "two words", "ok"]
    ck = _checkpoint_with_words(tmp_path / "ck", words)
    out = tmp_path / "v.out"
    proc = inspect(ck, "export", "--format", fmt, "-o", out)
    assert proc.returncode == 0, proc.stderr
    kv = gensim.models.KeyedVectors.load_word2vec_format(str(out), binary=fmt.endswith("binary"))
    assert kv.index_to_key == ["a\\u3000b", "nbsp\\u00a0", "\\u0085", "two\\u0020words", "ok"]
    np.testing.assert_allclose(kv.vectors, checkpoint.load(ck).w_in, rtol=1e-6)


@pytest.mark.parametrize("command", ["export", "plot"])
@pytest.mark.parametrize("case", ["missing", "parent-is-file", "output-is-folder", "read-only"])
def test_export_and_plot_to_unusable_path(run_dir, tmp_path, command, case):
    """One line, exit 2, naming the path and the reason; nothing written, nothing left."""
    if case == "missing":
        out, reason = tmp_path / "no" / "such" / "x.out", "does not exist"
    elif case == "parent-is-file":
        (tmp_path / "afile").write_text("x")
        out, reason = tmp_path / "afile" / "x.out", "is not a folder"
    elif case == "output-is-folder":
        out, reason = tmp_path / "adir", "is a folder"
        out.mkdir()
    else:
        if os.geteuid() == 0:
            pytest.skip("root can write into a read-only folder")
        (tmp_path / "ro").mkdir()
        os.chmod(tmp_path / "ro", 0o500)
        out, reason = tmp_path / "ro" / "x.out", "not writable"
    before = sorted(os.walk(tmp_path))
    args = ["export", "--force", "-o", out] if command == "export" else ["plot", "-o", out]
    proc = inspect(run_dir / "run", *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m mpidwe.inspect: error:"), proc.stderr
    assert str(out) in lines[0] and reason in lines[0], lines[0]
    assert sorted(os.walk(tmp_path)) == before


def _file_size_limit(limit):
    def pre():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


@pytest.mark.parametrize("command", ["export", "plot"])
def test_export_and_plot_when_writes_fail(run_dir, tmp_path, command):
    """A write that the system refuses part way (here: a file size limit, so the kernel
    fails the write with EFBIG as it fails one with ENOSPC on a full disk) is one line, exit
    2, and leaves neither the output nor a temporary file."""
    out = tmp_path / "x.out"
    args = ["export", "-o", out] if command == "export" else ["plot", "-o", out]
    proc = subprocess.run([sys.executable, "-m", "mpidwe.inspect", str(run_dir / "run"), *map(str, args)],
                          capture_output=True, text=True, timeout=180, env=mpi_env(),
                          preexec_fn=_file_size_limit(4096), restore_signals=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "File too large" in lines[0], proc.stderr
    assert os.listdir(tmp_path) == []


def test_export_and_plot_on_a_full_disk(run_dir, tmp_path, monkeypatch, capsys):
    """ENOSPC (as a full disk, or a full NFS server at fsync, reports it): one line, exit 2."""
    from mpidwe import inspect as inspect_module

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "x.out"
    for args in (["export", "-o", str(out)], ["plot", "-o", str(out)]):
        assert inspect_module.main([str(run_dir / "run"), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(out) in err[0] and "No space left on device" in err[0], err
        assert os.listdir(tmp_path) == []
