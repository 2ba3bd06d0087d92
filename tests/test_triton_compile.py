"""The fused kernel compiled, not interpreted: ``TRITON_INTERPRET=1`` (tests/test_triton_kernel.py)
runs its Python, which accepts code the compiler refuses, so here Triton compiles it for a
Hopper GPU (sm_90: the H100 and H200) down to machine code on whatever machine runs the tests,
with the ptxas Triton's wheel brings; no GPU is needed to compile. Both variants: uncapped
(one rank at the defaults) and with the duplicate cap (several ranks)."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

# not imported here: tests/test_triton_kernel.py must import triton after setting
# TRITON_INTERPRET=1, and this file runs before it
pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

SCRIPT = textwrap.dedent("""
    import sys
    from mpidwe.kernels import triton_kernel as tk
    from triton import compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = {"w_in": "*fp32", "w_out": "*fp32", "ids": "*i64", "weights": "*fp32", "tables": "*fp32",
           "losses": "*fp32", "first": "i32", "dims": "constexpr"}
    for capped in (0, 1):
        kernel = compile(ASTSource(tk._window_step, sig, constexprs={"dims": (100, 10, 6, 128, 16, 8, capped)}),
                         target=GPUTarget("cuda", 90, 32))
        print(capped, len(kernel.asm["cubin"]), kernel.asm["ptx"].count("atom.global"))
""")


def test_both_variants_compile_for_a_hopper_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_DEFAULT_FP_FUSION="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    if proc.returncode and ("ptxas" in proc.stderr and "not found" in proc.stderr.lower()):
        pytest.skip("this triton has no ptxas to compile with")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.split("\n") if line.strip()]
    assert [r[0] for r in rows] == ["0", "1"]
    for _, cubin, atomics in rows:
        assert int(cubin) > 10_000 and int(atomics) > 0        # machine code with its atomic adds
