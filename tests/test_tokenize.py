"""The compiled tokenizer (kernels/tokenize.py, preprocess.scan.RankScan) against the readable Python
path (text.scan_rank + tokenize), on random text full of the hard cases: Unicode
whitespace, invalid UTF-8, control bytes, doc tags, very long tokens and lines, empty
lines, every option, several rank counts and block sizes."""

import bz2
import gzip
import json
import random

import h5py
import numpy as np
import pytest

from mpidwe.parallel.comm import Comm
from mpidwe.core.config import PreprocessConfig
from mpidwe.preprocess import run
from mpidwe.io.text import (Boundary, ScanStats, TextOptions, describe_source, estimated_size, find_boundaries,
    pieces_between, scan_rank, split_pieces)
from mpidwe.preprocess.scan import RankScan
from mpidwe.preprocess.tokens import TokenTable, pack

PIECES = ["a", "B", "word", "Word", "Ünï", "ΟΔΟΣ", "ΣΑΣ", "東京", "\u212a", "İ", "ß", "ǅ", " ", "  ", "\n", "\n\n",
          "\t", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x00", "\x7f", "\u3000", "\xa0", "\x85", "\u2028",
          "\u2029", "\u1680", "\u200b", "\ufeff", "<doc id=\"1\">", "</doc>", " </doc> ", "<doc", "<document>", ">"]
BAD = [b"\xff", b"\xc3", b"\xe3\x80", b"\xed\xa0\x80", b"\xf0\x90", b"\xf0\x90\x80", b"\xe0\x80", b"\xf4\x90\x80\x80",
       b"\x80", b"\xc0\xaf", b"\xf5", b"\xe3\x80\x80\x80", b"\xc2"]
TAG_LINES = [b"<doc a>", b"</doc>", b"  <doc x=1>  ", b"</doc>  ", b"\t</doc>\x0b", b"<doc" + b"y" * 5000 + b">"]
MODES = [dict(normalize="none"), dict(normalize="none", lowercase=True), dict(normalize="text8"),
         dict(normalize="none", strip_doc_tags=True), dict(normalize="none", lowercase=True, strip_doc_tags=True),
         dict(normalize="text8", strip_doc_tags=True)]


def random_text(rng: random.Random, n: int) -> bytes:
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.15:
            out.append(rng.choice(BAD))
        elif r < 0.17:
            out.append(rng.choice(["x", "É", "\u3000"]).encode() * rng.randint(1, 9000))   # longer than a block
        elif r < 0.20:
            out.append(b"\n" + rng.choice(TAG_LINES) + rng.choice([b"\n", b""]))
        else:
            out.append(rng.choice(PIECES).encode())
    return b"".join(out)


def python_scan(sources, lo, hi, opts):
    stats = ScanStats()
    toks, ends = [], []
    for t, newline in scan_rank(sources, lo, hi, opts, stats):
        toks.extend(t)
        if newline:
            ends.append(len(toks))
    return toks, ends, stats


def compiled_scan(sources, lo, hi, opts):
    chunks = []
    scan = RankScan(opts, chunks.append)
    scan.scan(sources, pieces_between(sources, lo, hi))
    table, raw_to_type = scan.canonical()
    words = table.words()
    raw = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
    ends = np.concatenate(scan.line_ends).tolist() if scan.line_ends else []
    counts = np.bincount(raw_to_type[raw], minlength=len(table)) if len(raw) else np.zeros(len(table), int)
    assert counts.tolist() == table.counts[: len(table)].tolist()
    return [words[i] for i in raw_to_type[raw]], ends, scan.stats


@pytest.mark.parametrize("seed", range(6))
def test_compiled_scan_matches_the_python_path(tmp_path, seed):
    rng = random.Random(seed)
    paths = []
    for k in range(2):
        p = tmp_path / f"in{k}.txt"
        p.write_bytes(random_text(rng, rng.randint(0, 2500)) + rng.choice([b"", b"\n", b" "]))
        paths.append(p)
    sources = [describe_source(str(p)) for p in paths]
    for mode in MODES:
        opts = TextOptions(**mode, block_bytes=rng.choice([4096, 4099, 1 << 20]))
        for world in (1, 2, 3):
            bounds = find_boundaries(sources, world)
            for r in range(world):
                a = python_scan(sources, bounds[r], bounds[r + 1], opts)
                b = compiled_scan(sources, bounds[r], bounds[r + 1], opts)
                assert a[0] == b[0], (mode, world, r)
                assert a[1] == b[1], (mode, world, r)
                assert a[2] == b[2], (mode, world, r)


