"""The fused Triton kernel (kernels/triton_kernel.py) under Triton's interpreter on CPU tensors:
its layout (the torch kernel's), and every window's update against kernels/reference.py. With
``TRITON_INTERPRET=0`` on a machine with CUDA the same tests compile the kernel and run it on
the GPU (what a lent GPU machine runs; CI has none)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")    # before triton is imported: run kernels on the CPU

import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from mpidwe.core.vocab import keep_probabilities, negative_table  # noqa: E402
from mpidwe.kernels import reference, torch_kernel, triton_kernel  # noqa: E402
from mpidwe.kernels.args import KernelArgs  # noqa: E402
from mpidwe.kernels.batch import next_seed  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                                reason="needs CUDA or TRITON_INTERPRET=1")
# the interpreter runs on CPU tensors; compiled kernels need the tensors on the GPU
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"


def corpus(n_sentences=24, length=9, vocab=30, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, n_sentences * length).astype(np.int32)
    starts = np.arange(0, len(tokens), length, dtype=np.int64)
    return tokens, starts, np.bincount(tokens, minlength=vocab)


def args_for(counts, n_tokens, sample=0.0, batch_size=16, window=3, negative=4):
    return KernelArgs(keep_prob=keep_probabilities(counts, sample), neg_table=negative_table(counts),
                      words_total=4 * n_tokens, window=window, negative=negative, lr0=0.05,
                      shared_negatives=True, batch_size=batch_size)


def layout_of(tokens, starts, seed, args):
    return torch_kernel.prepare_block(tokens, starts, np.array([seed], dtype=np.uint64), DEVICE, args)


def test_the_layout_is_the_torch_kernels_and_follows_the_window_rule():
    """The fused kernel trains the torch kernel's own layout (one generator stream: both
    kernels draw the same examples for a seed): one row per kept centre in corpus order, 0/1
    slot weights inside the shrunk window and the sentence, the centre then its negatives."""
    tokens, starts, counts = corpus()
    layout = layout_of(tokens, starts, 11, args_for(counts, len(tokens)))
    ok = layout.ok.cpu().numpy()
    contexts, targets = layout.contexts.cpu().numpy(), layout.targets.cpu().numpy()
    assert len(ok) == len(tokens)                                          # sample 0: every word kept
    assert set(np.unique(ok)) <= {0.0, 1.0} and ok.sum(1).max() <= 6 and ok.sum(1).min() >= 1
    assert 2.0 < ok.sum(1).mean() < 5.0
    for c in (0, 8, 9, 100, 215):                                          # sentence starts and ends
        sent = c // 9
        ctx = contexts[c][ok[c] > 0]
        window = tokens[max(sent * 9, c - 3):c].tolist() + tokens[c + 1:min(sent * 9 + 9, c + 4)].tolist()
        assert set(ctx.tolist()) <= set(window)
    assert np.array_equal(targets[:, 0], tokens.astype(np.int64))
    target_ok = layout.target_ok.cpu().numpy()
    dropped = targets[:, 1:] == targets[:, :1]
    assert np.all(target_ok[:, 1:][dropped] == 0) and np.all(target_ok[:, 1:][~dropped] == 1)


@pytest.mark.parametrize("batch_size", [1, 64])
def test_fused_step_matches_the_reference_window_by_window(batch_size):
    """Under the interpreter a launch's programs run one after another, so a block must be
    exactly reference.skipgram_window_shared applied to each window in order (float sums in
    another order aside), whatever the batch size; slots of weight 0 are skipped. Compiled on
    a GPU, a launch's programs race (Hogwild, as the kernel intends), so there only one
    centre per launch is exact."""
    if DEVICE == "cuda" and batch_size > 1:
        pytest.skip("on a GPU the programs of one launch race: only batch size 1 is sequential")
    tokens, starts, counts = corpus(n_sentences=10)     # 90 windows: the interpreter runs each program in Python
    args = args_for(counts, len(tokens), sample=0.005, batch_size=batch_size)
    layout = layout_of(tokens, starts, 5, args)
    assert 0 < len(layout.lr) < len(tokens)             # some words dropped: rows are kept centres only
    rng = np.random.default_rng(1)
    w_in = ((rng.random((30, 12)) - 0.5) / 4).astype(np.float32)
    w_out = ((rng.random((30, 12)) - 0.5) / 4).astype(np.float32)
    ref_in, ref_out = w_in.copy(), w_out.copy()
    ref_loss = 0.0
    ok, contexts = layout.ok.cpu().numpy(), layout.contexts.cpu().numpy()
    targets, target_ok, lr = (layout.targets.cpu().numpy(), layout.target_ok.cpu().numpy(),
                              layout.lr.cpu().numpy())
    for c in range(len(lr)):
        ctx = contexts[c][ok[c] > 0].tolist()
        if not ctx:
            continue
        outs = [int(t) for t, w in zip(targets[c], target_ok[c]) if w]
        ref_loss += reference.skipgram_window_shared(ref_in, ref_out, ctx, outs, float(lr[c]))
    t_in, t_out = torch.from_numpy(w_in.copy()).to(DEVICE), torch.from_numpy(w_out.copy()).to(DEVICE)
    losses = triton_kernel.step_batches(t_in, t_out, layout, batch_size, capped=False)
    np.testing.assert_allclose(t_in.cpu().numpy(), ref_in, atol=2e-6)
    np.testing.assert_allclose(t_out.cpu().numpy(), ref_out, atol=2e-6)
    assert float(losses.sum()) == pytest.approx(ref_loss, rel=1e-4)
    assert not np.allclose(ref_in, w_in)                          # it did train


def test_duplicate_loads_count_the_slots_of_a_launch_that_update_one_row():
    """The cap's load per slot of weight 1: n x the centre's rate x sigma'(0) / STABILITY, n
    the slots of the same launch (``batch_size`` centres) with weight 1 that update the same
    row of the same matrix (contexts: w_in; outputs: w_out)."""
    tokens, starts, counts = corpus(n_sentences=6)
    layout = layout_of(tokens, starts, 3, args_for(counts, len(tokens)))
    loads = triton_kernel.duplicate_loads(layout, 16, 30).cpu().numpy()
    ids = np.concatenate((layout.contexts.cpu().numpy(), layout.targets.cpu().numpy() + 30), 1)
    ok = np.concatenate((layout.ok.cpu().numpy(), layout.target_ok.cpu().numpy()), 1)
    lr = layout.lr.cpu().numpy()
    for c in range(len(lr)):
        first = c // 16 * 16
        here_ids, here_ok = ids[first:first + 16], ok[first:first + 16]
        for j in np.flatnonzero(ok[c]):          # (a slot of weight 0 trains nothing: its load is unused)
            n = int(((here_ids == ids[c, j]) & (here_ok > 0)).sum())
            assert loads[c, j] == pytest.approx(n * lr[c] * 0.25 / torch_kernel.STABILITY), (c, j)
    assert loads.max() * 2 > lr.max() * 4          # some row is updated several times in a launch


def test_the_capped_launch_divides_each_windows_update_by_its_rows_load():
    """Above UNCAPPED_MAX_RATE the kernel divides a window's update of a row by max(1, the
    slot's load x the mean squared norm of the rows it pairs with, from the rows before the
    window): under the interpreter, window by window, the reference's update so divided. Rows
    of norm ~3.5 and a launch of 64 centres on 30 words make the cap bind."""
    if DEVICE == "cuda":
        pytest.skip("on a GPU the programs of one launch race: the window-by-window order holds only here")
    tokens, starts, counts = corpus(n_sentences=8)
    args = args_for(counts, len(tokens), batch_size=64)
    layout = layout_of(tokens, starts, 7, args)
    rng = np.random.default_rng(3)
    w_in, w_out = (rng.standard_normal((30, 12)).astype(np.float32) for _ in range(2))
    ref_in, ref_out = w_in.copy(), w_out.copy()
    loads = triton_kernel.duplicate_loads(layout, 64, 30).cpu().numpy()
    ok, contexts = layout.ok.cpu().numpy(), layout.contexts.cpu().numpy()
    targets, target_ok, lr = (layout.targets.cpu().numpy(), layout.target_ok.cpu().numpy(),
                              layout.lr.cpu().numpy())
    m = contexts.shape[1]
    bound = 0
    for c in range(len(lr)):
        slots = [j for j in range(m) if ok[c, j] > 0]
        if not slots:
            continue
        outs = [k for k in range(targets.shape[1]) if target_ok[c, k] > 0]
        h_square = sum(float(ref_in[contexts[c, j]] @ ref_in[contexts[c, j]]) for j in slots) / len(slots)
        o_square = sum(float(ref_out[targets[c, k]] @ ref_out[targets[c, k]]) for k in outs) / max(len(outs), 1)
        new_in, new_out = ref_in.copy(), ref_out.copy()
        reference.skipgram_window_shared(new_in, new_out, [int(contexts[c, j]) for j in slots],
                                         [int(targets[c, k]) for k in outs], float(lr[c]))
        # a row twice in a window (a repeated context or negative) has one load: one cap
        for ref, new, caps in ((ref_out, new_out, {int(targets[c, k]): loads[c, m + k] * h_square for k in outs}),
                               (ref_in, new_in, {int(contexts[c, j]): loads[c, j] * o_square for j in slots})):
            for row, load in caps.items():
                bound += load > 1
                ref[row] += (new[row] - ref[row]) / max(1.0, load)
    assert bound > 100                                    # the cap binds for most updates
    t_in, t_out = torch.from_numpy(w_in.copy()).to(DEVICE), torch.from_numpy(w_out.copy()).to(DEVICE)
    triton_kernel.step_batches(t_in, t_out, layout, 64, capped=True)
    np.testing.assert_allclose(t_in.cpu().numpy(), ref_in, atol=2e-5)
    np.testing.assert_allclose(t_out.cpu().numpy(), ref_out, atol=2e-5)
    uncapped = torch.from_numpy(w_in.copy()).to(DEVICE), torch.from_numpy(w_out.copy()).to(DEVICE)
    triton_kernel.step_batches(*uncapped, layout, 64, capped=False)
    moved = [np.abs(new.cpu().numpy() - old).sum() for new, old in ((t_out, w_out), (uncapped[1], w_out))]
    assert moved[1] > 1.5 * moved[0], moved


def test_train_block_caps_only_above_the_uncapped_rate(monkeypatch):
    """One rank's default rate (0.025) and 2 ranks' (0.05) run uncapped, as measured on a
    GPU; the rule's 4 x and 8 x (0.1, 0.2) run capped."""
    tokens, starts, counts = corpus(n_sentences=4)
    seen = []
    real = triton_kernel.step_batches
    monkeypatch.setattr(triton_kernel, "step_batches",
                        lambda *a, capped: seen.append(capped) or real(*a, capped=capped))
    for rate in (0.025, 0.05, 0.1, 0.2):
        args = KernelArgs(**{**args_for(counts, len(tokens)).__dict__, "lr0": rate})
        w = [torch.zeros(30, 8, device=DEVICE) + 0.01 for _ in range(2)]
        touched = [torch.zeros(30, dtype=torch.uint8, device=DEVICE) for _ in range(2)]
        triton_kernel.train_block(*w, tokens, starts, np.array([1], dtype=np.uint64), *touched, args)
    assert seen == [False, False, True, True]
    assert triton_kernel.UNCAPPED_MAX_RATE == 0.05


