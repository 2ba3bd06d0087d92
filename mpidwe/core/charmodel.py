"""The character-level generator (Mimick, Pinter et al. 2017): a word's characters -> its vector.

A bidirectional LSTM reads the characters of ``<word>``; its two final states, joined, go
through a one-hidden-layer MLP to a vector of the embedding's dimension. It is fitted after
training to reproduce the learned vectors (cosine loss), and answers words the vocabulary
never saw. No I/O: checkpoint.py stores and reads its parameters.

Why noise: the demo's words are random syllables, so nothing in a spelling predicts its
cluster, and a model fitted to the exact spellings memorises them: a spelling with one
character changed lands anywhere. Each epoch therefore shows every word both as spelt and
with one random edit (a substituted, deleted, inserted or swapped character) with the same
target, which teaches the model that a near spelling means the same vector. On real text the
same noise does not hurt morphology (prefixes and suffixes stay), and it is what makes a
misspelling land next to its word.

The fit takes the ``words`` most frequent words (frequent words have the best-trained
vectors), batches words of one length together (no padding, so the final states are exact),
and is seeded: the same checkpoint, options and torch version give the same model.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np

BOW, EOW = "\x02", "\x03"      # boundary marks (never in a whitespace-split token)
PAD, UNK = 0, 1                # reserved character ids; the alphabet starts at 2
MAX_CHARS = 40                 # longer words are cut to their first and last 20 characters


@dataclass(frozen=True)
class CharModelOptions:
    """Hyper-parameters of the generator and of its fit (stored with the model)."""

    words: int = 50_000        # fit on the most frequent words
    steps: int = 6000          # Adam steps (the epochs follow from the number of words)
    batch: int = 64
    lr: float = 3e-3
    char_dim: int = 32
    hidden: int = 128          # LSTM state per direction
    mlp: int = 256             # the MLP's hidden layer
    noise: float = 1.0         # noisy copies per word and epoch (one random edit each)
    alphabet: int = 200        # keep the most frequent characters; the rest share UNK
    seed: int = 1
    threads: int = 1           # torch threads (a small LSTM gains little from more)

    def check(self) -> None:
        from .errors import ConfigError

        for name in ("words", "steps", "batch", "char_dim", "hidden", "mlp", "alphabet", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ConfigError(f"--lr must be > 0, got {self.lr}")
        if not 0 <= self.noise <= 8:
            raise ConfigError(f"--noise must be between 0 and 8 noisy copies per word, got {self.noise}")


def _net(n_chars: int, dim: int, o: CharModelOptions):
    import torch
    from torch import nn

    class CharNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(n_chars, o.char_dim, padding_idx=PAD)
            self.lstm = nn.LSTM(o.char_dim, o.hidden, batch_first=True, bidirectional=True)
            self.mlp = nn.Sequential(nn.Linear(2 * o.hidden, o.mlp), nn.Tanh(), nn.Linear(o.mlp, dim))

        def forward(self, ids):          # ids: [B, L], every row the same length
            _, (h, _) = self.lstm(self.embed(ids))
            return self.mlp(torch.cat([h[0], h[1]], dim=1))

    return CharNet()


def param_shapes(n_chars: int, dim: int, o: CharModelOptions) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor of :func:`_net`'s network, by name (as its state_dict)."""
    h, c, m = o.hidden, o.char_dim, o.mlp
    shapes = {"embed.weight": (n_chars, c)}
    for side in ("", "_reverse"):
        shapes.update({f"lstm.weight_ih_l0{side}": (4 * h, c), f"lstm.weight_hh_l0{side}": (4 * h, h),
                       f"lstm.bias_ih_l0{side}": (4 * h,), f"lstm.bias_hh_l0{side}": (4 * h,)})
    shapes.update({"mlp.0.weight": (m, 2 * h), "mlp.0.bias": (m,), "mlp.2.weight": (dim, m), "mlp.2.bias": (dim,)})
    return shapes


