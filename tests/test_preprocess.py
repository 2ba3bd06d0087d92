import bz2
import gzip
import os
import re

import h5py
import numpy as np
import pytest

from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig
from mpidwe.io.corpus import Corpus
from mpidwe.core.errors import InputError
from mpidwe.io.formats import reseal
from mpidwe.preprocess import run

from conftest import error_lines, mpi_flavor, run_mpi, run_py

DATASETS = ("vocab/words", "vocab/counts", "tokens", "sentences")


def reference(texts: list[bytes], *, min_count=1, sentence_length=1000, text8=False, strip_doc=False):
    """Straightforward whole-file preprocessing to compare against."""
    lines = []
    for t in texts:
        lines.extend(t.split(b"\n"))
    toks_per_line = []
    for ln in lines:
        s = ln.strip()
        if strip_doc and ((s.startswith(b"<doc") and s.endswith(b">")) or s == b"</doc>"):
            continue
        if text8:
            ln = bytes(c if 97 <= c <= 122 else (c + 32 if 65 <= c <= 90 else 32) for c in ln)
            toks = ln.split()
        else:
            toks = ln.decode("utf-8", "replace").encode().split()
        toks_per_line.append(toks)
    counts = {}
    for toks in toks_per_line:
        for t in toks:
            counts[t] = counts.get(t, 0) + 1
    vocab = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    idx = {w: i for i, w in enumerate(vocab)}
    ids, sents = [], []
    for toks in toks_per_line:
        kept = [idx[t] for t in toks if t in idx]
        for a in range(0, len(kept), sentence_length):
            sents.append(len(ids) + a)
        ids.extend(kept)
    return [w.decode() for w in vocab], [counts[w] for w in vocab], ids, sents


def read(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][:] for k in DATASETS}, dict(f.attrs)


def make_text(tmp_path, *, lines=300, long_line=False, doc_tags=False, seed=3):
    rng = np.random.default_rng(seed)
    words = [f"Word{i}" if i % 7 == 0 else f"w{i}" for i in range(80)]
    out = []
    for k in range(lines):
        if doc_tags and k % 40 == 0:
            out.append(f'<doc id="{k}" url="x?curid={k}" title="T{k}">')
        n = int(rng.integers(0, 25))
        out.append(" ".join(words[int(i)] for i in rng.zipf(1.3, size=n) % 80) + ("  " if k % 5 == 0 else ""))
        if doc_tags and k % 40 == 39:
            out.append("</doc>")
    text = "\n".join(out).encode()
    if long_line:  # text8-like: one very long line
        text = b" " + b" ".join(words[int(i)].encode() for i in rng.zipf(1.2, size=20000) % 80)
    return text


@pytest.mark.parametrize("kind", ["lines", "long_line", "doc_tags"])
def test_serial_matches_reference(tmp_path, kind):
    text = make_text(tmp_path, long_line=kind == "long_line", doc_tags=kind == "doc_tags")
    src = tmp_path / "in.txt"
    src.write_bytes(text)
    out = tmp_path / "c.h5"
    cfg = PreprocessConfig(inputs=(str(src),), output=str(out), min_count=2, sentence_length=7,
                           block_bytes=4096, strip_doc_tags=kind == "doc_tags")
    summary = run(cfg, Comm.serial(), log=None)
    words, counts, ids, sents = reference([text], min_count=2, sentence_length=7,
                                          strip_doc=kind == "doc_tags")
    data, attrs = read(out)
    assert [w.decode() for w in data["vocab/words"]] == words
    assert data["vocab/counts"].tolist() == counts
    assert data["tokens"].tolist() == ids
    assert data["sentences"].tolist() == sents
    assert attrs["format"] == "mpidwe-corpus" and attrs["format_version"] == 3
    assert summary["kept_tokens"] == len(ids)
    if kind == "doc_tags":
        assert attrs["doc_tag_lines_dropped"] > 10


def test_text8_normalisation_and_compressed_inputs(tmp_path):
    text = "The Cat's 3 hats, café!\nDOG dog\n".encode() * 50
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text))
    (tmp_path / "b.bz2").write_bytes(bz2.compress(text))
    out = tmp_path / "c.h5"
    cfg = PreprocessConfig(inputs=(str(tmp_path / "a.txt.gz"), str(tmp_path / "b.bz2")), output=str(out),
                           min_count=1, normalize="text8")
    run(cfg, Comm.serial(), log=None)
    words, counts, ids, sents = reference([text, text], text8=True)
    data, attrs = read(out)
    assert [w.decode() for w in data["vocab/words"]] == words
    assert set(words) == {"the", "cat", "s", "hats", "caf", "dog"}
    assert data["tokens"].tolist() == ids and data["sentences"].tolist() == sents
    assert '"compression": "gzip"' in attrs["inputs"] and '"compression": "bz2"' in attrs["inputs"]


