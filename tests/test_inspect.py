"""python -m mpidwe.inspect on a real (small) run, and evaluate on checkpoints."""

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mpidwe.io import checkpoint
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import TrainConfig
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
    assert proc.returncode == 2 and "not found" in proc.stderr and "word2vec file" in proc.stderr
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


def test_export_and_plot_never_write_over_a_source_or_a_checkpoint(run_dir, tmp_path):
    """Even with --force: the checkpoint read (named or found in the run), any file of the
    run's checkpoints folder, the word2vec file read, and any HDF5 file elsewhere."""
    run = run_dir / "run"
    ckpts = checkpoint.list_checkpoints(str(run / "checkpoints"))
    other = tmp_path / "copy.h5"
    other.write_bytes(open(ckpts[0], "rb").read())
    w2v = tmp_path / "v.txt"
    w2v.write_text("2 2\na 1 0\nb 0 1\n")
    before = {p: open(p, "rb").read() for p in ckpts + [str(other), str(w2v)]}
    cases = [(run, ckpts[-1], "checkpoints folder"), (ckpts[-1], ckpts[-1], "reads"),
             (run, run / "checkpoints" / "new.txt", "checkpoints folder"), (run, other, "HDF5"),
             (w2v, w2v, "reads"), (run / "checkpoints", ckpts[0], "checkpoints folder")]
    for source, out, reason in cases:
        for args in (["export", "--force", "-o", out], ["plot", "-o", out]):
            proc = inspect(source, *args)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and reason in lines[0], (source, args, proc.stderr)
    assert {p: open(p, "rb").read() for p in before} == before
    assert not (run / "checkpoints" / "new.txt").exists()


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


# --- issue 14: word2vec files, one load per call, summary subcommand, batch modes, help ----------
@pytest.fixture(scope="module")
def w2v(run_dir):
    """The run's input vectors as a word2vec binary file (the format told by content)."""
    path = run_dir / "vectors.bin"
    assert inspect(run_dir / "run", "export", "--format", "word2vec-binary", "-o", path).returncode == 0
    return path


def test_summary_is_also_a_subcommand(run_dir):
    assert inspect(run_dir / "run", "summary").stdout == inspect(run_dir / "run").stdout
    assert (json.loads(inspect(run_dir / "run", "summary", "--json").stdout)
            == json.loads(inspect(run_dir / "run", "--json").stdout))


def test_word2vec_files(run_dir, w2v):
    word = checkpoint.latest_valid(str(run_dir / "run" / "checkpoints")).words[60]
    for path in (w2v, run_dir / "run" / "vectors.txt"):  # binary, and text as training writes it
        from_ck = json.loads(inspect(run_dir / "run", "--json", "neighbors", word, "-k", "4").stdout)
        from_file = json.loads(inspect(path, "neighbors", word, "-k", "4", "--json").stdout)
        assert [r["word"] for r in from_file] == [r["word"] for r in from_ck]
        np.testing.assert_allclose([r["cosine"] for r in from_file], [r["cosine"] for r in from_ck], rtol=1e-6)
    proc = inspect(w2v)
    assert proc.returncode == 0 and "(word2vec)" in proc.stdout and "dim 16" in proc.stdout
    assert "only words and vectors" in proc.stdout
    s = json.loads(inspect(w2v, "summary", "--json").stdout)
    assert s["format"] == "word2vec" and s["dim"] == 16 and s["vocab_size"] > 100
    for args, reason in ((["neighbors", "x", "--matrix", "sum"], "holds only the input vectors"),
                         (["plot", "-o", str(run_dir / "p.png")], "plot takes a run directory")):
        proc = inspect(w2v, *args)
        assert proc.returncode == 2 and reason in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_the_checkpoint_is_loaded_once(run_dir, monkeypatch, capsys):
    from mpidwe import inspect as inspect_module

    calls = []
    real = checkpoint.load
    monkeypatch.setattr(checkpoint, "load", lambda *a, **k: calls.append(a) or real(*a, **k))
    word = real(checkpoint.list_checkpoints(str(run_dir / "run" / "checkpoints"))[-1]).words[5]
    calls.clear()
    for args in ([], ["neighbors", word], ["analogy", word, word, word], ["vectors", word]):
        assert inspect_module.main([str(run_dir / "run"), *args]) == 0
        assert len(calls) == 1, (args, calls)
        calls.clear()
    capsys.readouterr()


