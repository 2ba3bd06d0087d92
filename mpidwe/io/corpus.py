"""The only module that reads or writes corpus files (HDF5). Layout: docs/hdf5-format.md.

A corpus holds the vocabulary, the token ids of the whole text (out-of-vocabulary
tokens already removed) and the sentence boundaries. Preprocessing ranks write their
slices of the token ids and sentence starts straight into the one corpus file that rank
0 creates (``create_corpus``, ``write_slice``, ``finish_corpus``). A corpus grows by
*segments* (``preprocess --append``): each appended text is a new segment after the old
ones, whose token ids never change; new words get ids after the existing ones. A reader
may select a contiguous run of segments (``Corpus(path, segments="new")``); shards,
blocks and token counts are then over those segments only.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
from dataclasses import dataclass
from typing import Iterator

import h5py
import numpy as np

from ..core.errors import InputError
from .formats import SEAL_SIZE, check_format, check_seal, check_shape, check_stored, raw_extent, seal, unreadable
from .fsutil import fsync_path
from . import corpus_id as cid
from ..core.sharding import sentence_shard_by

FORMAT = "mpidwe-corpus"
FORMAT_VERSION = 3              # 3: chunk digests (the id needs no serial pass); 2: segments
FORMAT_OLDER = (1, 2)           # still read (their id is one stream over every token)

# names of groups, datasets and attributes
A_FORMAT = "format"
A_VERSION = "format_version"
A_TOOL_VERSION = "tool_version"
A_CREATED = "created_utc"
A_OPTIONS = "options"
A_INPUTS = "inputs"
A_RAW_TOKENS = "raw_tokens"
A_KEPT_TOKENS = "kept_tokens"
A_INVALID_UTF8 = "invalid_utf8_sequences"
A_DOC_LINES = "doc_tag_lines_dropped"
A_RANKS = "preprocess_ranks"
A_CORPUS_ID = "corpus_id"
D_WORDS = "vocab/words"
D_COUNTS = "vocab/counts"
D_TOKENS = "tokens"
D_SENTENCES = "sentences"
D_SEGMENTS = "segments"        # int64 (S, 3): each segment's end token, end sentence, end vocabulary size
A_SEGMENT_INFO = "segment_info"   # JSON list, one object per segment (inputs, counts, when, how)
D_TOKEN_DIGESTS = "digests/tokens"        # version 3: uint8 (ceil(N / C), 32), SHA-256 of each chunk
D_SENTENCE_DIGESTS = "digests/sentences"  # version 3: uint8 (ceil(S / C), 32)
A_CHUNK_ITEMS = "digest_chunk_items"      # version 3: C, the items of a chunk

COPY_ITEMS = 1 << 22           # items read or copied at a time when writing a corpus


# ------------------------------------------------------------------------- writing
# Preprocessing writes a corpus in place: rank 0 creates the file with the token ids and
# the sentence starts allocated (contiguous, never filled), every rank writes its own
# slice of both straight into the file's bytes at offsets known from an exclusive prefix
# sum of the ranks' counts, and rank 0 then reads the two datasets back once for the
# corpus id and seals the file. No rank ever copies another rank's data.

def sentence_carries(kept: list[int], last_line_start: list[int | None]) -> list[int]:
    """For each rank, how many kept tokens of the line still open where its slice starts
    came before it: the shift of its first sentence cut. ``kept[r]`` is rank r's kept-token
    count, ``last_line_start[r]`` its last line start (a kept index within its slice) or
    None when no line starts in it (one line spans the whole slice)."""
    carries, carry = [], 0
    for n, last in zip(kept, last_line_start):
        carries.append(carry)
        carry = carry + n if last is None else n - last
    return carries


def sentence_starts(line_starts: np.ndarray, carry: int, n: int, length: int) -> np.ndarray:
    """The sentence starts (kept indices in [0, n)) of one rank's slice of ``n`` kept
    tokens, from its line starts (ascending kept indices in [0, n]) and its carry
    (``sentence_carries``). A line is a run of tokens from one line start to the next;
    sentences cut every ``length`` kept tokens within a line, counted from the line's
    first token even where the line began in an earlier rank's slice."""
    seg_a = np.concatenate(([0], line_starts)).astype(np.int64)
    seg_b = np.concatenate((line_starts, [n])).astype(np.int64)
    first = np.zeros(len(seg_a), dtype=np.int64)
    first[0] = (-carry) % length
    room = seg_b - seg_a - first
    k = np.where(room > 0, (room + length - 1) // length, 0)
    within = np.arange(int(k.sum()), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    return np.repeat(seg_a + first, k) + length * within


def _no_fill():
    """Dataset creation properties for data that ranks write in place: storage allocated at
    creation (so that its file offset is known), and never filled with zeros first."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    return dcpl


def create_corpus(out_path: str, *, words: list[str], counts: np.ndarray, attrs: dict, n_tokens: int,
                  n_sentences: int, segment_info: dict | None = None,
                  base: "Corpus | None" = None) -> tuple[int, int]:
    """Rank 0: create the corpus file ``out_path`` (a temporary name; the caller renames)
    with everything but the token ids, the sentence starts and the corpus id, which
    ``write_slice`` and ``finish_corpus`` fill in. ``n_tokens``/``n_sentences`` count the
    whole corpus, the base's segments included. Returns the file offsets of the tokens'
    and the sentence starts' raw data (-1 where a dataset is empty).

    With ``base`` (an open corpus: ``preprocess --append``) the new text becomes a segment
    after the base's, ``words``/``counts`` must extend its vocabulary, and the base's own
    tokens and sentence starts are copied here, unchanged. ``segment_info`` describes the
    new segment (stored with the base's in A_SEGMENT_INFO)."""
    if base is not None:
        if words[:base.n_words] != base.words:   # the caller extends the vocabulary: a bug otherwise
            raise ValueError("an appended vocabulary must keep the old words and their ids")
        segments = np.concatenate((base.segment_table, [[n_tokens, n_sentences, len(words)]])).astype(np.int64)
        info = base.segment_info + [segment_info or {}]
    else:
        segments = np.array([[n_tokens, n_sentences, len(words)]], dtype=np.int64)
        info = [segment_info or {}]
    with h5py.File(out_path, "w", userblock_size=SEAL_SIZE) as f:
        f.attrs[A_FORMAT] = FORMAT
        f.attrs[A_VERSION] = FORMAT_VERSION
        for k, v in attrs.items():
            f.attrs[k] = v
        f.attrs[A_SEGMENT_INFO] = json.dumps(info)
        f.create_dataset(D_WORDS, data=np.array(words, dtype=object), dtype=h5py.string_dtype("utf-8"))
        f.create_dataset(D_COUNTS, data=np.asarray(counts, dtype=np.int64))
        f.create_dataset(D_SEGMENTS, data=segments)
        tokens = f.create_dataset(D_TOKENS, shape=(n_tokens,), dtype="<i4", dcpl=_no_fill())
        sentences = f.create_dataset(D_SENTENCES, shape=(n_sentences,), dtype="<i8", dcpl=_no_fill())
        f.flush()
        offsets = tuple(-1 if d.id.get_offset() is None else int(d.id.get_offset()) for d in (tokens, sentences))
    if base is not None:          # the old segments, byte for byte
        old_tokens, old_sentences = base.total_tokens, base.total_sentences
        write_slice(out_path, offsets, 0, (base.read_tokens(a, min(a + COPY_ITEMS, old_tokens))
                                          for a in range(0, old_tokens, COPY_ITEMS)),
                    0, (base.read_sentences(a, min(a + COPY_ITEMS, old_sentences))
                        for a in range(0, old_sentences, COPY_ITEMS)))
    return offsets


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        n = os.pwrite(fd, data, offset)
        data, offset = data[n:], offset + n


def write_slice(out_path: str, offsets: tuple[int, int], token_start: int, token_blocks,
                sentence_start: int, sentence_blocks) -> tuple[int, int]:
    """Write one rank's token ids (int32 blocks, in order) from corpus token ``token_start``
    and its sentence starts (int64 blocks of global token indices) from sentence
    ``sentence_start`` into the file ``create_corpus`` made, at ``offsets``. Several ranks
    write disjoint slices at once, each with its own file descriptor; nothing is fsynced
    here (``finish_corpus`` does it once). Returns (tokens, sentence starts) written."""
    fd = os.open(out_path, os.O_WRONLY)
    written = []
    try:
        for base_offset, itemsize, dtype, start, blocks in (
                (offsets[0], 4, "<i4", token_start, token_blocks),
                (offsets[1], 8, "<i8", sentence_start, sentence_blocks)):
            at = start
            for block in blocks:
                if len(block):
                    _pwrite_all(fd, memoryview(np.ascontiguousarray(block, dtype=dtype)).cast("B"),
                                base_offset + itemsize * at)
                    at += len(block)
            written.append(at - start)
    finally:
        os.close(fd)
    return written[0], written[1]


def slice_digests(out_path: str, offsets: tuple[int, int], n_tokens: int, n_sentences: int, rank: int,
                  world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """After every slice is written: the digests of ``rank``'s share of the chunks of the
    token ids and of the sentence starts (``corpus_id.chunk_range``), read back from the
    file's bytes at ``offsets`` (``create_corpus``'s). Every rank digests its share at once."""
    out, chunk = [], cid.CHUNK_ITEMS
    for offset, itemsize, items in ((offsets[0], 4, n_tokens), (offsets[1], 8, n_sentences)):
        first, last = cid.chunk_range(items, rank, world_size, chunk)
        out.append(cid.chunk_digests(out_path, offset, itemsize, items, first, last, chunk))
    return out[0], out[1]


def finish_corpus(out_path: str, token_digests: np.ndarray, sentence_digests: np.ndarray) -> str:
    """Rank 0, with every chunk's digest (``slice_digests`` of every rank, in rank order):
    stores them and the corpus id they make (``corpus_id.combined_id``: the id
    ``Corpus.verify`` checks), seals and fsyncs the file. Reads no token. Returns the id."""
    with h5py.File(out_path, "r+") as f:
        words = [w.decode("utf-8") if isinstance(w, bytes) else w for w in f[D_WORDS][:]]
        n_tokens, n_sentences = int(f[D_TOKENS].shape[0]), int(f[D_SENTENCES].shape[0])
        corpus_id = cid.combined_id(words, f[D_COUNTS][:], f[D_SEGMENTS][:], cid.CHUNK_ITEMS, n_tokens,
                                    n_sentences, token_digests, sentence_digests)
        f.create_dataset(D_TOKEN_DIGESTS, data=np.asarray(token_digests, dtype=np.uint8).reshape(-1, 32))
        f.create_dataset(D_SENTENCE_DIGESTS, data=np.asarray(sentence_digests, dtype=np.uint8).reshape(-1, 32))
        f.attrs[A_CHUNK_ITEMS] = cid.CHUNK_ITEMS
        f.attrs[A_CORPUS_ID] = corpus_id
        f.flush()
        extents = [raw_extent(f[D_TOKENS]), raw_extent(f[D_SENTENCES])]
    seal(out_path, extents)
    fsync_path(out_path)
    return corpus_id


# ---------------------------------------------------------------------------- reader
@dataclass(frozen=True)
class Shard:
    """A rank's contiguous, sentence-aligned part of the corpus."""

    token_start: int
    token_end: int
    sentence_start: int
    sentence_end: int

    @property
    def n_tokens(self) -> int:
        return self.token_end - self.token_start


@dataclass(frozen=True)
class Segment:
    """One appended text: its tokens, its sentences, and the ids of the words it added."""

    index: int
    token_start: int
    token_end: int
    sentence_start: int
    sentence_end: int
    vocab_start: int
    vocab_end: int

    @property
    def n_tokens(self) -> int:
        return self.token_end - self.token_start


SEGMENT_SPEC_HELP = "all, new (the last segment), K (segment K, from 0), K: (K to the last) or K:L (K to L-1)"


def segment_range(spec: str, n_segments: int) -> tuple[int, int]:
    """[first, last + 1) of the segments ``spec`` selects (SEGMENT_SPEC_HELP) among
    ``n_segments``; ValueError for a malformed spec or an empty or out-of-range selection."""
    spec = spec.strip()
    if spec == "all":
        return 0, n_segments
    if spec == "new":
        return n_segments - 1, n_segments
    head, colon, tail = spec.partition(":")
    try:
        a = int(head)
        b = (int(tail) if tail else n_segments) if colon else a + 1
    except ValueError:
        raise ValueError(f"segments {spec!r}: use {SEGMENT_SPEC_HELP}") from None
    if not 0 <= a < b <= n_segments:
        raise ValueError(f"segments {spec!r} selects nothing of the {n_segments} segment(s) (0 to "
                         f"{n_segments - 1})")
    return a, b


class Corpus:
    """Read-only view of a corpus file; checks the format before anything is read.

    ``segments`` (SEGMENT_SPEC_HELP) selects the segments that ``n_tokens``, ``shard``,
    ``block_spans`` and ``iter_blocks`` cover; the vocabulary, counts and token ids are
    always the whole corpus's (token positions stay positions in the whole file)."""

    def __init__(self, path: str, segments: str = "all"):
        self.path = path
        if not os.path.exists(path):
            raise InputError(f"corpus not found: {path}")
        hint = "; make one from text with python -m mpidwe.preprocess TEXT --output CORPUS.h5"
        check_seal(path, "corpus", hint, fix=" (preprocess it again)")   # before HDF5 parses it
        try:
            self._f = h5py.File(path, "r")
        except OSError:
            raise unreadable(path, "corpus", hint) from None
        try:
            self._check()
            self._select(segments)
        except (OSError, ValueError, KeyError, UnicodeDecodeError) as e:
            self._f.close()
            if isinstance(e, ValueError) and str(e).startswith("segments "):
                raise InputError(f"{path}: {e}") from None
            raise InputError(f"{path} is damaged: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        except Exception:
            self._f.close()
            raise

    def _check(self) -> None:
        f, path = self._f, self.path
        self.version = check_format(f.attrs, path, FORMAT, FORMAT_VERSION, "corpus", older=FORMAT_OLDER)
        for name in (D_WORDS, D_COUNTS, D_TOKENS, D_SENTENCES) + ((D_SEGMENTS,) if self.version >= 2 else ()) \
                + ((D_TOKEN_DIGESTS, D_SENTENCE_DIGESTS) if self.version >= 3 else ()):
            if name not in f:
                raise InputError(f"{path} is damaged: dataset /{name} is missing")
        check_stored(f, path, "corpus")        # before any dataset is read
        for name, expected, kinds in ((D_WORDS, (None,), "O"), (D_COUNTS, (None,), "iu"),
                                      (D_TOKENS, (None,), "i"), (D_SENTENCES, (None,), "i"),
                                      (D_SEGMENTS, (None, 3), "i")):
            if name in f:
                check_shape(path, name, f[name].shape, expected, kinds, f[name].dtype)
        n_words, n_tokens = f[D_WORDS].shape[0], f[D_TOKENS].shape[0]
        if f[D_COUNTS].shape[0] != n_words:
            raise InputError(f"{path} is damaged: {n_words} words but {f[D_COUNTS].shape[0]} counts")
        if int(f[D_COUNTS][:].sum()) != n_tokens:
            raise InputError(f"{path} is damaged: vocabulary counts do not add up to the "
                             f"{n_tokens} tokens stored")
        self.n_words, self.total_tokens = int(n_words), int(n_tokens)
        self.total_sentences = int(f[D_SENTENCES].shape[0])
        if A_CORPUS_ID not in f.attrs:
            raise InputError(f"{path} is damaged: it has no corpus id")
        if self.version >= 2:
            table = np.asarray(f[D_SEGMENTS][:], dtype=np.int64)
            ends = (self.total_tokens, self.total_sentences, self.n_words)
            if table.ndim != 2 or table.shape[1] != 3 or len(table) == 0 or tuple(table[-1]) != ends \
                    or np.any(np.diff(table[:, :2], axis=0) < 0) or np.any(np.diff(table[:, 2]) < 0) \
                    or np.any(table < 0):
                raise InputError(f"{path} is damaged: its segment table does not match its tokens, "
                                 f"sentences and vocabulary")
        else:
            table = np.array([[self.total_tokens, self.total_sentences, self.n_words]], dtype=np.int64)
        self.segment_table = table
        if self.version >= 3:
            chunk = f.attrs.get(A_CHUNK_ITEMS)
            if not isinstance(chunk, (int, np.integer)) or chunk <= 0:
                raise InputError(f"{path} is damaged: its attribute {A_CHUNK_ITEMS} is {chunk!r}")
            for name, items in ((D_TOKEN_DIGESTS, self.total_tokens), (D_SENTENCE_DIGESTS, self.total_sentences)):
                check_shape(path, name, f[name].shape, (cid.n_chunks(items, int(chunk)), cid.DIGEST_BYTES), "u",
                            f[name].dtype)

    def _select(self, spec: str) -> None:
        a, b = segment_range(spec, len(self.segment_table))
        self.selected = self.segments[a:b]
        first, last = self.selected[0], self.selected[-1]
        self.token_base, self.sentence_base = first.token_start, first.sentence_start
        self.n_tokens = last.token_end - first.token_start
        self.n_sentences = last.sentence_end - first.sentence_start

    @property
    def segments(self) -> list[Segment]:
        """Every segment of the file, oldest first (a version 1 file is one segment)."""
        out, prev = [], (0, 0, 0)
        for k, row in enumerate(self.segment_table.tolist()):
            out.append(Segment(k, prev[0], row[0], prev[1], row[1], prev[2], row[2]))
            prev = row
        return out

    @property
    def segment_info(self) -> list[dict]:
        """What each segment was made from (A_SEGMENT_INFO; for a version 1 file, its inputs)."""
        raw = self._f.attrs.get(A_SEGMENT_INFO)
        if raw is None:
            a = self.attrs
            return [{k: a.get(k) for k in (A_INPUTS, A_RAW_TOKENS, A_KEPT_TOKENS, A_CREATED, A_RANKS)}]
        return json.loads(raw.decode() if isinstance(raw, bytes) else raw)

    def verify(self, rank: int = 0, world_size: int = 1) -> None:
        """Check what is stored against the corpus id and refuse a mismatch: a flipped byte
        anywhere would otherwise train silently on wrong data. Version 3: ``rank`` hashes its
        share of the chunks (``corpus_id.chunk_range``: all of them when ``world_size`` is 1)
        and compares each with its stored digest, naming the first that differs; rank 0 also
        checks that the stored digests make the corpus id. Every rank of a job calls it at
        once (``Comm.agree``), and none reads more than its share. Versions 1 and 2: rank 0
        recomputes the id from every token (about 0.3 s for 16M tokens); the others wait."""
        try:
            if self.version >= 3:
                self._verify_chunks(rank, world_size)
            elif rank == 0:
                self._verify_stream()
        except (OSError, ValueError, KeyError, UnicodeDecodeError) as e:
            raise InputError(f"{self.path} is damaged: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None

    def _verify_chunks(self, rank: int, world_size: int) -> None:
        f, chunk = self._f, int(self._f.attrs[A_CHUNK_ITEMS])
        for name, stored, itemsize, items in ((D_TOKENS, D_TOKEN_DIGESTS, 4, self.total_tokens),
                                              (D_SENTENCES, D_SENTENCE_DIGESTS, 8, self.total_sentences)):
            first, last = cid.chunk_range(items, rank, world_size, chunk)
            if last <= first:
                continue
            if f[name].chunks is None:
                found = cid.chunk_digests(self.path, raw_extent(f[name])[0], itemsize, items, first, last, chunk)
            else:      # copied without the seal's contiguous layout: through HDF5
                found = np.array([np.frombuffer(hashlib.sha256(np.asarray(
                    f[name][k * chunk:(k + 1) * chunk], dtype=f"<i{itemsize}").tobytes()).digest(), np.uint8)
                    for k in range(first, last)], dtype=np.uint8).reshape(-1, cid.DIGEST_BYTES)
            bad = np.flatnonzero(np.any(found != f[stored][first:last], axis=1))
            if len(bad):
                k = first + int(bad[0])
                what = "token ids" if name == D_TOKENS else "sentence starts"
                raise InputError(f"{self.path} is damaged: chunk {k} of its {what} (items {k * chunk:,} to "
                                 f"{min((k + 1) * chunk, items) - 1:,}) does not match its digest "
                                 f"(preprocess it again)")
        if rank == 0 and cid.combined_id(self.words, f[D_COUNTS][:], self.segment_table, chunk, self.total_tokens,
                                         self.total_sentences, f[D_TOKEN_DIGESTS][:],
                                         f[D_SENTENCE_DIGESTS][:]) != self.corpus_id:
            raise InputError(f"{self.path} is damaged: its chunk digests do not match its corpus id "
                             f"{self.corpus_id[:12]} (preprocess it again)")

    def _verify_stream(self, block: int = COPY_ITEMS) -> None:
        f = self._f
        digest = cid.header_digest(self.words, f[D_COUNTS][:])
        tokens = f[D_TOKENS]
        for a in range(0, self.total_tokens, block):
            digest.update(np.asarray(tokens[a:a + block], dtype="<i4").tobytes())
        sent = hashlib.sha256()
        starts = f[D_SENTENCES]
        for a in range(0, self.total_sentences, block):
            sent.update(np.asarray(starts[a:a + block], dtype="<i8").tobytes())
        if cid.stream_id(digest, sent, self.segment_table) != self.corpus_id:
            raise InputError(f"{self.path} is damaged: its content does not match its corpus id "
                             f"{self.corpus_id[:12]} (preprocess it again)")

    # -- metadata
    @property
    def corpus_id(self) -> str:
        return str(self._f.attrs[A_CORPUS_ID])

    @property
    def counts(self) -> np.ndarray:
        return self._f[D_COUNTS][:]

    @property
    def words(self) -> list[str]:
        return [w.decode("utf-8") if isinstance(w, bytes) else w for w in self._f[D_WORDS][:]]

    @property
    def attrs(self) -> dict:
        out = {}
        for k, v in self._f.attrs.items():
            if isinstance(v, bytes):
                v = v.decode()
            if k in (A_OPTIONS, A_INPUTS) and isinstance(v, str):
                v = json.loads(v)
            elif isinstance(v, np.generic):
                v = v.item()
            out[k] = v
        return out

    # -- sharding and reading
    def shard(self, rank: int = 0, world_size: int = 1) -> Shard:
        """Rank's sentence-aligned part of the selected segments (positions in the whole file)."""
        s0, t0 = self.sentence_base, self.token_base
        sents = self._f[D_SENTENCES]
        # a few sentence starts read where the cuts fall (a binary search), never all of them
        a, b, i, j = sentence_shard_by(lambda k: int(sents[s0 + k]) - t0, self.n_sentences, self.n_tokens,
                                       rank, world_size)
        if not 0 <= a <= b <= self.n_tokens:      # a damaged start where the cut fell
            raise InputError(f"{self.path} is damaged: its sentence starts are out of order near sentence "
                             f"{i + s0:,}")
        return Shard(a + t0, b + t0, i + s0, j + s0)

    def read_tokens(self, start: int, end: int) -> np.ndarray:
        return self._f[D_TOKENS][start:end]

    def read_sentences(self, start: int, end: int) -> np.ndarray:
        """Sentence starts ``start`` to ``end`` (indices into the whole file's sentences)."""
        return self._f[D_SENTENCES][start:end]

    def block_spans(self, shard: Shard, block_tokens: int) -> Iterator[tuple[int, int, np.ndarray]]:
        """The shard's block grid without reading tokens: (start, end, sentence starts
        local to the block). A block holds whole sentences and at most ``block_tokens``
        tokens unless one sentence is longer. The grid depends only on the shard and
        ``block_tokens``, so a resumed run cuts the same blocks as an uninterrupted one."""
        sents = self._f[D_SENTENCES]
        pos = shard.token_start
        if pos >= shard.token_end:
            return
        window = 1 << 16

        def boundaries():
            last = shard.token_start
            for a in range(shard.sentence_start, shard.sentence_end, window):
                chunk = sents[a:min(a + window, shard.sentence_end)]
                # the starts rise from the shard's first token to its end: a damaged one (not
                # caught with --no-verify-corpus) is one line, never merged or split sentences
                if (chunk[0] < last or (a == shard.sentence_start and chunk[0] != last)
                        or chunk[-1] > shard.token_end or np.any(np.diff(chunk) < 0)):
                    raise InputError(f"{self.path} is damaged: its sentence starts are out of order near "
                                     f"sentence {a:,}")
                last = int(chunk[-1])
                yield chunk, False
            yield np.array([shard.token_end], dtype=np.int64), True

        pending = np.zeros(0, dtype=np.int64)
        for chunk, final in boundaries():
            pending = np.concatenate((pending, chunk[chunk >= pos]))
            while len(pending) >= 2:
                k = int(np.searchsorted(pending, pos + block_tokens, side="right")) - 1
                if k == len(pending) - 1 and not final:
                    break  # later boundaries may still fit in this block
                k = max(k, 1)  # at least one sentence, however long
                end = int(pending[k])
                yield pos, end, pending[:k] - pos
                pos, pending = end, pending[k:]

    def iter_blocks(self, shard: Shard, block_tokens: int = 1 << 20,
                    start_token: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        """Sentence-aligned blocks of ``shard`` (see ``block_spans``): (token ids, sentence
        starts local to the block, global offset of the block). ``start_token`` (a
        sentence start inside the shard) resumes there: the block holding it is cut, the
        rest of the grid is unchanged. Memory is bounded by the block size."""
        for pos, end, local in self.block_spans(shard, block_tokens):
            if start_token is not None and end <= start_token:
                continue
            if start_token is not None and pos < start_token:
                k = int(np.searchsorted(local, start_token - pos))
                if k >= len(local) or local[k] != start_token - pos:
                    raise InputError(f"{self.path}: token {start_token} is not a sentence start")
                local = local[k:] - (start_token - pos)
                pos = start_token
            block = self._f[D_TOKENS][pos:end]
            if len(block) and (int(block.max()) >= self.n_words or int(block.min()) < 0):
                raise InputError(f"{self.path} is damaged: token id out of range near token {pos}")
            yield block, local, pos

    def close(self) -> None:
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def prefetch(it: Iterator, depth: int = 2) -> Iterator:
    """Run ``it`` in a background thread, ``depth`` items ahead, so the consumer does
    not wait on the disk. Exceptions in the reader are re-raised in the consumer."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def worker():
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            q.put(e)

    t = threading.Thread(target=worker, name="mpidwe-prefetch", daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