@pytest.mark.mpi
def test_p_ranks_identical_to_one_rank(tmp_path):
    """The corpus written by P = 1, 2, 3 ranks is identical, for line-structured text with doc
    tags (two inputs, one gzipped) and for one text8-like long line."""
    (tmp_path / "a.txt").write_bytes(make_text(tmp_path, lines=500, doc_tags=True))
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(make_text(tmp_path, long_line=True, seed=5)))
    (tmp_path / "c.txt").write_bytes(make_text(tmp_path, long_line=True, seed=9))
    cases = {
        "docs": ["a.txt", "b.txt.gz", "--strip-doc-tags", "--min-count", "2", "--sentence-length", "9"],
        "long": ["c.txt", "--normalize", "text8", "--sentence-length", "100"],
    }
    for name, args in cases.items():
        results = []
        for p in (1, 2, 3):
            out = tmp_path / f"{name}-{p}.h5"
            run_mpi(p, ["-m", "mpidwe.preprocess", *args, "--output", str(out), "--block-bytes", "4096"],
                    cwd=tmp_path)
            results.append(read(out))
        for data, attrs in results[1:]:
            for k in DATASETS:
                assert np.array_equal(results[0][0][k], data[k]), (name, k)
            assert attrs["corpus_id"] == results[0][1]["corpus_id"]
        assert [a["preprocess_ranks"] for _, a in results] == [1, 2, 3]
        assert not [f for f in os.listdir(tmp_path) if ".ids" in f or ".tmp-" in f]


def test_block_iterator_covers_shards_sentence_aligned(tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(make_text(tmp_path, lines=600))
    out = tmp_path / "c.h5"
    run(PreprocessConfig(inputs=(str(src),), output=str(out), min_count=1, sentence_length=5),
        Comm.serial(), log=None)
    with Corpus(str(out)) as c:
        all_tokens = c.read_tokens(0, c.n_tokens)
        sents = set(c._f["sentences"][:].tolist())
        for world in (1, 2, 3, 7):
            seen = []
            for r in range(world):
                shard = c.shard(r, world)
                for block, local, offset in c.iter_blocks(shard, block_tokens=23):
                    assert len(block) <= 23 or len(local) == 1
                    assert local[0] == 0 and offset in sents
                    assert all(int(x) + offset in sents for x in local)
                    seen.append(block)
            assert np.array_equal(np.concatenate(seen), all_tokens)


def test_stdin_input(tmp_path):
    out = tmp_path / "c.h5"
    proc = run_py(["-m", "mpidwe.preprocess", "-", "--output", str(out), "--min-count", "1"],
                  input="a b c a\nb a\n")
    assert proc.returncode == 0, proc.stderr
    data, _ = read(out)
    assert [w.decode() for w in data["vocab/words"]] == ["a", "b", "c"]
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # the copy of stdin is gone


def test_invalid_utf8_and_binary_bytes_are_replaced_and_counted(tmp_path):
    src = tmp_path / "bad.txt"
    # text with some invalid UTF-8 and control bytes (a NUL, or a fifth of it invalid, is no text: see
    # test_a_binary_input_is_refused)
    src.write_bytes(b"good \xff\xfe word\x01nul good\n" * 60 + bytes(range(1, 256)))
    out = tmp_path / "c.h5"
    proc = run_py(["-m", "mpidwe.preprocess", str(src), "--output", str(out), "--min-count", "1"])
    assert proc.returncode == 0, proc.stderr
    _, attrs = read(out)
    assert attrs["invalid_utf8_sequences"] >= 6
    with Corpus(str(out)) as c:
        assert "good" in c.words and "nul" in c.words and "\ufffd\ufffd" in c.words


def test_a_binary_input_is_refused(tmp_path):
    """A file that is not text among text inputs (NUL bytes, or mostly invalid UTF-8), named,
    in a folder or on standard input, is refused in one line, by the rule (io.text.binary_reason)
    with which train --follow rejects it; nothing is written, no temporary file is left."""
    from mpidwe.io.text import binary_reason

    (tmp_path / "in").mkdir()
    text = tmp_path / "in" / "a.txt"
    text.write_bytes(b"a b c a b a\n" * 50)
    binary = tmp_path / "in" / "b.bin"
    binary.write_bytes(bytes(range(256)) * 12)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9 \xe0 l\xe0 \xe9t\xe9 \xfc\xdf\n".encode("latin-1") * 40)
    out = tmp_path / "c.h5"
    for inputs, why in [((str(text), str(binary)), binary_reason(str(binary))),
                        ((str(tmp_path / "in"),), "NUL bytes"), ((str(latin1), str(text)), "invalid UTF-8")]:
        with pytest.raises(InputError, match="is not text: ") as e:
            run(PreprocessConfig(inputs=inputs, output=str(out), min_count=1), Comm.serial(), log=None)
        assert why in str(e.value)
    proc = run_py(["-m", "mpidwe.preprocess", "-", "--output", str(out), "--min-count", "1"],
                  input=binary.read_bytes().decode("latin-1"))
    assert "input standard input is not text: it holds NUL bytes" in one_error(proc) and proc.returncode == 2
    assert not out.exists() and not [f for f in os.listdir(tmp_path) if f.startswith(".")]


def test_an_input_named_twice_is_refused(tmp_path):
    """The same file named twice (another spelling, a symlink) would count its text twice: it
    is refused in one line, before anything is written, with --append as without."""
    src = tmp_path / "a.txt"
    src.write_bytes(b"a b c a b a\n" * 50)
    (tmp_path / "x").mkdir()
    (tmp_path / "link.txt").symlink_to(src)
    out = tmp_path / "c.h5"
    for other in (str(src), str(tmp_path / "x" / ".." / "a.txt"), str(tmp_path / "link.txt")):
        with pytest.raises(InputError, match=r"input .* is named twice \(also as .*a\.txt\)"):
            run(PreprocessConfig(inputs=(str(src), other), output=str(out), min_count=1), Comm.serial(), log=None)
    assert not out.exists()
    other = tmp_path / "b.txt"
    other.write_bytes(b"d e f\n" * 50)
    run(PreprocessConfig(inputs=(str(other),), output=str(out), min_count=1), Comm.serial(), log=None)
    with pytest.raises(InputError, match="named twice"):
        run(PreprocessConfig(inputs=(str(src), str(tmp_path / "x" / ".." / "a.txt")), append=str(out),
                             output=str(out)), Comm.serial(), log=None)
    with Corpus(str(out)) as c:
        assert len(c.segments) == 1
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]


