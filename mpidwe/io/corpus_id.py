"""The corpus id and the digests of a corpus's chunks (docs/hdf5-format.md). No h5py:
io/corpus.py hands in the raw file extents of its contiguous datasets.

Version 3 of the corpus format cuts the token ids and the sentence starts into chunks of
``CHUNK_ITEMS`` items and stores the SHA-256 of every chunk; the corpus id is one SHA-256
over the vocabulary, the counts, the segment table and those chunk digests, in order (a
two-level Merkle tree). So no rank ever hashes the whole corpus: preprocessing ranks
digest their share of the chunks in parallel, and a training rank verifies its share
against the stored digests. Versions 1 and 2 hashed every token in one stream
(``stream_id``), which one rank had to read in order."""

from __future__ import annotations

import hashlib

import numpy as np

from ..core.sharding import even_split

CHUNK_ITEMS = 1 << 20          # tokens (4 MiB) or sentence starts (8 MiB) a chunk
DIGEST_BYTES = 32
_ID_TAG = b"mpidwe-corpus-id-3\n"
READ_BYTES = 1 << 22           # bytes read at a time while hashing


def n_chunks(items: int, chunk_items: int = CHUNK_ITEMS) -> int:
    return -(-items // chunk_items)


def chunk_range(items: int, rank: int, world_size: int, chunk_items: int = CHUNK_ITEMS) -> tuple[int, int]:
    """The chunks [first, last) of ``items`` items that ``rank`` digests or verifies: an
    even split of the chunks, so about the rank's own shard of a corpus read whole."""
    return even_split(n_chunks(items, chunk_items), rank, world_size)


def chunk_digests(path: str, offset: int, itemsize: int, items: int, first: int, last: int,
                  chunk_items: int = CHUNK_ITEMS) -> np.ndarray:
    """The SHA-256 of chunks [first, last) of a dataset of ``items`` items of ``itemsize``
    bytes stored contiguously at ``offset`` of ``path`` (little-endian, as stored), as a
    (last - first, 32) uint8 array. Reads straight into one reused buffer."""
    out = np.zeros((max(last - first, 0), DIGEST_BYTES), dtype=np.uint8)
    if last <= first:
        return out
    buf = memoryview(bytearray(min(READ_BYTES, chunk_items * itemsize)))
    with open(path, "rb", buffering=0) as fh:
        for k in range(first, last):
            a, b = k * chunk_items, min((k + 1) * chunk_items, items)
            digest = hashlib.sha256()
            fh.seek(offset + a * itemsize)
            left = (b - a) * itemsize
            while left:
                n = fh.readinto(buf[:min(len(buf), left)])
                if not n:
                    raise OSError(f"{path}: short read at byte {fh.tell()}")
                digest.update(buf[:n])
                left -= n
            out[k - first] = np.frombuffer(digest.digest(), dtype=np.uint8)
    return out


def header_digest(words: list[str], counts: np.ndarray) -> "hashlib._Hash":
    """The running SHA-256 of the vocabulary (newline-joined UTF-8) and the counts (int64)."""
    digest = hashlib.sha256("\n".join(words).encode("utf-8"))
    digest.update(np.ascontiguousarray(counts, dtype="<i8").tobytes())
    return digest


def combined_id(words: list[str], counts: np.ndarray, segments: np.ndarray, chunk_items: int, n_tokens: int,
                n_sentences: int, token_digests: np.ndarray, sentence_digests: np.ndarray) -> str:
    """The version 3 corpus id: SHA-256 of a tag, the vocabulary and counts' digest, the
    segment table, (chunk items, tokens, sentences) and every chunk digest in order."""
    if len(token_digests) != n_chunks(n_tokens, chunk_items) or \
            len(sentence_digests) != n_chunks(n_sentences, chunk_items):
        raise ValueError("the chunk digests do not cover the tokens and sentence starts")
    digest = hashlib.sha256(_ID_TAG)
    digest.update(header_digest(words, counts).digest())
    digest.update(np.ascontiguousarray(segments, dtype="<i8").tobytes())
    digest.update(np.array([chunk_items, n_tokens, n_sentences], dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(token_digests, dtype=np.uint8).tobytes())
    digest.update(np.ascontiguousarray(sentence_digests, dtype=np.uint8).tobytes())
    return digest.hexdigest()


def stream_id(digest, sent_digest, segments: np.ndarray) -> str:
    """The version 1 and 2 corpus id from the running digest (vocabulary, counts, every
    token), the digest of the sentence starts and the segment table (added once there are
    several segments)."""
    digest.update(sent_digest.digest())
    if len(segments) > 1:
        digest.update(np.ascontiguousarray(segments, dtype=np.int64).tobytes())
    return digest.hexdigest()
