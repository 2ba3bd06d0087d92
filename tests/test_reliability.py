"""Bad input to the readers and the command line: one line, exit 2, nothing allocated
from a header or shape the file cannot back, no traceback."""

from __future__ import annotations

import numpy as np
import pytest

import mpidwe
from mpidwe.core.errors import InputError
from mpidwe.io.vectors import write_word2vec

from conftest import run_py

HUGE = b"2000000000 16\n"


def one_line(proc, text):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and text in lines[0], proc.stderr


@pytest.mark.parametrize("binary", [False, True])
def test_a_word2vec_header_larger_than_the_file_is_one_line(tmp_path, binary):
    """'2000000000 16' as the header of a small file asked numpy for 119 GiB (a traceback in
    inspect, evaluate and load): the header is bounded by the file's size first."""
    path = tmp_path / "v.w2v"
    write_word2vec(str(path), ["a", "b", "c"], np.eye(3, 16, dtype=np.float32), binary=binary)
    data = path.read_bytes()
    path.write_bytes(HUGE + data[data.index(b"\n") + 1:])
    with pytest.raises(InputError, match="the header announces 2,000,000,000 vectors of dimension 16"):
        mpidwe.load(str(path))
    one_line(run_py(["-m", "mpidwe.inspect", str(path), "neighbors", "a"]), "the header announces")
    pairs = tmp_path / "sim.tsv"
    pairs.write_text("a\tb\t1\na\tc\t2\nb\tc\t3\n")
    one_line(run_py(["-m", "mpidwe.evaluate", str(path), "--similarity", str(pairs)]), "the header announces")
    path.write_bytes(b"1 2000000000\n" + data[data.index(b"\n") + 1:])
    with pytest.raises(InputError, match="vectors of dimension 2,000,000,000"):
        mpidwe.load(str(path))


@pytest.mark.parametrize("kind", ["folder", "latin-1"])
def test_a_config_file_that_is_a_folder_or_not_utf8_is_one_line(tmp_path, kind):
    """--config naming a folder or a non-UTF-8 file: one line, exit 2 (it was a traceback,
    once per rank under mpiexec), in train and warm."""
    from conftest import error_lines, run_mpi

    path = tmp_path / "conf"
    if kind == "folder":
        path.mkdir()
    else:
        path.write_bytes("dim = 16 # \xe9t\xe9\n".encode("latin-1"))
    why = "is a folder" if kind == "folder" else "is not UTF-8"
    for module in ("mpidwe.train", "mpidwe.warm"):
        proc = run_py(["-m", module, "--config", str(path), "--out", str(tmp_path / "run")], timeout=120)
        one_line(proc, why)
    proc = run_mpi(2, ["-m", "mpidwe.train", "--config", str(path), "--out", str(tmp_path / "run")], check=False)
    assert proc.returncode == 2 and len(error_lines(proc.stderr)) == 1 and why in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "run").exists()


@pytest.mark.parametrize("byte,mask", [(7, 0x80), (5, 0xFF)], ids=["sign-bit", "huge"])
def test_damaged_sentence_starts_without_verification_are_one_line(tmp_path, byte, mask):
    """--no-verify-corpus skips the chunk digests: a damaged sentence start then gave a
    ValueError traceback from the kernel's check (a huge one) or trained with sentences
    merged (a sign-bit flip, exit 0). Either is one line, exit 2, and no model is written."""
    import h5py

    from conftest import make_demo_corpus

    corpus = make_demo_corpus(tmp_path / "demo", tokens=20_000, seed=4) / "corpus.h5"
    with h5py.File(corpus, "r") as f:
        offset, n = f["sentences"].id.get_offset(), len(f["sentences"])
    with open(corpus, "r+b") as fh:          # sentence n // 2, little-endian int64
        fh.seek(offset + 8 * (n // 2) + byte)
        value = fh.read(1)[0]
        fh.seek(-1, 1)
        fh.write(bytes([value ^ mask]))
    out = tmp_path / "run"
    proc = run_py(["-m", "mpidwe.train", "--corpus", str(corpus), "--out", str(out), "--no-verify-corpus",
                   "--dim", "8", "--epochs", "1", "--threads", "1", "--no-progress"], timeout=120)
    one_line(proc, "sentence starts are out of order")
    assert not list(out.glob("checkpoints/ckpt-*.h5")) and not (out / "vectors.txt").exists()