def test_a_symlinked_corpus_is_grown_and_replaced_through_its_link(tmp_path):
    """--append to a symlinked corpus (and --output LINK --force) replaced the link by a new
    file and left its target as it was: the target is now written, the link stays a link."""
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "corpus.h5"
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(b"a b c a b a\n" * 50)
    b.write_bytes(b"d e f d e d\n" * 50)
    run(PreprocessConfig(inputs=(str(a),), output=str(target), min_count=1), Comm.serial(), log=None)
    link = tmp_path / "corpus.h5"
    link.symlink_to(target)
    run(PreprocessConfig(inputs=(str(b),), append=str(link), output=str(link)), Comm.serial(), log=None)
    assert link.is_symlink() and os.readlink(link) == str(target)
    with Corpus(str(target)) as c:
        assert len(c.segments) == 2 and "d" in c.words
    run(PreprocessConfig(inputs=(str(b),), output=str(link), min_count=1, force=True), Comm.serial(), log=None)
    assert link.is_symlink()
    with Corpus(str(target)) as c:
        assert len(c.segments) == 1 and "a" not in c.words
    assert sorted(os.listdir(tmp_path / "store")) == ["corpus.h5"]


@pytest.mark.mpi
def test_standard_input_under_mpichs_mpiexec_is_refused_before_anything_is_written(tmp_path):
    """MPICH's mpiexec kills a job reading a large standard input ("process reading stdin too
    slowly", even at -n 1, even a rank that reads at once), which left the lock and the copy
    of the stream: standard input under it is refused in one line before anything is written
    (a large one may be killed by the launcher first: then too nothing is left); without
    mpiexec standard input works."""
    if mpi_flavor() != "mpich":
        pytest.skip("MPICH's launcher")
    small = "".join(f"w{i % 50} w{i % 7} w{i % 11}\n" for i in range(2_000))     # 25 KB: forwarded whole
    out = tmp_path / "c.h5"
    for text in (small, small * 100):
        proc = run_mpi(1, ["-m", "mpidwe.preprocess", "-", "--output", str(out), "--min-count", "1"],
                       cwd=tmp_path, input=text, check=False, timeout=120)
        assert proc.returncode != 0 and os.listdir(tmp_path) == [], proc.stderr
        if text is small:
            lines = error_lines(proc.stderr)
            assert proc.returncode == 2 and len(lines) == 1 and "standard input (-) under MPICH's mpiexec" in \
                lines[0], proc.stderr
    proc = run_py(["-m", "mpidwe.preprocess", "-", "--output", str(out), "--min-count", "1"], input=small * 100)
    assert proc.returncode == 0, proc.stderr


def _long_word_text():
    """Words of 100 and 101 bytes (ASCII and two-byte é), a 300 KB run with no space, text."""
    return (b"short a b c a b a\n" * 50 + b"x" * 100 + b" " + b"y" * 101 + b"\n" + "\u00e9".encode() * 50 + b" "
            + "\u00e9".encode() * 51 + b" a\n" + b"z" * 300_000 + b"\n" + b"a b c\n" * 20) * 2


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_words_longer_than_the_maximum_are_left_out_of_the_vocabulary(tmp_path, engine):
    """A 300 KB run without a space became one vocabulary word: words longer than
    --max-word-bytes (default 100, word2vec's limit; UTF-8 bytes as stored) are left out as
    rare words are, with either engine; 0 keeps them."""
    src = tmp_path / "in.txt"
    src.write_bytes(_long_word_text())
    out = tmp_path / "c.h5"
    summary = run(PreprocessConfig(inputs=(str(src),), output=str(out), min_count=1), Comm.serial(), log=None,
                  engine=engine)
    with Corpus(str(out)) as c:
        words = set(c.words)
    assert {"x" * 100, "\u00e9" * 50, "short", "a"} <= words
    assert not {"y" * 101, "\u00e9" * 51, "z" * 300_000} & words
    assert summary["raw_tokens"] - summary["kept_tokens"] == 6       # three long words, twice
    run(PreprocessConfig(inputs=(str(src),), output=str(out), min_count=1, force=True, max_word_bytes=0),
        Comm.serial(), log=None, engine=engine)
    with Corpus(str(out)) as c:
        assert {"y" * 101, "z" * 300_000} <= set(c.words)


@pytest.mark.mpi
def test_long_words_leave_the_corpus_identical_on_any_rank_count(tmp_path):
    (tmp_path / "in.txt").write_bytes(_long_word_text() * 3)
    got = []
    for p in (1, 2, 3):
        out = tmp_path / f"c{p}.h5"
        run_mpi(p, ["-m", "mpidwe.preprocess", "in.txt", "--output", str(out), "--min-count", "1",
                    "--block-bytes", "4096"], cwd=tmp_path)
        got.append(read(out))
    assert "z" * 300_000 not in [w.decode() for w in got[0][0]["vocab/words"]]
    for data, attrs in got[1:]:
        for k in DATASETS:
            assert np.array_equal(got[0][0][k], data[k]), k
        assert attrs["corpus_id"] == got[0][1]["corpus_id"]


