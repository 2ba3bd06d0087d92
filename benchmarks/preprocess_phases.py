"""Where a preprocess run's time goes: seconds per phase, from the launch, at 1 and 2 ranks.

    python benchmarks/preprocess_phases.py [--input ../shared/data/enwiki-extract-100M.txt.gz ...]
                                           [--repeat N] [--ranks 1 2] [--workdir DIR]

Each run is ``mpiexec -n P`` of this script in child mode, which runs ``mpidwe.preprocess``'s
own ``main`` (as the command does: numba warmed up in the background) with every
``Comm.agree`` timed on every rank (wall and the process's CPU seconds), and writes the times
to a file. The parent turns rank 0's times into phases: start (interpreter, imports, MPI, up
to the plan), the plan (rank 0 decompresses a gzip input for several ranks), pass 1
(tokenize and count), the vocabulary (gather and fix it on rank 0), pass 2 and the sentence
cuts, create and write, the chunk digests (every rank its share), the corpus id and seal
(rank 0), and the exit (the interpreter's teardown, up to the launcher's end).

Then the serial share, from every rank's steps rather than the wall (ranks oversubscribed on
few cores run their parallel steps no faster than one): serial = the seconds of the steps
only rank 0 works in (plan, vocabulary, create, seal) while the others wait, in rank 0's CPU
seconds (its wall there grows with the waiting ranks' busy polling on shared cores, listed
too); parallel work
= every rank's CPU seconds in the steps all ranks work in (pass 1, pass 2, write, digests),
summed; serial share = serial / (serial + parallel work). The start and the exit (fixed
costs of a launch, paid by every rank at once) are listed apart. ``--repeat N`` runs on N
copies of the decompressed input instead. Several ``--input`` files are one input, in order
(a dump in shards). Options as benchmarks/preprocess.py (text8, doc tags dropped,
min-count 5).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
sys.path.insert(0, str(ROOT))

OPTIONS = ["--normalize", "text8", "--strip-doc-tags", "--min-count", "5"]


def child(trace: str, argv: list[str]) -> int:
    """One rank: the command with every agreed step timed (seconds since the launch)."""
    t0 = float(os.environ["PHASES_T0"])
    from mpidwe.parallel import comm as comm_mod
    from mpidwe import preprocess

    steps = []
    agree = comm_mod.Comm.agree

    def timed(self, fn, *args, **kwargs):
        a, own = time.time() - t0, [0.0]

        def step(*args, **kwargs):        # the step's own CPU seconds, not the wait in agree's allgather
            cpu = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                own[0] = time.process_time() - cpu

        try:
            return agree(self, step, *args, **kwargs)
        finally:
            steps.append((getattr(fn, "__name__", str(fn)), a, time.time() - t0, own[0]))

    comm_mod.Comm.agree = timed
    rc = preprocess.main(argv, as_command=True)
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    with open(f"{trace}.{rank}", "w") as fh:
        json.dump({"steps": steps, "end": time.time() - t0}, fh)
    return rc


# The function each step of preprocess/pipeline.py runs under Comm.agree on rank 0, in order:
# plan_ranges, count_tokens_of_ranks, fix_vocabulary, map_ids, create_file, write_slices,
# digest_chunks, seal_and_rename.
STEPS = ("plan_inputs", "count_compiled", "_vocabulary", "_final_ids", "_create_corpus_file", "_write_slice",
         "_slice_digests", "_seal_and_rename")
SERIAL = ("plan_inputs", "_vocabulary", "_create_corpus_file", "_seal_and_rename")     # rank 0 alone
PARALLEL = ("count_compiled", "_final_ids", "_write_slice", "_slice_digests")          # every rank


def phases(trace: dict, wall: float) -> dict[str, float]:
    """Rank 0's steps as phases."""
    at = {step[0]: step[1:3] for step in trace["steps"]}
    at.setdefault("_slice_digests", (at["_write_slice"][1],) * 2)   # code before the chunk digests
    plan, count, vocab, ids, create, write, digest, finish = (at[name] for name in STEPS)
    return {
        "start (interpreter, imports, MPI)": plan[0],
        "plan (rank 0 decompresses a gzip for several ranks)": plan[1] - plan[0],
        "pass 1: tokenize, count, spool raw ids": count[1] - count[0],
        "gather the tables, fix the vocabulary (rank 0)": vocab[1] - count[1],
        "pass 2 and the sentence cuts": create[0] - vocab[1],
        "create the file, every rank writes its slices": write[1] - create[0],
        "every rank digests its share of the chunks": digest[1] - digest[0],
        "rank 0: corpus id from the digests, seal, fsync": finish[1] - finish[0],
        "exit (the interpreter's teardown, the launcher)": wall - finish[1],
        "total (wall of the launch)": wall,
    }


