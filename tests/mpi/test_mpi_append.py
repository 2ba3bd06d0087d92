"""``preprocess --append`` on a job of ranks: a failure where rank 0 opens the corpus it grows
for the copy of its segments stops every rank with one agreed error, and the corpus stays."""

import pytest

from mpidwe.core.config import PreprocessConfig
from mpidwe.core.errors import InputError, MpidweError
from mpidwe.parallel.comm import Comm
from mpidwe.io import corpus as corpus_io
from mpidwe.preprocess import pipeline, run


class _GoneAtCopy:
    """mpidwe.io.corpus as the pipeline sees it, but the corpus cannot be opened any more
    when the pipeline opens it to copy its segments (deleted or damaged since pass 1)."""

    def __getattr__(self, name):
        return getattr(corpus_io, name)

    @staticmethod
    def Corpus(path, *args, **kwargs):
        raise InputError(f"{path} is damaged: simulated at the copy of its segments")


@pytest.mark.parallel(2)
def test_a_failure_opening_the_base_for_the_copy_stops_every_rank_with_one_line(job_tmp, monkeypatch):
    comm = Comm.world()
    base, text = job_tmp / "base.h5", job_tmp / "new.txt"
    if comm.is_root:
        (job_tmp / "old.txt").write_text("a b c d a b c a b a\n" * 20)
        text.write_text("a b e f e f e f e f\n" * 20)
    comm.barrier()
    run(PreprocessConfig(inputs=(str(job_tmp / "old.txt"),), output=str(base), min_count=1), comm, log=None)
    with corpus_io.Corpus(str(base)) as c:
        before = c.corpus_id
    if comm.is_root:
        monkeypatch.setattr(pipeline, "corpus_io", _GoneAtCopy())
    with pytest.raises(MpidweError, match="simulated at the copy") as e:
        run(PreprocessConfig(inputs=(str(text),), append=str(base)), comm, log=None)
    assert getattr(e.value, "agreed", False)          # raised on every rank at the same collective
    monkeypatch.undo()
    comm.barrier()
    with corpus_io.Corpus(str(base)) as c:
        assert c.corpus_id == before and len(c.segment_table) == 1
