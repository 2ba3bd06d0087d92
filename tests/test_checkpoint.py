"""Checkpoint files: round trip, crash safety, damage detection."""

import os

import h5py
import numpy as np
import pytest

from mpidwe.io import checkpoint
from mpidwe.core.errors import InputError
from mpidwe.io.formats import reseal


def unsealed_copy(src, dst, **attrs):
    """A copy of ``src`` as an mpidwe from before the seal wrote it (no user block), with
    root attributes changed (None: removed)."""
    with h5py.File(src, "r") as a, h5py.File(dst, "w") as b:
        for name in a:
            a.copy(a[name], b, name=name)
        for k, v in a.attrs.items():
            b.attrs[k] = v
        for k, v in attrs.items():
            if v is None:
                del b.attrs[k]
            else:
                b.attrs[k] = v
    return str(dst)


def make(round_=1, v=20, d=4):
    rng = np.random.default_rng(round_)
    state = checkpoint.TrainingState(
        w_in=rng.standard_normal((v, d)).astype(np.float32), w_out=rng.standard_normal((v, d)).astype(np.float32),
        progress=checkpoint.Progress(round=round_, rounds=10, words_done=100 * round_, words_total=1000,
                                     world_size=2, positions=[50 * round_, 50 * round_], lr=0.02),
        rng_state=np.array([[1, 2], [3, 2**63 + 5]], dtype=np.uint64), history=[{"step": round_, "loss": 1.5}])
    return checkpoint.Checkpoint(
        state=state, words=[f"w{i}" for i in range(v)], counts=np.arange(v, 0, -1),
        config={"dim": d, "model": "skipgram"}, corpus_id="abc", corpus_path="c.h5")


def test_round_trip(tmp_path):
    ck = make()
    path = checkpoint.save(str(tmp_path), ck)
    got = checkpoint.load(path)
    assert np.array_equal(got.w_in, ck.w_in) and np.array_equal(got.w_out, ck.w_out)
    assert got.words == ck.words and got.config == ck.config and got.progress == ck.progress
    assert got.state.rng_state.dtype == np.uint64 and got.state.rng_state[1, 1] == 2**63 + 5
    assert got.state.history == ck.state.history and got.corpus_id == "abc"
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]


def test_keeps_the_newest(tmp_path):
    for r in range(1, 6):
        checkpoint.save(str(tmp_path), make(r), keep=2)
    names = [os.path.basename(p) for p in checkpoint.list_checkpoints(str(tmp_path))]
    assert names == ["ckpt-000000004.h5", "ckpt-000000005.h5"]


def test_rotation_keeps_checkpoints_newer_than_the_one_written(tmp_path):
    """A resume skipped damaged newer checkpoints (the damage may be a passing network
    filesystem error): the checkpoints the resumed run writes rotate only the older ones."""
    for r in (10, 20, 30):
        checkpoint.save(str(tmp_path), make(r), keep=2)
    newest = tmp_path / "ckpt-000000030.h5"
    damaged = bytearray(newest.read_bytes())
    damaged[-100] ^= 0xFF
    newest.write_bytes(bytes(damaged))
    assert checkpoint.latest_valid(str(tmp_path)).progress.round == 20
    for r in (24, 26):
        checkpoint.save(str(tmp_path), make(r), keep=2)
    names = [os.path.basename(p) for p in checkpoint.list_checkpoints(str(tmp_path))]
    assert names == ["ckpt-000000024.h5", "ckpt-000000026.h5", "ckpt-000000030.h5"]
    assert newest.read_bytes() == bytes(damaged)


def test_damage_is_detected_and_skipped(tmp_path):
    good = checkpoint.save(str(tmp_path), make(1))
    newest = checkpoint.save(str(tmp_path), make(2))
    # flip one bit inside the parameters of the newest
    with h5py.File(newest, "r") as f:
        offset = f["params/w_in"].id.get_offset()
    data = bytearray(open(newest, "rb").read())
    data[offset + 5] ^= 0x10
    open(newest, "wb").write(bytes(data))
    with pytest.raises(InputError, match="checksum"):
        checkpoint.load(newest)
    warnings = []
    ck = checkpoint.latest_valid(str(tmp_path), warn=warnings.append)
    assert ck.path == good and warnings and "skipping damaged" in warnings[0]
    # a truncated file
    trunc = os.path.join(tmp_path, "ckpt-000000009.h5")
    open(trunc, "wb").write(open(good, "rb").read()[:3000])
    with pytest.raises(InputError, match="not a readable HDF5"):
        checkpoint.load(trunc)
    assert checkpoint.latest_valid(str(tmp_path)).path == good


