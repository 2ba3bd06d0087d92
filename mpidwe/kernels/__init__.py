"""Local SGNS / CBOW training kernels: the update math per backend; no I/O, no MPI.

Backends (import the one you need; importing this package loads neither numba nor torch):

* ``kernels.cpu``          numba, the fast CPU path (Hogwild threads);
* ``kernels.torch_kernel`` batched torch, for CUDA (and CPU, for tests);
* ``kernels.triton_kernel`` skip-gram with shared negatives, one fused Triton launch per batch
  of the torch kernel's own layout (``--kernel triton``, the CUDA default where it applies;
  the device store (parallel/device.py) calls it where ``args.fused``);
* ``kernels.reference``    plain numpy, readable and slow; the tests' yardstick.

All three have the same entry point (``torch_hs.train_block``, the torch kernel's
hierarchical softmax, too)::

    loss_sum, n_examples, words_processed = train_block(
        w_in, w_out, tokens, sent_starts, rng_state, touched_in, touched_out, args)

``args`` is a frozen :class:`kernels.args.KernelArgs`, built once per run; between blocks only
its point on the learning-rate schedule moves (``args.at(words_done, words_scale)``), and the
sharded store swaps in a working set's tables (``args.on_slots(keep_prob, neg_slots)``).
``kernels.plan.plan_block(tokens, sent_starts, rng_state, mark_in, mark_out, args)`` makes
the numba kernel's draws without training (the sharded store's pull list). Every entry checks
its block once, with ``common.check_block``.

The block (numpy arrays for cpu/reference; torch tensors or CPU numpy for torch_kernel):

* ``w_in``, ``w_out``: float32 [V, dim], C-contiguous, updated IN PLACE. The caller
  initialises them (word2vec: w_in uniform in [-0.5/dim, 0.5/dim), w_out zeros).
* ``tokens``: int32 word ids of the block. ``sent_starts``: int64 offsets where sentences
  start (the first is 0; the last sentence runs to len(tokens)). Windows never cross a
  sentence boundary.
* ``rng_state``: uint64 [>= threads], one LCG state per thread, advanced in place, so a
  checkpoint that saves it resumes the exact random stream. (The torch kernels use entry 0
  as the seed of a torch.Generator and store the next seed there.)
* ``touched_in`` / ``touched_out``: uint8 [V]; every row the call updates is set to 1
  (never cleared here), for sparse synchronisation.

The fields of ``args`` (KernelArgs):

* ``keep_prob``: float32 [V] from ``vocab.keep_probabilities``; an occurrence is dropped if a
  uniform draw exceeds it, before windowing (word2vec).
* ``neg_table``: uint32 [V, 2] alias table from ``vocab.negative_table`` (unigram^0.75).
* ``model``: "skipgram" (word2vec's: each context word's input row predicts the centre word)
  or "cbow" (the mean of the context rows, cbow_mean=1, predicts the centre; each context
  row receives the whole gradient, as word2vec.c and gensim).
* ``window``: maximum window; each centre draws b in [0, window) and uses window - b.
* ``negative``: noise words per positive example; a draw equal to the positive word is
  dropped (not redrawn), as in word2vec.
* ``lr0``, ``lr_min``, ``words_done``, ``words_scale``, ``words_total``: the learning rate
  ``max(lr_min, lr0 * (1 - (words_done + words_scale * local) / words_total))``
  where ``local`` is the raw tokens (before subsampling) of this block done so far,
  refreshed every 10,000 raw words; ``words_scale`` is the number of ranks that progress
  at the same pace.
* ``threads``: cpu only; > 1 trains contiguous sentence ranges in parallel without locks
  (Hogwild), each thread with its own ``rng_state`` entry, and is NOT deterministic.
  ``threads=1`` is bit-for-bit deterministic given the inputs and ``rng_state``.
* ``shared_negatives`` (skipgram only): one draw of negatives per centre word serves all
  its contexts and the window's gradients are computed from the rows as they were before
  it (Intel pWord2Vec). Faster; a different random stream than the default.
* ``hs``: None for negative sampling, or the Huffman tree ``(codes, points, lengths)`` of
  ``mpidwe.core.huffman.build_tree(counts).tables()`` for hierarchical softmax (word2vec's
  ``-hs 1 -negative 0``): the centre's path from the root replaces the positive and noise
  words (``negative`` is ignored, nothing is drawn), inner node ``n`` is ``w_out[n]``, and
  a node scored beyond +-6 is skipped as word2vec.c and gensim do. ``shared_negatives``
  then means: all contexts of a centre share its path, gradients from the rows before the
  window (no random difference, only the order of the updates). The torch kernel has it in
  ``kernels/torch_hs.py``.
* ``subwords``: None, or fastText's input layer ``(ptr, ids)`` from
  ``mpidwe.core.subwords.build_table(words, minn, maxn, buckets)``: word w's input is the mean
  of rows ``ids[ptr[w]:ptr[w+1]]`` of ``w_in`` (its own row, then its n-gram buckets, so
  ``w_in`` has V + buckets rows and ``touched_in`` as many), and every one of those rows
  receives the whole change of that mean. The random draws do not change. numba and
  reference kernels only.
* ``neg_slots`` (cpu only; the sharded store, mpidwe/parallel/sharded.py): int32 [V_global]. The
  matrices then hold a block's working set, not the vocabulary: ``tokens`` are slots,
  ``w_in``/``keep_prob``/``touched_in`` cover the block's token rows and ``w_out``/
  ``touched_out`` those plus the rows only noise words reach, while ``neg_table`` stays the
  global table and each noise draw is mapped through ``neg_slots``. The draws, and so the
  updates, are exactly those of the same call on the full matrices (kernels/plan.py lists
  the rows beforehand).
* ``batch_size`` (torch kernels): centre words per batch (torch_hs: examples per batch);
  None or 0 adapts to the run (torch_kernel.adaptive_batch_size; torch_hs: its BATCH_SIZE). ``fused``: the device store
  trains through kernels/triton_kernel.py instead (``--kernel triton``). ``duplicate_steps`` (torch_kernel): how a batch divides a
  row's repeated updates (None: adaptive; see torch_kernel.py). ``tables`` (torch_kernel): a
  ``torch_kernel.DeviceTables`` holding keep_prob and neg_table on the device, built once
  (None: uploaded per block). The numba and reference kernels ignore the three.

Returns ``loss_sum`` (sum of -log sigma(pos) - sum log sigma(-neg), from the same table
lookups as the gradient), ``n_examples`` (skip-gram pairs, or CBOW centres), and
``words_processed`` (len(tokens): raw tokens, the unit of the learning-rate schedule).

The random-number contract (which bits decide what, in which order) is in common.py.
"""

from .common import MODELS

__all__ = ["MODELS"]
