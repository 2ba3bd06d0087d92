"""Run under mpiexec -n P: train, then check every rank holds the same parameters.

usage: check_train.py CORPUS OUT SYNC [extra train flags...]; prints 'params <sha256>'."""

import hashlib
import sys

from mpidwe.dist.comm import Comm
from mpidwe.core.config import TrainConfig, parse_command
from mpidwe.train import run

corpus, out, sync, *extra = sys.argv[1:]
comm = Comm.world()
cfg = parse_command(TrainConfig, ["--corpus", corpus, "--out", out, "--sync", sync, "--threads", "1",
                                  "--no-progress", *extra], prog="check_train", description="")
res = run(cfg, comm, log=None)
digest = hashlib.sha256(res.w_in.tobytes() + res.w_out.tobytes()).hexdigest()
everyone = comm.allgather(digest)
assert len(set(everyone)) == 1, f"ranks differ after training: {everyone}"
if comm.is_root:
    print("params", digest, "words", res.words_total, "metrics", len(res.metrics))
