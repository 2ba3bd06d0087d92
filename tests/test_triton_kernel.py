"""The fused Triton kernel (kernels/triton_kernel.py) under Triton's interpreter on CPU tensors:
its compact layout, and every window's update against kernels/reference.py."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")    # before triton is imported: run kernels on the CPU

import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mpidwe.core.vocab import keep_probabilities, negative_table  # noqa: E402
from mpidwe.kernels import reference, triton_kernel  # noqa: E402
from mpidwe.kernels.args import KernelArgs  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                                reason="needs CUDA or TRITON_INTERPRET=1")


def corpus(n_sentences=24, length=9, vocab=30, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, n_sentences * length).astype(np.int32)
    starts = np.arange(0, len(tokens), length, dtype=np.int64)
    return tokens, starts, np.bincount(tokens, minlength=vocab)


def args_for(counts, n_tokens, sample=0.0, batch_size=16, window=3, negative=4):
    return KernelArgs(keep_prob=keep_probabilities(counts, sample), neg_table=negative_table(counts),
                      words_total=4 * n_tokens, window=window, negative=negative, lr0=0.05,
                      shared_negatives=True, batch_size=batch_size)


def test_layout_is_compact_and_follows_the_window_rule():
    tokens, starts, counts = corpus()
    layout, n = triton_kernel.host_layout(tokens, starts, 11, args_for(counts, len(tokens)))
    assert n == len(tokens) and layout.n_centres == len(tokens)       # sample 0: every word kept
    sizes = np.diff(layout.ptr)
    assert sizes.min() >= 1 and sizes.max() <= 6                      # no empty, none beyond 2 x window
    # 9-word sentences, reach r in 1..3: no slot is padding, so the mean is well below 6
    assert 2.0 < sizes.mean() < 5.0 and len(layout.contexts) == sizes.sum()
    for c in (0, 8, 9, 100, 215):                                          # sentence starts and ends
        sent = c // 9
        ctx = layout.contexts[layout.ptr[c]:layout.ptr[c + 1]]
        window = tokens[max(sent * 9, c - 3):c].tolist() + tokens[c + 1:min(sent * 9 + 9, c + 4)].tolist()
        assert set(ctx.tolist()) <= set(window)
    assert np.array_equal(layout.targets[:, 0], tokens.astype(np.int64))
    dropped = layout.targets[:, 1:] == layout.targets[:, :1]
    assert np.all(layout.target_ok[:, 1:][dropped] == 0) and np.all(layout.target_ok[:, 1:][~dropped] == 1)


@pytest.mark.parametrize("batch_size", [1, 64])
def test_fused_step_matches_the_reference_window_by_window(batch_size):
    """Under the interpreter a launch's programs run one after another, so a block must be
    exactly reference.skipgram_window_shared applied to each window in order (float sums in
    another order aside), whatever the batch size."""
    tokens, starts, counts = corpus(n_sentences=10)     # 90 windows: the interpreter runs each program in Python
    args = args_for(counts, len(tokens), batch_size=batch_size)
    layout, _ = triton_kernel.host_layout(tokens, starts, 5, args)
    rng = np.random.default_rng(1)
    w_in = ((rng.random((30, 12)) - 0.5) / 4).astype(np.float32)
    w_out = ((rng.random((30, 12)) - 0.5) / 4).astype(np.float32)
    ref_in, ref_out = w_in.copy(), w_out.copy()
    ref_loss = 0.0
    for c in range(layout.n_centres):
        ctx = layout.contexts[layout.ptr[c]:layout.ptr[c + 1]].tolist()
        outs = [int(t) for t, ok in zip(layout.targets[c], layout.target_ok[c]) if ok]
        ref_loss += reference.skipgram_window_shared(ref_in, ref_out, ctx, outs, float(layout.lr[c]))
    t_in, t_out = torch.from_numpy(w_in.copy()), torch.from_numpy(w_out.copy())
    losses = triton_kernel.step_batches(t_in, t_out, layout, batch_size)
    np.testing.assert_allclose(t_in.numpy(), ref_in, atol=2e-6)
    np.testing.assert_allclose(t_out.numpy(), ref_out, atol=2e-6)
    assert float(losses.sum()) == pytest.approx(ref_loss, rel=1e-4)
    assert not np.allclose(ref_in, w_in)                          # it did train


def test_train_block_learns_and_marks_rows_and_resumes_its_stream():
    tokens, starts, counts = corpus(n_sentences=12)
    args = args_for(counts, len(tokens), sample=1e-2)
    rng = np.random.default_rng(2)
    w_in = torch.from_numpy(((rng.random((30, 8)) - 0.5) / 8).astype(np.float32))
    w_out = torch.zeros(30, 8)
    touched = torch.zeros(30, dtype=torch.uint8), torch.zeros(30, dtype=torch.uint8)
    state = np.array([9], dtype=np.uint64)
    loss, pairs, words = triton_kernel.train_block(w_in, w_out, tokens, starts, state, *touched, args)
    assert words == len(tokens) and 0 < pairs < 6 * len(tokens) and np.isfinite(loss) and loss > 0
    assert state[0] != 9 and touched[0].sum() > 15 and touched[1].sum() > 15
    assert float(w_out.abs().sum()) > 0
    with pytest.raises(ValueError, match="skip-gram with shared negatives"):
        triton_kernel.train_block(w_in, w_out, tokens, starts, state, *touched,
                                  KernelArgs(**{**args.__dict__, "shared_negatives": False}))
