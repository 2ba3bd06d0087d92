"""``python -m mpidwe.demo`` (what ``make demo`` runs): the whole pipeline on the
embedded default, the synthetic demo corpus whose right answers are known.

1. generate the demo corpus (``mpidwe.synth``) if it is missing;
2. preprocess it with ``--ranks`` MPI ranks (``mpiexec -n R python -m mpidwe.preprocess``);
3. train skip-gram on the same ranks, evaluating against the planted answer key;
4. evaluate the exported vectors and inspect the final checkpoint.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from .core.prog import prog
from .io.corpus import Corpus


def mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else (shutil.which("mpiexec") or "mpiexec")


def mpi_launch(ranks: int, args: list[str]) -> list[str]:
    """``mpiexec -n R python ARGS`` with the flags this MPI needs to run anywhere
    (Open MPI refuses more ranks than cores without --oversubscribe)."""
    cmd = [mpiexec(), "-n", str(ranks)]
    version = subprocess.run([mpiexec(), "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:     # more ranks than cores; threads beyond a core
        cmd += ["--oversubscribe", "--bind-to", "none"]
    return cmd + [sys.executable] + args


def step(title: str, cmd: list[str]) -> None:
    print(f"\n== {title}\n$ {' '.join(cmd)}", flush=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    rc = subprocess.call(cmd, env=env)
    if rc != 0:
        raise SystemExit(f"mpidwe.demo: error: step '{title}' failed with exit code {rc}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=prog("demo"), description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="demo", help="where the demo's files go (default: demo)")
    p.add_argument("--ranks", type=int, default=2, help="MPI ranks (default: 2)")
    p.add_argument("--tokens", type=int, default=3_000_000, help="demo corpus size in tokens")
    a = p.parse_args(argv)
    if a.ranks < 1:
        p.error("--ranks must be >= 1")
    os.makedirs(a.dir, exist_ok=True)
    text = os.path.join(a.dir, "demo.txt")
    corpus = os.path.join(a.dir, "corpus.h5")
    if not os.path.exists(text):
        step("generate the demo corpus", [sys.executable, "-m", "mpidwe.synth", "--output", a.dir,
                                          "--tokens", str(a.tokens)])
    step(f"preprocess on {a.ranks} rank(s)",
         mpi_launch(a.ranks, ["-m", "mpidwe.preprocess", text, "--output", corpus, "--force"]))
    with Corpus(corpus) as c:
        attrs = c.attrs
        print(f"\n== wrote {corpus}\n   format {attrs['format']} v{attrs['format_version']}, "
              f"corpus id {c.corpus_id[:16]}")
        print(f"   {c.n_words:,} words, {c.n_tokens:,} tokens, {c.n_sentences:,} sentences")
        print(f"   most frequent: {' '.join(c.words[:10])}")
        print(f"   shards for {a.ranks} ranks: " + ", ".join(
            f"r{r}={c.shard(r, a.ranks).n_tokens:,}" for r in range(a.ranks)))
        cluster_word = c.words[min(60, c.n_words - 1)]
    run_dir = os.path.join(a.dir, "run")
    sim = os.path.join(a.dir, "demo-similarity.tsv")
    ana = os.path.join(a.dir, "demo-analogies.txt")
    step(f"train skip-gram on {a.ranks} rank(s)",
         mpi_launch(a.ranks, ["-m", "mpidwe.train", "--corpus", corpus, "--out", run_dir, "--epochs", "2",
                              "--eval-sim", sim, "--eval-analogy", ana, "--checkpoint-every", "1000000",
                              "--force"]))
    step("evaluate the exported vectors",
         [sys.executable, "-m", "mpidwe.evaluate", os.path.join(run_dir, "vectors.txt"),
          "--similarity", sim, "--analogy", ana])
    step("inspect the final checkpoint", [sys.executable, "-m", "mpidwe.inspect", run_dir])
    step(f"nearest neighbours of {cluster_word!r}",
         [sys.executable, "-m", "mpidwe.inspect", run_dir, "neighbors", cluster_word, "-k", "5"])
    step("plot the training curves",
         [sys.executable, "-m", "mpidwe.inspect", run_dir, "plot", "-o", os.path.join(run_dir, "curves.png")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
