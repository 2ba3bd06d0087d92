"""Training under MPI through ``mpidwe.train.run(cfg, comm)`` on every rank: after every
sync mode, loss and kernel, every rank holds the same parameters, bit for bit; with 2 ranks
the transports combine the same two terms, so they agree bit for bit too; a run is
deterministic; and another rank count trains other shards."""

import hashlib

import pytest
from mpi4py import MPI

from mpidwe.parallel.comm import Comm
from mpidwe.core.config import TrainConfig, parse_command
from mpidwe.io import checkpoint
from mpidwe.train import run

from conftest import made_once, make_demo_corpus


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The small demo corpus, made once by the serial pytest for every job of this module."""
    return made_once("MPIDWE_TEST_DEMO_300K_5",
                     lambda: make_demo_corpus(tmp_path_factory.mktemp("demo"), tokens=300_000, seed=5))


def digest(w_in, w_out) -> str:
    return hashlib.sha256(w_in.tobytes() + w_out.tobytes()).hexdigest()


def train_here(comm: Comm, demo, out, sync: str, *flags: str):
    """Train on every rank of ``comm`` with the command line's flags; assert every rank ends
    with the same parameters; returns (their digest, the run's result)."""
    cfg = parse_command(TrainConfig, ["--corpus", str(demo / "corpus.h5"), "--out", str(out), "--sync", sync,
                                      "--threads", "1", "--no-progress", *flags], prog="test", description="")
    res = run(cfg, comm, log=None)
    mine = digest(res.w_in, res.w_out)
    everyone = comm.allgather(mine)
    assert len(set(everyone)) == 1, f"ranks differ after training with --sync {sync} {' '.join(flags)}: {everyone}"
    return mine, res


def on_the_first(ranks: int, demo, out, sync: str, *flags: str) -> str:
    """The digest of the same training on the job's first ``ranks`` ranks (the others wait),
    known to every rank: what another rank count computes."""
    world = MPI.COMM_WORLD
    part = world.Split(0 if world.Get_rank() < ranks else MPI.UNDEFINED, world.Get_rank())
    mine = train_here(Comm(part), demo, out, sync, *flags)[0] if part != MPI.COMM_NULL else None
    return world.bcast(mine)


@pytest.mark.timeout(300)
@pytest.mark.parallel([2, 3])
def test_every_sync_mode_leaves_the_ranks_identical_and_a_run_is_deterministic(demo, job_tmp):
    comm = Comm.world()
    flags = ("--dim", "16", "--sync-every", "20000", "--wire", "fp32")     # (int8 rows round each sum)
    runs = {2: [("sparse",), ("sparse",), ("dense",), ("average",)],
            3: [("dense", "--allreduce", "ring"), ("sparse",)]}[comm.size]
    seen = []
    for i, (sync, *extra) in enumerate(runs):
        got, res = train_here(comm, demo, job_tmp / f"{sync}-{i}", sync, *flags, *extra)
        seen.append(got)
        if comm.is_root:
            comm_bytes = res.metrics[-1]["comm_bytes"]
            assert len(comm_bytes) == comm.size and min(comm_bytes) > 0, comm_bytes
    if comm.size == 2:
        assert seen[0] == seen[1], "same seed and rank count must give the same parameters"
        # one combining rule, three transports: every sum has two terms, so the transport
        # cannot change a bit
        assert seen[1] == seen[2] == seen[3], "sparse, dense and average differ at 2 ranks"
    else:
        assert seen[1] != on_the_first(2, demo, job_tmp / "pair", "sparse", *flags), \
            "3 ranks trained what 2 ranks train: the shards did not change"


@pytest.mark.timeout(400)
@pytest.mark.parallel([2, 4])
def test_hierarchical_softmax_leaves_the_ranks_identical_in_every_sync_mode(demo, job_tmp):
    comm = Comm.world()
    flags = ("--dim", "16", "--loss", "hs", "--sync-every", "20000", "--wire", "fp32")
    modes = ("sparse", "dense", "average") if comm.size == 2 else ("sparse", "dense")
    seen = {}
    for sync in modes:
        out = job_tmp / sync
        seen[sync], res = train_here(comm, demo, out, sync, *flags)
        if comm.is_root:       # rank 0 wrote the final checkpoint: it holds these parameters
            ck = checkpoint.load(checkpoint.list_checkpoints(str(out / "checkpoints"))[-1])
            assert ck.complete and ck.config["loss"] == "hs"
            assert digest(ck.w_in, ck.w_out) == seen[sync]
    if comm.size == 2:
        assert seen["sparse"] == seen["dense"] == seen["average"], seen
    else:
        assert seen["sparse"] != on_the_first(2, demo, job_tmp / "pair", "sparse", *flags)


@pytest.mark.timeout(400)
@pytest.mark.parallel([2, 4])
def test_the_torch_kernel_leaves_the_ranks_identical_after_every_sync(demo, job_tmp, monkeypatch):
    """The GPU path (torch kernel, device-resident parameters) on CPU torch; from the rank
    count that turns them on (8; lowered to this job's here) it combines in tiers by default
    (int4 rows from 3 ranks), as the numba kernel does, for far fewer bytes."""
    pytest.importorskip("torch")
    import mpidwe.core.config as config

    comm = Comm.world()
    seen, sent = {}, {}
    monkeypatch.setattr(config, "TIERS_AUTO_MIN_RANKS", comm.size)
    for sync in ("sparse", "dense", "auto"):
        tiers = () if sync == "auto" else ("--sync-full", "1")
        seen[sync], res = train_here(comm, demo, job_tmp / sync, sync, "--dim", "16", "--sync-every", "20000",
                                     "--kernel", "torch", "--device", "cpu", "--epochs", "1", *tiers)
        assert (res.config["sync_tiers"] is not None) == (sync == "auto")
        if comm.is_root:
            assert res.metrics[-1]["loss"] < res.metrics[0]["loss"]
            assert min(res.metrics[-1]["sync_bytes"]) > 0
            sent[sync] = sum(res.metrics[-1]["sync_bytes"])
    assert res.config["sync_tiers"]["wire"] == ("int4" if comm.size >= config.WIRE_AUTO_MIN_RANKS else "fp32")
    if comm.is_root:
        assert sent["auto"] < 0.5 * min(sent["sparse"], sent["dense"]), sent
    if comm.size == 2:      # sparse and dense combine by the same rule: two terms per sum
        assert seen["sparse"] == seen["dense"]


@pytest.mark.timeout(400)
@pytest.mark.parallel([2, 4])
def test_subword_training_leaves_the_ranks_identical(demo, job_tmp):
    comm = Comm.world()
    sync = "sparse" if comm.size == 2 else "dense"
    _, res = train_here(comm, demo, job_tmp / "sub", sync, "--dim", "16", "--sync-every", "20000",
                        "--subwords", "--buckets", "5000", "--epochs", "2")
    assert res.w_in.shape[0] == len(res.words) + 5000      # the n-gram buckets are synced too


@pytest.mark.timeout(300)
@pytest.mark.parallel([2, 3])
def test_sync_seconds_sets_the_interval_from_the_slowest_ranks_speed_after_the_second_round(demo, job_tmp):
    comm = Comm.world()
    for seconds in ("0.02", "1000"):      # a short interval (many rounds), and one round for the rest
        _, res = train_here(comm, demo, job_tmp / seconds, "auto", "--dim", "16", "--sync-every", "20000",
                            "--epochs", "2", "--sync-seconds", seconds)
        record = res.config["replan"]
        cal = record["calibration"]
        assert record["round"] == 2 and cal["sync_every_before"] == 20000 and cal["words_per_s"] > 0
        assert cal["sync_every"] == res.config["sync_every"] == max(5000, int(cal["words_per_s"] * float(seconds)))
        shard = res.config["words_total"] // comm.size                  # (about) each rank's words, both epochs
        left = record["rounds"] - 2
        assert left == 1 if seconds == "1000" else left >= (shard - 2 * 20000) // cal["sync_every"] - 1
        if comm.is_root:
            steps = [m["step"] for m in res.metrics]
            assert steps[-1] == record["rounds"] == res.metrics[-1]["rounds"]
            assert res.metrics[-1]["words"] == res.config["words_total"]      # every word, once
            assert res.metrics[-1]["syncs"] == record["rounds"]
