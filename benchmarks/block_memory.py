"""The arrays one rank of ``--store blocks`` holds, for a vocabulary of V words and dim d.

    python benchmarks/block_memory.py --vocab 145785 --dim 100 --ranks 16 [--rank 0] [--wire int8|int16|auto]

One process stands in for rank RANK of RANKS (the store's constructor asks its communicator
only for the rank and the size): it makes the rank's fresh rows (``blocks.fresh_params``) and
builds the store under tracemalloc, which traces numpy's allocations, then prints one JSON
line: the peak and held bytes of that start, the bytes of the rows the rank trains
(``block_param_bytes``) and of a lossy ring's residuals as they stand after a pass (every
block sent once). The counts are Zipf's; the block sizes depend only on V and P.
docs/lab/blocks.md, "Memory per rank", has the figures.
"""

from __future__ import annotations

import argparse
import json
import tracemalloc
from types import SimpleNamespace

import numpy as np

from mpidwe.core.config import TrainConfig
from mpidwe.parallel import blocks, wire
from mpidwe.parallel.store import StoreSetup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=145_785)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--wire", default="fp32", choices=["fp32", "bf16", "int8", "int16", "auto"])
    a = ap.parse_args()
    v, d, p = a.vocab, a.dim, a.ranks
    counts = (1e7 / np.arange(1, v + 1)).astype(np.int64) + 5
    cfg = TrainConfig(store="blocks", dim=d, seed=1, wire=a.wire)
    comm = SimpleNamespace(rank=a.rank, size=p, stats=None)
    one = np.zeros((1, d), np.float32)      # numba's loading of the wire kernels (which the store
    for name in ("bf16", "int8", "int16"):  # does at start) is not the store's memory
        wire.decode(wire.encode(one, name), name, d)
        wire.encode(one, "int8", feedback=(one.copy(), np.ones(1, np.uint8)))
    wire.encode_carried(one, np.zeros((1, wire.row_bytes("int8", d)), np.uint8))
    tracemalloc.start()
    w_in, w_out = blocks.fresh_params(cfg, comm, v, counts)
    store = blocks.BlockStore(comm, w_in, w_out, StoreSetup(cfg, 1, "cpu", v, 1, None, counts))
    del w_in, w_out
    held_now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if store.residual is not None:          # as a pass leaves them: int8 rows for int8, float32 for bf16
        width, kind = store.residual_row()
        store.residual = [np.zeros((store.size(b), width), kind) for b in range(p)]
    rows, residual = store.param_bytes()
    print(json.dumps({"vocab": v, "dim": d, "ranks": p, "rank": a.rank, "wire": store.wire,
                      "start_peak_bytes": peak, "start_held_bytes": held_now, "block_param_bytes": rows,
                      "residual_bytes_after_a_pass": residual, "two_v_d_over_p_bytes": 2 * v * d * 4 // p,
                      "v_d_bytes": v * d * 4}))


if __name__ == "__main__":
    main()