def one_error(proc):
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_bad_inputs_give_one_line_and_no_output(tmp_path):
    out = tmp_path / "c.h5"
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"  \n\n \t\n")
    rare = tmp_path / "rare.txt"
    rare.write_bytes(b"a b c d\n")
    (tmp_path / "nofiles").mkdir()
    cases = [
        ([str(tmp_path / "missing.txt")], "input not found"),
        ([str(tmp_path / "nofiles")], "directory"),
        ([str(empty)], "empty"),
        ([str(blank)], "no tokens"),
        ([str(rare), "--min-count", "5"], "--min-count=5"),
        ([str(rare), "--min-count", "0"], "--min-count must be > 0"),
        ([str(rare), "--normalize", "bogus"], "invalid choice"),
        ([str(rare), "--output", str(tmp_path / "nodir" / "x.h5")], "does not exist"),
    ]
    for args, expected in cases:
        if "--output" not in args:
            args = args + ["--output", str(out)]
        proc = run_py(["-m", "mpidwe.preprocess", *args])
        line = one_error(proc)
        assert expected in line, (args, line)
        assert proc.returncode == 2
        assert not out.exists()
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".") or ".tmp" in f]


def test_existing_output_needs_force(tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"a b a\n")
    out = tmp_path / "c.h5"
    out.write_bytes(b"precious")
    line = one_error(run_py(["-m", "mpidwe.preprocess", str(src), "--output", str(out), "--min-count", "1"]))
    assert "--force" in line and out.read_bytes() == b"precious"
    proc = run_py(["-m", "mpidwe.preprocess", str(src), "--output", str(out), "--min-count", "1", "--force"])
    assert proc.returncode == 0 and Corpus(str(out)).n_tokens == 3


