"""Unicode whitespace (issue 15, item 2): the tokenizer splits on every character for which
str.isspace() is true, for any rank count and block size, and the word2vec writers never
fail on a word that holds whitespace or a character that does not encode."""

import os
import sys

import numpy as np
import pytest

from mpidwe.io import text
from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig, TrainConfig
from mpidwe.io.corpus import Corpus
from mpidwe.io import vectors
from mpidwe.io.vectors import read_word2vec, write_word2vec
from mpidwe.preprocess import run as preprocess
from mpidwe.io.text import ScanStats, TextOptions, describe_source, find_boundaries, scan_rank, tokenize
from mpidwe.train import run as train

UNICODE_WS = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
MULTIBYTE_WS = [c for c in UNICODE_WS if ord(c) > 127]
# control bytes other than ASCII whitespace become spaces, as in mpidwe.io.text
_CONTROL = bytes(32 if (c < 32 and c not in b"\t\n\r\x0b\x0c") or c == 127 else c for c in range(256))


def reference_lines(data: bytes, lowercase=False) -> list[list[bytes]]:
    """Whole-input tokens per line: str.split() on the decoded text of each line."""
    out = []
    for ln in data.split(b"\n"):
        s = ln.translate(_CONTROL).decode("utf-8", "replace")
        if lowercase:
            s = s.lower()
        out.append([t.encode() for t in s.split()])
    return out


def scan_all(paths, world: int, opts: TextOptions):
    """What ``world`` ranks read, in rank order: tokens per line, and the summed stats."""
    sources = [describe_source(str(p)) for p in paths]
    bounds = find_boundaries(sources, world)
    stats = ScanStats()
    lines, cur = [], []
    for r in range(world):
        for toks, line_end in scan_rank(sources, bounds[r], bounds[r + 1], opts, stats):
            cur.extend(toks)
            if line_end:
                lines.append(cur)
                cur = []
    lines.append(cur)
    return lines, stats, bounds


def mixed_text(seed: int, n: int = 3000) -> bytes:
    """Words separated by every kind of whitespace, with stretches that hold no ASCII
    whitespace at all, a few newlines, invalid bytes and truncated sequences."""
    rng = np.random.default_rng(seed)
    words = ["a", "bb", "café", "日本語", "Ωμέγα", "ΟΔΟΣ", "x\xff", "\xe3\x80", "zz"]
    seps = MULTIBYTE_WS * 3 + [" ", "\t", "\x1c", "\r"]
    out = []
    for i in range(n):
        w = words[int(rng.integers(len(words)))]
        out.append(w.encode("latin-1") if w in ("x\xff", "\xe3\x80") else w.encode())
        k = int(rng.integers(100))
        if k < 3:
            out.append(b"\n")
        elif 400 < i % 1000 < 700:          # a long stretch with multi-byte separators only
            out.append(MULTIBYTE_WS[int(rng.integers(len(MULTIBYTE_WS)))].encode())
        else:
            out.append(seps[int(rng.integers(len(seps)))].encode())
    return b"".join(out)


def test_tokenize_splits_on_every_unicode_whitespace():
    for lowercase in (False, True):
        opts = TextOptions(lowercase=lowercase)
        for c in UNICODE_WS:
            line = f"Ab{c}cd{c}{c}e".encode()
            assert tokenize(line, opts, ScanStats()) == [b"ab" if lowercase else b"Ab", b"cd", b"e"], repr(c)
            assert tokenize(c.encode() * 3, opts, ScanStats()) == []


def test_tokenize_ascii_text_unchanged():
    """ASCII input (control bytes included) gives exactly the tokens bytes.split() gave."""
    rng = np.random.default_rng(1)
    data = bytes(rng.integers(0, 128, size=20000).tolist())
    for line in data.split(b"\n"):
        for lowercase in (False, True):
            stats = ScanStats()
            got = tokenize(line, TextOptions(lowercase=lowercase), stats)
            want = (line.translate(_CONTROL).lower() if lowercase else line.translate(_CONTROL)).split()
            assert got == want and stats.raw_tokens == len(want)