def test_whole_file_pieces_give_the_tokens_of_one_rank(tmp_path):
    """Compressed inputs read whole (split_pieces, their sizes unknown) mixed with plain
    ones cut at whitespace: the ranks' tokens and line ends, concatenated, are one rank's,
    at 1 to 5 ranks; every compressed file is read by one rank only, whole."""
    rng = random.Random(7)
    paths = []
    for k in range(5):
        text = random_text(rng, rng.randint(0, 1500)) + rng.choice([b"", b"\n", b" "])
        p = tmp_path / (f"in{k}.txt" + ("" if k == 2 else ".gz"))
        p.write_bytes(text if k == 2 else gzip.compress(text))
        paths.append(p)
    sources = [describe_source(str(p), sized=False) for p in paths]
    assert [s.size is None for s in sources] == [True, True, False, True, True]
    opts = TextOptions(**MODES[0], block_bytes=4096)
    one = compiled_scan_pieces(sources, [p for ps in split_pieces(sources, [1.0] * 5, 1) for p in ps], opts)
    for world in (2, 3, 4, 5):
        plan = split_pieces(sources, [estimated_size(s) for s in sources], world)
        assert len(plan) == world
        toks, ends = [], []
        for pieces in plan:
            for p in pieces:
                assert sources[p.source].size is not None or (p.start, p.end) == (0, None)
            t, e, _ = compiled_scan_pieces(sources, pieces, opts)
            ends += [len(toks) + x for x in e]
            toks += t
        assert toks == one[0] and ends == one[1], world
        assert sorted(p.source for ps in plan for p in ps if p.end is None) == [0, 1, 3, 4]


def compiled_scan_pieces(sources, pieces, opts):
    chunks = []
    scan = RankScan(opts, chunks.append)
    scan.scan(sources, pieces)
    table, raw_to_type = scan.canonical()
    words = table.words()
    raw = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int32)
    ends = np.concatenate(scan.line_ends).tolist() if scan.line_ends else []
    return [words[i] for i in raw_to_type[raw]], ends, scan.stats


def test_one_line_longer_than_a_block_and_a_doc_tag_across_blocks(tmp_path):
    """A doc tag line longer than a block is still dropped whole; a line of one token of
    3 blocks is one token."""
    tag = b"<doc id=\"1\" title=\"" + b"t" * 10000 + b"\">"
    text = b"a b\n" + tag + b"\nc " + b"\xe3\x80\x80" * 3000 + b"x" * 13000 + b"\n</doc>"
    p = tmp_path / "in.txt"
    p.write_bytes(text)
    src = [describe_source(str(p))]
    opts = TextOptions("none", False, True, block_bytes=4096)
    bounds = [Boundary(0, True), Boundary(len(text), True)]
    toks, ends, stats = compiled_scan(src, *bounds, opts)
    assert toks == [b"a", b"b", b"c", b"x" * 13000] and stats.doc_lines == 2
    assert (toks, ends, stats) == python_scan(src, *bounds, opts)


def test_token_table_grows_and_finds_every_word():
    words = [f"w{i}".encode() * (1 + i % 7) for i in range(50000)]
    t = TokenTable(types=16, arena=16)
    ids = t.add_all(*pack(words))
    assert ids.tolist() == list(range(len(words))) and t.words() == words
    assert t.lookup_all(*pack([b"w3" * 4, b"nope", words[-1]])).tolist() == [3, -1, len(words) - 1]


CASES = [
    dict(min_count=1),
    dict(min_count=2, lowercase=True, sentence_length=7),
    dict(min_count=1, normalize="text8", strip_doc_tags=True, max_vocab=20),
    dict(min_count=3, strip_doc_tags=True, lowercase=True, max_vocab=50, sentence_length=3),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_compiled_engine_writes_the_corpus_of_the_python_engine(tmp_path, case):
    """End to end, every option: same vocabulary, counts, tokens, sentences, corpus id.
    Inputs: plain, gzip (streamed once by one rank) and bz2."""
    rng = random.Random(100 + case)
    # preprocess refuses a text with NUL bytes (not text); \x01 is a control byte as NUL is
    text = random_text(rng, 4000).replace(b"\x00", b"\x01")
    (tmp_path / "a.txt").write_bytes(text)
    (tmp_path / "b.gz").write_bytes(gzip.compress(random_text(rng, 3000).replace(b"\x00", b"\x01")))
    (tmp_path / "c.bz2").write_bytes(bz2.compress(text[::-1]))
    inputs = tuple(str(tmp_path / n) for n in ("a.txt", "b.gz", "c.bz2"))
    got = []
    for engine in ("python", "compiled"):
        out = tmp_path / f"{engine}.h5"
        cfg = PreprocessConfig(inputs=inputs, output=str(out), block_bytes=4096, **CASES[case])
        summary = run(cfg, Comm.serial(), log=None, engine=engine)
        with h5py.File(out, "r") as f:
            got.append(({k: f[k][:] for k in ("vocab/words", "vocab/counts", "tokens", "sentences", "line_starts")
                         if k in f}, {k: v for k, v in f.attrs.items() if k not in ("created_utc", "options")}, summary))
            for seg in (info := json.loads(got[-1][1].pop("segment_info"))):
                seg.pop("created_utc")
            got[-1][1]["segment_info"] = info
    (a, a_attrs, a_sum), (b, b_attrs, b_sum) = got
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert a_attrs == b_attrs
    for s in (a_sum, b_sum):
        s.pop("seconds"), s.pop("output")
    assert a_sum == b_sum


def test_the_kernel_uses_the_same_doc_line_limit():
    from mpidwe.io import text
    from mpidwe.kernels import tokenize

    assert tokenize.DOC_LINE_MAX == text.DOC_LINE_MAX
