"""python -m mpidwe.inspect on a real (small) run, and evaluate on checkpoints."""

import json

import numpy as np
import pytest

from mpidwe import checkpoint
from mpidwe.comm import Comm
from mpidwe.config import TrainConfig
from mpidwe.train import run as train

from conftest import make_demo_corpus, run_py


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
    assert proc.returncode == 2 and "checkpoint not found" in proc.stderr
    proc = inspect(tmp_path)
    assert proc.returncode == 2 and "no checkpoint" in proc.stderr
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    proc = inspect(bad)
    assert proc.returncode == 2 and "not a readable HDF5" in proc.stderr
