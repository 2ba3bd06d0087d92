"""The trainer's pure pieces: round planning, data stream, outputs."""

import dataclasses
import re

import numpy as np
import pytest

from mpidwe.parallel.comm import Comm, latency_steps
from mpidwe.core.config import PreprocessConfig, TrainConfig
from mpidwe.io.corpus import Corpus
from mpidwe.preprocess import run as preprocess
from mpidwe.train.stream import ShardStream
from mpidwe.train.plan import binding_warning, count_rounds, learning_rate, rng_seeds, round_targets
from mpidwe.parallel.replicated import init_params

from conftest import ROOT


def test_rounds_are_planned_from_the_largest_shard():
    assert count_rounds([100, 120, 90], epochs=2, sync_every=50) == 5
    assert count_rounds([0, 0], epochs=1, sync_every=10) == 1
    t = round_targets(95, 4)
    assert t[-1] == 95 and np.all(np.diff(t) >= 23)


def test_a_binding_that_does_not_fit_the_threads_is_warned_of():
    # Open MPI binds each rank of a 1- or 2-rank job to one core: 16 threads share it
    assert binding_warning(16, False, [16, 16], 16, 1) == ""
    w = binding_warning(16, False, [16, 1], 16, 1)
    assert w.startswith("warning: 16 thread(s) per rank, but rank 1 may run on 1 CPU(s)")
    assert "--bind-to none" in w and "PE=16" in w
    # --threads 0 follows the affinity: 1 thread on a 16-core node, said so
    w = binding_warning(1, True, [1, 1], 16, 1)
    assert w.startswith("warning: --threads 0 chose 1 thread(s) per rank: rank 0 may run on 1 of its node's 16 CPUs")
    assert binding_warning(8, True, [8, 8], 16, 2) == ""          # 2 ranks a node, 8 CPUs each
    assert binding_warning(2, False, [4, 4], 16, 4) == ""          # fewer threads than CPUs: the user's choice


def test_latency_steps_follow_the_usual_algorithms():
    assert [latency_steps("alltoall", p) for p in (1, 2, 16, 32)] == [0, 1, 15, 31]
    assert latency_steps("tree", 16) == 4 and latency_steps("tree", 17) == 5 and latency_steps("ring", 16) == 30
    assert latency_steps("allgather", 16, 100_000) == 4 and latency_steps("allgather", 16, 1 << 20) == 15
    assert latency_steps("allreduce", 16, 2048) == 4 and latency_steps("allreduce", 16, 4096) == 8
    with pytest.raises(ValueError):
        latency_steps("scatter", 4)


def test_init_is_word2vec_and_seeded():
    a_in, a_out = init_params(10, 8, seed=3)
    b_in, _ = init_params(10, 8, seed=3)
    c_in, _ = init_params(10, 8, seed=4)
    assert np.array_equal(a_in, b_in) and not np.array_equal(a_in, c_in)
    assert a_in.dtype == np.float32 and np.abs(a_in).max() <= 0.5 / 8 and not a_out.any()


def test_rng_seeds_distinct_per_rank_and_thread():
    s = {int(x) for r in range(3) for x in rng_seeds(1, r, 4)}
    assert len(s) == 12
    assert np.array_equal(rng_seeds(1, 0, 2), rng_seeds(1, 0, 2))


def test_learning_rate_decays_to_floor():
    cfg = TrainConfig(lr=0.1, min_lr_ratio=0.01)
    assert learning_rate(cfg, 0, 100) == pytest.approx(0.1)
    assert learning_rate(cfg, 50, 100) == pytest.approx(0.05)
    assert learning_rate(cfg, 100, 100) == pytest.approx(0.001)


def test_shard_stream_cuts_rounds_at_sentence_boundaries(tmp_path):
    src = tmp_path / "t.txt"
    rng = np.random.default_rng(0)
    src.write_text("\n".join(" ".join(f"w{int(i)}" for i in rng.integers(0, 20, rng.integers(1, 15)))
                             for _ in range(200)))
    out = tmp_path / "c.h5"
    preprocess(PreprocessConfig(inputs=(str(src),), output=str(out), min_count=1), Comm.serial(), log=None)
    with Corpus(str(out)) as c:
        shard = c.shard(0, 1)
        sentences = set(c._f["sentences"][:].tolist()) | {c.n_tokens}
        stream = ShardStream(c, shard, epochs=2, block_tokens=37)
        targets = round_targets(shard.n_tokens * 2, 7)
        got, ends = [], []
        for t in targets:
            for tokens, starts in stream.take(int(t)):
                assert starts[0] == 0
                got.append(tokens)
            ends.append(stream.consumed)
        assert ends[-1] == 2 * c.n_tokens
        assert all(e >= t for e, t in zip(ends, targets))
        assert all(e % c.n_tokens in sentences or e == 2 * c.n_tokens for e in ends)
        whole = c.read_tokens(0, c.n_tokens)
        assert np.array_equal(np.concatenate(got), np.concatenate([whole, whole]))


