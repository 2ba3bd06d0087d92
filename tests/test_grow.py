"""Growing a corpus (preprocess --append, corpus format 2 segments), training on a selection
of segments, and a warm start on a grown corpus that learns the new words."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import h5py
import numpy as np
import pytest

from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig, SynthConfig
from mpidwe.io import corpus_id
from mpidwe.io.corpus import Corpus, segment_range
from mpidwe.core.errors import InputError
from mpidwe.io.formats import reseal
from mpidwe.preprocess import grow_vocab, run
from mpidwe.synth import write_demo

from conftest import error_lines, make_demo_corpus, run_mpi, run_py
from test_preprocess import DATASETS, make_text, read, reference


def read_all(path):
    data, attrs = read(path)
    with h5py.File(path, "r") as f:
        data["segments"] = f["segments"][:]
    return data, attrs


def texts(tmp_path):
    """Old text; new text with old words, new frequent words and new rare words."""
    old = make_text(tmp_path, lines=300, seed=1)
    new = make_text(tmp_path, lines=300, seed=2).replace(b"w1 ", b"zz1 zz2 w1 ").replace(b"w7", b"yy0")
    (tmp_path / "old.txt").write_bytes(old)
    (tmp_path / "new.txt").write_bytes(new + b"only once\n")
    return old, new + b"only once\n"


def build(tmp_path, name, **kw):
    out = tmp_path / name
    run(PreprocessConfig(inputs=(str(tmp_path / "old.txt"),), output=str(out), min_count=2, sentence_length=9, **kw),
        Comm.serial(), log=None)
    return out


def test_append_keeps_old_ids_and_extends_the_vocabulary(tmp_path):
    old, new = texts(tmp_path)
    base = build(tmp_path, "c.h5")
    before, _ = read(base)
    with Corpus(str(base)) as c:
        old_id = c.corpus_id
    summary = run(PreprocessConfig(inputs=(str(tmp_path / "new.txt"),), append=str(base)), Comm.serial(), log=None)
    after, attrs = read(base)
    assert attrs["format_version"] == 3 and summary["segments"] == 2
    # old words, ids and tokens unchanged
    n_old = len(before["vocab/words"])
    assert list(after["vocab/words"][:n_old]) == list(before["vocab/words"])
    assert np.array_equal(after["tokens"][:len(before["tokens"])], before["tokens"])
    assert np.array_equal(after["sentences"][:len(before["sentences"])], before["sentences"])
    # the new segment against a straightforward reference, with min-count over the new text only
    words_old, counts_old, ids_old, _ = reference([old], min_count=2, sentence_length=9)
    new_counts = {}
    for t in new.split():
        new_counts[t.decode()] = new_counts.get(t.decode(), 0) + 1
    fresh = sorted((w for w in new_counts if w not in words_old and new_counts[w] >= 2),
                   key=lambda w: (-new_counts[w], w.encode()))
    assert "zz1" in fresh and "yy05" in fresh and "only" not in fresh
    words = [w.decode() for w in after["vocab/words"]]
    assert words == words_old + fresh
    assert after["vocab/counts"].tolist() == [c + new_counts.get(w, 0) for w, c in zip(words_old, counts_old)] \
        + [new_counts[w] for w in fresh]
    index = {w: i for i, w in enumerate(words)}
    want = [index[t.decode()] for t in new.split() if t.decode() in index]
    assert after["tokens"][len(before["tokens"]):].tolist() == want
    with Corpus(str(base)) as c:
        c.verify()
        s0, s1 = c.segments
        assert (s0.token_end, s0.vocab_end, s1.vocab_start, s1.vocab_end) == (len(ids_old), n_old, n_old, len(words))
        assert s1.token_start == s0.token_end and s1.token_end == c.total_tokens
        assert c.sentence_base == 0 and int(c.read_sentences(s1.sentence_start, s1.sentence_start + 1)[0]) == s1.token_start
        info = c.segment_info
        assert info[1]["parent_corpus_id"] == old_id and info[1]["new_words"] == len(fresh)
        assert c.corpus_id != old_id


@pytest.mark.mpi
def test_append_on_one_two_and_four_ranks_is_identical(tmp_path):
    texts(tmp_path)
    outs = []
    for p in (1, 2, 4):
        out = build(tmp_path, f"c{p}.h5")
        before, _ = read(out)
        run_mpi(p, ["-m", "mpidwe.preprocess", str(tmp_path / "new.txt"), "--append", str(out), "--block-bytes", "4096"],
                cwd=tmp_path)
        data, attrs = read_all(out)
        assert np.array_equal(data["tokens"][:len(before["tokens"])], before["tokens"])
        outs.append((data, attrs))
    for data, attrs in outs[1:]:
        for k in DATASETS + ("segments",):
            assert np.array_equal(outs[0][0][k], data[k]), k
        assert attrs["corpus_id"] == outs[0][1]["corpus_id"]
    assert not [f for f in os.listdir(tmp_path) if ".part" in f or ".tmp-" in f or f.endswith(".lock")]


def test_append_replaces_the_file_and_a_failed_append_changes_nothing(tmp_path):
    texts(tmp_path)
    base = build(tmp_path, "c.h5")
    original = base.read_bytes()
    inode = os.stat(base).st_ino
    with open(base, "rb") as held:           # a reader of the old corpus keeps its bytes
        (tmp_path / "blank.txt").write_text("   \n\n")
        with pytest.raises(InputError, match="no tokens"):
            run(PreprocessConfig(inputs=(str(tmp_path / "blank.txt"),), append=str(base)), Comm.serial(), log=None)
        assert base.read_bytes() == original
        with pytest.raises(InputError, match="--lowercase is True but the corpus was made with False"):
            run(PreprocessConfig(inputs=(str(tmp_path / "new.txt"),), append=str(base), lowercase=True),
                Comm.serial(), log=None)
        run(PreprocessConfig(inputs=(str(tmp_path / "new.txt"),), append=str(base)), Comm.serial(), log=None)
        assert os.stat(base).st_ino != inode and held.read() == original
    assert sorted(os.listdir(tmp_path)) == ["blank.txt", "c.h5", "new.txt", "old.txt"]
    proc = run_py(["-m", "mpidwe.preprocess", str(tmp_path / "new.txt"), "--append", str(tmp_path / "none.h5")])
    assert proc.returncode == 2 and "no such corpus" in error_lines(proc.stderr)[0]
    proc = run_py(["-m", "mpidwe.preprocess", str(tmp_path / "new.txt"), "--append", str(base), "--output", "x.h5"])
    assert proc.returncode == 2 and "--output cannot name another file" in error_lines(proc.stderr)[0]


def test_appending_the_same_text_twice_is_refused_unless_allowed(tmp_path):
    """The corpus records each appended input's path, size and SHA-256: the same text again,
    under its name or another, is refused (and the corpus left as it was) unless
    --allow-duplicate; the first text, recorded without a digest, is known by path and size."""
    texts(tmp_path)
    base = build(tmp_path, "c.h5")
    new, copy = tmp_path / "new.txt", tmp_path / "copy.txt"
    run(PreprocessConfig(inputs=(str(new),), append=str(base)), Comm.serial(), log=None)
    shutil.copyfile(new, copy)
    before = base.read_bytes()
    for p, segment in ((new, 1), (copy, 1), (tmp_path / "old.txt", 0)):
        with pytest.raises(InputError, match=f"input {p} is already in .*: segment {segment} holds .*"
                                             f"--allow-duplicate"):
            run(PreprocessConfig(inputs=(str(p),), append=str(base)), Comm.serial(), log=None)
        assert base.read_bytes() == before
    proc = run_py(["-m", "mpidwe.preprocess", str(copy), "--append", str(base)])
    assert proc.returncode == 2 and len(error_lines(proc.stderr)) == 1 and "--allow-duplicate" in proc.stderr
    run(PreprocessConfig(inputs=(str(copy),), append=str(base), allow_duplicate=True), Comm.serial(), log=None)
    with Corpus(str(base)) as c:
        assert len(c.segment_table) == 3 and c.segment_info[2]["inputs"][0]["sha256"] == \
            c.segment_info[1]["inputs"][0]["sha256"]
    with pytest.raises(Exception, match="--allow-duplicate goes with --append"):
        PreprocessConfig(inputs=(str(copy),), output=str(tmp_path / "x.h5"), allow_duplicate=True)


def test_a_text_without_a_kept_token_is_not_appended(tmp_path):
    """Words that are all new and below the corpus's --min-count keep no token: refused
    (an empty segment would be "trained" on nothing), the corpus unchanged."""
    texts(tmp_path)
    base = build(tmp_path, "c.h5")
    before = base.read_bytes()
    (tmp_path / "rare.txt").write_text("qq1 qq2 qq3\nqq4\n")
    with pytest.raises(InputError, match="^input keeps no token: none of its 4 tokens"):
        run(PreprocessConfig(inputs=(str(tmp_path / "rare.txt"),), append=str(base)), Comm.serial(), log=None)
    assert base.read_bytes() == before


def as_older_version(path, version: int) -> None:
    """Rewrite a corpus in place as ``version`` (1 or 2) wrote it: no chunk digests, its id
    one SHA-256 stream over every token (and, in version 1, no segments)."""
    with h5py.File(path, "a") as f:
        del f["digests"]
        del f.attrs["digest_chunk_items"]
        if version == 1:
            del f["segments"]
            del f.attrs["segment_info"]
        f.attrs["format_version"] = version
        digest = corpus_id.header_digest([w.decode() for w in f["vocab/words"][:]], f["vocab/counts"][:])
        digest.update(f["tokens"][:].astype("<i4").tobytes())
        sent = hashlib.sha256(f["sentences"][:].astype("<i8").tobytes())
        f.attrs["corpus_id"] = corpus_id.stream_id(digest, sent, f["segments"][:] if version == 2 else np.zeros((1, 3)))
    reseal(str(path))


def test_version_2_corpus_is_still_read_and_verified(tmp_path):
    """A version 2 corpus (no chunk digests) keeps its id, verifies on rank 0 alone (the
    other ranks have nothing to check), and a flipped token is still caught."""
    texts(tmp_path)
    base = build(tmp_path, "c.h5")
    as_older_version(base, 2)
    with Corpus(str(base)) as c:
        assert c.version == 2
        c.verify()
        c.verify(1, 2)
        off = c._f["tokens"].id.get_offset()
    with open(base, "r+b") as fh:           # the tokens are left out of the seal
        fh.seek(off + 4 * 7)
        old = fh.read(4)
        fh.seek(off + 4 * 7)
        fh.write(b"\x01\x00\x00\x00" if old != b"\x01\x00\x00\x00" else b"\x02\x00\x00\x00")
    with Corpus(str(base)) as c:
        with pytest.raises(InputError, match="does not match its corpus id"):
            c.verify()
        c.verify(1, 2)                           # not rank 0's part: version 2 has no chunks


def test_version_1_corpus_reads_as_one_segment_and_grows(tmp_path):
    texts(tmp_path)
    base = build(tmp_path, "c.h5")
    as_older_version(base, 1)                    # the layout version 1 wrote
    with Corpus(str(base)) as c:
        assert c.version == 1 and len(c.segments) == 1 and c.segments[0].token_end == c.n_tokens
        c.verify()                               # a one-segment id is version 1's
        n_old = c.n_tokens
    run(PreprocessConfig(inputs=(str(tmp_path / "new.txt"),), append=str(base)), Comm.serial(), log=None)
    with Corpus(str(base)) as c, Corpus(str(base), "new") as new, Corpus(str(base), "0") as first:
        assert c.version == 3 and len(c.segments) == 2
        assert first.n_tokens == n_old and new.n_tokens == c.total_tokens - n_old
        assert new.shard(0, 1).token_start == n_old
        got = np.concatenate([b for b, _, _ in new.iter_blocks(new.shard(0, 1), 500)])
        assert np.array_equal(got, c.read_tokens(n_old, c.total_tokens))
        shards = [new.shard(r, 3) for r in range(3)]
        assert shards[0].token_start == n_old and shards[-1].token_end == c.total_tokens
        assert all(a.token_end == b.token_start for a, b in zip(shards, shards[1:]))


def test_segment_specs():
    assert segment_range("all", 3) == (0, 3) and segment_range("new", 3) == (2, 3)
    assert segment_range("1", 3) == (1, 2) and segment_range("1:", 3) == (1, 3) and segment_range("0:2", 3) == (0, 2)
    for bad in ("3", "2:2", "x", "1:9"):
        with pytest.raises(ValueError):
            segment_range(bad, 3)


def test_grow_vocab_bounds_and_order():
    words, counts = grow_vocab([b"a", b"b"], np.array([5, 3]), [(b"b", 4), (b"d", 2), (b"c", 2), (b"e", 1)], 2, None)
    assert words == [b"a", b"b", b"c", b"d"] and counts.tolist() == [5, 7, 2, 2]
    words, _ = grow_vocab([b"a", b"b"], np.array([5, 3]), [(b"d", 9), (b"c", 2)], 1, 3)
    assert words == [b"a", b"b", b"d"]


@pytest.mark.mpi
def test_warm_start_on_a_grown_corpus_learns_the_new_clusters(tmp_path):
    """Part 1 trained; part 2 (5 clusters of new words) appended; a warm start on the new
    segment recovers the new clusters (as well as a fresh run on it) and keeps the old ones."""
    d1 = make_demo_corpus(tmp_path / "p1", tokens=300_000, seed=6)
    write_demo(SynthConfig(output=str(tmp_path / "p2"), tokens=300_000, seed=6, part=2, new_clusters=5))
    shutil.copy(tmp_path / "p2" / "demo-similarity.tsv", tmp_path / "new-sim.tsv")
    shutil.copy(d1 / "demo-similarity.tsv", tmp_path / "old-sim.tsv")
    corpus = d1 / "corpus.h5"
    flags = ["--dim", "24", "--threads", "1", "--no-progress", "--log-seconds", "0", "--epochs", "2",
             "--eval-sim", str(tmp_path / "new-sim.tsv"), str(tmp_path / "old-sim.tsv")]
    run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(tmp_path / "r1"), *flags[:-3]])
    run_mpi(2, ["-m", "mpidwe.preprocess", str(tmp_path / "p2" / "demo.txt"), "--append", str(corpus)])
    with Corpus(str(corpus)) as c:
        new_words = c.segments[1].vocab_end - c.segments[1].vocab_start
        assert new_words >= 5 * 30
    run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(tmp_path / "warm"), *flags,
                "--segments", "new", "--init-from", str(tmp_path / "r1")])
    run_mpi(2, ["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(tmp_path / "cold"), *flags,
                "--segments", "new"])
    warm = json.loads((tmp_path / "warm" / "metrics.jsonl").read_text().splitlines()[-1])
    cold = json.loads((tmp_path / "cold" / "metrics.jsonl").read_text().splitlines()[-1])
    config = json.loads((tmp_path / "warm" / "config.json").read_text())
    assert config["init_from"]["rows_new"] == new_words and config["segments"] == "new"
    with Corpus(str(corpus), "new") as c:
        assert warm["words"] == 2 * c.n_tokens
    assert warm["eval"]["sim:new-sim.tsv"] > 0.7, warm["eval"]
    assert warm["eval"]["sim:old-sim.tsv"] > 0.7, warm["eval"]
    # a perfect ranking of the tied 9/1 scores gives 0.866 (demo-key.json max_spearman)
    assert cold["eval"]["sim:new-sim.tsv"] > 0.7, cold["eval"]


def test_train_refuses_a_segment_the_corpus_lacks(tmp_path):
    d = make_demo_corpus(tmp_path, tokens=20_000, seed=2)
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(d / "corpus.h5"), "--out", str(tmp_path / "r"),
                   "--segments", "1:", "--no-progress"])
    assert proc.returncode == 2
    assert "selects nothing of the 1 segment(s)" in error_lines(proc.stderr)[0]
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(d / "corpus.h5"), "--segments", "last"])
    assert proc.returncode == 2 and "--segments must be all, new" in error_lines(proc.stderr)[0]


def test_the_balanced_stream_covers_only_the_selected_segments(tmp_path):
    from mpidwe.train.stream import EpochStream

    texts(tmp_path)
    base = build(tmp_path, "c.h5")
    run(PreprocessConfig(inputs=(str(tmp_path / "new.txt"),), append=str(base)), Comm.serial(), log=None)
    with Corpus(str(base), "new") as c:
        st = EpochStream(c, 2, 300)
        a = c.segments[1].token_start
        got = [t for t, _ in st.pieces(0, st.total)]
        assert np.array_equal(np.concatenate(got), np.tile(c.read_tokens(a, c.total_tokens), 2))
        starts = c.read_sentences(c.segments[1].sentence_start, c.total_sentences) - a
        assert np.array_equal(st.sentences, starts)
