"""Hierarchical softmax end to end: the demo's answer key, exact resume, and refusals; every
sync mode on 2 and 4 ranks (bit-identical ranks) is in tests/mpi/test_mpi_train.py."""

import hashlib
import json
import os
import shutil

import numpy as np
import pytest

from mpidwe.io import checkpoint
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import MIN_SYNC_EVERY, TrainConfig
from mpidwe.train import run as train

from conftest import error_lines, make_demo_corpus, run_mpi
from test_train import cluster_purity


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_corpus(tmp_path_factory.mktemp("hsdemo"), tokens=300_000, seed=5)


def small(demo, out, **kw):
    base = dict(corpus=str(demo / "corpus.h5"), out=str(out), dim=32, epochs=2, threads=1, progress=False,
                sync_every=50_000, loss="hs", sample=1e-3,
                eval_sim=(str(demo / "demo-similarity.tsv"),), eval_analogy=(str(demo / "demo-analogies.txt"),))
    base.update(kw)
    return TrainConfig(**base)


@pytest.mark.parametrize("model,shared,lr", [("skipgram", True, 0.025), ("skipgram", False, 0.025),
                                             ("cbow", False, 0.05)])
def test_hs_recovers_the_planted_answer_key(demo, tmp_path, model, shared, lr):
    res = train(small(demo, tmp_path / "r", model=model, shared_negatives=shared, lr=lr), Comm.serial(), log=None)
    ev = res.metrics[-1]["eval"]
    assert ev["analogy:demo-analogies.txt"] > 0.9, ev
    assert ev["sim:demo-similarity.tsv"] > 0.6, ev
    assert cluster_purity(res.w_in, res.words, demo / "demo-clusters.tsv") > 0.8
    # inner nodes are rows 0..V-2 of the output matrix: the last row stays at its zeros
    assert not res.w_out[-1].any() and np.abs(res.w_out[:-1]).sum() > 0
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert cfg["loss"] == "hs"


def test_hs_is_deterministic_and_differs_from_ns(demo, tmp_path):
    a = train(small(demo, tmp_path / "a", epochs=1, eval_sim=(), eval_analogy=()), Comm.serial(), log=None)
    b = train(small(demo, tmp_path / "b", epochs=1, eval_sim=(), eval_analogy=()), Comm.serial(), log=None)
    assert np.array_equal(a.w_in, b.w_in) and np.array_equal(a.w_out, b.w_out)
    ns = train(small(demo, tmp_path / "n", epochs=1, loss="ns", eval_sim=(), eval_analogy=()), Comm.serial(),
               log=None)
    assert not np.array_equal(a.w_in, ns.w_in)


def test_hs_torch_kernel_learns_the_clusters(demo, tmp_path):
    pytest.importorskip("torch")
    res = train(small(demo, tmp_path / "t", kernel="torch", eval_sim=(), eval_analogy=()), Comm.serial(), log=None)
    assert cluster_purity(res.w_in, res.words, demo / "demo-clusters.tsv") > 0.8


def digest(run_dir) -> str:
    ck = checkpoint.load(checkpoint.list_checkpoints(os.path.join(run_dir, "checkpoints"))[-1])
    assert ck.complete and ck.config["loss"] == "hs"
    return hashlib.sha256(ck.w_in.tobytes() + ck.w_out.tobytes()).hexdigest()


FLAGS = ["--dim", "16", "--threads", "1", "--no-progress", "--sync-every", "20000", "--keep-checkpoints", "100",
         "--loss", "hs", "--epochs", "2", "--checkpoint-every", "100000"]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,tiers", [(2, False), (4, False), (4, True)], ids=["2", "4", "4-tiers"])