@pytest.mark.parametrize("block", [5, 16, 61, 4096])
def test_any_rank_count_and_block_size_reads_the_same_tokens(tmp_path, monkeypatch, block):
    """P = 1..9 simulated ranks and blocks of 5 bytes up give the tokens of str.split() on
    each whole line; with DOC_LINE_MAX made small, range boundaries fall inside lines, where
    a split point near a multi-byte whitespace must not cut it."""
    monkeypatch.setattr(text, "DOC_LINE_MAX", 64)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes(mixed_text(1))
    b.write_bytes(mixed_text(2, 800))
    for lowercase in (False, True):
        opts = TextOptions(lowercase=lowercase, block_bytes=block)
        ref = reference_lines(a.read_bytes(), lowercase) + reference_lines(b.read_bytes(), lowercase)
        want = [t for ln in ref for t in ln]
        first = None
        for world in range(1, 10):
            lines, stats, _ = scan_all([a, b], world, opts)
            got = [t for ln in lines for t in ln]
            assert got == want, (world, block, lowercase)
            assert [ln for ln in lines if ln] == [ln for ln in ref if ln]
            assert not any(any(c.isspace() for c in t.decode()) for t in got)
            if first is None:
                first = (lines, stats.raw_tokens, stats.invalid_utf8)
            assert (lines, stats.raw_tokens, stats.invalid_utf8) == first, (world, block)


def test_ranges_and_blocks_split_at_multibyte_whitespace(tmp_path):
    """Text whose only separator is U+3000 (no ASCII whitespace, no newline) is still split
    evenly between ranks, each boundary just after a whole U+3000, and read in pieces about a
    block long, not as one piece of the whole file."""
    src = tmp_path / "ja.txt"
    data = "\u3000".join(["日本語"] * 20000).encode()
    src.write_bytes(data)
    sources = [describe_source(str(src))]
    bounds = find_boundaries(sources, 4)
    inner = [b.offset for b in bounds[1:-1]]
    for r, off in enumerate(inner, 1):
        assert data[off - 3:off] == "\u3000".encode() and not bounds[r].line_start
        assert abs(off - len(data) * r // 4) < 100
    with open(src, "rb") as fh:
        pieces = [p for p, _ in text._pieces(fh, str(src), 0, len(data), 4096)]
    assert b"".join(pieces) == data and max(map(len, pieces)) <= 4096 + 12


def test_writers_escape_whitespace_and_unencodable_characters(tmp_path):
    gensim = pytest.importorskip("gensim")
    words = ["plain", "new york", "a\u3000b", "nbsp\xa0", "\x85nel", "tab\tx", "line\nfeed",
             "bad\ud800half", "é\u2028", "back\\slash"]
    escaped = ["plain", "new\\u0020york", "a\\u3000b", "nbsp\\u00a0", "\\u0085nel", "tab\\u0009x",
               "line\\u000afeed", "bad\\ud800half", "é\\u2028", "back\\slash"]
    vecs = np.random.default_rng(0).standard_normal((len(words), 4)).astype(np.float32)
    for binary in (False, True):
        out = tmp_path / f"v-{binary}.w2v"
        write_word2vec(str(out), words, vecs, binary=binary)
        kv = gensim.models.KeyedVectors.load_word2vec_format(str(out), binary=binary)
        assert kv.index_to_key == escaped
        np.testing.assert_allclose(kv.vectors, vecs, rtol=1e-6)
        got_words, got = read_word2vec(str(out))
        assert got_words == escaped and np.array_equal(got, vecs)
    assert not [f for f in os.listdir(tmp_path) if ".tmp-" in f]
    assert [vectors.escape_word(w) for w in words] == escaped


def test_unicode_whitespace_text_preprocesses_and_trains_to_vectors(tmp_path):
    """The operator's case: text (and binary bytes) with U+3000, U+00A0 and U+0085 inside
    'words'; preprocessing splits there, and training ends with a readable vectors.txt."""
    gensim = pytest.importorskip("gensim")
    rng = np.random.default_rng(5)
    vocab = ["alpha", "beta", "gamma", "delta", "東京", "café"]
    seps = [" ", "\u3000", "\xa0", "\x85", "\u2003", "\n"]
    parts = []
    for _ in range(6000):
        parts.append(vocab[int(rng.integers(len(vocab)))])
        parts.append(seps[int(rng.integers(len(seps)))])
    src = tmp_path / "in.txt"
    src.write_bytes("".join(parts).encode() + bytes(range(1, 256)) * 4)    # a NUL would make it "not text"
    corpus = tmp_path / "c.h5"
    preprocess(PreprocessConfig(inputs=(str(src),), output=str(corpus), min_count=1), Comm.serial(), log=None)
    with Corpus(str(corpus)) as c:
        assert set(vocab) <= set(c.words)
        assert not [w for w in c.words if any(ch.isspace() for ch in w)]
    run = tmp_path / "run"
    train(TrainConfig(corpus=str(corpus), out=str(run), dim=8, threads=1, progress=False),
          Comm.serial(), log=None)
    kv = gensim.models.KeyedVectors.load_word2vec_format(str(run / "vectors.txt"), binary=False)
    assert set(vocab) <= set(kv.index_to_key)