def test_default_sync_interval_is_global_and_shrinks_beyond_four_ranks():
    from mpidwe.train.plan import auto_sync_every

    enwiki = [auto_sync_every(69_103, p) for p in (1, 2, 4, 8, 16)]
    assert enwiki == [2_000_000, 1_000_000, 250_000, 62_500, 15_625]
    # words all ranks train between two syncs: fixed up to 2 ranks, then 2/P of it
    assert [p * s for p, s in zip((1, 2, 4, 8), enwiki)] == [2_000_000, 2_000_000, 1_000_000, 500_000]
    assert auto_sync_every(2_724, 2) == 108_960 and auto_sync_every(2_724, 16) == 5_000
    # in tiers: 16 ranks' interval per rank below 16 ranks, 2 W / 16^2, and 16 ranks' global
    # interval beyond, 2 W / 16 shared among them (longer than the rule's 2 W / P^2 there)
    assert [auto_sync_every(69_103, p, tiered=True) for p in (2, 8, 12, 16, 32, 64)] == [
        15_625, 15_625, 15_625, 15_625, 7_812, 5_000]
    assert auto_sync_every(69_103, 32, tiered=True) > auto_sync_every(69_103, 32) == 5_000
    assert auto_sync_every(2_724, 8, tiered=True) == 5_000


# ----------------------------------------------------------- the docs' interval, from the code
def _number(text: str) -> int:
    """'2,000,000' or '2M' or '1M' -> int."""
    text = text.replace(",", "")
    return int(float(text[:-1]) * 1_000_000) if text.endswith("M") else int(text)


FORMULA = re.compile(r"min\(\s*([\d,.]+M?)\s*,\s*(\d+)\s*x\s*(?:V|the vocabulary size)\s*\)")


def _interval_texts() -> dict[str, str]:
    """Every user-facing text that states the default interval: the docs, the README and
    ``train --help`` (generated from the TrainConfig field's help)."""
    texts = {p.name: p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]}
    field = next(f for f in dataclasses.fields(TrainConfig) if f.name == "sync_every")
    texts["train --help"] = field.metadata["help"]
    return texts


def test_docs_state_the_default_interval_the_code_uses():
    """docs/running.md once said min(1M, 40 x V), up to 4 ranks, shrinking as 4/P, while the
    code and --help said min(2M, 80 x V), up to 2 ranks, 2 W / P^2 beyond: every statement of
    the formula is checked against plan.py's constants, and the defaults table of
    docs/lab/sync-modes.md cell by cell against auto_sync_every."""
    from mpidwe.core.config import TIERS_AUTO_MIN_RANKS
    from mpidwe.train.plan import (SYNC_EVERY_MIN, SYNC_FULL_INTERVAL_RANKS, SYNC_WORDS_MAX, SYNC_WORDS_PER_TYPE,
                                   auto_sync_every)

    stated = 0
    for name, text in _interval_texts().items():
        for sentence in re.split(r"(?<=[.;])\s", " ".join(text.split())):
            for m in FORMULA.finditer(sentence):
                stated += 1
                assert (_number(m.group(1)), int(m.group(2))) == (SYNC_WORDS_MAX, SYNC_WORDS_PER_TYPE), \
                    f"{name}: {m.group(0)!r}"
            if not FORMULA.search(sentence):
                continue
            for ranks in re.findall(r"up to (\d+) ranks", sentence) + re.findall(r"as (\d+)/P", sentence):
                assert int(ranks) == SYNC_FULL_INTERVAL_RANKS, f"{name}: {sentence!r}"
            for least in re.findall(r"at least ([\d,]+)", sentence):
                assert _number(least) == SYNC_EVERY_MIN, f"{name}: {sentence!r}"
    assert stated >= 3          # running.md, sync-modes.md and --help at least

    table = (ROOT / "docs" / "lab" / "sync-modes.md").read_text().split("The defaults:", 1)[1]
    header, _, *rows = [ln for ln in table.split("\n\n", 2)[1].splitlines() if ln.startswith("|")]
    ranks = [int(c.split("=")[-1]) for c in header.strip("|").split("|")[1:]]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        vocab = int(cells[0].rsplit(" ", 1)[1].replace(",", ""))
        assert [int(c.replace(",", "")) for c in cells[1:]] == [
            auto_sync_every(vocab, p, tiered=p >= TIERS_AUTO_MIN_RANKS) for p in ranks], row
    assert len(rows) == 2
