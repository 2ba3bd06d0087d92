"""The only module that reads or writes corpus files (HDF5). Layout: docs/hdf5-format.md.

A corpus holds the vocabulary, the token ids of the whole text (out-of-vocabulary
tokens already removed) and the sentence boundaries. Preprocessing ranks write *part*
files that rank 0 stitches into one self-contained corpus file. A corpus grows by
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

from .errors import InputError
from .formats import SEAL_SIZE, check_format, check_seal, raw_extent, seal, unreadable
from .fsutil import fsync_path
from .sharding import sentence_shard

FORMAT = "mpidwe-corpus"
FORMAT_VERSION = 2              # 2: segments (a corpus can grow); version 1 files still read
FORMAT_OLDER = (1,)
PART_FORMAT = "mpidwe-corpus-part"
PART_FORMAT_VERSION = 2              # 2: segments (a corpus can grow); version 1 files still read
FORMAT_OLDER = (1,)

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
D_LINE_STARTS = "line_starts"
D_SEGMENTS = "segments"        # int64 (S, 3): each segment's end token, end sentence, end vocabulary size
A_SEGMENT_INFO = "segment_info"   # JSON list, one object per segment (inputs, counts, when, how)

TOKEN_CHUNK = 1 << 18          # tokens per HDF5 chunk of a part file (1 MiB of int32)
COPY_ITEMS = 1 << 22           # items copied at a time when stitching


# ----------------------------------------------------------------------------- parts
class PartWriter:
    """One preprocessing rank's token ids and line starts, appended block by block."""

    def __init__(self, path: str):
        self.path = path
        self._f = h5py.File(path, "w")
        self._f.attrs[A_FORMAT] = PART_FORMAT
        self._f.attrs[A_VERSION] = PART_FORMAT_VERSION
        self._tokens = self._f.create_dataset(D_TOKENS, shape=(0,), maxshape=(None,), dtype=np.int32,
                                              chunks=(TOKEN_CHUNK,))
        self._lines = self._f.create_dataset(D_LINE_STARTS, shape=(0,), maxshape=(None,),
                                             dtype=np.int64, chunks=(1 << 16,))

    @staticmethod
    def _append(ds, arr: np.ndarray) -> None:
        n = ds.shape[0]
        ds.resize((n + len(arr),))
        ds[n:] = arr

    def append_tokens(self, ids: np.ndarray) -> None:
        if len(ids):
            self._append(self._tokens, ids.astype(np.int32, copy=False))

    def append_line_starts(self, starts: np.ndarray) -> None:
        if len(starts):
            self._append(self._lines, starts.astype(np.int64, copy=False))

    @property
    def n_tokens(self) -> int:
        return int(self._tokens.shape[0])

    def close(self) -> None:
        self._f.flush()
        self._f.close()