def test_batch_neighbors_from_stdin(run_dir, w2v):
    vecs = checkpoint.latest_valid(str(run_dir / "run" / "checkpoints"))
    a, b = vecs.words[10], vecs.words[70]
    proc = run_py(["-m", "mpidwe.inspect", str(w2v), "neighbors", "-", "-k", "3"],
                  input=f"{a}\nno-such-word {b}\n\n")
    assert proc.returncode == 2, proc.stderr      # one query failed: batch callers must know
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert [r[0] for r in rows] == [a] * 3 + [b] * 3
    single = json.loads(inspect(w2v, "--json", "neighbors", b, "-k", "3").stdout)
    assert [r[1] for r in rows[3:]] == [r["word"] for r in single]
    err = proc.stderr.splitlines()
    assert len(err) == 2 and err[0].startswith("python -m mpidwe.inspect: standard input line 2: word not in "
                                               "vocabulary: 'no-such-word'; these vectors have no model for words")
    assert err[1] == "python -m mpidwe.inspect: error: 1 of 3 queries could not be answered"
    # a capitalised word the vocabulary has in lowercase gets a hint
    proc = inspect(w2v, "neighbors", a.capitalize())
    assert proc.returncode == 2 and f"did you mean {a!r}? (the vocabulary is lowercase)" in proc.stderr
    proc = run_py(["-m", "mpidwe.inspect", str(run_dir / "run"), "neighbors", "-", "--json", "-k", "2"],
                  input=f"{a}\n")
    assert [json.loads(line) for line in proc.stdout.splitlines()][0]["word"] == a
    # nothing answered: every query on stderr, then one error line, exit 2
    proc = run_py(["-m", "mpidwe.inspect", str(w2v), "neighbors", "-"], input="NOPE nope\n")
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 3 and "no query could be answered (2 asked)" in proc.stderr
    proc = run_py(["-m", "mpidwe.inspect", str(w2v), "neighbors", "-"], input="")
    assert proc.returncode == 0 and proc.stdout == proc.stderr == ""


def test_batch_analogies_from_stdin(run_dir):
    words = checkpoint.latest_valid(str(run_dir / "run" / "checkpoints")).words
    q = " ".join(words[40:43])
    proc = run_py(["-m", "mpidwe.inspect", str(run_dir / "run"), "analogy", "-", "-k", "2"],
                  input=f"{q}\n{words[1]} {words[2]}\n{words[1]} {words[2]} zzz-none\n")
    assert proc.returncode == 2, proc.stderr
    single = json.loads(inspect(run_dir / "run", "--json", "analogy", *words[40:43], "-k", "2").stdout)
    assert proc.stdout.splitlines() == [f"{q}\t{r['word']}\t{r['cosine']:.4f}" for r in single]
    err = proc.stderr.splitlines()
    assert len(err) == 3 and "line 2: expected three words" in err[0] and "line 3: not in vocabulary: zzz-none" in err[1]
    proc = inspect(run_dir / "run", "analogy", words[1], words[2])
    assert proc.returncode == 2 and "three words A B C or -" in proc.stderr