def test_reader_refuses_truncated_and_foreign_files(tmp_path):
    src = tmp_path / "in.txt"
    src.write_bytes(b"a b a c\n" * 1000)
    good = tmp_path / "good.h5"
    run(PreprocessConfig(inputs=(str(src),), output=str(good), min_count=1), Comm.serial(), log=None)
    trunc = tmp_path / "trunc.h5"
    trunc.write_bytes(good.read_bytes()[: os.path.getsize(good) // 2])
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    newer = tmp_path / "newer.h5"
    newer.write_bytes(good.read_bytes())
    with h5py.File(newer, "a") as f:
        f.attrs["format_version"] = 99
    reseal(str(newer))     # an intact file of a newer version, not a damaged one
    for path, msg in [(trunc, "not a readable HDF5"), (foreign, "not an mpidwe corpus"),
                      (newer, "format version 99"),
                      (src, r"not an mpidwe corpus \(not an HDF5 file\); make one from text with python -m mpidwe.preprocess")]:
        with pytest.raises(InputError, match=msg):
            Corpus(str(path))


@pytest.mark.mpi
def test_failure_on_one_rank_ends_all_ranks(tmp_path):
    """A corrupt gzip member is found while counting on one rank: every rank stops
    promptly with one error line and no output is left."""
    good = gzip.compress(make_text(tmp_path, lines=2000))
    bad = good[: len(good) // 2] + b"\x00" * 50 + good[len(good) // 2 + 50:]
    (tmp_path / "bad.gz").write_bytes(bad)
    out = tmp_path / "c.h5"
    proc = run_mpi(2, ["-m", "mpidwe.preprocess", "bad.gz", "--output", str(out)], cwd=tmp_path,
                   check=False, timeout=60)
    assert proc.returncode != 0
    assert any("cannot read" in ln for ln in error_lines(proc.stderr)), proc.stderr
    assert not out.exists()
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]


# ------------------------------------------------- output among the inputs (issue 15, item 5)
def test_output_that_is_one_of_the_inputs_is_refused(tmp_path):
    """``preprocess X --output X --force`` used to replace the text X by its own corpus. The
    output is compared with every input by real path, so another spelling of the same path,
    a symlink on either side and a hard link are refused too, before anything is written."""
    text = b"a b a c\n" * 50
    src = tmp_path / "in.txt"
    src.write_bytes(text)
    other = tmp_path / "other.txt"
    other.write_bytes(b"x y x\n")
    (tmp_path / "sub").mkdir()
    os.symlink("in.txt", tmp_path / "link.txt")
    os.link(src, tmp_path / "hard.txt")
    cases = [
        (["in.txt"], "in.txt"),
        (["in.txt"], "./sub/../in.txt"),
        ([str(src)], "in.txt"),
        (["other.txt", "link.txt"], "in.txt"),    # the input is a symlink to the output
        (["in.txt"], "link.txt"),                 # the output is a symlink to the input
        (["hard.txt"], "in.txt"),                 # a hard link: same file, other name
    ]
    before = sorted(os.listdir(tmp_path))
    for inputs, output in cases:
        proc = run_py(["-m", "mpidwe.preprocess", *inputs, "--output", output, "--min-count", "1", "--force"],
                      cwd=tmp_path)
        line = one_error(proc)
        assert proc.returncode == 2, (inputs, output, proc.stderr)
        assert "is also an input" in line, line
        assert src.read_bytes() == text and os.path.islink(tmp_path / "link.txt")
        assert sorted(os.listdir(tmp_path)) == before, (inputs, output)
    # a different output next to the inputs still works
    proc = run_py(["-m", "mpidwe.preprocess", "link.txt", "--output", "c.h5", "--min-count", "1"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert src.read_bytes() == text


# --------------------------------------- temporary files of killed runs (issue 15, item 16)
def _dead_pid() -> int:
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_leftovers_of_killed_runs_to_the_same_output_are_removed_at_start(tmp_path):
    """A run removes the temporary files that earlier runs to the same output left when they
    were killed (their writer is a dead process on this host, or a file of another host that
    nobody touched for a day), and keeps those of a run that may still be writing and those
    of other outputs."""
    import socket
    import time

    import subprocess
    import sys

    host = socket.gethostname()
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a live run
    dead, alive, now = _dead_pid(), writer.pid, int(time.time())
    src = tmp_path / "in.txt"
    src.write_bytes(b"a b a c\n" * 100)
    stale = [
        f".c.h5.part0-{dead}-{now - 60}.h5",              # names written before the host was recorded
        f".c.h5.part1-{dead}-{now - 60}.h5",
        f"c.h5.tmp-{dead}-{now - 60}",
        f".c.h5.part0-{host}-{dead}-{now}.h5",            # this host, dead writer
        f".c.h5.tmp-{host}-{dead}-{now}",
        f".c.h5.stdin-{host}-{dead}-{now}",
        f".c.h5.part3-node-17-{alive}-{now - 90000}.h5",  # another host, untouched for a day
    ]
    keep = [
        f".c.h5.part0-{host}-{alive}-{now}.h5",           # its writer is alive
        f".c.h5.part2-node-17-{dead}-{now}.h5",           # another host, recent: may be running
        f".other.h5.part0-{host}-{dead}-{now}.h5",        # another output
        f".c.h5.part0-{host}-{dead}-x.h5",                # not one of our names
    ]
    for name in stale + keep:
        (tmp_path / name).write_bytes(b"half a part")
    old = time.time() - 90000
    os.utime(tmp_path / stale[-1], (old, old))
    logs = []
    try:
        run(PreprocessConfig(inputs=(str(src),), output=str(tmp_path / "c.h5"), min_count=1), Comm.serial(),
            log=logs.append)
    finally:
        writer.kill()
        writer.wait()
    assert Corpus(str(tmp_path / "c.h5")).n_tokens == 400
    left = sorted(f for f in os.listdir(tmp_path) if f.startswith(".") or ".tmp-" in f)
    assert left == sorted(keep)
    assert any(f"removed {len(stale)} temporary file(s)" in x for x in logs), logs


def test_leftovers_of_a_killed_run_are_removed_by_the_next(tmp_path):
    """kill -9 leaves temporary files (here the spool of raw token ids); the next run to the
    same output removes them."""
    import signal
    import subprocess
    import sys

    from conftest import mpi_env

    src = tmp_path / "big.txt"
    _big_text(src, 24)
    out = tmp_path / "c.h5"
    proc = subprocess.Popen([sys.executable, "-m", "mpidwe.preprocess", str(src), "--output", str(out)],
                            env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    rc, _, _ = _interrupt_when(proc, lambda: any(".ids" in f for f in os.listdir(tmp_path)), signal.SIGKILL)
    assert rc == -9 and _ours(tmp_path)
    small = tmp_path / "small.txt"
    small.write_bytes(b"a b a c\n" * 10)
    proc = run_py(["-m", "mpidwe.preprocess", str(small), "--output", str(out), "--min-count", "1"])
    assert proc.returncode == 0, proc.stderr
    # the spool of raw token ids between the passes (and the corpus, if it got that far)
    assert re.search(r"removed [12] temporary file\(s\) left by killed runs", proc.stdout), proc.stdout
    assert not _ours(tmp_path), os.listdir(tmp_path)


def _big_text(path, mbytes: int) -> None:
    """MBYTES of random words (a 1 MB block, repeated), enough for preprocessing to take seconds."""
    rng = np.random.default_rng(11)
    words = np.array([f"w{i}" for i in range(20000)])
    ids = rng.zipf(1.2, size=250_000) % len(words)
    block = "\n".join(" ".join(words[ids[a:a + 25]]) for a in range(0, len(ids), 25)).encode() + b"\n"
    with open(path, "wb") as fh:
        for _ in range(max(1, (mbytes << 20) // len(block))):
            fh.write(block)


def _interrupt_when(proc, ready, sig, timeout=120, target=None, wait=10):
    """Send ``sig`` to ``proc`` once ``ready()`` holds (``target``: to the PID it returns
    then instead); its (returncode, stderr, seconds to end)."""
    import time

    t = time.time()
    while not ready():
        if proc.poll() is not None:
            raise AssertionError(f"preprocess ended before the signal: {proc.communicate()}")
        assert time.time() - t < timeout, "no temporary files in time"
        time.sleep(0.02)
    pid = proc.pid if target is None else target()
    assert pid is not None
    t = time.time()
    os.kill(pid, sig)
    try:
        _, stderr = proc.communicate(timeout=wait)
    except Exception:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, stderr, time.time() - t


def _ours(directory):
    return [f for f in os.listdir(directory) if ".part" in f or ".ids" in f or ".tmp-" in f or ".stdin-" in f
            or f.startswith(".mpidwe-stdin")]


@pytest.mark.parametrize("ranks,sig", [(1, "SIGTERM"), (1, "SIGINT"), pytest.param(2, "SIGTERM", marks=pytest.mark.mpi)])
def test_signal_during_a_run_removes_temporary_files(tmp_path, ranks, sig):
    """SIGTERM (or Ctrl-C) while the ranks spool their token ids: every rank stops, its
    temporary files are removed, one error line, exit 128 + signal number (143 for SIGTERM, 130 for
    SIGINT). Under mpiexec the launcher forwards the signal to every rank."""
    import signal
    import subprocess
    import sys

    from conftest import mpi_command, mpi_env

    src = tmp_path / "big.txt"
    _big_text(src, 24)
    out = tmp_path / "c.h5"
    args = ["-m", "mpidwe.preprocess", str(src), "--output", str(out), "--min-count", "1"]
    cmd = mpi_command(ranks, args) if ranks > 1 else [sys.executable, *args]
    proc = subprocess.Popen(cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    signum = getattr(signal, sig)
    rc, stderr, seconds = _interrupt_when(proc, lambda: any(".ids" in f for f in os.listdir(tmp_path)), signum)
    assert rc == 128 + signum, (rc, stderr)
    lines = error_lines(stderr)
    assert len(lines) == 1 and "interrupted" in lines[0] and sig in lines[0], stderr
    assert "Traceback" not in stderr, stderr
    assert seconds < 10
    assert not out.exists()
    assert not _ours(tmp_path), os.listdir(tmp_path)


def _rank_pid(launcher_pid: int, rank: int) -> int | None:
    """The PID of MPI rank ``rank`` among the descendants of ``launcher_pid`` (from /proc)."""
    parents = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue

    def descends(pid):
        while pid in parents and pid > 1:
            pid = parents[pid]
            if pid == launcher_pid:
                return True
        return False

    for pid in parents:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        ranks = {env.get(k) for k in (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK")}
        if str(rank).encode() in ranks and b"mpidwe.preprocess" in cmdline and descends(pid):
            return pid
    return None


@pytest.mark.mpi
def test_a_signal_to_one_rank_alone_ends_the_job(tmp_path):
    """SIGTERM to rank 1 only (a node's own kill, not the launcher's): the other rank never
    reaches the agreement, so rank 1 says it, with its rank, and aborts the job within
    seconds: exit 143, no output file. (Where every rank gets the signal, they agree and end
    without an abort: the test above.)"""
    import signal
    import subprocess

    from conftest import mpi_command, mpi_env

    src = tmp_path / "big.txt"
    _big_text(src, 24)
    out = tmp_path / "c.h5"
    proc = subprocess.Popen(mpi_command(2, ["-m", "mpidwe.preprocess", str(src), "--output", str(out),
                                            "--min-count", "1"]),
                            env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    rc, stderr, seconds = _interrupt_when(proc, lambda: any(".ids" in f for f in os.listdir(tmp_path)),
                                          signal.SIGTERM, target=lambda: _rank_pid(proc.pid, 1), wait=30)
    assert rc == 143, (rc, stderr)
    lines = error_lines(stderr)
    assert lines == ["python -m mpidwe.preprocess: error (rank 1): interrupted by SIGTERM; this run's "
                     "temporary files were removed"], stderr
    assert seconds < 15
    assert not out.exists()


def test_a_signal_inside_a_callback_is_not_lost():
    """The signal handler raises where the main thread happens to be; inside a weakref
    callback (h5py releasing an object while writing) Python would print the exception
    and go on to finish the run. It is raised again, in ordinary code."""
    import signal
    import sys
    import time
    import weakref

    from mpidwe.preprocess.signals import Interrupted, Signals

    class Obj:
        pass

    def callback(_):
        os.kill(os.getpid(), signal.SIGTERM)
        _ = 1  # the handler runs here, inside the callback

    hook = sys.unraisablehook
    with Signals():
        obj = Obj()
        ref = weakref.ref(obj, callback)
        with pytest.raises(Interrupted, match="SIGTERM"):
            del obj
            time.sleep(2)
    assert ref() is None and sys.unraisablehook is hook
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sigterm_while_reading_standard_input_removes_the_spool_file(tmp_path):
    """Standard input is copied to a file beside the output first; SIGTERM while a slow pipe
    feeds it removes that file too."""
    import signal
    import subprocess
    import sys

    from conftest import mpi_env

    out = tmp_path / "c.h5"
    proc = subprocess.Popen([sys.executable, "-m", "mpidwe.preprocess", "-", "--output", str(out)],
                            env=mpi_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=tmp_path)
    proc.stdin.write(b"a b c a\n" * 1000)
    proc.stdin.flush()
    try:
        rc, stderr, seconds = _interrupt_when(proc, lambda: bool(_ours(tmp_path)), signal.SIGTERM)
    finally:
        proc.stdin.close()
    stderr = stderr.decode()
    assert rc == 143, stderr
    assert len(error_lines(stderr)) == 1, stderr
    assert not out.exists()
    assert not _ours(tmp_path), os.listdir(tmp_path)


# ------------------------------- Unicode whitespace inside words (issue 15, item 2)
_U15_WS = ["\u3000", "\xa0", "\x85", "\u2003", "\u2028", "\u1680", "\u205f"]


def _u15_text(n: int, seed: int, *, ascii_every: int = 0) -> bytes:
    """Words separated by multi-byte Unicode whitespace (and, if ascii_every, now and then a
    space or a newline)."""
    rng = np.random.default_rng(seed)
    vocab = ["alpha", "Beta", "東京", "café", "ΟΔΟΣ", "x"]
    out = []
    for i in range(n):
        out.append(vocab[int(rng.integers(len(vocab)))])
        if ascii_every and i % ascii_every == 0:
            out.append("\n" if i % (2 * ascii_every) else " ")
        else:
            out.append(_U15_WS[int(rng.integers(len(_U15_WS)))])
    return "".join(out).encode()


def test_unicode_whitespace_splits_words_in_text_and_binary_input(tmp_path):
    """U+3000, U+00A0, U+0085 and the other Unicode spaces end a word like a space does,
    also where they appear among binary bytes; no stored word holds whitespace."""
    src = tmp_path / "in.txt"
    src.write_bytes(_u15_text(3000, 1, ascii_every=17)
                    + b"\x01\xff\xe3\x80\x80bin\xc2\xa0ary\xc2\x85zz\xe3\x80\n" + bytes(range(1, 256)) * 3)
    out = tmp_path / "c.h5"
    proc = run_py(["-m", "mpidwe.preprocess", str(src), "--output", str(out), "--min-count", "1", "--lowercase"])
    assert proc.returncode == 0, proc.stderr
    with Corpus(str(out)) as c:
        words = c.words
    assert {"alpha", "beta", "東京", "café", "οδος", "x", "bin", "ary", "zz\ufffd"} <= set(words)
    assert not [w for w in words if any(ch.isspace() for ch in w)]


@pytest.mark.mpi
def test_unicode_whitespace_p_ranks_identical_to_one_rank(tmp_path):
    """A 2.5 MB line whose only separators are multi-byte whitespace (so rank ranges end at
    them, not at a newline) and a line-structured file: P = 1, 2, 3 write the same corpus."""
    (tmp_path / "long.txt").write_bytes(_u15_text(300_000, 2))
    (tmp_path / "lines.txt").write_bytes(_u15_text(20_000, 3, ascii_every=9))
    results = []
    for p in (1, 2, 3):
        out = tmp_path / f"u-{p}.h5"
        run_mpi(p, ["-m", "mpidwe.preprocess", "long.txt", "lines.txt", "--output", str(out), "--min-count", "1",
                    "--sentence-length", "50", "--block-bytes", "4096"], cwd=tmp_path)
        results.append(read(out))
    words = [w.decode() for w in results[0][0]["vocab/words"]]
    assert not [w for w in words if any(ch.isspace() for ch in w)] and "東京" in words
    for data, attrs in results[1:]:
        for k in DATASETS:
            assert np.array_equal(results[0][0][k], data[k]), k
        assert attrs["corpus_id"] == results[0][1]["corpus_id"]
# ------------------------------- end of issue 15, item 2 block


# ----------------------------------- two runs to one output (issue 15, item 4)
def test_a_second_run_to_the_same_output_is_refused_while_the_first_runs(tmp_path):
    import subprocess
    import sys
    import time

    from conftest import mpi_env

    out = tmp_path / "c.h5"
    # the first run reads standard input that we hold open: it keeps running
    first = subprocess.Popen([sys.executable, "-m", "mpidwe.preprocess", "-", "--output", str(out)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=mpi_env())
    try:
        lock = tmp_path / ".c.h5.lock"
        for _ in range(200):
            if lock.exists():
                break
            time.sleep(0.05)
        assert lock.exists()
        (tmp_path / "t.txt").write_text("a b c a b a\n" * 20)
        second = subprocess.run([sys.executable, "-m", "mpidwe.preprocess", str(tmp_path / "t.txt"), "--output",
                                 str(out), "--force", "--min-count", "1"], capture_output=True, text=True,
                                timeout=60, env=mpi_env())
        assert second.returncode == 2, second.stderr
        assert f"{out} is in use by another preprocess run" in second.stderr and f"pid {first.pid}" in second.stderr
        stdout, stderr = first.communicate("x y z x y x\n" * 20, timeout=60)
        assert first.returncode == 0, stderr
    finally:
        if first.poll() is None:
            first.kill()
    assert out.exists() and not lock.exists()


# ------------------------------------------------------ a full disk (issue 15, item 6)
@pytest.fixture
def small_disk(tmp_path):
    """A small tmpfs, remounted at the size a test asks for (root only; skipped where
    mounting is not allowed), as tests/test_run_dir.py's tiny_disk."""
    import subprocess

    mnt = tmp_path / "disk"
    mnt.mkdir()

    def mount(size: str):
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.strip()}")
        return mnt

    yield mount
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.mpi)])
def test_a_full_disk_gives_one_line_exit_2_and_no_leftovers(tmp_path, small_disk, ranks):
    """The disk fills up while writing the copy of standard input, the token-id spool, the
    corpus (the ranks' slices, rank 0's metadata), or the lock: every time one line, exit 2, and nothing
    left on the disk. It used to give tracebacks, then a segfault (exit 139), and leave the
    copy of standard input behind."""
    import subprocess
    import sys

    from conftest import mpi_command, mpi_env

    src = tmp_path / "in.txt"
    _big_text(src, 1)
    text = src.read_bytes()
    for size, stdin in [("4k", False), ("64k", True), ("300k", False), ("1200k", True), ("1900k", False)]:
        if stdin and ranks > 1:
            # mpiexec itself dies of SIGPIPE when rank 0 stops reading the stdin it forwards
            continue
        disk = small_disk(size)
        args = ["-m", "mpidwe.preprocess", "-" if stdin else str(src), "--output", str(disk / "c.h5"),
                "--min-count", "1"]
        cmd = mpi_command(ranks, args) if ranks > 1 else [sys.executable, *args]
        proc = subprocess.run(cmd, input=text if stdin else None, capture_output=True, env=mpi_env(),
                              timeout=120, cwd=tmp_path)
        stderr = proc.stderr.decode()
        assert proc.returncode == 2, (size, proc.returncode, stderr)
        lines = error_lines(stderr)
        assert len(lines) == 1 and "No space left on device" in lines[0], (size, stderr)
        assert "Traceback" not in stderr, stderr
        assert os.listdir(disk) == [], (size, os.listdir(disk))


# ------------------------------------------ pipes and FIFOs as inputs (issue 15, item 18)
@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.mpi)])
def test_a_fifo_input_is_read_as_a_stream(tmp_path, ranks):
    """A FIFO (what bash's ``<(zcat ...)`` gives) used to be "input is empty (0 bytes)": it
    is copied like standard input, and its gzip content is detected as usual. The corpus is
    the one the same text as a file gives."""
    import subprocess
    import sys
    import threading

    from conftest import mpi_command, mpi_env

    text = make_text(tmp_path, lines=400, doc_tags=True)
    (tmp_path / "plain.txt").write_bytes(text)
    fifo = tmp_path / "in.fifo"
    for payload, name in [(text, "plain"), (gzip.compress(text), "gz")]:
        os.mkfifo(fifo)

        def writer():
            with open(fifo, "wb") as fh:
                fh.write(payload)

        w = threading.Thread(target=writer, daemon=True)
        w.start()
        out = tmp_path / f"{name}.h5"
        args = ["-m", "mpidwe.preprocess", str(fifo), "--output", str(out), "--min-count", "2", "--strip-doc-tags"]
        cmd = mpi_command(ranks, args) if ranks > 1 else [sys.executable, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), timeout=120, cwd=tmp_path)
        w.join(10)
        os.unlink(fifo)
        assert proc.returncode == 0, proc.stderr
        assert not [f for f in os.listdir(tmp_path) if f.startswith(".")], os.listdir(tmp_path)
    ref = tmp_path / "ref.h5"
    run(PreprocessConfig(inputs=(str(tmp_path / "plain.txt"),), output=str(ref), min_count=2,
                         strip_doc_tags=True), Comm.serial(), log=None)
    for name in ("plain", "gz"):
        assert read(tmp_path / f"{name}.h5")[1]["corpus_id"] == read(ref)[1]["corpus_id"]


# ------------------------------------------- sentences across rank slices (issue 14)
def test_sentences_of_slices_are_the_sentences_of_the_whole():
    """Each rank cuts the sentences of its own slice, shifted by the tokens of the line
    still open where the slice starts (``sentence_carries``): together they are the whole
    corpus's sentences, for any split, also slices that are empty, hold no line start, or
    end exactly at one."""
    from mpidwe.io.corpus import sentence_carries, sentence_starts

    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(0, 60))
        length = int(rng.integers(1, 9))
        lines = np.unique(rng.integers(0, n + 1, size=int(rng.integers(0, 12))))
        whole = sentence_starts(lines, 0, n, length)
        cuts = np.sort(rng.integers(0, n + 1, size=int(rng.integers(0, 5))))
        bounds = [0, *cuts.tolist(), n]
        kept, last, local = [], [], []
        for a, b in zip(bounds, bounds[1:]):
            mine = lines[(lines >= a) & (lines <= b)] - a if a == 0 else lines[(lines > a) & (lines <= b)] - a
            local.append(mine)
            kept.append(b - a)
            last.append(int(mine[-1]) if len(mine) else None)
        carries = sentence_carries(kept, last)
        parts = [sentence_starts(m, c, k, length) + a for m, c, k, a in zip(local, carries, kept, bounds)]
        assert np.concatenate(parts).tolist() == whole.tolist(), (trial, n, length, lines, bounds)


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_hold_out_drops_the_words_as_rare_words_are_dropped(tmp_path, engine):
    """--hold-out FILE: the corpus is the reference's with those words' tokens gone, as if
    they occurred below --min-count; a word of the file that is not in the text is harmless."""
    text = make_text(tmp_path)
    src = tmp_path / "in.txt"
    src.write_bytes(text)
    held = tmp_path / "held.txt"
    held.write_text("w1 w2\nWord7\n  nosuchword\n")
    out = tmp_path / "c.h5"
    run(PreprocessConfig(inputs=(str(src),), output=str(out), min_count=2, hold_out=str(held)),
        Comm.serial(), log=None, engine=engine)
    dropped = text
    for w in (b"w1", b"w2", b"Word7"):
        dropped = re.sub(rb"(?<!\S)" + w + rb"(?!\S)", b"", dropped)
    words, counts, ids, sents = reference([dropped], min_count=2)
    data, attrs = read(out)
    got = [w.decode() for w in data["vocab/words"]]
    assert got == words and {"w1", "w2", "Word7"} & set(reference([text], min_count=2)[0]) == {"w1", "w2", "Word7"}
    assert data["tokens"].tolist() == ids and data["sentences"].tolist() == sents
    assert '"hold_out"' in attrs["options"]


def test_hold_out_errors_are_one_line(tmp_path):
    (tmp_path / "in.txt").write_text("a b c a b a\n")
    proc = run_py(["-m", "mpidwe.preprocess", "in.txt", "--hold-out", "missing.txt", "--min-count", "1"], cwd=tmp_path)
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and "cannot read --hold-out file missing.txt" in lines[0]
    assert not (tmp_path / "corpus.h5").exists()
    proc = run_py(["-m", "mpidwe.preprocess", "in.txt", "--hold-out", "x", "--append", "corpus.h5"], cwd=tmp_path)
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and "--append keeps the corpus's own" in lines[0]
