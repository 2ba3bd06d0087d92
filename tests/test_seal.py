"""The seal: a checksum of the raw file bytes that readers check before HDF5 parses a
corpus, checkpoint or SPPMI cache (docs/hdf5-format.md, "The seal"). The byte-flip
campaign (test_byteflip.py) shows it ends every flip; these pin the details."""

import h5py
import numpy as np
import pytest

from mpidwe.io import formats
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig
from mpidwe.io.corpus import D_SENTENCES, D_TOKENS, Corpus
from mpidwe.core.errors import InputError
from mpidwe.io import refcache
from mpidwe.preprocess import run as preprocess


def unsealed_copy(src, dst):
    """The same HDF5 content without the seal, as mpidwe wrote it before the seal existed."""
    with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
        for name in a:
            a.copy(a[name], b, name=name)
        for k, v in a.attrs.items():
            b.attrs[k] = v
    return str(dst)


@pytest.fixture
def corpus(tiny_text, tmp_path):
    out = tmp_path / "c.h5"
    preprocess(PreprocessConfig(inputs=(str(tiny_text),), output=str(out), min_count=1), Comm.serial(), log=None)
    return str(out)


def test_a_corpus_is_sealed_around_its_tokens_and_sentences(corpus):
    data = open(corpus, "rb").read()
    assert data.startswith(b"MPIDWE-SEAL 1\nsize %d\n" % len(data)) and data[512:516] == b"\x89HDF"
    with h5py.File(corpus, "r") as f:
        assert f[D_TOKENS].chunks is None and f[D_SENTENCES].chunks is None
        skip = [formats.raw_extent(f[D_TOKENS]), formats.raw_extent(f[D_SENTENCES])]
        assert np.array_equal(np.frombuffer(data[skip[0][0]:skip[0][0] + skip[0][1]], np.int32), f[D_TOKENS][:])
    assert f"skip {skip[0][0]}+{skip[0][1]} {skip[1][0]}+{skip[1][1]}\n".encode() in data[:512]
    assert formats.check_seal(corpus, "corpus") is True


def test_an_unsealed_corpus_is_still_read(corpus, tmp_path):
    """Files written before the seal (chunked tokens, no user block) keep working."""
    old = tmp_path / "old.h5"
    with h5py.File(corpus, "r") as a, h5py.File(old, "w") as b:
        for name in a:
            if name in (D_TOKENS, D_SENTENCES):
                b.create_dataset(name, data=a[name][:], chunks=(64,), maxshape=(None,))
            else:
                a.copy(a[name], b, name=name)
        for k, v in a.attrs.items():
            b.attrs[k] = v
    assert formats.check_seal(str(old), "corpus") is False
    with Corpus(corpus) as new, Corpus(str(old)) as c:
        c.verify()
        assert c.corpus_id == new.corpus_id and c.words == new.words
        assert np.array_equal(c.read_tokens(0, c.n_tokens), new.read_tokens(0, new.n_tokens))


@pytest.mark.parametrize("damage", ["magic", "version", "size", "skip", "digest", "padding", "length",
                                    "hdf5", "body"])
def test_damage_is_refused_before_hdf5_opens_the_file(corpus, damage, monkeypatch):
    data = bytearray(open(corpus, "rb").read())
    head = data[:512].split(b"\0", 1)[0]
    if damage == "magic":
        data[0] ^= 0x20
    elif damage == "version":
        data[12] = ord("0")
    elif damage == "size":
        data[head.index(b"size ") + 5] ^= 0x01
    elif damage == "skip":
        data[head.index(b"skip ") + 5] ^= 0x01
    elif damage == "digest":
        data[head.index(b"sha256 ") + 7] ^= 0x01
    elif damage == "padding":
        data[500] = 1
    elif damage == "length":
        data += b"\0"
    elif damage == "hdf5":
        data[513] ^= 0xFF
    else:
        data[700] ^= 0x01                      # the root group's object header
    open(corpus, "wb").write(bytes(data))
    monkeypatch.setattr(h5py, "File", lambda *a, **k: pytest.fail("HDF5 opened a damaged file"))
    with pytest.raises(InputError) as e:
        Corpus(corpus)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(corpus)
    # a size flipped upward reads as a cut file ("truncated: N of M bytes"), downward as damage
    assert ("is damaged" in msg or (damage == "size" and "truncated:" in msg)) and "not an HDF5 file" not in msg


def test_a_cache_is_sealed_and_an_unsealed_one_still_read(tmp_path):
    key = refcache.ReferenceKey(corpus_id="ab" * 32, window=2, negatives=1, dim=2, top_n=3, alpha=0.5)
    ref = refcache.CachedReference(key, ["a", "b", "c"], np.ones((3, 2), np.float32), np.array([2.0, 1.0]), {})
    path = str(tmp_path / "c.h5.sppmi.h5")
    refcache.write_reference(path, ref)
    assert formats.check_seal(path, "cache") is True
    old = unsealed_copy(path, tmp_path / "old.sppmi.h5")
    assert refcache.read_reference(old, key).words == ["a", "b", "c"]
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0x04
    open(path, "wb").write(bytes(data))
    with pytest.raises(InputError, match="is damaged: the file fails its checksum; delete it to recompute"):
        refcache.read_reference(path, key)


def test_reseal_after_a_deliberate_edit(corpus):
    with h5py.File(corpus, "a") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(InputError, match="fails its checksum"):
        Corpus(corpus)
    formats.reseal(corpus)
    with pytest.raises(InputError, match="format version 99"):
        Corpus(corpus)