def test_foreign_and_future_files_refused(tmp_path):
    p = tmp_path / "x.h5"
    with h5py.File(p, "w") as f:
        f.attrs["format"] = "mpidwe-corpus"
    with pytest.raises(InputError, match="is an mpidwe corpus, not a checkpoint"):
        checkpoint.load(str(p))
    path = checkpoint.save(str(tmp_path), make(1))
    with h5py.File(path, "a") as f:
        f.attrs["format_version"] = 7
    with pytest.raises(InputError, match="fails its checksum"):
        checkpoint.load(path)                  # an edit in place breaks the seal
    reseal(path)                               # as a newer mpidwe would have written it
    with pytest.raises(InputError, match="version 7"):
        checkpoint.load(path)
    head = bytearray(open(path, "rb").read())
    head[12:13] = b"2"                         # "MPIDWE-SEAL 2": a newer seal
    open(path, "wb").write(bytes(head))
    with pytest.raises(InputError, match="mpidwe header of version 2; this mpidwe .* reads version 1"):
        checkpoint.load(path)


@pytest.mark.parametrize("damage", ["rng", "progress", "metrics", "counts", "config", "complete"])
def test_every_dataset_and_attribute_is_checksummed(tmp_path, damage):
    """A change anywhere, not only in the parameters, is refused: a flipped RNG state or
    progress would otherwise resume silently and break the bit-identical resume."""
    path = checkpoint.save(str(tmp_path), make())
    with h5py.File(path, "r+") as f:
        if damage == "rng":
            f[checkpoint.D_RNG][0, 0] ^= np.uint64(1)
        elif damage == "counts":
            f[checkpoint.D_COUNTS][3] += 1
        elif damage == "metrics":
            f[checkpoint.D_METRICS][()] = '[{"step": 9, "loss": 1.5}]'
        elif damage == "progress":
            f.attrs[checkpoint.A_PROGRESS] = f.attrs[checkpoint.A_PROGRESS].replace('"round": 1', '"round": 2')
        elif damage == "config":
            f.attrs[checkpoint.A_CONFIG] = '{"dim": 4, "model": "cbow"}'
        else:
            f.attrs[checkpoint.A_COMPLETE] = True
    with pytest.raises(InputError, match="fails its checksum"):
        checkpoint.load(path)                  # the seal, before HDF5 reads anything
    legacy = unsealed_copy(path, tmp_path / "legacy.h5")
    reseal(path)
    for p in (path, legacy):                   # the content checksum: sealed or not
        with pytest.raises(InputError, match="content checksum mismatch"):
            checkpoint.load(p)


def test_version_1_checkpoints_still_load(tmp_path):
    """Version 1 (no content checksum) and version 2 files written before the seal."""
    path = checkpoint.save(str(tmp_path), make())
    v1 = unsealed_copy(path, tmp_path / "v1.h5", format_version=1, content_sha256=None)
    v2 = unsealed_copy(path, tmp_path / "v2.h5")
    assert open(v1, "rb").read(4) == b"\x89HDF"
    for p in (v1, v2):
        got = checkpoint.load(p)
        assert got.progress.round == 1 and got.words == make().words
        assert np.array_equal(got.w_in, make().w_in)


def test_checkpoints_are_sealed(tmp_path):
    """The seal covers every byte but the two matrices (which the checksums cover), and is
    checked before HDF5 parses the file: a flipped byte in the vocabulary's heap, which
    made HDF5 spin forever, is refused at once."""
    path = checkpoint.save(str(tmp_path), make())
    data = open(path, "rb").read()
    assert data.startswith(b"MPIDWE-SEAL 1\n")
    with h5py.File(path, "r") as f:
        params = [(f[n].id.get_offset(), f[n].id.get_storage_size()) for n in (checkpoint.D_W_IN, checkpoint.D_W_OUT)]
    assert f"skip {params[0][0]}+{params[0][1]} {params[1][0]}+{params[1][1]}\n".encode() in data[:512]
    heap = data.index(b"GCOL")
    bad = bytearray(data)
    bad[heap + 40] ^= 0xFF
    open(path, "wb").write(bytes(bad))
    with pytest.raises(InputError, match="is damaged: the file fails its checksum"):
        checkpoint.load(path)


# ------------------------------------------------------------ sharded checkpoints, edited
def _sharded(folder, round_=7, v=11, world=3, seed=0):
    ck = make(round_, v=v, d=4)
    if seed:
        ck.state.w_in += seed
        ck.state.w_out -= seed
    parts = [checkpoint.save_part(str(folder), round_, r, world, v, ck.w_in[r::world], ck.w_out[r::world])
             for r in range(world)]
    return ck, checkpoint.save(str(folder), ck, parts=parts)


