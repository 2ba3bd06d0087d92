"""The SPPMI reference and the PIP loss computed by a job equal one process's, on every rank."""

import numpy as np
import pytest

from mpidwe.parallel.comm import Comm
from mpidwe.evaluate import pip, sppmi
from mpidwe.io.corpus import Corpus

from conftest import made_once
from test_pip import SPEC, make_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return str(made_once("MPIDWE_TEST_PIP_CORPUS", lambda: make_corpus(tmp_path_factory.mktemp("pip"))))


@pytest.mark.parallel([2, 3])
def test_cooccurrence_counts_summed_over_the_ranks_are_the_counts_of_one_process(corpus):
    comm = Comm.world()
    with Corpus(corpus) as c:
        local = sppmi.count_cooccurrences(c, 3, 30, rank=comm.rank, world_size=comm.size)
        serial = sppmi.count_cooccurrences(c, 3, 30)
    total = sppmi.sum_over_ranks(local, comm, chunk_entries=7)  # many gather rounds
    if comm.is_root:
        np.testing.assert_array_equal(total.toarray(), serial.toarray())
    else:
        assert total is None


@pytest.mark.parallel([2, 3])
def test_the_reference_of_a_job_is_the_reference_of_one_process_on_every_rank(corpus):
    comm = Comm.world()
    ref = sppmi.reference_embedding(corpus, SPEC, comm, cache=False)
    np.testing.assert_allclose(ref.vectors, sppmi.reference_embedding(corpus, SPEC, cache=False).vectors, atol=1e-6)
    assert len(set(comm.allgather(ref.vectors.tobytes()))) == 1


@pytest.mark.parallel([2, 3])
def test_pip_of_a_job_is_the_pip_of_one_process_on_every_rank(corpus):
    comm = Comm.world()
    ref = sppmi.reference_embedding(corpus, SPEC, cache=False)
    e = np.random.default_rng(0).standard_normal((ref.vectors.shape[0], 6))
    rep = pip.pip_report(e, ref.vectors, rank=comm.rank, world_size=comm.size, reduce=comm.allreduce_)
    serial = pip.pip_report(e, ref.vectors)
    for k in ("pip", "norm", "reference_norm", "normalized"):
        assert rep[k] == pytest.approx(serial[k], rel=1e-9), k
    assert all(r == rep for r in comm.allgather(rep)), "ranks report different PIP numbers"