def check_state(meta: dict, params: dict, dim: int) -> None:
    """Refuse (ValueError, saying why) a stored model whose options do not describe its arrays,
    whose dimension is not the vectors' ``dim``, or whose scale or weights are not finite:
    checked before the network is built, so options edited to hidden=30000 in a small file
    cost no gigabytes, and a NaN scale gives no NaN vectors."""
    try:
        options = CharModelOptions(**meta["options"])
        alphabet, stored_dim, scale = meta["alphabet"], int(meta["dim"]), float(meta["scale"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"its options cannot be read ({e})") from None
    if (not isinstance(alphabet, list) or not all(isinstance(ch, str) for ch in alphabet)
            or len(set([BOW, EOW] + alphabet)) != len(alphabet) + 2):
        raise ValueError("its alphabet is not a list of distinct characters")
    if stored_dim != dim:
        raise ValueError(f"it makes vectors of {stored_dim} dimensions, the checkpoint's have {dim}")
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"its scale is {scale}, not a positive number")
    want = param_shapes(len(alphabet) + 4, dim, options)
    got = {k: tuple(np.shape(v)) for k, v in params.items()}
    if got != want:
        bad = sorted(set(got) ^ set(want)) or [k for k in want if got[k] != want[k]]
        raise ValueError(f"its arrays do not match its options (hidden {options.hidden}, mlp {options.mlp}, "
                         f"char_dim {options.char_dim}): {bad[0]} is {got.get(bad[0])}, expected {want.get(bad[0])}")
    for k, v in params.items():
        if not np.isfinite(v).all():
            raise ValueError(f"its array {k} holds NaN or infinite values")


def spell(word: str) -> str:
    """The characters the model reads: ``<word>`` with long words cut in the middle."""
    if len(word) > MAX_CHARS:
        word = word[:MAX_CHARS // 2] + word[-MAX_CHARS // 2:]
    return BOW + word + EOW


def build_alphabet(words, size: int) -> list[str]:
    """The ``size`` most frequent characters of ``words`` (ties by code point)."""
    from collections import Counter

    c = Counter(ch for w in words for ch in w)
    return [ch for ch, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:size]]


class CharModel:
    """A fitted generator: ``vector(word)``, ``vectors(words)``; ``state()`` and
    :meth:`from_state` convert to and from plain arrays (what checkpoint.py stores)."""

    kind = "chars"

    def __init__(self, alphabet: list[str], dim: int, options: CharModelOptions, scale: float,
                 params: dict | None = None, info: dict | None = None):
        import torch

        self.alphabet, self.dim, self.options, self.scale = list(alphabet), int(dim), options, float(scale)
        self.info = dict(info or {})
        self.ids = {ch: i + 2 for i, ch in enumerate([BOW, EOW] + self.alphabet)}
        self.net = _net(len(self.ids) + 2, self.dim, options)
        if params is not None:
            self.net.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in params.items()}, strict=True)
        self.net.eval()

    def encode(self, word: str) -> list[int]:
        return [self.ids.get(ch, UNK) for ch in spell(word)]

    def vectors(self, words: list[str]) -> np.ndarray:
        """float32 [len(words), dim], scaled to the fitted vectors' mean length."""
        import torch

        out = np.zeros((len(words), self.dim), dtype=np.float32)
        by_len: dict[int, list[int]] = {}
        codes = [self.encode(w) for w in words]
        for i, c in enumerate(codes):
            by_len.setdefault(len(c), []).append(i)
        with torch.no_grad():
            for rows in by_len.values():
                pred = self.net(torch.tensor([codes[i] for i in rows], dtype=torch.long))
                pred = pred / pred.norm(dim=1, keepdim=True).clamp_min(1e-12) * self.scale
                out[rows] = pred.numpy()
        return out

    def vector(self, word: str) -> np.ndarray:
        return self.vectors([word])[0]

    def state(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().numpy().astype(np.float32) for k, v in self.net.state_dict().items()}

    def meta(self) -> dict:
        """What a reader needs besides the arrays: alphabet, dim, options, scale, fit info."""
        return {"alphabet": self.alphabet, "dim": self.dim, "options": asdict(self.options),
                "scale": self.scale, "info": self.info}

    @classmethod
    def from_state(cls, meta: dict, params: dict) -> "CharModel":
        return cls(meta["alphabet"], meta["dim"], CharModelOptions(**meta["options"]), meta["scale"],
                   params=params, info=meta.get("info"))