def _remap(path, files):
    """Point the virtual datasets' part r at files[r] (as h5py can), then seal the file again."""
    with h5py.File(path, "r+") as f:
        for name in (checkpoint.D_W_IN, checkpoint.D_W_OUT):
            per, world, dim = f[name].shape
            rows = [s[1] for s in json_parts(f)]
            layout = h5py.VirtualLayout(shape=(per, world, dim), dtype=np.float32)
            for r, file in enumerate(files):
                layout[:rows[r], r, :] = h5py.VirtualSource(file, name, shape=(rows[r], dim))
            del f[name]
            f.create_virtual_dataset(name, layout, fillvalue=np.nan)
    reseal(path)


def json_parts(f):
    import json

    return [(p["file"], p["rows"]) for p in json.loads(f.attrs[checkpoint.A_PARTS])]


def _read_everywhere(path):
    """What the readers give: mpidwe.load, the streamed export, and a resume's rows by rank."""
    import mpidwe

    whole = mpidwe.load(path).vectors
    streamed = np.concatenate([i for _, i, _ in checkpoint.iter_rows(checkpoint.load(path, params=False), 4)])
    ck = checkpoint.load(path, params=False)
    by_rank = [checkpoint.read_rows(path, ck.parts, len(ck.words), r, p, 4)[0] for p in (2, 3) for r in range(p)]
    return whole, streamed, by_rank


def test_sharded_readers_refuse_virtual_datasets_that_do_not_map_the_part_list(tmp_path):
    """The content checksum leaves the virtual datasets out (the parts have their own): one
    pointed at another checkpoint's part, or at a missing file, is refused by every reader,
    never read as another model or as NaN rows; a part removed after loading is one line."""
    from mpidwe import inspect

    ck, path = _sharded(tmp_path / "a")
    _, other = _sharded(tmp_path / "b", seed=5)
    whole, streamed, by_rank = _read_everywhere(path)
    assert np.array_equal(whole, ck.w_in) and np.array_equal(streamed, ck.w_in)
    assert all(np.array_equal(m, ck.w_in[r::p]) for m, (p, r) in zip(by_rank, [(2, 0), (2, 1), (3, 0), (3, 1), (3, 2)]))
    names = [f"ckpt-000000007.part-0000{r}-of-00003.h5" for r in range(3)]
    for swap in (os.path.join("..", "b", names[1]), "gone.h5"):
        edited = tmp_path / "a" / "ckpt-000000007.h5"
        _remap(str(edited), [names[0], swap, names[2]])
        for read in (checkpoint.load, lambda p: _read_everywhere(p)):
            with pytest.raises(InputError, match="virtual dataset /params/w_in does not map"):
                read(str(edited))
        out = tmp_path / "v.txt"
        assert inspect.main([str(edited), "export", "-o", str(out)]) == 2 and not out.exists()
        _remap(str(edited), names)
    assert np.array_equal(_read_everywhere(path)[1], ck.w_in)
    loaded = checkpoint.load(path, params=False)
    os.unlink(tmp_path / "a" / names[2])
    with pytest.raises(InputError, match="is missing"):
        list(checkpoint.iter_rows(loaded, 4))
    with pytest.raises(InputError, match="is missing"):
        checkpoint.read_rows(path, loaded.parts, len(loaded.words), 0, 2, 4)


@pytest.mark.parametrize("name", ["absolute", "parent", "other round", "other rank", "rows"])
def test_sharded_part_list_names_only_what_the_writer_makes(tmp_path, name):
    """An edited part list (resealed, its checksums made to match) that names an absolute or
    ../ path, another round's or rank's part, or other row counts is refused: a resume would
    otherwise train from another file's rows."""
    import json

    from mpidwe.io.digests import content_sha256

    ck, path = _sharded(tmp_path / "a")
    _sharded(tmp_path / "b", seed=5)
    _sharded(tmp_path / "a", round_=8, seed=7)
    with h5py.File(path, "r") as f:
        parts = json.loads(f.attrs[checkpoint.A_PARTS])
    theirs = checkpoint.load(str(tmp_path / "b" / "ckpt-000000007.h5"), params=False).parts[1]
    eighth = checkpoint.load(str(tmp_path / "a" / "ckpt-000000008.h5"), params=False).parts[1]
    parts[1] = {"absolute": dict(theirs, file=str(tmp_path / "b" / theirs["file"])),
                "parent": dict(theirs, file=os.path.join("..", "b", theirs["file"])),
                "other round": eighth, "other rank": dict(parts[2], rank=1),
                "rows": dict(parts[1], rows=2_000_000_000)}[name]
    with h5py.File(path, "r+") as f:
        f.attrs[checkpoint.A_PARTS] = json.dumps(parts, sort_keys=True)
        f.attrs[checkpoint.A_CHECKSUM] = checkpoint.parts_sha256(parts)
        f.attrs[checkpoint.A_CONTENT] = content_sha256(f)
    reseal(path)
    with pytest.raises(InputError, match="its part list names"):
        checkpoint.load(path, params=False)