def test_hs_resume_from_a_middle_checkpoint_is_exact(demo, tmp_path, ranks, tiers):
    """tiers: the defaults' interval, in tiers from 4 ranks (config.tiers_of, plan.hs_tiers)."""
    corpus = str(demo / "corpus.h5")
    full, part = tmp_path / "full", tmp_path / "part"
    flags = [f for f in FLAGS if f not in ("--sync-every", "20000")] if tiers else FLAGS
    run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(full), *flags], timeout=300)
    ck = checkpoint.load(checkpoint.list_checkpoints(str(full / "checkpoints"))[-1], params=False)
    assert (ck.config["sync_tiers"] is not None) == tiers, ck.config["sync_tiers"]
    if tiers:
        # the demo's small vocabulary: W / (100 x 4) below the floor, MIN_SYNC_EVERY words per rank
        assert ck.config["sync_tiers"]["hot"] == 64 and ck.config["sync_every"] == MIN_SYNC_EVERY == 500
    shutil.copytree(full, part)
    for p in checkpoint.list_checkpoints(str(part / "checkpoints"))[2:]:
        os.unlink(p)
    proc = run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(part), *flags, "--resume", "auto"],
                   timeout=300)
    assert "resuming from" in proc.stdout
    assert digest(part) == digest(full)
    if tiers:
        return
    # a checkpoint of an HS run does not continue as negative sampling when that is asked for
    # (left out, --loss is taken from the checkpoint, as every model setting is)
    ck = checkpoint.list_checkpoints(str(full / "checkpoints"))[0]
    flags = [f for f in FLAGS if f not in ("--loss", "hs")]
    proc = run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(tmp_path / "x"), *flags,
                           "--loss", "ns", "--resume", ck], check=False, timeout=60)
    lines = error_lines(proc.stderr)
    assert proc.returncode == 2 and len(lines) == 1 and "--loss is 'ns' but the checkpoint has 'hs'" in lines[0]
    if ranks == 2:
        # a checkpoint of the cap before --loss hs had its own (0.2): continued with it when the
        # flag is left out; another cap, given, is taken and said (here the same 2 x at 2 ranks)
        run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(tmp_path / "y"), *FLAGS,
                        "--max-local-lr", "0.2", "--epochs", "1"], timeout=300)
        old = str(next((tmp_path / "y" / "checkpoints").glob("ckpt-*.h5")))
        proc = run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(tmp_path / "z"), *FLAGS,
                               "--max-local-lr", "0.05", "--resume", old], timeout=300)
        assert ("--max-local-lr 0.05 (the checkpoint's run: 0.2): the ranks stay at 2 x --lr, and the run "
                "continues as it would have") in proc.stdout, proc.stdout
        proc = run_mpi(ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", str(tmp_path / "w"), *FLAGS,
                               "--resume", old], timeout=300)
        assert "--max-local-lr 0.2" in proc.stdout


def test_a_checkpoint_without_a_loss_resumes_as_negative_sampling(demo, tmp_path):
    """Checkpoints written before --loss existed ran negative sampling."""
    from mpidwe.train.resume import RESUME_DEFAULTS, _check_resume

    out = tmp_path / "old"
    train(small(demo, out, loss="ns", epochs=1, eval_sim=(), eval_analogy=()), Comm.serial(), log=None)
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    del ck.config["loss"]
    assert RESUME_DEFAULTS["loss"] == "ns"
    from mpidwe.io.corpus import Corpus

    with Corpus(str(demo / "corpus.h5")) as c:
        _check_resume(dict(ck.config, loss="ns"), ck, c, 1)
        from mpidwe.core.errors import InputError

        with pytest.raises(InputError, match="--loss is 'hs'"):
            _check_resume(dict(ck.config, loss="hs"), ck, c, 1)


def test_a_checkpoint_trained_at_another_scale_is_refused_on_the_same_ranks(demo, tmp_path):
    """A change of the scale rule (parallel/rule.py) must not continue an old run at another
    rate: on the ranks and length that wrote it, a checkpoint's lr_scale must be the plan's; a
    re-planned run (other ranks, more epochs) takes its plan's, and a checkpoint without one
    is taken as it is."""
    from mpidwe.core.errors import InputError
    from mpidwe.io.corpus import Corpus
    from mpidwe.train.resume import _check_resume

    out = tmp_path / "run"
    train(small(demo, out, loss="ns", epochs=1, eval_sim=(), eval_analogy=()), Comm.serial(), log=None)
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    assert (ck.config["ranks"], ck.config["lr_scale"]) == (1, 1)
    with Corpus(str(demo / "corpus.h5")) as c:
        _check_resume(dict(ck.config), ck, c, 1)
        with pytest.raises(InputError, match=r"its 1 ranks trained at 1 x --lr, and this mpidwe trains this run "
                                             r"at 2 x .*--init-from$"):
            _check_resume(dict(ck.config, lr_scale=2), ck, c, 1)
        _check_resume(dict(ck.config, lr_scale=2), ck, c, 2)                  # re-planned on 2 ranks
        _check_resume(dict(ck.config, lr_scale=2, words_total=2 * ck.config["words_total"]), ck, c, 1)  # --epochs
        del ck.config["lr_scale"]
        _check_resume(dict(ck.config, lr_scale=2), ck, c, 1)                  # written before lr_scale