def test_vectors_command(run_dir, w2v):
    ck = checkpoint.latest_valid(str(run_dir / "run" / "checkpoints"))
    a, b = ck.words[3], ck.words[99]
    for stdin, args in ((f"{a} no-such\n{b}\n", []), (f"{a} no-such\n{b}\n", ["-"])):
        proc = run_py(["-m", "mpidwe.inspect", str(w2v), "vectors", *args], input=stdin)
        # one word failed: exit 2, the others answered all the same
        assert proc.returncode == 2 and proc.stderr.count("not in vocabulary: 'no-such'") == 1, proc.stderr
        lines = proc.stdout.splitlines()
        assert [line.split()[0] for line in lines] == [a, b]
        np.testing.assert_array_equal(np.array(lines[1].split()[1:], dtype=np.float32), ck.w_in[99])
    proc = inspect(run_dir / "run", "vectors", b, a, "--matrix", "output", "--json")
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [g["word"] for g in got] == [b, a]
    np.testing.assert_array_equal(np.array(got[0]["vector"], dtype=np.float32), ck.w_out[99])
    proc = inspect(run_dir / "run", "vectors", a, "no-such", "nope")
    assert proc.returncode == 2 and proc.stdout == "" and "not in vocabulary: no-such, nope" in proc.stderr


def test_every_argument_has_help():
    import argparse

    from mpidwe.inspect import build_parser

    def check(parser, where):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    check(sub, f"{where} {name}")
            assert action.help, f"{where}: {action.option_strings or action.dest} has no help"

    check(build_parser(), "inspect")
    assert inspect("--help").returncode == 0 and "summary" in inspect("x", "summary", "--help").stdout


def test_nan_vectors_are_neither_queries_nor_neighbours(tmp_path):
    """A vectors file with a nan row (evaluate warns and skips it): inspect warns once, a
    query of that word is refused in one line, and it is never a neighbour (scored -inf)."""
    path = tmp_path / "v.txt"
    path.write_text("5 3\na 1 0 0\nb nan 0 0\nc 0.9 0.1 0\nd 0 1 0\ne 0 0 1\n")
    proc = inspect(path, "neighbors", "a")
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[1] for line in proc.stdout.splitlines()] == ["c", "d", "e"]
    err = proc.stderr.splitlines()
    assert len(err) == 1 and "warning:" in err[0] and "1 of 5 vectors contain nan or inf" in err[0]
    proc = inspect(path, "neighbors", "b")
    err = proc.stderr.splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(err) == 2 and "error: the vector of 'b' holds nan" \
        in err[1]
    proc = inspect(path, "analogy", "a", "b", "c")
    assert proc.returncode == 2 and "the vector of 'b' holds nan" in proc.stderr
    proc = run_py(["-m", "mpidwe.inspect", str(path), "neighbors", "-", "-k", "2"], input="b a\n")
    # a batch answers what it can and exits 2 when any query failed (issue 24)
    assert proc.returncode == 2 and [r.split("\t")[:2] for r in proc.stdout.splitlines()] == [["a", "c"], ["a", "d"]]
    assert "standard input line 1: the vector of 'b' holds nan" in proc.stderr
    assert "1 of 2 queries could not be answered" in proc.stderr


def test_a_zero_vector_query_warns_that_its_neighbours_mean_nothing(tmp_path):
    """A word whose vector is all zeros has cosine 0 with every word: its neighbours printed
    0.0000 in an arbitrary order with no warning; now one warning line says so."""
    path = tmp_path / "v.txt"
    path.write_text("4 3\na 1 0 0\nz 0 0 0\nc 0.9 0.1 0\nd 0 1 0\n")
    proc = inspect(path, "neighbors", "z")
    assert proc.returncode == 0, proc.stderr
    err = proc.stderr.splitlines()
    assert len(err) == 1 and "warning: the vector of 'z' is all zeros" in err[0], err
    proc = inspect(path, "neighbors", "a")
    assert proc.returncode == 0 and proc.stderr == ""


def test_export_over_a_symlink_writes_through_to_its_target(tmp_path):
    """export -o LINK --force replaced the link by a file and left its target as it was: the
    write now goes to the link's target, and the link stays."""
    src = tmp_path / "v.txt"
    src.write_text("3 2\na 1 0\nb 0 1\nc 1 1\n")
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "old.txt"
    target.write_text("old")
    link = tmp_path / "latest.txt"
    link.symlink_to(target)
    proc = inspect(src, "export", "-o", link, "--force")
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("3 2\n")
    assert sorted(os.listdir(tmp_path / "store")) == ["old.txt"]
