"""The character-level generator (``inspect RUN fit-chars``): a misspelt cluster word's
neighbours come from its cluster, the stored model (beside the checkpoint, sealed, bound to
it) round-trips, its write is crash-safe, and every misuse is one error line."""

import json
import os
import shutil

import h5py
import numpy as np
import pytest

import mpidwe
from mpidwe.io import charfile, checkpoint
from mpidwe.core.charmodel import CharModelOptions, corrupt, fit
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import TrainConfig
from mpidwe.core.errors import ConfigError, InputError
from mpidwe.train import run as train

from conftest import clusters, make_demo_corpus, misspelt, misspelt_neighbours, run_py, train_small_demo

STEPS = "4000"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("chardemo"), tokens=300_000, seed=5)


@pytest.fixture(scope="module")
def fitted(demo, tmp_path_factory):
    """A plain (no subwords) demo run with a character model fitted by the command."""
    out = tmp_path_factory.mktemp("charrun") / "run"
    train_small_demo(demo, out)
    proc = run_py(["-m", "mpidwe.inspect", str(out), "fit-chars", "--steps", STEPS, "--json"], timeout=600)
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


def one_error(proc, text):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and text in lines[0], proc.stderr


def test_a_misspelt_cluster_word_has_neighbours_from_its_cluster(demo, fitted):
    out, info = fitted
    vecs = mpidwe.load(str(out))
    assert vecs.oov is not None and vecs.oov.kind == "chars"
    assert info["fitted_words"] == len(vecs) and info["epoch_losses"][-1] < 0.1
    labels = clusters(demo)
    pairs = misspelt(vecs, labels)
    assert len(pairs) >= 30
    found, same = misspelt_neighbours(vecs, labels, pairs)
    # chance is 1 in 20 clusters (and 5 in 1,400 words for the original): measured 0.85 and
    # 0.60 at 4,000 steps. The demo's words are random syllables, so this is learnt mostly
    # from the misspelt copies the fit trains on (--noise 0: 0.515 and 0.325)
    assert same / (5 * len(pairs)) > 0.6 and found / len(pairs) > 0.35, (found, same, len(pairs))
    # known words keep their own vectors; the model answers only the others
    np.testing.assert_array_equal(vecs[vecs.words[3]], vecs.vectors[3])


def test_inspect_and_evaluate_answer_unseen_words_with_the_char_model(demo, fitted, tmp_path):
    out, _ = fitted
    vecs = mpidwe.load(str(out))
    changed, original = misspelt(vecs, clusters(demo))[0]
    proc = run_py(["-m", "mpidwe.inspect", str(out), "neighbors", changed, "-k", "3"])
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 3, proc.stderr
    proc = run_py(["-m", "mpidwe.inspect", str(out), "vectors"], input=f"{original} {changed}\n")
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and [ln.split()[0] for ln in lines] == [original, changed], proc.stderr
    np.testing.assert_allclose(np.array(lines[1].split()[1:], dtype=np.float32), vecs.vector(changed), rtol=1e-5)
    pairs = tmp_path / "pairs.tsv"
    words = vecs.words[:6]
    pairs.write_text("".join(f"{a}\t{b}\t{i}\n" for i, (a, b) in enumerate(zip(words, words[1:]))) +
                     f"{changed}\t{original}\t9\n")
    proc = run_py(["-m", "mpidwe.evaluate", str(out), "--similarity", str(pairs), "--json", "--oov"])
    assert proc.returncode == 0 and json.loads(proc.stdout)["similarity"][0]["covered"] == 6, proc.stderr
    # the output matrix has no model (it was fitted to the input vectors)
    assert mpidwe.load(str(out), matrix="output").oov is None


def test_the_stored_model_round_trips_and_is_not_a_checkpoint(fitted):
    out, info = fitted
    ckdir = str(out / "checkpoints")
    ck = checkpoint.latest_valid(ckdir)
    path = checkpoint.char_model_path(ck.path)
    assert info["char_model"] == path and os.path.basename(path).endswith(".chars.h5")
    assert [os.path.basename(p) for p in checkpoint.list_checkpoints(ckdir)] == [os.path.basename(ck.path)]
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "mpidwe-char-model" and int(f.attrs["format_version"]) == 2
        assert json.loads(f.attrs["fitted_on"])["checkpoint"] == os.path.basename(ck.path)
        assert f.attrs["checkpoint"] == os.path.basename(ck.path) and f.attrs["matrix"] == "input"
        names = set()
        f["params"].visititems(lambda n, o: names.add(n) if isinstance(o, h5py.Dataset) else None)
    assert {"embed.weight", "lstm.weight_ih_l0", "lstm.weight_ih_l0_reverse", "mlp.2.weight"} <= names
    meta, params, matrix = charfile.load_char_model(ck)[:3]
    from mpidwe.core.charmodel import CharModel

    a = CharModel.from_state(meta, params).vectors(["zzkrop", "a"])
    b = mpidwe.load(str(out)).oov.vectors(["zzkrop", "a"])
    np.testing.assert_array_equal(a, b)
    assert np.allclose(np.linalg.norm(a, axis=1), meta["scale"], rtol=1e-4)


