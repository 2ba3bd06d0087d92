"""A character model fitted to a checkpoint (``inspect RUN fit-chars``) is carried to the
checkpoints of the training that continues it (``--resume`` with more epochs, ``--init-from``
as every ``--follow`` step), naming the checkpoint it was fitted on; loading a carried copy
uses it and says so once; ``fit-chars`` replaces a carried copy without ``--force``."""

import json
import logging
import os

import numpy as np
import pytest

import mpidwe
from mpidwe.core.charmodel import CharModel, CharModelOptions, fit
from mpidwe.core.config import PreprocessConfig, TrainConfig
from mpidwe.parallel.comm import Comm
from mpidwe.io import charfile, checkpoint
from mpidwe.preprocess import run as preprocess
from mpidwe.train import run as train

from conftest import run_py

TINY_FIT = CharModelOptions(words=200, steps=30, hidden=16, mlp=16, char_dim=8)
UNSEEN = ["w7x", "zzkrop"]


def _train(corpus, out, **options):
    cfg = TrainConfig(corpus=str(corpus), out=str(out), dim=16, threads=1, progress=False, export=False,
                      sync_every=5_000, **{"epochs": 1, **options})
    return train(cfg, Comm.serial(), log=None)


def _carried_warnings(caplog):
    return [r.getMessage() for r in caplog.records if "fitted on the vectors of an earlier checkpoint" in r.getMessage()]


@pytest.fixture
def fitted_run(tiny_text, tmp_path):
    """A one-epoch run and a (tiny) character model fitted to its checkpoint."""
    corpus = tmp_path / "corpus.h5"
    preprocess(PreprocessConfig(inputs=(str(tiny_text),), output=str(corpus), min_count=1), Comm.serial(), log=None)
    out = tmp_path / "run"
    _train(corpus, out)
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    model = fit(ck.words, ck.w_in, TINY_FIT)
    charfile.save_char_model(ck, model.meta(), model.state(), "input")
    return corpus, out, ck, model.vectors(UNSEEN)


def test_resuming_carries_the_model_forward_and_loading_it_says_so_once(fitted_run, caplog):
    corpus, out, first, expected = fitted_run
    _train(corpus, out, epochs=2, resume="auto", keep_checkpoints=1)
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    assert ck.progress.words_done == 2 * first.progress.words_done
    # --keep-checkpoints 1 removed the first checkpoint and the model beside it
    ckdir = out / "checkpoints"
    assert sorted(os.listdir(ckdir)) == sorted([os.path.basename(ck.path),
                                                os.path.basename(checkpoint.char_model_path(ck.path))])
    stored = charfile.read_char_model(ck)
    assert stored.carried and stored.matrix == "input"
    assert stored.fitted_on["checkpoint"] == os.path.basename(first.path)
    assert stored.fitted_on["words_done"] == first.progress.words_done
    with caplog.at_level(logging.WARNING, logger="mpidwe"):
        vecs = mpidwe.load(str(out))
    assert vecs.oov is not None and vecs.oov.kind == "chars"
    np.testing.assert_allclose(vecs.oov.vectors(UNSEEN), expected, rtol=1e-6)   # the fitted model, unchanged
    said = _carried_warnings(caplog)
    assert len(said) == 1 and os.path.basename(first.path) in said[0] and "fit-chars" in said[0], said
    # the command line says it in one line too, and answers the unseen word
    proc = run_py(["-m", "mpidwe.inspect", str(out), "vectors", UNSEEN[1]])
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 0 and len(lines) == 1 and "earlier checkpoint" in lines[0], proc.stderr
    assert proc.stdout.split()[0] == UNSEEN[1]
    # refitting replaces the carried copy without --force; the new fit is this checkpoint's own
    proc = run_py(["-m", "mpidwe.inspect", str(out), "fit-chars", "--steps", "5", "--hidden", "8", "--mlp", "8",
                   "--char-dim", "4", "--json"], timeout=300)
    assert proc.returncode == 0, proc.stderr
    refit = charfile.read_char_model(ck)
    assert not refit.carried and refit.fitted_on["checkpoint"] == os.path.basename(ck.path)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mpidwe"):
        assert mpidwe.load(str(out)).oov.kind == "chars"
    assert not _carried_warnings(caplog)


def test_a_run_started_from_a_checkpoint_carries_its_model_across_run_directories(fitted_run, tmp_path, caplog):
    """--init-from (what each --follow step does with the step before it): the copy names the
    checkpoint it was fitted on by a path that leads to it from the new run's folder, also
    when carried a second time."""
    corpus, out, first, expected = fitted_run
    step1, step2 = tmp_path / "steps" / "0001", tmp_path / "steps" / "0002"
    _train(corpus, step1, init_from=str(out))
    _train(corpus, step2, init_from=str(step1))
    for run in (step1, step2):
        ck = checkpoint.latest_valid(str(run / "checkpoints"))
        stored = charfile.read_char_model(ck)
        assert stored is not None and stored.carried
        fitted = os.path.normpath(os.path.join(os.path.dirname(stored.path), stored.fitted_on["checkpoint"]))
        assert fitted == os.path.normpath(first.path)
    with caplog.at_level(logging.WARNING, logger="mpidwe"):
        vecs = mpidwe.load(str(step2))
    np.testing.assert_allclose(vecs.oov.vectors(UNSEEN), expected, rtol=1e-6)
    assert len(_carried_warnings(caplog)) == 1
    # a run that continues nothing carries nothing; nor does one whose source has no model
    fresh = tmp_path / "fresh"
    _train(corpus, fresh, seed=3)
    assert charfile.read_char_model(checkpoint.latest_valid(str(fresh / "checkpoints"))) is None
    _train(corpus, tmp_path / "from-fresh", init_from=str(fresh))
    assert not [p for p in os.listdir(tmp_path / "from-fresh" / "checkpoints") if p.endswith(".chars.h5")]


def test_a_version_1_model_is_still_read_as_fitted_to_its_own_checkpoint(fitted_run):
    import h5py

    from mpidwe.io.formats import seal

    _, _, ck, _ = fitted_run
    path = checkpoint.char_model_path(ck.path)
    with h5py.File(path, "r+") as f:          # as version 1 wrote it: no fitted_on
        del f.attrs["fitted_on"]
        f.attrs["format_version"] = 1
        from mpidwe.io.digests import content_sha256

        f.attrs["content_sha256"] = content_sha256(f)
    seal(path, [])
    stored = charfile.read_char_model(ck)
    assert not stored.carried and stored.fitted_on["checkpoint"] == os.path.basename(ck.path)
    assert isinstance(CharModel.from_state(stored.meta, stored.params), CharModel)
    assert json.loads(json.dumps(stored.fitted_on))["words_done"] is None
