"""--store blocks --kernel torch: a bucket's runs of one centre, and its training as the torch
kernel's batches (kernels/torch_pairs.py); tests/mpi/test_mpi_blocks.py trains and resumes it
on several ranks."""

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mpidwe.core.blocks import block_members, block_noise_tables, snake_blocks  # noqa: E402
from mpidwe.kernels.batch import next_seed  # noqa: E402
from mpidwe.kernels.pairs import Noise, Span  # noqa: E402
from mpidwe.kernels.torch_pairs import runs, train_bucket_torch  # noqa: E402


def test_runs_cut_a_bucket_where_the_centre_changes_and_every_longest_pairs():
    out = np.array([5, 5, 5, 7, 7, 5, 9, 9, 9, 9, 9])
    assert runs(out, 2).tolist() == [0, 2, 3, 5, 6, 8, 10, 11]
    assert runs(out, 10).tolist() == [0, 3, 5, 6, 11]
    assert runs(out, 1).tolist() == list(range(12))
    assert runs(np.zeros(0, np.int32), 4).tolist() == [0]


def args(**kw):
    return SimpleNamespace(window=5, batch_size=64, duplicate_steps=None, words_total=1e6, words_scale=1.0,
                           lr0=0.05, **kw)


def bucket(shared: bool, seed: int = 6):
    v, dim, parts, j = 120, 8, 4, 2
    counts = (1e5 / np.arange(1, v + 1)).astype(np.int64) + 5
    members, offsets = block_members(snake_blocks(counts, parts), parts)
    table = block_noise_tables(counts, members, offsets)
    rng = np.random.default_rng(seed)
    w_in = rng.standard_normal((v, dim)).astype(np.float32)
    w_out = rng.standard_normal((v, dim)).astype(np.float32) * 0.1
    inp = members[offsets[1]:offsets[2]][rng.integers(0, offsets[2] - offsets[1], 500)]
    out = np.repeat(members[offsets[j]:offsets[j] + 3], 200)[:500]       # three centres
    noise = Noise(table, members, int(offsets[j]), int(offsets[j + 1] - offsets[j]), 5, shared, 10)
    return w_in, w_out, inp, out, noise, set(members[offsets[j]:offsets[j + 1]].tolist())


@pytest.mark.parametrize("shared", [True, False])
def test_a_torch_bucket_trains_every_pair_once_touching_its_input_rows_and_the_held_block_only(shared):
    w_in, w_out, inp, out, noise, block = bucket(shared)
    before_in, before_out = w_in.copy(), w_out.copy()
    state = np.array([77, 5], np.uint64)
    loss, n = train_bucket_torch((w_in, w_out), (inp, out), noise, Span(0.05, 1e-4, 0.0, 1000.0, 1e6), state, args(),
                                 "cpu")
    assert n == 500 and np.isfinite(loss) and loss > 0
    assert int(state[0]) == next_seed(77) and int(state[1]) == 5          # one seed a bucket, on the host
    changed_in = np.flatnonzero((w_in != before_in).any(axis=1))
    changed_out = np.flatnonzero((w_out != before_out).any(axis=1))
    assert set(changed_in.tolist()) == set(inp.tolist())
    assert set(changed_out.tolist()) <= block and len(changed_out) > 3     # the noise, from the held block only
    again = bucket(shared)
    train_bucket_torch((again[0], again[1]), (inp, out), noise, Span(0.05, 1e-4, 0.0, 1000.0, 1e6),
                       np.array([77, 5], np.uint64), args(), "cpu")
    assert np.array_equal(again[0], w_in) and np.array_equal(again[1], w_out), "the same seed, the same numbers"


def test_a_torch_bucket_learns_its_pairs():
    """Trained on the same bucket again and again (each input word with one of three
    centres), its loss falls and the pairs' own scores turn positive (a kernel that updated
    the wrong rows or signs would not)."""
    w_in, w_out, inp, _, noise, block = bucket(True, seed=8)
    centres = np.array(sorted(block)[:3])
    out = centres[inp % 3]                          # each input word has one centre: learnable
    w_in *= 0.1
    state = np.array([3, 0], np.uint64)
    first = None
    for _ in range(30):
        loss, _ = train_bucket_torch((w_in, w_out), (inp, out), noise, Span(0.05, 1e-4, 0.0, 1000.0, 1e6), state,
                                     args(), "cpu")
        first = loss if first is None else first
    assert loss < 0.5 * first
    assert (np.einsum("ij,ij->i", w_in[inp], w_out[out]) > 0).mean() > 0.95


def test_an_empty_bucket_draws_nothing():
    w_in, w_out, _, _, noise, _ = bucket(True)
    state = np.array([9, 0], np.uint64)
    assert train_bucket_torch((w_in, w_out), (np.zeros(0, np.int32), np.zeros(0, np.int32)), noise,
                              Span(0.05, 1e-4, 0.0, 1.0, 1e6), state, args(), "cpu") == (0.0, 0)
    assert int(state[0]) == 9


def test_the_device_path_copies_the_rows_and_brings_back_the_input_block_and_the_held_piece(monkeypatch):
    """On a device the bucket trains copies (staged on the CPU here) and writes back the input
    block and the rows of the piece it held: the same numbers as training in place, and a
    row outside the piece that changed meanwhile (the ring thread's other piece) is kept."""
    from mpidwe.kernels import torch_pairs

    w_in, w_out, inp, out, noise, block = bucket(True)
    want_in, want_out = w_in.copy(), w_out.copy()
    sched = Span(0.05, 1e-4, 0.0, 1000.0, 1e6)
    train_bucket_torch((want_in, want_out), (inp, out), noise, sched, np.array([5, 0], np.uint64), args(), "cpu")
    monkeypatch.setattr(torch_pairs, "STAGE_ON_CPU", True)
    outside = next(r for r in range(len(w_out)) if not min(block) <= r <= max(block))
    real_to = torch.Tensor.to

    def to(self, *a, **kw):                 # the other piece changes while this bucket trains
        moved = real_to(self, *a, **kw)
        if self.data_ptr() == torch.from_numpy(w_out).data_ptr():
            w_out[outside] = 7.0
        return moved

    monkeypatch.setattr(torch.Tensor, "to", to)
    train_bucket_torch((w_in, w_out), (inp, out), noise, sched, np.array([5, 0], np.uint64), args(), "cpu")
    assert np.array_equal(w_in, want_in)
    assert (w_out[outside] == 7.0).all()
    keep = np.array(sorted(block))
    assert np.array_equal(w_out[keep], want_out[keep])
