"""benchmarks/gpu_bench.py runs end to end on the CPU (a small demo, the eager torch kernel,
2 ranks; the block store at 1 and 2 ranks) and prints every figure it promises with plausible values."""

import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402


def test_gpu_bench_smoke():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_bench.py"), "--device", "cpu",
                          "--tokens", "40000", "--dim", "16", "--kernels", "torch", "--threads", "1",
                          "--copy-mb", "16", "--blocks", "1", "2"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert re.search(r"peak copy bandwidth [\d,.]+ GB/s", text), text
    assert re.search(r"numba \(cpu\): [\d,]+ words/s, similarity -?[\d.]+, analogy [\d.]+%", text), text
    m = re.search(r"torch \(cpu\): ([\d,]+) words/s, ([\d,]+) bytes/word \(modelled\) = ([\d.]+)% of the roofline",
                  text)
    assert m, text
    assert int(m.group(1).replace(",", "")) > 0 and int(m.group(2).replace(",", "")) > 1000
    assert 0 < float(m.group(3)) < 100
    share = re.search(r"at 2 ranks: ([\d.]+)% of the ranks' time in the exchange", text)
    assert share and 0 < float(share.group(1)) < 100, text
    blocks = dict(re.findall(r"blocks, torch \(cpu\), (\d) rank\(s\): [\d,]+ words/s, similarity -?[\d.]+ "
                             r"\([-+][\d.]+ vs numba\), analogy [\d.]+% \([-+][\d.]+ points\), ([\d,.]+) bytes", text))
    assert set(blocks) == {"1", "2"}, text
    assert float(blocks["1"]) == 0 and float(blocks["2"].replace(",", "")) > 0     # one rank sends nothing