def test_train_block_learns_and_marks_rows_and_resumes_its_stream():
    tokens, starts, counts = corpus(n_sentences=12)
    args = args_for(counts, len(tokens), sample=1e-2)
    rng = np.random.default_rng(2)
    w_in = torch.from_numpy(((rng.random((30, 8)) - 0.5) / 8).astype(np.float32)).to(DEVICE)
    w_out = torch.zeros(30, 8, device=DEVICE)
    touched = (torch.zeros(30, dtype=torch.uint8, device=DEVICE), torch.zeros(30, dtype=torch.uint8, device=DEVICE))
    state = np.array([9], dtype=np.uint64)
    loss, pairs, words = triton_kernel.train_block(w_in, w_out, tokens, starts, state, *touched, args)
    assert words == len(tokens) and 0 < pairs < 6 * len(tokens) and np.isfinite(loss) and loss > 0
    assert state[0] == next_seed(9) and touched[0].sum() > 15 and touched[1].sum() > 15
    assert float(w_out.abs().sum()) > 0
    # the torch kernel draws the same examples from the same seed
    state = np.array([9], dtype=np.uint64)
    _, torch_pairs, _ = torch_kernel.train_block(w_in.clone(), w_out.clone(), tokens, starts, state,
                                                 *(t.clone() for t in touched), args)
    assert torch_pairs == pairs
    with pytest.raises(ValueError, match="skip-gram with shared negatives"):
        triton_kernel.train_block(w_in, w_out, tokens, starts, state, *touched,
                                  KernelArgs(**{**args.__dict__, "shared_negatives": False}))