def corrupt(word: str, alphabet: list[str], rng: np.random.Generator) -> str:
    """One random edit: substitute, delete (words of 3+ characters), insert or swap."""
    n = len(word)
    op = rng.integers(4) if n >= 3 else rng.choice([0, 2])
    i = int(rng.integers(n)) if n else 0
    ch = alphabet[int(rng.integers(len(alphabet)))]
    if op == 0 and n:
        return word[:i] + ch + word[i + 1:]
    if op == 1:
        return word[:i] + word[i + 1:]
    if op == 3 and n >= 2:
        i = min(i, n - 2)
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word[:i] + ch + word[i:]


def fit(words: list[str], vectors: np.ndarray, options: CharModelOptions = CharModelOptions(),
        log=None) -> CharModel:
    """Fit the generator to ``vectors`` (row i is ``words[i]``'s; the first ``options.words``
    rows are used, so pass them most frequent first). Rows with nan/inf or zero length are
    left out. Cosine loss; Adam with the learning rate decayed linearly to a tenth."""
    import torch

    options.check()
    n = min(options.words, len(words))
    targets = np.asarray(vectors[:n], dtype=np.float32)
    norms = np.linalg.norm(targets, axis=1)
    ok = np.isfinite(norms) & (norms > 0)
    words = [w for w, k in zip(words[:n], ok) if k]
    targets = targets[ok] / norms[ok, None]
    if not words:
        from .errors import InputError

        raise InputError("no word with a finite, non-zero vector to fit the character model to")
    torch.manual_seed(options.seed)
    rng = np.random.default_rng(options.seed)
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(options.threads)
    model = CharModel(build_alphabet(words, options.alphabet), targets.shape[1], options,
                      float(np.mean(norms[ok])))
    net = model.net
    net.train()
    opt = torch.optim.Adam(net.parameters(), lr=options.lr)
    clean = [model.encode(w) for w in words]
    target_t = torch.from_numpy(targets)
    copies = int(math.floor(options.noise))
    t0, c0 = time.perf_counter(), time.process_time()
    steps_done, losses = 0, []
    try:
        epoch = 0
        while steps_done < options.steps:
            # each word as spelt, plus ``noise`` noisy copies (a fraction: for that share of words)
            n_words = len(words)
            frac = int(rng.binomial(n_words, options.noise - copies))
            noisy_rows = list(range(n_words)) * copies + rng.choice(n_words, frac, replace=False).tolist()
            rows = list(range(n_words)) + noisy_rows
            codes = clean + [model.encode(corrupt(words[i], model.alphabet, rng)) for i in noisy_rows]
            epoch_loss, seen = 0.0, 0
            for ids, tgt_rows in _batches(codes, rows, options.batch, rng)[:options.steps - steps_done]:
                for g in opt.param_groups:
                    g["lr"] = options.lr * (1 - 0.9 * steps_done / options.steps)
                pred = net(ids)
                loss = 1 - torch.nn.functional.cosine_similarity(pred, target_t[tgt_rows], dim=1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps_done += 1
                epoch_loss += float(loss.detach()) * len(tgt_rows)
                seen += len(tgt_rows)
            epoch += 1
            losses.append(epoch_loss / seen)
            if log:
                log(f"char model epoch {epoch}: loss {losses[-1]:.4f} ({seen:,} spellings, step "
                    f"{steps_done:,}/{options.steps:,}, {time.perf_counter() - t0:.1f} s)")
    finally:
        torch.set_num_threads(prev_threads)
    net.eval()
    model.info = {"fitted_words": len(words), "epoch_losses": [round(x, 6) for x in losses],
                  "seconds": round(time.perf_counter() - t0, 2),
                  "cpu_seconds": round(time.process_time() - c0, 2), "torch_version": torch.__version__}
    return model


def _batches(codes: list[list[int]], rows: list[int], batch: int, rng: np.random.Generator):
    """Shuffled batches of spellings of one length: (ids [B, L] long tensor, target rows)."""
    import torch

    by_len: dict[int, list[int]] = {}
    for k, c in enumerate(codes):
        by_len.setdefault(len(c), []).append(k)
    out = []
    for length in sorted(by_len):
        ks = np.array(by_len[length])
        rng.shuffle(ks)
        for a in range(0, len(ks), batch):
            part = ks[a:a + batch]
            out.append((torch.tensor([codes[k] for k in part], dtype=torch.long),
                        torch.tensor([rows[k] for k in part], dtype=torch.long)))
    order = rng.permutation(len(out))
    return [out[i] for i in order]
