import bz2
import gzip
import os

import h5py
import numpy as np
import pytest

from mpidwe.comm import Comm
from mpidwe.config import PreprocessConfig
from mpidwe.corpus import Corpus
from mpidwe.errors import InputError
from mpidwe.preprocess import run

from conftest import error_lines, run_mpi, run_py

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
    assert attrs["format"] == "mpidwe-corpus" and attrs["format_version"] == 1
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
        assert not [f for f in os.listdir(tmp_path) if ".part" in f or ".tmp-" in f]


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
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".mpidwe-stdin")]


def test_invalid_utf8_and_binary_bytes_are_replaced_and_counted(tmp_path):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"good \xff\xfe word\x00nul good\n" * 3 + bytes(range(256)))
    out = tmp_path / "c.h5"
    proc = run_py(["-m", "mpidwe.preprocess", str(src), "--output", str(out), "--min-count", "1"])
    assert proc.returncode == 0, proc.stderr
    _, attrs = read(out)
    assert attrs["invalid_utf8_sequences"] >= 6
    with Corpus(str(out)) as c:
        assert "good" in c.words and "nul" in c.words and "\ufffd\ufffd" in c.words


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
    cases = [
        ([str(tmp_path / "missing.txt")], "input not found"),
        ([str(tmp_path)], "directory"),
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