def _sentence_starts(line_starts: np.ndarray, seg_start: int, carry: int, n: int,
                     length: int) -> np.ndarray:
    """Sentence starts in [seg_start, n) given the line starts in that range.

    Segment k runs from a line start to the next; sentences cut every ``length`` kept
    tokens within a line. ``carry`` is how many kept tokens of the first segment's line
    came before ``seg_start`` (it shifts the first cut)."""
    seg_a = np.concatenate(([seg_start], line_starts)).astype(np.int64)
    seg_b = np.concatenate((line_starts, [n])).astype(np.int64)
    first = np.zeros(len(seg_a), dtype=np.int64)
    first[0] = (-carry) % length
    room = seg_b - seg_a - first
    k = np.where(room > 0, (room + length - 1) // length, 0)
    within = np.arange(int(k.sum()), dtype=np.int64) - np.repeat(np.cumsum(k) - k, k)
    return np.repeat(seg_a + first, k) + length * within


def _sentence_blocks(parts: list, sizes: list[int], sentence_length: int) -> Iterator[np.ndarray]:
    """The corpus's sentence starts (global token indices, ascending), block by block, from
    the rank-ordered parts' line starts. Reads at most COPY_ITEMS line starts at a time."""
    offset, carry = 0, 0  # carry: kept tokens of the open line before this part
    for part, n in zip(parts, sizes):
        lines = part[D_LINE_STARTS]
        n_lines = lines.shape[0]
        seg_start = 0
        for a in range(0, max(n_lines, 1), COPY_ITEMS):
            ls = lines[a:min(a + COPY_ITEMS, n_lines)]
            last = a + COPY_ITEMS >= n_lines
            # the segment after the last line start stays open until the part ends
            end = n if last else int(ls[-1])
            body = ls if last else ls[:-1]
            yield _sentence_starts(body, seg_start, carry, end, sentence_length) + offset
            if not last:
                carry = 0
            elif len(body):
                carry = end - int(body[-1])
            else:
                carry += end - seg_start
            seg_start = end
        offset += n


def finish_digest(digest, sent_digest, segments: np.ndarray) -> str:
    """The corpus id from the running digest (vocabulary, counts, tokens), the digest of the
    sentence starts and the segment table. One segment adds nothing, so a corpus that never
    grew has the id version 1 gave it."""
    digest.update(sent_digest.digest())
    if len(segments) > 1:
        digest.update(np.ascontiguousarray(segments, dtype=np.int64).tobytes())
    return digest.hexdigest()


def stitch_parts(part_paths: list[str], out_path: str, *, words: list[str], counts: np.ndarray,
                 attrs: dict, sentence_length: int, segment_info: dict | None = None,
                 base: "Corpus | None" = None) -> str:
    """Write the final corpus from rank-ordered part files into ``out_path`` (a temporary
    name; the caller renames), sealed and fsynced. Streams: memory is bounded by
    COPY_ITEMS. Returns the corpus id (sha256 of vocabulary, counts, tokens and sentences,
    and of the segment table once there are several).

    With ``base`` (an open corpus: ``preprocess --append``) the parts become a new segment
    after the base's: its tokens and sentence starts are copied first, unchanged, and
    ``words``/``counts`` must extend its vocabulary. ``segment_info`` describes the new
    segment (stored with the base's in A_SEGMENT_INFO).

    The tokens and the sentence starts are stored contiguously (the sentences are counted
    first, in a pass over the parts' line starts), so the seal leaves out exactly their two
    byte ranges, which HDF5 copies without interpreting them."""
    parts = [h5py.File(p, "r") for p in part_paths]
    try:
        sizes = [int(p[D_TOKENS].shape[0]) for p in parts]
        old_tokens = base.total_tokens if base is not None else 0
        old_sentences = base.total_sentences if base is not None else 0
        total = old_tokens + sum(sizes)
        n_new = sum(len(s) for s in _sentence_blocks(parts, sizes, sentence_length))
        n_sentences = old_sentences + n_new
        if base is not None:
            old_words = base.words
            if words[:len(old_words)] != old_words:   # the caller extends the vocabulary: a bug otherwise
                raise RuntimeError("an appended vocabulary must keep the old words and their ids")
            segments = np.concatenate((base.segment_table, [[total, n_sentences, len(words)]])).astype(np.int64)
            info = base.segment_info + [segment_info or {}]
        else:
            segments = np.array([[total, n_sentences, len(words)]], dtype=np.int64)
            info = [segment_info or {}]
        digest = hashlib.sha256()  # vocabulary, counts, then tokens (rank-count independent)
        sent_digest = hashlib.sha256()
        with h5py.File(out_path, "w", userblock_size=SEAL_SIZE) as f:
            f.attrs[A_FORMAT] = FORMAT
            f.attrs[A_VERSION] = FORMAT_VERSION
            for k, v in attrs.items():
                f.attrs[k] = v
            f.attrs[A_SEGMENT_INFO] = json.dumps(info)
            word_bytes = "\n".join(words).encode("utf-8")
            digest.update(word_bytes)
            counts = np.asarray(counts, dtype=np.int64)
            digest.update(counts.tobytes())
            f.create_dataset(D_WORDS, data=np.array(words, dtype=object),
                             dtype=h5py.string_dtype("utf-8"))
            f.create_dataset(D_COUNTS, data=counts)
            f.create_dataset(D_SEGMENTS, data=segments)
            tokens = f.create_dataset(D_TOKENS, shape=(total,), dtype=np.int32)
            sentences = f.create_dataset(D_SENTENCES, shape=(n_sentences,), dtype=np.int64)
            if base is not None:       # the old segments, byte for byte
                for a in range(0, old_tokens, COPY_ITEMS):
                    block = base.read_tokens(a, min(a + COPY_ITEMS, old_tokens))
                    tokens[a:a + len(block)] = block
                    digest.update(np.asarray(block, dtype=np.int32).tobytes())
                for a in range(0, old_sentences, COPY_ITEMS):
                    block = base.read_sentences(a, min(a + COPY_ITEMS, old_sentences))
                    sentences[a:a + len(block)] = block
                    sent_digest.update(np.asarray(block, dtype=np.int64).tobytes())
            offset = old_tokens
            for part, n in zip(parts, sizes):
                src = part[D_TOKENS]
                for a in range(0, n, COPY_ITEMS):
                    block = src[a:min(a + COPY_ITEMS, n)]
                    tokens[offset + a:offset + a + len(block)] = block
                    digest.update(block.tobytes())
                offset += n
            done = old_sentences
            for s in _sentence_blocks(parts, sizes, sentence_length):
                if len(s):
                    s = s + old_tokens
                    sentences[done:done + len(s)] = s
                    sent_digest.update(s.tobytes())
                    done += len(s)
            if done != n_sentences:   # both passes read the same parts: a bug, not bad input
                raise RuntimeError(f"sentence starts: counted {n_sentences}, then made {done}")
            corpus_id = finish_digest(digest, sent_digest, segments)
            f.attrs[A_CORPUS_ID] = corpus_id
            f.flush()
            skip = [raw_extent(tokens), raw_extent(sentences)]
        seal(out_path, skip)
        fsync_path(out_path)
        return corpus_id
    finally:
        for p in parts:
            p.close()


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
        for name in (D_WORDS, D_COUNTS, D_TOKENS, D_SENTENCES) + ((D_SEGMENTS,) if self.version >= 2 else ()):
            if name not in f:
                raise InputError(f"{path} is damaged: dataset /{name} is missing")
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

    def verify(self, block: int = COPY_ITEMS) -> None:
        """Recompute the corpus id from what is stored (vocabulary, counts, every token, the
        sentence starts, the segments; the same digest ``stitch_parts`` made) and refuse a
        mismatch: a flipped byte anywhere would otherwise train silently on wrong data.
        Streams ``block`` tokens at a time; about 0.3 s for 16M tokens."""
        f = self._f
        try:
            digest = hashlib.sha256("\n".join(self.words).encode("utf-8"))
            digest.update(np.asarray(f[D_COUNTS][:], dtype=np.int64).tobytes())
            tokens = f[D_TOKENS]
            for a in range(0, self.total_tokens, block):
                digest.update(np.asarray(tokens[a:a + block], dtype=np.int32).tobytes())
            sent = hashlib.sha256()
            starts = f[D_SENTENCES]
            for a in range(0, self.total_sentences, block):
                sent.update(np.asarray(starts[a:a + block], dtype=np.int64).tobytes())
            found = finish_digest(digest, sent, self.segment_table)
        except (OSError, ValueError, KeyError, UnicodeDecodeError) as e:
            raise InputError(f"{self.path} is damaged: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        if found != self.corpus_id:
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
        starts = (self._f[D_SENTENCES][s0:s0 + self.n_sentences] - t0 if self.n_sentences
                  else np.zeros(0, np.int64))
        a, b, i, j = sentence_shard(starts, self.n_tokens, rank, world_size)
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
            for a in range(shard.sentence_start, shard.sentence_end, window):
                yield sents[a:min(a + window, shard.sentence_end)], False
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