def copy_run(out, tmp_path):
    dst = tmp_path / "run"
    shutil.copytree(out, dst)
    ck = checkpoint.latest_valid(str(dst / "checkpoints"))
    return dst, ck, checkpoint.char_model_path(ck.path)


def ignored(proc, text, code):
    """A command that warned in one line that it ignores the character model (``text``
    saying why) and ended with ``code``; on exit 2, one error line follows the warning."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == code and "warning: ignoring the character model" in lines[0] and text in lines[0], \
        proc.stderr
    assert len(lines) == (2 if code else 1), proc.stderr
    return lines


def test_an_unusable_model_is_ignored_with_a_warning_and_only_unseen_words_are_refused(fitted, tmp_path,
                                                                                         caplog):
    out, _ = fitted
    dst, ck, path = copy_run(out, tmp_path)
    good = open(path, "rb").read()
    known = ck.words[3]
    # a flipped byte: the seal refuses the file before HDF5 reads it; the checkpoint is intact
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x40
    open(path, "wb").write(bytes(bad))
    with caplog.at_level("WARNING", logger="mpidwe"):
        vecs = mpidwe.load(str(dst))
    assert vecs.oov is None and known in vecs
    assert any("chars.h5 is damaged: the file fails its checksum" in r.getMessage() for r in caplog.records)
    proc = run_py(["-m", "mpidwe.inspect", str(dst), "neighbors", known, "-k", "3"])
    ignored(proc, "chars.h5 is damaged", 0)
    assert len(proc.stdout.splitlines()) == 3
    lines = ignored(run_py(["-m", "mpidwe.inspect", str(dst), "neighbors", "zzkrop"]), "chars.h5 is damaged", 2)
    assert "error" in lines[1] and "zzkrop" in lines[1]
    # another format version
    open(path, "wb").write(good)
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = 99
    from mpidwe.io.formats import seal

    seal(path, [])
    caplog.clear()
    with caplog.at_level("WARNING", logger="mpidwe"):
        assert mpidwe.load(str(dst)).oov is None
    assert any("character model format version 99" in r.getMessage() for r in caplog.records)
    with pytest.raises(InputError, match="character model format version 99"):
        charfile.read_char_model(ck)        # the strict reader still says why
    # a model fitted to another checkpoint (the same name, other parameters)
    open(path, "wb").write(good)
    ck.state.w_in[0, 0] += 1.0          # saved under the same name: it replaces the fitted checkpoint
    checkpoint.save(os.path.dirname(ck.path), ck)
    ignored(run_py(["-m", "mpidwe.inspect", str(dst), "vectors", "zzkrop"]), "was fitted to another checkpoint", 2)
    ignored(run_py(["-m", "mpidwe.inspect", str(dst), "vectors", known]), "was fitted to another checkpoint", 0)
    # --force fits it again
    proc = run_py(["-m", "mpidwe.inspect", str(dst), "fit-chars", "--force", "--steps", "20", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert mpidwe.load(str(dst)).oov.kind == "chars"


def test_a_failed_write_keeps_the_old_model_and_leaves_no_temporary(fitted, tmp_path, monkeypatch):
    out, _ = fitted
    dst, ck, path = copy_run(out, tmp_path)
    before = open(path, "rb").read()
    meta, params, _ = charfile.load_char_model(ck)[:3]

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(h5py.Group, "create_dataset", full_disk)
    with pytest.raises(InputError, match="cannot write character model .*No space left on device"):
        charfile.save_char_model(ck, meta, params, "input")
    monkeypatch.undo()
    assert open(path, "rb").read() == before
    assert sorted(os.listdir(os.path.dirname(path))) == sorted([os.path.basename(ck.path), os.path.basename(path)])


def test_fit_chars_refuses_what_it_cannot_fit_in_one_line(fitted, demo, tmp_path):
    out, _ = fitted
    one_error(run_py(["-m", "mpidwe.inspect", str(out), "fit-chars"]), "a character model exists")
    one_error(run_py(["-m", "mpidwe.inspect", str(out / "vectors.txt"), "fit-chars"]), "is a word2vec file")
    one_error(run_py(["-m", "mpidwe.inspect", str(out), "fit-chars", "--force", "--steps", "0"]),
              "--steps must be >= 1")
    one_error(run_py(["-m", "mpidwe.inspect", str(out), "fit-chars", "--force", "--noise", "-1"]), "--noise")
    sub = tmp_path / "sub"
    train(TrainConfig(corpus=str(demo / "corpus.h5"), out=str(sub), dim=8, epochs=1, threads=1, progress=False,
                      subwords=True, buckets=1000, export=False), Comm.serial(), log=None)
    one_error(run_py(["-m", "mpidwe.inspect", str(sub), "fit-chars"]), "trained with --subwords")
    # without a model, a word2vec file's answer names the way to get one
    one_error(run_py(["-m", "mpidwe.inspect", str(out / "vectors.txt"), "neighbors", "zzkrop"]), "fit-chars")


def test_corrupt_makes_one_edit_and_fit_is_seeded():
    rng = np.random.default_rng(0)
    w, kinds = "kropital", set()
    for _ in range(200):
        c = corrupt(w, list("xyz"), rng)
        if len(c) == len(w):
            diff = [i for i in range(len(w)) if c[i] != w[i]]
            swap = len(diff) == 2 and diff[1] == diff[0] + 1 and c[diff[0]] == w[diff[1]]
            assert len(diff) == 1 or swap, c
            kinds.add("swap" if swap else "substitute")
        else:
            short, long_ = (c, w) if len(c) < len(w) else (w, c)
            assert len(long_) == len(short) + 1 and any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))
            kinds.add("delete" if len(c) < len(w) else "insert")
    assert kinds == {"substitute", "delete", "insert", "swap"}
    words = [f"w{i}x" for i in range(50)]
    vecs = np.random.default_rng(1).normal(size=(50, 8)).astype(np.float32)
    o = CharModelOptions(steps=30, batch=16, hidden=16, mlp=16, char_dim=8)
    a, b = fit(words, vecs, o), fit(words, vecs, o)
    np.testing.assert_array_equal(a.vectors(["w3y", "q"]), b.vectors(["w3y", "q"]))
    with pytest.raises(ConfigError, match="--hidden must be >= 1"):
        fit(words, vecs, CharModelOptions(hidden=0))
    with pytest.raises(InputError, match="no word with a finite"):
        fit(words, np.zeros_like(vecs), o)


@pytest.mark.parametrize("edit,why", [
    ({"options": {"hidden": 30000}}, "do not match its options"),
    ({"options": {"mlp": 8000}}, "do not match its options"),
    ({"dim": 9}, "makes vectors of 9 dimensions"),
    ({"scale": float("nan")}, "scale is nan"),
    ({"scale": float("inf")}, "scale is inf"),
    ({"alphabet": ["a", "a"]}, "distinct characters"),
    ({"weights": "nan"}, "NaN or infinite"),
])
def test_an_edited_model_is_refused_before_the_network_is_built(tmp_path, monkeypatch, edit, why):
    """Options edited to a huge hidden size (2.25 GB at 8000 from a 45 KB file), a dimension
    or alphabet that does not fit, a NaN scale or NaN weights, the file resealed: one line,
    exit 2, and no network is built from it (no NaN vectors, no gigabytes)."""
    import math

    from mpidwe.core import charmodel
    from mpidwe.io.digests import content_sha256
    from mpidwe.io.formats import reseal
    from test_checkpoint import make

    ck = make(3, v=20, d=4)
    path = checkpoint.save(str(tmp_path / "checkpoints"), ck)
    ck = checkpoint.load(path)
    small = CharModelOptions(hidden=4, mlp=6, char_dim=3)
    model = charmodel.CharModel(["a", "b", "w"], 4, small, 2.0)
    chars = charfile.save_char_model(ck, model.meta(), model.state(), "input")
    assert mpidwe.load(path).oov.vector("wab").shape == (4,)
    with h5py.File(chars, "r+") as f:
        meta = json.loads(f.attrs[charfile.A_META])
        if "weights" in edit:
            f["params/mlp.2.bias"][0] = math.nan
        for k, v in edit.items():
            if k == "options":
                meta["options"].update(v)
            elif k != "weights":
                meta[k] = v
        f.attrs[charfile.A_META] = json.dumps(meta)
        f.attrs[checkpoint.A_CONTENT] = content_sha256(f)
    reseal(chars)
    monkeypatch.setattr(charmodel, "_net", lambda *a: pytest.fail("built the network"))
    with pytest.raises(InputError, match=why):
        mpidwe.load(path)
    monkeypatch.undo()
    if edit in ({"options": {"hidden": 30000}}, {"scale": float("inf")}):       # the command: one line, exit 2
        one_error(run_py(["-m", "mpidwe.inspect", path, "vectors", "wab"]), why)
