"""Which device and kernel a run trains with, and why, without a GPU: --device cuda without
one is one line and exit 2 (before the corpus is opened), --device auto and --kernel torch
on the CPU say what they chose in the run's first log line, and a node with CUDA (mocked)
puts the torch kernel's parameters on cuda:N."""

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mpidwe.core.config import TrainConfig  # noqa: E402
from mpidwe.core.errors import EXIT_USAGE, ConfigError, MpidweError  # noqa: E402
from mpidwe.parallel import torchdist  # noqa: E402
from mpidwe.parallel.comm import Comm  # noqa: E402
from mpidwe.parallel.store import StoreSetup  # noqa: E402
from mpidwe.train import plan as plan_module  # noqa: E402
from mpidwe.train.plan import choose_compute, resolve_device, resolve_kernel  # noqa: E402
from mpidwe.train.rundir import summary_line  # noqa: E402
from mpidwe.train.runner import store_class  # noqa: E402

from conftest import error_lines, run_py  # noqa: E402


def cfg(**kw):
    return TrainConfig(out="unused", **kw)


def node(rank: int = 0):
    """A Comm-like view of a rank that is ``rank``-th on its node (all resolve_device reads)."""
    return SimpleNamespace(node_rank=rank)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(plan_module, "_nvidia_gpus_visible", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    """A node whose driver lists GPUs and where torch sees two (nothing touches them)."""
    monkeypatch.setattr(plan_module, "_nvidia_gpus_visible", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


# ------------------------------------------------------------------ without a GPU
def test_auto_chooses_numba_on_the_cpu_and_says_why(no_gpu):
    device, why = resolve_device(cfg(), node())
    assert (device, why) == ("cpu", "auto: no NVIDIA GPU found")
    assert resolve_kernel(cfg(), device) == ("numba", "")
    assert choose_compute(cfg(), Comm.serial()).why == "auto: no NVIDIA GPU found"
    assert choose_compute(cfg(device="cpu"), Comm.serial()).why == "", "the options said it all"


def test_auto_with_a_driver_but_no_usable_cuda_says_torch_saw_none(no_gpu, monkeypatch):
    monkeypatch.setattr(plan_module, "_nvidia_gpus_visible", lambda: True)
    assert resolve_device(cfg(), node()) == ("cpu", "auto: PyTorch sees no usable CUDA device")


def test_device_cuda_without_a_gpu_is_a_usage_error(no_gpu):
    with pytest.raises(ConfigError, match="--device cuda: no usable CUDA device on this node") as e:
        resolve_device(cfg(device="cuda"), node())
    assert e.value.exit_code == EXIT_USAGE


def test_kernel_torch_on_the_cpu_says_so(no_gpu):
    device, _ = resolve_device(cfg(kernel="torch"), node())
    kernel, why = resolve_kernel(cfg(kernel="torch"), device)
    assert (device, kernel, why) == ("cpu", "torch", "--kernel torch on the CPU, where numba is faster")


def test_the_first_log_line_states_the_choice_and_its_reason(no_gpu):
    choice = choose_compute(cfg(kernel="torch"), Comm.serial())
    resolved = dict(model="skipgram", dim=8, window=5, loss="ns", negative=5, subwords=False, store="replicated",
                    balance="off", exchange="mpi", epochs=1, words_total=10, vocab_size=3, corpus="c.h5",
                    ranks=1, threads=1, kernel=choice.kernel, device=choice.device, compute_choice=choice.why,
                    sync="sparse", sync_every=5000, lr=0.025, lr_scale=1)
    line = summary_line(resolved, "config.json")
    assert ", torch on cpu (auto: no NVIDIA GPU found; --kernel torch on the CPU, where numba is faster), " in line


def test_kernel_triton_on_the_cpu_is_a_test_mode_only(no_gpu, monkeypatch):
    monkeypatch.setattr(plan_module, "_triton_available", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ConfigError, match=r"^--kernel triton runs on CUDA \(on the CPU only under TRITON_INTERPRET=1"):
        choose_compute(cfg(kernel="triton"), Comm.serial())
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_kernel(cfg(kernel="triton"), "cpu") == (
        "triton", "--kernel triton on the CPU under TRITON_INTERPRET=1 (a test mode, slow)")


def test_exchange_torch_needs_the_torch_kernel(no_gpu):
    with pytest.raises(ConfigError, match="--exchange torch moves the torch kernel's rows, but this run trains "
                                          "with numba"):
        choose_compute(cfg(exchange="torch"), Comm.serial())
    with pytest.raises(MpidweError, match="--exchange torch"):
        cfg(exchange="torch", kernel="numba")
    for bad in (dict(wire="bf16", sync="dense"), dict(allreduce="ring"), dict(store="sharded")):
        with pytest.raises(MpidweError, match="--exchange torch"):
            cfg(exchange="torch", kernel="torch", **bad)


def test_device_cuda_fails_at_once_in_one_line_before_the_corpus_is_read(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a usable CUDA device")
    # a corpus that does not exist: the device is checked first, so its error is the one seen
    proc = run_py(["-m", "mpidwe.train", "--device", "cuda", "--corpus", str(tmp_path / "none.h5"),
                   "--out", str(tmp_path / "run")], timeout=120)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert error_lines(proc.stderr) == [
        "python -m mpidwe.train: error: --device cuda: no usable CUDA device on this node "
        "(torch.cuda.is_available() is False); use --device auto or cpu"], proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ with CUDA (mocked)
def test_auto_on_a_node_with_cuda_chooses_the_fused_kernel_on_cuda_n(two_gpus, monkeypatch):
    device, why = resolve_device(cfg(), node(3))
    assert device == "cuda:1", "node rank 3 of a node with 2 GPUs takes GPU 3 % 2"
    assert why == "auto: 2 CUDA device(s) found"
    monkeypatch.setattr(plan_module, "_triton_available", lambda: True)
    assert resolve_kernel(cfg(), device) == ("triton", "")
    # where the fused kernel does not apply, or triton is missing: the torch kernel, and why
    assert resolve_kernel(cfg(model="cbow"), device) == (
        "torch", "auto: torch kernel, not triton (the fused kernel trains skip-gram with shared negatives and "
                 "negative sampling only)")
    assert resolve_kernel(cfg(loss="hs"), device)[0] == "torch"
    assert resolve_kernel(cfg(shared_negatives=False), device)[0] == "torch"
    monkeypatch.setattr(plan_module, "_triton_available", lambda: False)
    assert resolve_kernel(cfg(), device) == ("torch", "auto: torch kernel, not triton (triton is not installed)")
    with pytest.raises(ConfigError, match="^--kernel triton needs the triton package"):
        resolve_kernel(cfg(kernel="triton"), device)
    assert resolve_device(cfg(device="cuda"), node(0))[0] == "cuda:0"
    with pytest.raises(ConfigError, match="--kernel numba runs on the CPU only"):
        resolve_kernel(cfg(kernel="numba"), device)
    assert torchdist.backend_for(device) == "nccl" and torchdist.backend_for("cpu") == "gloo"


def test_auto_on_cuda_refuses_what_the_device_store_cannot_do(two_gpus):
    """--kernel auto picks triton or torch on a CUDA node, whose store has no overlap: said in
    one line, not ignored (config.py can only check a kernel the user names); tiers it has
    (its syncs are combined on the host, with --exchange mpi)."""
    with pytest.raises(ConfigError, match="^--overlap needs the numba kernel on the CPU"):
        choose_compute(cfg(overlap=True), Comm.serial())
    assert choose_compute(cfg(device="cpu", overlap=True), Comm.serial()).kernel == "numba"
    assert choose_compute(cfg(sync_full=8, sync="dense"), Comm.serial()).kernel in ("torch", "triton")
    with pytest.raises(ConfigError, match="--sync-full > 1 combines rows in tiers on the replicated store with "
                                          "--exchange mpi"):
        cfg(sync_full=8, exchange="torch", kernel="torch")


def test_the_block_store_on_a_cuda_node_trains_with_numba_on_the_cpu_and_says_so(two_gpus, monkeypatch):
    """--store blocks trains on a GPU with --kernel torch only: on a GPU node --device auto
    must not name cuda and the fused kernel in the first log line while the store trains
    with numba; --kernel torch takes the GPU."""
    monkeypatch.setattr(plan_module, "_triton_available", lambda: True)
    choice = choose_compute(cfg(store="blocks"), Comm.serial())
    assert (choice.device, choice.kernel) == ("cpu", "numba")
    assert choice.why == "--store blocks: numba on the CPU (give --kernel torch for the GPU; 2 CUDA device(s) found, unused)"
    assert choose_compute(cfg(), Comm.serial()).kernel == "triton"      # auto stays on the GPU
    choice = choose_compute(cfg(store="blocks", kernel="torch"), Comm.serial())
    assert (choice.device, choice.kernel) == ("cuda:0", "torch")


def test_on_cuda_the_store_puts_the_parameters_on_the_gpu(two_gpus, monkeypatch):
    """The whole choice on a (mocked) CUDA node: the plan's device and kernel give the device
    store, whose parameters and touched masks are created on cuda:0 (the mock records where
    each tensor is asked to live and keeps it on the CPU)."""
    from mpidwe.parallel.device import DeviceStore

    monkeypatch.setattr(plan_module, "_triton_available", lambda: True)
    config = cfg(exchange="torch")
    choice = choose_compute(config, Comm.serial())
    assert (choice.device, choice.kernel) == ("cuda:0", "triton")
    assert store_class(config, SimpleNamespace(kernel=choice.kernel)) is DeviceStore
    asked = []
    real_to, real_zeros = torch.Tensor.to, torch.zeros

    def to(self, device, *args, **kw):
        asked.append(torch.device(device))
        return real_to(self, "cpu", *args, **kw)

    def zeros(*shape, device=None, **kw):
        asked.append(torch.device(device))
        return real_zeros(*shape, **kw)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch, "zeros", zeros)
    w_in, w_out = np.ones((5, 4), np.float32), np.zeros((5, 4), np.float32)
    store = DeviceStore(Comm.serial(), w_in, w_out, StoreSetup(config, 1, choice.device, 5))
    assert store.device == torch.device("cuda:0")
    assert asked == [torch.device("cuda:0")] * 4, asked       # two matrices, two touched masks
    assert store.exchange is None, "one rank: nothing to exchange, no process group"
