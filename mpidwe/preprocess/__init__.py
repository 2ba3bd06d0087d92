"""``python -m mpidwe.preprocess``: raw text -> versioned HDF5 corpus, over P ranks.

1. rank 0 checks the inputs (a folder or a glob pattern stands for its files, in name
   order) and gives every rank its pieces: with at least P compressed inputs (a dump in
   shards) each of them is read whole by one rank, which decompresses it itself, the
   inputs cut into P runs of about equal size (text.split_pieces); otherwise the inputs
   are sized (a compressed one decompressed to a plain copy) and their bytes split into P
   ranges at whitespace (text.find_boundaries); everyone gets the same plan;
2. pass 1: every rank counts the tokens of its range; counts are summed on rank 0, which
   fixes the vocabulary (count descending, ties by word) and broadcasts it;
3. pass 2: every rank maps its tokens to ids and finds its line starts; an exclusive
   prefix sum of the ranks' kept tokens and sentence counts (the sentences cut lines every
   --sentence-length tokens, also across a rank boundary) places each rank's slice;
4. rank 0 creates the corpus under a temporary name with the token ids and sentence
   starts allocated; every rank writes its slices straight into the file's bytes (h5py
   here has no parallel HDF5, and needs none for this: the datasets are contiguous and
   their offsets known); every rank reads back its share of fixed chunks of them and
   digests each; rank 0 stores the digests and the corpus id they make, seals, fsyncs
   and renames the file into place. The result does not depend on P.

Temporary files (the raw token ids between the passes, the corpus before its rename,
the copy of standard input) sit beside the output, named ``.OUT.KIND-TAG`` with TAG = rank 0's host, pid and
start time. A run removes its own on any failure and on SIGTERM/SIGINT (exit 128 + signal),
and at its start those that killed runs to the same output left (tempfiles.remove_leftovers).

The modules, in the order a run uses them:

- ``cli``: the command (parse, start MPI, report one line); ``signals``: SIGTERM/SIGINT;
- ``pipeline``: ``run``, the steps of a run over one ``RunState``;
- ``output``: checks and lock of the output, ``--append``'s configuration, failed HDF5 writes;
  ``tempfiles``: the run's temporary files and the leftovers of killed runs;
- ``inputs``: rank 0's plan of the inputs (folders and patterns expanded, streams copied,
  whole files or byte ranges for each rank);
- ``passes``: a rank's pass 1 (count) and pass 2 (final ids, line starts) with either
  engine, the spool of raw ids between them; ``scan`` and ``tokens``: the compiled
  engine's reader and token table (over kernels/tokenize.py);
- ``vocab``: the counts merged, the vocabulary built, held out or grown.
"""

import sys
import types

from .cli import PROG, main
from .output import INHERITED_OPTIONS, appended_config
from .passes import FLUSH_TOKENS, IdSpool, RankIds, count_compiled, count_tokens, final_ids, final_ids_compiled
from .pipeline import ENGINES, run
from .signals import Interrupted
from .vocab import build_vocab, build_vocab_from_table, grow_vocab, hold_out, merge_counts, merge_tables

__all__ = ["ENGINES", "FLUSH_TOKENS", "INHERITED_OPTIONS", "PROG", "IdSpool", "Interrupted", "RankIds",
           "appended_config", "build_vocab", "build_vocab_from_table", "count_compiled", "count_tokens",
           "final_ids", "final_ids_compiled", "grow_vocab", "hold_out", "main", "merge_counts", "merge_tables",
           "run"]


class _CallableModule(types.ModuleType):
    """``mpidwe.preprocess(*inputs, **options)``: the module, called, preprocesses
    (call.preprocess), as ``mpidwe.train(**options)`` trains."""

    def __call__(self, *inputs, **options):
        from .call import preprocess

        return preprocess(*inputs, **options)


sys.modules[__name__].__class__ = _CallableModule
