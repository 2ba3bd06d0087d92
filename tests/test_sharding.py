import numpy as np
import pytest

from mpidwe.core.sharding import even_split, sentence_shard, sentence_shard_by


@pytest.mark.parametrize("total,world", [(0, 1), (10, 3), (7, 7), (5, 8), (1000003, 4)])
def test_even_split_covers_everything_once(total, world):
    ranges = [even_split(total, r, world) for r in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [b - a for a, b in ranges]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("world", [1, 2, 3, 5, 16])
def test_sentence_shards_are_contiguous_aligned_and_balanced(world):
    rng = np.random.default_rng(world)
    lengths = rng.integers(1, 50, size=300)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    n = int(lengths.sum())
    shards = [sentence_shard(starts, n, r, world) for r in range(world)]
    assert shards[0][0] == 0 and shards[-1][1] == n
    for (a0, a1, s0, s1), (b0, _, t0, _) in zip(shards, shards[1:]):
        assert a1 == b0 and s1 == t0
    for t0, t1, s0, s1 in shards:
        assert t0 == (starts[s0] if s0 < len(starts) else n)
        # within one (longest) sentence of the ideal share
        assert abs((t1 - t0) - n / world) <= lengths.max()


def test_sentence_shard_more_ranks_than_sentences():
    starts = np.array([0, 10])
    shards = [sentence_shard(starts, 20, r, 4) for r in range(4)]
    assert sum(t1 - t0 for t0, t1, _, _ in shards) == 20
    assert shards[-1][1] == 20


def test_bad_rank_refused():
    with pytest.raises(ValueError):
        sentence_shard(np.array([0]), 5, 2, 2)


def test_sentence_shard_by_a_lookup_is_sentence_shard_and_reads_few_starts():
    """The binary search over a lookup (a corpus file's sentence starts, never all read)
    cuts where the search over the whole array cuts, and looks at O(log S) starts."""
    rng = np.random.default_rng(4)
    for trial in range(40):
        n_sent = int(rng.integers(0, 300))
        starts = np.sort(rng.choice(np.arange(1, 5000), size=max(n_sent - 1, 0), replace=False))
        starts = np.concatenate(([0], starts))[:n_sent].astype(np.int64)
        n = int(starts[-1] + rng.integers(1, 50)) if n_sent else 0
        for world in (1, 2, 3, 7):
            for r in range(world):
                seen = []
                got = sentence_shard_by(lambda k: seen.append(k) or int(starts[k]), n_sent, n, r, world)
                assert got == sentence_shard(starts, n, r, world), (trial, world, r)
                assert len(seen) <= 4 * (np.log2(n_sent + 2) + 2)
