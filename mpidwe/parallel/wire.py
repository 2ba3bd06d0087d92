"""How rows of changes travel: their encoding on the wire (``--wire``). Arrays in, bytes
out, and back; no Comm (parallel/comm.py moves the bytes).

* ``fp32``: the values as they are (4 d bytes a row);
* ``bf16``: the high 16 bits of each float32, rounded to nearest even (2 d bytes a row):
  float32's range with 8 bits of mantissa, about 0.4% relative error per value;
* ``int8``: per row one float32 scale (the row's largest |value| / 127) and d signed bytes,
  rounded to nearest (d + 4 bytes a row): at most 0.4% of the row's largest value off. A
  row holding a NaN or an infinity decodes as NaN throughout, so the divergence guard
  still sees it.
* ``int16``: the same with 16 bits per value (a float32 scale, the row's largest |value| /
  32767, and d signed 16-bit values: 2 d + 4 bytes a row): at most 1/65534 of the row's
  largest value off, fine enough that a ring of blocks needs no error feedback (its changes
  to a row between two sends are far larger); it takes none;
* ``int4``: the same with 4 bits per value (-7..7 times the row's largest |value| / 7, two
  values a byte, low nibble first; (d + 1) // 2 + 4 bytes a row): at most 1/14 of the row's
  largest value off, rounded to nearest.

Every rank decodes the same bytes into the same floats, so a sum reduced by one rank and
sent encoded to the others is bit-identical on every rank (Comm.reduce_rows_encoded).
The int8 and int4 loops are compiled (numba): one pass over the rows each way, and ``decode_add``
adds a decoded block into a sum without a temporary.

Error feedback (``encode(..., feedback=(residual, mask))``, int8 and int4): what a row's
encoding left out, ``change - decode(encode(change))``, is kept by its sender and added to
the row's next change, so rounding delays a part of a change instead of losing it (1-bit
SGD's and EF-SGD's error compensation); only rows the mask flags (those the rank touched
since the last sync) take and update their residual.
"""

from __future__ import annotations

import numpy as np
from numba import njit

WIRES = ("fp32", "bf16", "int8", "int16", "int4")
# the wires whose senders keep no residual (error feedback) in the block store's ring
UNFED_WIRES = ("fp32", "int16")


def row_bytes(wire: str, dim: int) -> int:
    if wire == "int4":
        return (dim + 1) // 2 + 4
    return {"fp32": 4 * dim, "bf16": 2 * dim, "int8": dim + 4, "int16": 2 * dim + 4}[wire]


def whole(n: int, work) -> list:
    """``work(0, n)`` in one piece: the default ``split`` (Synchronizer._by_rows splits by
    row ranges over the rank's threads; every row is encoded alike either way)."""
    return [work(0, n)]