def serial_share(traces: list[dict], wall: float) -> dict[str, float]:
    """The serial share of a run from every rank's steps (see the module docstring)."""
    at = {step[0]: step[1:] for step in traces[0]["steps"]}
    serial_wall = sum(at[name][1] - at[name][0] for name in SERIAL)
    serial = sum(at[name][2] for name in SERIAL)
    cpu = [sum(step[3] for step in t["steps"] if step[0] in PARALLEL) for t in traces]
    fixed = at["plan_inputs"][0] + wall - at["_seal_and_rename"][1]
    return {"serial s (rank 0 alone), wall": serial_wall, "serial s (rank 0 alone), CPU": serial,
            "parallel work, CPU s summed": sum(cpu),
            "parallel work, CPU s of the busiest rank": max(cpu), "busiest / mean rank": max(cpu) / (sum(cpu) / len(cpu)),
            "start + exit s": fixed, "serial share": serial / (serial + sum(cpu)),
            "serial share with start + exit": (serial + fixed) / (serial + fixed + sum(cpu))}


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3:])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", nargs="+", default=[str(DATA / "enwiki-extract-100M.txt.gz")])
    p.add_argument("--repeat", type=int, default=0, help="run on N copies of the decompressed input")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--workdir", default=None, help="where the input copy and corpora go (default: a temp dir)")
    a = p.parse_args()
    from mpidwe.demo import mpi_launch
    from mpidwe.io.text import describe_source, open_reader

    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        sources = a.input
        if a.repeat:
            source = os.path.join(tmp, f"plain-x{a.repeat}.txt")
            with open(source, "wb") as dst:
                for _ in range(a.repeat):
                    with open_reader(describe_source(a.input[0])) as src:
                        while block := src.read(1 << 24):
                            dst.write(block)
            sources = [source]
        table, shares = {}, {}
        for n in a.ranks:
            out, trace = os.path.join(tmp, f"c{n}.h5"), os.path.join(tmp, f"trace{n}")
            cmd = mpi_launch(n, [__file__, "--child", trace, *sources, "--output", out, *OPTIONS])
            t0 = time.time()
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, PHASES_T0=repr(t0), OMPI_ALLOW_RUN_AS_ROOT="1",
                                    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1"))
            wall = time.time() - t0
            traces = [json.load(open(f"{trace}.{r}")) for r in range(n)]
            table[n], shares[n] = phases(traces[0], wall), serial_share(traces, wall)
            os.unlink(out)
    what = " ".join(a.input) + (f" x{a.repeat} (plain)" if a.repeat else "")
    print(f"input: {what}; seconds, rank 0's view")
    print(f"{'phase':55s}" + "".join(f"{f'{n} rank(s)':>12s}" for n in a.ranks))
    for name in table[a.ranks[0]]:
        print(f"{name:55s}" + "".join(f"{table[n][name]:12.2f}" for n in a.ranks))
    for name in shares[a.ranks[0]]:
        print(f"{name:55s}" + "".join(f"{shares[n][name]:12.3f}" for n in a.ranks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