def test_an_hs_run_is_inspected_and_exported_by_its_input_vectors(demo, tmp_path):
    import mpidwe
    from mpidwe.core.errors import InputError
    from conftest import run_py

    out = tmp_path / "r"
    train(small(demo, out, epochs=1, eval_sim=(), eval_analogy=()), Comm.serial(), log=None)
    vecs = mpidwe.load(str(out))
    assert len(vecs) > 100 and vecs.most_similar(vecs.words[5], topn=3)
    with pytest.raises(InputError, match="hierarchical softmax"):
        mpidwe.load(str(out), matrix="output")
    proc = run_py(["-m", "mpidwe.inspect", str(out), "export", "--matrix", "sum", "-o", str(tmp_path / "v.txt")])
    assert proc.returncode == 2 and "hierarchical softmax" in proc.stderr and not (tmp_path / "v.txt").exists()
    proc = run_py(["-m", "mpidwe.inspect", str(out), "export", "-o", str(tmp_path / "v.txt")])
    assert proc.returncode == 0 and (tmp_path / "v.txt").exists()


def test_hs_refuses_a_one_word_vocabulary(tmp_path):
    from mpidwe.core.config import PreprocessConfig
    from mpidwe.core.errors import InputError
    from mpidwe.preprocess import run as preprocess

    (tmp_path / "one.txt").write_text("same same same same\n" * 20)
    preprocess(PreprocessConfig(inputs=(str(tmp_path / "one.txt"),), output=str(tmp_path / "one.h5"), min_count=1),
               Comm.serial(), log=None)
    with pytest.raises(InputError, match="at least 2 words"):
        train(TrainConfig(corpus=str(tmp_path / "one.h5"), out=str(tmp_path / "r"), loss="hs", threads=1,
                          progress=False), Comm.serial(), log=None)


def test_a_checkpoint_combined_otherwise_is_refused_when_the_defaults_changed(demo, tmp_path):
    """--loss hs combines in tiers by default from 4 ranks: a checkpoint whose run combined
    every row, resumed with the same options on its ranks and length, must not continue in
    tiers; the line names the flags that keep its schedule. Options the user changed, another
    plan, and a checkpoint written before tiers are taken as they are."""
    from mpidwe.core.errors import InputError
    from mpidwe.io.corpus import Corpus
    from mpidwe.train.resume import _check_resume

    out = tmp_path / "run"
    train(small(demo, out, epochs=1, eval_sim=(), eval_analogy=()), Comm.serial(), log=None)
    ck = checkpoint.latest_valid(str(out / "checkpoints"))
    assert ck.config["sync_tiers"] is None
    now = dict(full=8, hot=64, wire="int4")
    with Corpus(str(demo / "corpus.h5")) as c:
        _check_resume(dict(ck.config), ck, c, 1)
        with pytest.raises(InputError, match=r"its 1 ranks combined every row at every sync, and this mpidwe would "
                                             r"combine in geometric tiers \(64 hot rows, all every 8 syncs\) .*give "
                                             r"--sync-full 1 to continue it as it was$"):
            _check_resume(dict(ck.config, sync_tiers=now), ck, c, 1)
        _check_resume(dict(ck.config, sync_tiers=now, sync_full=8), ck, c, 1)       # the user asked for tiers
        _check_resume(dict(ck.config, sync_tiers=now), ck, c, 2)                     # re-planned on 2 ranks
        ck.config["sync_tiers"] = now
        with pytest.raises(InputError, match=r"give --sync-full 8 --sync-hot 64 --wire int4 --sync-schedule geometric to continue"):
            _check_resume(dict(ck.config, sync_tiers=None), ck, c, 1)
        del ck.config["sync_tiers"]
        _check_resume(dict(ck.config, sync_tiers=now), ck, c, 1)                     # written before tiers