def encode(rows: np.ndarray, wire: str, minus: np.ndarray | None = None, split=whole, feedback=None) -> np.ndarray:
    """float32 [n, d] -> uint8 [n, row_bytes]; ``minus``: encode ``rows - minus`` instead
    (for int8 and int4 row by row, never materialised: the sync's changes without a pass
    that writes them; the same bits as encoding the float32 difference). ``split(n,
    work)``: runs ``work(a, b)`` over row ranges covering [0, n) (int8 and int4).
    ``feedback``: (residual float32 [n, d], mask uint8 [n]), int8 and int4 only: a row the
    mask flags is encoded with its residual added, and its residual becomes what the
    encoding left out (0 for a row holding a NaN or an infinity); other rows as without."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    n, d = rows.shape
    if feedback is not None and wire not in ("int8", "int4"):
        raise ValueError(f"error feedback needs an int8 or int4 wire, not {wire}")
    resid, mask = (None, None) if feedback is None else feedback
    if minus is not None and wire in ("fp32", "bf16"):
        rows, minus = np.subtract(rows, minus, dtype=np.float32), None
    if wire == "fp32":
        return rows.view(np.uint8).reshape(n, 4 * d)
    if wire == "bf16":
        bits = rows.view(np.uint32).astype(np.uint64)
        # round to nearest even on the 16 bits dropped (NaN stays NaN: its payload bits are kept high)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return rounded.astype(np.uint16).view(np.uint8).reshape(n, 2 * d)
    out = np.empty((n, row_bytes(wire, d)), dtype=np.uint8)      # int8, int16, int4: a float32 scale, the values
    scales = np.empty(n, dtype=np.float32)
    minus = np.zeros((0, d), np.float32) if minus is None else np.ascontiguousarray(minus, dtype=np.float32)
    q = out[:, 4:] if wire == "int4" else out[:, 4:].view(np.int16 if wire == "int16" else np.int8)
    if wire == "int16" or (wire == "int8" and feedback is None):       # int16 keeps no feedback
        levels, finite = (32767.0, True) if wire == "int16" else (127.0, False)
        split(n, lambda a, b: _encode_levels(rows[a:b], minus[a:b] if len(minus) else minus, scales[a:b], q[a:b],
                                             levels, finite))
    elif feedback is None:
        split(n, lambda a, b: _encode_int4(rows[a:b], minus[a:b] if len(minus) else minus, scales[a:b], q[a:b]))
    else:
        codec = _encode_int4_fed if wire == "int4" else _encode_int8_fed
        split(n, lambda a, b: codec(rows[a:b], minus[a:b] if len(minus) else minus, scales[a:b], q[a:b],
                                    resid[a:b], mask[a:b]))
    out[:, :4] = scales.view(np.uint8).reshape(n, 4)
    return out


def decode(data: np.ndarray, wire: str, dim: int) -> np.ndarray:
    """uint8 [n, row_bytes] -> float32 [n, d]."""
    out = np.zeros((data.shape[0], dim), dtype=np.float32)
    return decode_add(data, wire, out)


def decode_add(data: np.ndarray, wire: str, out: np.ndarray) -> np.ndarray:
    """``out += decode(data)``, in place (float32 [n, d]); returns ``out``."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    n, dim = out.shape
    if wire == "fp32":
        out += data.view(np.float32).reshape(n, dim)
    elif wire == "bf16":
        out += (data.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(n, dim)
    else:
        values, scales = scaled_rows(data, wire)
        (_decode_add_int4 if wire == "int4" else _decode_add_levels)(values, scales, out)
    return out


def scaled_rows(data: np.ndarray, wire: str) -> tuple[np.ndarray, np.ndarray]:
    """int8, int16 or int4 rows (uint8 [n, row_bytes], C-contiguous) as (values, scales):
    the int8 or int16 values or the packed int4 bytes, and each row's float32 scale."""
    scales = np.ascontiguousarray(data[:, :4]).view(np.float32).reshape(len(data))
    if wire == "int4":
        return data[:, 4:], scales
    return data[:, 4:].view(np.int16 if wire == "int16" else np.int8), scales


ABS_BITS = np.uint32(0x7FFFFFFF)          # a float32's bits without its sign
NOT_FINITE_BITS = np.uint32(0x7F800000)   # this or more: an infinity or a NaN


@njit(cache=True, nogil=True)
def largest_bits(row_bits, top):
    """max(top, the largest |value| of a float32 row as bits): ``row_bits`` is the row viewed
    as uint32. For finite floats the order of |x| is the order of their bits without the
    sign, so this integer maximum (which vectorises) finds the largest magnitude exactly, and
    a NaN or an infinity shows as NOT_FINITE_BITS or more."""
    for j in range(row_bits.shape[0]):
        top = max(top, row_bits[j] & ABS_BITS)
    return top


@njit(cache=True, nogil=True)
def bits_value(top, cell):
    """The float32 whose bits are ``top``; ``cell``: a one-element uint32 buffer (no
    allocation per call)."""
    cell[0] = top
    return cell.view(np.float32)[0]


@njit(cache=True, nogil=True)
def _scale(row_bits, i, levels, scales, cell):
    """Row ``i``'s scale, its largest |value| / ``levels``, into scales[i]; returns 1 / scale
    (0 for a zero row). NaN (and 0) if the row holds a NaN or an infinity. ``row_bits``: the
    row viewed as uint32 (largest_bits)."""
    top = largest_bits(row_bits, np.uint32(0))
    if top >= NOT_FINITE_BITS:
        scales[i] = np.float32(np.nan)
        return np.float32(0.0)
    scale = np.float32(bits_value(top, cell) / np.float32(levels))
    scales[i] = scale
    return np.float32(1.0) / scale if scale > 0 else np.float32(0.0)


@njit(cache=True, nogil=True)
def _finite_scale(row_bits, i, levels, scales, cell):
    """:func:`_scale`, with 1 / scale 0 where the scale is subnormal (the row is zero to
    float32; its inverse would overflow): int16's and int4's encoders."""
    inv = _scale(row_bits, i, levels, scales, cell)
    return inv if inv < np.float32(3.0e38) else np.float32(0.0)


@njit(cache=True, nogil=True)
def _row(rows, minus, i, diff):
    """Row ``i`` to encode: rows[i], or rows[i] - minus[i] written into ``diff`` when
    ``minus`` has rows (the same float32 difference numpy's subtract gives)."""
    if minus.shape[0] == 0:
        return rows[i]
    r, m = rows[i], minus[i]
    for j in range(diff.shape[0]):
        diff[j] = r[j] - m[j]
    return diff


@njit(cache=True, nogil=True)
def _row_fed(rows, minus, i, diff, resid, mask):
    """:func:`_row`, plus resid[i] where the mask flags row i (error feedback), in ``diff``."""
    if mask[i] == 0:
        return _row(rows, minus, i, diff)
    r, e = rows[i], resid[i]
    if minus.shape[0] == 0:
        for j in range(diff.shape[0]):
            diff[j] = r[j] + e[j]
    else:
        m = minus[i]
        for j in range(diff.shape[0]):
            diff[j] = (r[j] - m[j]) + e[j]
    return diff


@njit(cache=True, nogil=True)
def _keep_residual(resid, mask, i, r, levels, scale):
    """Error feedback: resid[i] = what row ``r``'s encoding (its ``levels`` times
    ``scale``, as the decoder computes them) left out, where the mask flags row i; 0 for a
    row the encoding could not hold (a NaN or an infinity)."""
    if mask[i] == 0:
        return
    e = resid[i]
    if scale != scale:
        e[:] = 0
        return
    for j in range(e.shape[0]):
        e[j] = r[j] - levels[j] * scale


@njit(cache=True, nogil=True)
def _encode_levels(rows, minus, scales, q, levels, finite):
    """Rows to ``levels`` levels each way (int8: 127, int16: 32,767) in q's integer type, with
    their scales; ``finite``: 1 / scale from :func:`_finite_scale` (int16), else :func:`_scale`
    (int8, as it always was)."""
    n, d = rows.shape
    cell = np.empty(1, np.uint32)
    diff = np.empty(d, np.float32)
    top = np.float32(levels)
    for i in range(n):
        r, qi = _row(rows, minus, i, diff), q[i]
        bits = r.view(np.uint32)
        inv = _finite_scale(bits, i, levels, scales, cell) if finite else _scale(bits, i, levels, scales, cell)
        if scales[i] != scales[i]:  # a NaN or an infinity: scale NaN, values 0
            qi[:] = 0
            continue
        for j in range(d):
            qi[j] = min(max(np.rint(r[j] * inv), -top), top)


@njit(cache=True, nogil=True)
def _encode_int8_fed(rows, minus, scales, q, resid, mask):
    """_encode_levels' int8 with error feedback (a kernel of its own: the extra arguments in the
    plain one cost its loop 15-25%)."""
    n, d = rows.shape
    cell = np.empty(1, np.uint32)
    diff = np.empty(d, np.float32)
    levels = np.empty(d, np.float32)
    for i in range(n):
        r, qi = _row_fed(rows, minus, i, diff, resid, mask), q[i]
        inv = _scale(r.view(np.uint32), i, 127.0, scales, cell)
        if scales[i] != scales[i]:  # a NaN or an infinity: scale NaN, values 0
            qi[:] = 0
        else:
            for j in range(d):
                qi[j] = np.int8(min(max(np.rint(r[j] * inv), np.float32(-127.0)), np.float32(127.0)))
                levels[j] = np.float32(qi[j])
        _keep_residual(resid, mask, i, r, levels, scales[i])


def encode_carried(rows: np.ndarray, carry: np.ndarray) -> np.ndarray:
    """int8 rows of ``rows`` plus ``carry`` (int8 rows too, uint8 [n, d + 4]: error feedback
    kept in a quarter of float32's memory), and ``carry`` becomes, in int8 rows again, what
    this encoding left out: the same bits as decoding ``carry``, encoding with feedback and
    encoding the residual, in one pass (the block store's ring, parallel/blocks.py)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    n, d = rows.shape
    out = np.empty((n, row_bytes("int8", d)), dtype=np.uint8)
    scales, carry_scales = np.empty(n, np.float32), np.ascontiguousarray(carry[:, :4]).view(np.float32).reshape(n)
    _encode_int8_carried(rows, scales, out[:, 4:].view(np.int8), carry_scales, carry[:, 4:].view(np.int8))
    out[:, :4] = scales.view(np.uint8).reshape(n, 4)
    carry[:, :4] = carry_scales.view(np.uint8).reshape(n, 4)
    return out


@njit(cache=True, nogil=True)
def _int8_row(x, i, scales, q, cell):
    """_encode_levels' int8 row ``i`` of the float32 row ``x``."""
    inv = _scale(x.view(np.uint32), i, 127.0, scales, cell)
    if scales[i] != scales[i]:  # a NaN or an infinity: scale NaN, values 0
        q[i][:] = 0
        return
    for j in range(x.shape[0]):
        q[i][j] = np.int8(min(max(np.rint(x[j] * inv), np.float32(-127.0)), np.float32(127.0)))


@njit(cache=True, nogil=True)
def _encode_int8_carried(rows, scales, q, carry_scales, carry_q):
    n, d = rows.shape
    cell = np.empty(1, np.uint32)
    x, left = np.empty(d, np.float32), np.empty(d, np.float32)
    for i in range(n):
        c, r, cq, qi = carry_scales[i], rows[i], carry_q[i], q[i]
        for j in range(d):                  # decode's value of the carried residual, added
            x[j] = r[j] + np.float32(cq[j]) * c
        _int8_row(x, i, scales, q, cell)
        s = scales[i]
        if s != s:                          # _keep_residual's 0 where the row could not be held
            left[:] = 0
        else:
            for j in range(d):
                left[j] = x[j] - np.float32(qi[j]) * s
        _int8_row(left, i, carry_scales, carry_q, cell)


@njit(cache=True, nogil=True)
def _decode_add_levels(q, scales, out):
    """out += q x scale row by row (int8 or int16 values ``q``: one compiled loop each)."""
    n, d = out.shape
    for i in range(n):
        s = scales[i]
        for j in range(d):
            out[i, j] += np.float32(q[i, j]) * s


@njit(cache=True, nogil=True)
def _encode_int4(rows, minus, scales, q):
    n, d = rows.shape
    half = d // 2
    levels = np.empty(d, np.int32)
    cell = np.empty(1, np.uint32)
    diff = np.empty(d, np.float32)
    for i in range(n):
        r, qi = _row(rows, minus, i, diff), q[i]
        inv = _finite_scale(r.view(np.uint32), i, 7.0, scales, cell)
        if scales[i] != scales[i]:  # a NaN or an infinity: scale NaN, values 0
            qi[:] = 0
            continue
        for j in range(d):          # -7..7 as 1..15
            levels[j] = np.int32(min(max(np.rint(r[j] * inv), np.float32(-7.0)), np.float32(7.0))) + 8
        for k in range(half):
            qi[k] = np.uint8(levels[2 * k] | (levels[2 * k + 1] << 4))
        if d & 1:
            qi[half] = np.uint8(levels[d - 1])


@njit(cache=True, nogil=True)
def _encode_int4_fed(rows, minus, scales, q, resid, mask):
    """_encode_int4 with error feedback (a kernel of its own, as _encode_int8_fed)."""
    n, d = rows.shape
    half = d // 2
    levels = np.empty(d, np.int32)
    values = np.empty(d, np.float32)
    cell = np.empty(1, np.uint32)
    diff = np.empty(d, np.float32)
    for i in range(n):
        r, qi = _row_fed(rows, minus, i, diff, resid, mask), q[i]
        inv = _finite_scale(r.view(np.uint32), i, 7.0, scales, cell)
        if scales[i] != scales[i]:  # a NaN or an infinity: scale NaN, values 0
            qi[:] = 0
            _keep_residual(resid, mask, i, r, values, scales[i])
            continue
        for j in range(d):          # -7..7 as 1..15
            levels[j] = np.int32(min(max(np.rint(r[j] * inv), np.float32(-7.0)), np.float32(7.0))) + 8
            values[j] = np.float32(levels[j] - 8)
        for k in range(half):
            qi[k] = np.uint8(levels[2 * k] | (levels[2 * k + 1] << 4))
        if d & 1:
            qi[half] = np.uint8(levels[d - 1])
        _keep_residual(resid, mask, i, r, values, scales[i])


@njit(cache=True, nogil=True)
def row_levels_int4(qi, levels):
    """An int4 row's values -7..7, unpacked into ``levels`` (float32, d of them)."""
    d = levels.shape[0]
    half = d // 2
    for k in range(half):
        b = np.int32(qi[k])
        levels[2 * k] = np.float32((b & 15) - 8)
        levels[2 * k + 1] = np.float32((b >> 4) - 8)
    if d & 1:
        levels[d - 1] = np.float32(np.int32(qi[half]) - 8)


@njit(cache=True, nogil=True)
def _decode_add_int4(q, scales, out):
    n, d = out.shape
    levels = np.empty(d, np.float32)
    for i in range(n):              # the levels of a row first, then one contiguous multiply-add
        row_levels_int4(q[i], levels)
        row, s = out[i], scales[i]
        for j in range(d):
            row[j] += levels[j] * s


def segments(bounds: np.ndarray, a: int, b: int):
    """(s, lo, hi) for each segment s of ``bounds`` ([bounds[s], bounds[s + 1]): rank s's
    rows in an encoded all-reduce) that rows [a, b) overlap, as [lo, hi)."""
    for s in range(len(bounds) - 1):
        lo, hi = max(a, int(bounds[s])), min(b, int(bounds[s + 1]))
        if lo < hi:
            yield s, lo, hi
