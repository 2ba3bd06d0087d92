"""What the GPU path dispatches: aten ops, host synchronisations and bytes per 1M trained words.

    python benchmarks/gpu_dispatch.py [--tokens 1000000] [--epochs 2] [--batch-size 8192]

Trains the demo corpus (``mpidwe.synth``, generated into a temporary directory) with
``--kernel torch --device cpu`` at one rank, through ``mpidwe.train.run`` (the real round loop:
Backend, syncs, checkpoint, export), under a ``TorchDispatchMode`` that sees every aten op the
process dispatches. The same op stream runs on CUDA, so the counts are what a GPU would be
asked to do; no GPU is needed. Counting is deterministic: tests/test_gpu_path.py asserts
the targets (issue 11: at most 2,000 ops and 50 host syncs per 1M trained words).

A *host sync* is an operation that makes the host wait for the device on CUDA (a
device-to-host read of a value). Counted as one:

* the aten ops in ``SYNC_OPS``: ``_local_scalar_dense`` (``.item()``, ``int()``, ``float()``,
  ``bool()`` of a tensor), ``nonzero`` (and ``torch.where(cond)``, ``argwhere``),
  ``masked_select``, ``unique`` in every form, ``repeat_interleave`` with a tensor of repeats
  and no ``output_size``, ``bincount``, ``histc``, ``equal``, ``is_nonzero``, ``allclose``;
* ``index``/``index_put_`` with a boolean mask index (``x[mask]``, ``x[mask] = v``), whose
  output size is the mask's count;
* reads the dispatcher does not see on a CPU tensor: ``Tensor.tolist``, ``Tensor.numpy`` and
  ``Tensor.__array__`` (on CUDA each needs a device-to-host copy first).

*Launches* are the ops that are not views (views and metadata ops launch no kernel).
*Bytes* is a roofline estimate of memory traffic: every non-view op reads its tensor inputs
and writes its outputs, except the embedding gathers and scatters, which touch only the rows
they index (``index`` reads the rows it returns; ``index_add_`` reads and writes one row per
source row). docs/lab/benchmarks.md turns these into a words/s bound for one H100.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNC_OPS = frozenset({
    "_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique", "_unique2",
    "unique_dim", "unique_consecutive", "unique_dim_consecutive", "bincount", "histc",
    "equal", "is_nonzero", "allclose", "item",
})
# repeat_interleave syncs when it must count its output: a tensor of repeats, no output_size
REPEAT_INTERLEAVE = "repeat_interleave"
MASK_INDEX_OPS = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})
# ops that only make a new view of existing memory (no kernel launch, no bytes)
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "transpose", "t", "expand", "slice", "select", "split",
    "split_with_sizes", "unsqueeze", "squeeze", "as_strided", "permute", "alias", "detach",
    "lift_fresh", "unbind", "narrow", "chunk", "view_as", "expand_as", "diagonal", "unfold",
    "_reshape_alias", "empty", "empty_like", "empty_strided", "set_", "resize_",
})
HOST_READS = ("tolist", "numpy", "__array__")


def _name(func) -> str:
    return func._schema.name.split("::")[-1]


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


@dataclass
class Counts:
    ops: int = 0
    launches: int = 0
    syncs: int = 0
    bytes: int = 0
    by_op: collections.Counter = field(default_factory=collections.Counter)
    syncs_by_op: collections.Counter = field(default_factory=collections.Counter)

    def per_million(self, words: int) -> dict:
        f = 1e6 / max(words, 1)
        return {"ops": self.ops * f, "launches": self.launches * f, "syncs": self.syncs * f,
                "bytes": self.bytes * f}


class DispatchCounter(TorchDispatchMode):
    """Counts every aten op, the host syncs among them, launches and bytes (see module doc)."""

    def __init__(self):
        super().__init__()
        self.counts = Counts()

    def sync(self, what: str) -> None:
        self.counts.syncs += 1
        self.counts.syncs_by_op[what] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = _name(func)
        c = self.counts
        c.ops += 1
        c.by_op[name] += 1
        if name in SYNC_OPS:
            self.sync(name)
        elif name == REPEAT_INTERLEAVE and kwargs.get("output_size") is None and (
                len(args) > 1 and isinstance(args[1], torch.Tensor) or len(args) == 1):
            self.sync(name)
        elif name in MASK_INDEX_OPS and len(args) > 1 and any(
                t is not None and t.dtype in (torch.bool, torch.uint8) for t in _tensors(args[1])):
            self.sync(name + "[mask]")
        if name not in VIEW_OPS:
            c.launches += 1
            c.bytes += _op_bytes(name, args, out)
        return out


def _op_bytes(name, args, out) -> int:
    outs = sum(_nbytes(t) for t in _tensors(out))
    if name == "index":                       # rows read + written, plus the index
        return 2 * outs + sum(_nbytes(t) for t in _tensors(args[1]))
    if name in ("index_add", "index_add_", "index_copy", "index_copy_"):
        src, index = args[3], args[2]
        return 3 * _nbytes(src) + _nbytes(index)
    ins = sum(_nbytes(t) for a in args for t in _tensors(a))
    return ins + (0 if name.endswith("_") else outs)   # in-place: the output is an input


@contextlib.contextmanager
def counting(run_fused: bool = True, fused: bool = False):
    """A DispatchCounter, plus the host reads the dispatcher does not see, plus (``fused``)
    the fused kernel's Triton launches (``triton_kernel.launch``; the dispatcher does not see
    them): one op and one launch each. ``run_fused=False`` counts them without running them
    (on a CPU they run only under ``TRITON_INTERPRET=1``, slowly; the op stream does not
    depend on the parameters' values, so the counts are the same, the model is not).
    triton_kernel is imported only when ``fused``: Triton decides at that import whether its
    kernels are interpreted."""
    counter = DispatchCounter()
    originals = {m: getattr(torch.Tensor, m) for m in HOST_READS}
    if fused:
        from mpidwe.kernels import triton_kernel
        real_launch = triton_kernel.launch

    def launch(kernel, grid, *args):
        counter.counts.ops += 1
        counter.counts.launches += 1
        counter.counts.by_op["triton:" + getattr(kernel, "__name__", getattr(getattr(kernel, "fn", None), "__name__",
                                                                           "kernel"))] += 1
        if run_fused:
            with torch.utils._python_dispatch._disable_current_modes():
                real_launch(kernel, grid, *args)

    def wrap(method):
        def read(self, *a, **k):
            counter.sync(f"Tensor.{method}")
            return originals[method](self, *a, **k)
        return read

    for m in HOST_READS:
        setattr(torch.Tensor, m, wrap(m))
    if fused:
        triton_kernel.launch = launch
    try:
        with counter:
            yield counter
    finally:
        if fused:
            triton_kernel.launch = real_launch
        for m, f in originals.items():
            setattr(torch.Tensor, m, f)


def count_training(corpus: str, out: str, run_fused: bool = True, **options) -> tuple[Counts, int, float]:
    """Train with the torch kernel (``kernel="triton"``: the fused one) on the CPU under the
    counter: (counts, words, seconds)."""
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import TrainConfig
    from mpidwe.train import run

    cfg = TrainConfig(**dict(dict(corpus=corpus, out=out, kernel="torch", device="cpu", progress=False,
                                  force=True), **options))
    t = time.perf_counter()
    with counting(run_fused, fused=cfg.kernel == "triton") as counter:
        res = run(cfg, Comm.serial(), log=None)
    return counter.counts, res.words_total, time.perf_counter() - t


def make_demo(directory: Path, tokens: int, seed: int = 1) -> str:
    from mpidwe.parallel.comm import Comm
    from mpidwe.core.config import PreprocessConfig, SynthConfig
    from mpidwe.preprocess import run as preprocess
    from mpidwe.synth import write_demo

    write_demo(SynthConfig(output=str(directory), tokens=tokens, seed=seed))
    corpus = directory / "corpus.h5"
    preprocess(PreprocessConfig(inputs=(str(directory / "demo.txt"),), output=str(corpus)), Comm.serial(),
               log=None)
    return str(corpus)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=1_000_000, help="demo corpus size")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=None, help="default: TrainConfig's")
    p.add_argument("--model", default="skipgram", choices=["skipgram", "cbow"])
    p.add_argument("--kernel", default="torch", choices=["torch", "triton"],
                   help="triton: the fused kernel's launches are counted, not run (unless TRITON_INTERPRET=1)")
    p.add_argument("--no-shared-negatives", action="store_true")
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--top", type=int, default=12, help="ops to list")
    a = p.parse_args(argv)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    opts = dict(epochs=a.epochs, model=a.model, dim=a.dim, shared_negatives=not a.no_shared_negatives,
                kernel=a.kernel)
    if a.batch_size:
        opts["batch_size"] = a.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        corpus = make_demo(Path(tmp), a.tokens)
        run_fused = os.environ.get("TRITON_INTERPRET") == "1"
        if a.kernel == "triton":     # the plan allows triton on the CPU only so; its launches are stubbed
            os.environ["TRITON_INTERPRET"] = "1"
        counts, words, seconds = count_training(corpus, str(Path(tmp) / "run"), run_fused=run_fused, **opts)
    per = counts.per_million(words)
    print(f"{a.kernel} kernel on CPU, 1 rank, demo corpus {a.tokens:,} tokens x {a.epochs} epochs = {words:,} "
          f"trained words, {opts}")
    print(f"per 1M trained words: {per['ops']:,.0f} dispatched ops, {per['launches']:,.0f} launches "
          f"(non-view ops), {per['syncs']:,.1f} host syncs, {per['bytes'] / 1e6:,.0f} MB moved "
          f"({per['bytes'] / 1e6:,.1f} bytes/word)")
    print(f"whole run: {counts.ops:,} ops, {counts.syncs} host syncs, {seconds:.1f} s on this CPU "
          f"(with the counter)")
    print("host syncs by op:", dict(counts.syncs_by_op.most_common()))
    print("most dispatched ops:", ", ".join(f"{k} {v:,}" for k, v in counts.by_op.most_common(a.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
