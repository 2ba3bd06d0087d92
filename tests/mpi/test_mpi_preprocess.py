"""Preprocessing a dump in shards on 1, 2 and 3 ranks: each compressed shard is read whole by
one rank, the corpus (datasets, chunk digests, corpus id) is the one a serial run writes,
and at train start every rank verifies its own share of the chunks, a bad chunk stopping
every rank with one line that names it."""

import gzip
import shutil

import h5py
import numpy as np
import pytest

from mpidwe.core.config import PreprocessConfig
from mpidwe.core.errors import MpidweError
from mpidwe.parallel.comm import Comm
from mpidwe.io import corpus as corpus_io
from mpidwe.io import corpus_id as cid
from mpidwe.preprocess import run

from conftest import made_once

CHUNK = 64          # items a chunk, so that a tiny corpus has many
SAVED = ("vocab/words", "vocab/counts", "tokens", "sentences", "segments", "digests/tokens", "digests/sentences")


def _write_shards(folder):
    """Five gzip shards of random lines and a plain file, in a folder; and the corpus one
    serial run makes of them."""
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(60)]
    dump = folder / "dump"
    dump.mkdir()
    for k in range(5):
        lines = [" ".join(rng.choice(words, size=rng.integers(0, 40))) for _ in range(rng.integers(20, 120))]
        text = ("\n".join(lines) + ("\n" if k % 2 else "")).encode()
        (dump / f"part-{k:02d}.txt.gz").write_bytes(gzip.compress(text))
    (dump / "part-05.txt").write_text(" ".join(rng.choice(words, size=3000)))
    cid.CHUNK_ITEMS, saved = CHUNK, cid.CHUNK_ITEMS
    try:
        run(PreprocessConfig(inputs=tuple(str(p) for p in sorted(dump.iterdir())), output=str(folder / "ref.h5"),
                             min_count=2, sentence_length=13, block_bytes=4096), Comm.serial(), log=None)
    finally:
        cid.CHUNK_ITEMS = saved
    return folder


@pytest.fixture
def shards(tmp_path, monkeypatch):
    folder = made_once("MPIDWE_TEST_SHARDS", lambda: _write_shards(tmp_path), monkeypatch.setenv)
    monkeypatch.setattr(cid, "CHUNK_ITEMS", CHUNK)
    return folder


def _read(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][:] for k in SAVED}, f.attrs["corpus_id"], int(f.attrs["digest_chunk_items"])


@pytest.mark.parallel([1, 2, 3])
def test_a_folder_of_shards_makes_the_serial_corpus_at_any_rank_count(shards):
    comm = Comm.world()
    out = shards / f"c{comm.size}.h5"
    for inputs in ((str(shards / "dump"),), (str(shards / "dump" / "part-*"),)):
        summary = run(PreprocessConfig(inputs=inputs, output=str(out), min_count=2, sentence_length=13,
                                       block_bytes=4096, force=True), comm, log=None)
        comm.barrier()
        got, got_id, chunk = _read(out)
        want, want_id, _ = _read(shards / "ref.h5")
        assert chunk == CHUNK and len(got["digests/tokens"]) > 3 * comm.size
        for k in SAVED:
            assert np.array_equal(got[k], want[k]), k
        assert got_id == want_id
        if comm.is_root:
            assert summary["corpus_id"] == want_id and summary["ranks"] == comm.size
            with corpus_io.Corpus(str(out)) as c:   # the shards' sizes, found by the ranks that read them
                assert [i["uncompressed_bytes"] for i in c.attrs["inputs"]][:5] == \
                    [len(gzip.decompress((shards / "dump" / f"part-{k:02d}.txt.gz").read_bytes())) for k in range(5)]
        comm.barrier()


@pytest.mark.parallel([2, 3])
def test_each_rank_verifies_its_own_chunks_and_a_bad_one_stops_all(shards, monkeypatch):
    comm = Comm.world()
    bad = shards / f"bad{comm.size}.h5"
    with corpus_io.Corpus(str(shards / "ref.h5")) as c:
        n_chunks = cid.n_chunks(c.total_tokens, CHUNK)
        offset = c._f["tokens"].id.get_offset()
    k = n_chunks - 2                      # a chunk of the last rank's share
    if comm.is_root:
        shutil.copy(shards / "ref.h5", bad)
        with open(bad, "r+b") as fh:      # the token ids are left out of the seal: only the digests see this
            fh.seek(offset + 4 * (k * CHUNK + 5))
            old = fh.read(1)
            fh.seek(offset + 4 * (k * CHUNK + 5))
            fh.write(bytes([old[0] ^ 1]))
    comm.barrier()
    read = []
    real = cid.chunk_digests
    monkeypatch.setattr(cid, "chunk_digests", lambda *a: read.append(a[4:6]) or real(*a))
    with corpus_io.Corpus(str(shards / "ref.h5")) as c:
        comm.agree(c.verify, comm.rank, comm.size)        # the intact corpus passes
        assert read[0] == cid.chunk_range(c.total_tokens, comm.rank, comm.size, CHUNK)   # its share only
    with corpus_io.Corpus(str(bad)) as c:
        with pytest.raises(MpidweError, match=f"damaged: chunk {k} of its token ids \\(items {k * CHUNK:,} to") as e:
            comm.agree(c.verify, comm.rank, comm.size)
    assert getattr(e.value, "agreed", False) and "\n" not in str(e.value)
