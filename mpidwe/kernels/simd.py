"""The row products of the compiled kernels as explicit vector code (LLVM IR intrinsics).

numba hands LLVM plain loops over the embedding size; with that size a compile-time constant
LLVM unrolls them fully, and its SLP vectorizer then turns a dot product into one chain of
dependent 8-wide multiply-adds (12 for dim 100: about 60 cycles of latency for 26 loads), and
an update of a row by several others into one load, multiply-add and store of the row per
other row. The functions here write the vector code themselves, for a dim known when
compiling (``types.IntegerLiteral``):

* ``row_dot(x, y, dim)``: x . y with four independent accumulators (four chains of three),
  a 4-wide tail folded in before the lanes are summed;
* ``accumulate_rows(y, init, coefs, matrix, rows, n, dim)``: y = (y if init else 0) +
  sum_t coefs[t] * matrix[rows[t]] for t < n, with y's vectors held in registers across
  the rows (one load and one store of y, however many rows), in passes of at most
  ``_GROUP`` vectors so that they fit the 16 registers of AVX2.

Both are exact reorderings of the plain loops' arithmetic (float32 multiply-adds, fused), so
their results differ from the loops' by rounding only. Every array is float32 and C-contiguous
(kernels.common.check_block guarantees it for the parameters; the buffers are made so).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_WIDTH = 8          # float32 lanes of a 256-bit vector (AVX2)
_GROUP = 6          # vectors of y held in registers in one pass over the rows
_F32 = ir.FloatType()
_QUAD = ir.VectorType(_F32, 4)
_I64 = ir.IntType(64)


def _dim_of(dim):
    return dim.literal_value if isinstance(dim, types.IntegerLiteral) else None


def _is_row(ty):
    return isinstance(ty, types.Array) and ty.ndim == 1 and ty.dtype == types.float32 and ty.layout == "C"


def _pointer(context, builder, ty, value):
    """The float* of a 1-d C-contiguous float32 array."""
    return context.make_array(ty)(context, builder, value).data


def _fma(builder, a, b, c):
    """a * b + c, fused (llvm.fma of a's type: a vector or a float)."""
    name = f"llvm.fma.v{a.type.count}f32" if isinstance(a.type, ir.VectorType) else "llvm.fma.f32"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(a.type, [a.type] * 3), name)
    return builder.call(fn, [a, b, c])


def _half(builder, vec, which):
    """Lanes 0-3 (which=0) or 4-7 of an 8-lane vector."""
    lanes = ir.Constant(ir.VectorType(ir.IntType(32), 4), list(range(4 * which, 4 * which + 4)))
    return builder.shuffle_vector(vec, ir.Constant(vec.type, ir.Undefined), lanes)


def _hsum(builder, vec):
    """The sum of a vector's lanes, halving: (8 -> 4 -> 2 -> 1)."""
    width = vec.type.count
    while width > 1:
        half = width // 2
        lo = builder.shuffle_vector(vec, ir.Constant(vec.type, ir.Undefined), ir.Constant(
            ir.VectorType(ir.IntType(32), half), list(range(half))))
        hi = builder.shuffle_vector(vec, ir.Constant(vec.type, ir.Undefined), ir.Constant(
            ir.VectorType(ir.IntType(32), half), list(range(half, width))))
        vec, width = builder.fadd(lo, hi), half
    return builder.extract_element(vec, ir.Constant(ir.IntType(32), 0))


def _pair_add(builder, a, b, lanes):
    """a + b lane by lane, or ``lanes`` of shuffle(a, b) plus the next: pairwise sums."""
    idx = ir.VectorType(ir.IntType(32), len(lanes))
    even = builder.shuffle_vector(a, b, ir.Constant(idx, lanes))
    odd = builder.shuffle_vector(a, b, ir.Constant(idx, [k + 1 for k in lanes]))
    return builder.fadd(even, odd)


def _emit_dots(builder, px, pys, n):
    """IR for [x . y for y in pys] over n floats (1 or 4 rows y): x's vectors loaded once
    for all of them, each dot in independent chains (4 for one row, 2 each for several), its
    8 lanes folded to 4, a 4-wide tail multiplied in, then the lanes summed. Returns a float
    (one row) or a vector of the dots."""
    blocks = n // _WIDTH
    chains = min(4 if len(pys) == 1 else 2, blocks)
    accs = [[None] * chains for _ in pys]
    for b in range(blocks):
        xv = _load_piece(builder, px, b * _WIDTH, _WIDTH)
        for q, py in enumerate(pys):
            k, yv = b % chains, _load_piece(builder, py, b * _WIDTH, _WIDTH)
            accs[q][k] = builder.fmul(xv, yv) if accs[q][k] is None else _fma(builder, xv, yv, accs[q][k])
    quads = []
    for acc in accs:
        while len(acc) > 1:               # pairwise: (a0 + a2) + (a1 + a3)
            half = (len(acc) + 1) // 2
            acc = [builder.fadd(acc[i], acc[i + half]) if i + half < len(acc) else acc[i] for i in range(half)]
        quads.append(builder.fadd(_half(builder, acc[0], 0), _half(builder, acc[0], 1)) if acc
                     else ir.Constant(_QUAD, None))
    done = blocks * _WIDTH
    if n - done >= 4:                     # a tail of 4 or more: one 4-wide multiply-add
        xq = _load_piece(builder, px, done, 4)
        quads = [_fma(builder, xq, _load_piece(builder, py, done, 4), qv) for qv, py in zip(quads, pys)]
        done += 4
    if len(pys) == 1:
        total = _hsum(builder, quads[0])
        for k in range(done, n):
            total = _fma(builder, _load_piece(builder, px, k, 1), _load_piece(builder, pys[0], k, 1), total)
        return total
    # several dots: [sum q0, sum q1, ...] by rounds of pairwise lane sums
    low = _pair_add(builder, quads[0], quads[1], [0, 2, 4, 6])
    high = _pair_add(builder, quads[2], quads[3], [0, 2, 4, 6])
    sums = _pair_add(builder, low, high, [0, 2, 4, 6])
    for k in range(done, n):
        xk = _load_piece(builder, px, k, 1)
        tail = ir.Constant(sums.type, None)
        for q, py in enumerate(pys):
            tail = builder.insert_element(tail, builder.fmul(xk, _load_piece(builder, py, k, 1)),
                                          ir.Constant(ir.IntType(32), q))
        sums = builder.fadd(sums, tail)
    return sums


def _groups(size):
    """The pieces (offset, width 8, 4 or 1) of a row of ``size`` floats, in groups of at most
    _GROUP 8-wide pieces (the 4-wide and single tail in the last group)."""
    wide = [(b * _WIDTH, _WIDTH) for b in range(size // _WIDTH)]
    groups = [wide[g:g + _GROUP] for g in range(0, len(wide), _GROUP)] or [[]]
    done = len(wide) * _WIDTH
    if size - done >= 4:
        groups[-1].append((done, 4))
        done += 4
    groups[-1].extend((k, 1) for k in range(done, size))
    return groups


def _piece_type(width):
    return _F32 if width == 1 else ir.VectorType(_F32, width)


def _piece_pointer(builder, base, at, width):
    """A pointer to the width floats from base[at] (a float* when width is 1)."""
    return builder.bitcast(builder.gep(base, [ir.Constant(_I64, at)]), _piece_type(width).as_pointer())


def _load_piece(builder, base, at, width):
    return builder.load(_piece_pointer(builder, base, at, width), align=4)


def _splat(builder, value, width):
    """value in every lane of a width-wide vector (the float itself for width 1)."""
    if width == 1:
        return value
    vec = builder.insert_element(ir.Constant(_piece_type(width), ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(vec, ir.Constant(vec.type, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))


def _row_pointer(context, builder, base, stride, ids, ids_ty, t):
    """float* of matrix row ids[t] (base: the matrix data as i8*, stride: bytes per row)."""
    row = context.cast(builder, builder.load(builder.gep(ids.data, [t])), ids_ty.dtype, types.intp)
    return builder.bitcast(builder.gep(base, [builder.mul(row, stride)]), _F32.as_pointer())


def _is_matrix(ty):
    return isinstance(ty, types.Array) and ty.ndim == 2 and ty.dtype == types.float32 and ty.layout == "C"


def _is_ids(ty):
    return isinstance(ty, types.Array) and ty.ndim == 1 and isinstance(ty.dtype, types.Integer)


@intrinsic
def row_dot(typingctx, x, y, dim):
    """x[:dim] . y[:dim] for float32 rows, dim a compile-time constant."""
    n = _dim_of(dim)
    if n is None or not (_is_row(x) and _is_row(y)):
        return None

    def codegen(context, builder, sig, args):
        px = _pointer(context, builder, sig.args[0], args[0])
        return _emit_dots(builder, px, [_pointer(context, builder, sig.args[1], args[1])], n)

    return types.float32(x, y, dim), codegen


@intrinsic
def row_dots(typingctx, x, matrix, ids, n, out, dim):
    """out[j] = x[:dim] . matrix[ids[j], :dim] for j < n: four rows at a time against one
    load of x's vectors, then one at a time."""
    size = _dim_of(dim)
    if (size is None or not _is_row(x) or not _is_matrix(matrix) or not _is_ids(ids)
            or not isinstance(n, types.Integer) or not _is_row(out)):
        return None

    def codegen(context, builder, sig, args):
        x_ty, m_ty, ids_ty, n_ty, out_ty, _ = sig.args
        px = _pointer(context, builder, x_ty, args[0])
        pout = _pointer(context, builder, out_ty, args[4])
        mat = context.make_array(m_ty)(context, builder, args[1])
        stride = builder.extract_value(mat.strides, 0)
        base = builder.bitcast(mat.data, ir.IntType(8).as_pointer())
        ids = context.make_array(ids_ty)(context, builder, args[2])
        count = context.cast(builder, args[3], n_ty, types.intp)
        four = ir.Constant(count.type, 4)
        groups = builder.sdiv(count, four)
        with cgutils.for_range(builder, groups) as loop:
            first = builder.mul(loop.index, four)
            rows = [_row_pointer(context, builder, base, stride, ids, ids_ty, builder.add(first, ir.Constant(
                count.type, q))) for q in range(4)]
            sums = _emit_dots(builder, px, rows, size)
            ptr = builder.bitcast(builder.gep(pout, [first]), _QUAD.as_pointer())
            builder.store(sums, ptr, align=4)
        with cgutils.for_range_slice(builder, builder.mul(groups, four), count, ir.Constant(count.type, 1)) as (t, _):
            row = _row_pointer(context, builder, base, stride, ids, ids_ty, t)
            builder.store(_emit_dots(builder, px, [row], size), builder.gep(pout, [t]), align=4)
        return context.get_dummy_value()

    return types.void(x, matrix, ids, n, out, dim), codegen


@intrinsic
def accumulate_rows(typingctx, y, init, coefs, matrix, rows, n, dim):
    """y[:dim] = (y if init else 0) + sum over t < n of coefs[t] * matrix[rows[t], :dim]
    (``init`` a compile-time bool), the sum taken row by row in the order of t."""
    size = _dim_of(dim)
    if (size is None or not isinstance(init, types.BooleanLiteral) or not _is_row(y) or not _is_row(coefs)
            or not _is_matrix(matrix) or not _is_ids(rows) or not isinstance(n, types.Integer)):
        return None
    keep = init.literal_value

    def codegen(context, builder, sig, args):
        y_ty, _, c_ty, m_ty, r_ty, n_ty, _ = sig.args
        py = _pointer(context, builder, y_ty, args[0])
        pc = _pointer(context, builder, c_ty, args[2])
        mat = context.make_array(m_ty)(context, builder, args[3])
        stride = builder.extract_value(mat.strides, 0)        # bytes per row
        base = builder.bitcast(mat.data, ir.IntType(8).as_pointer())
        ids = context.make_array(r_ty)(context, builder, args[4])
        count = context.cast(builder, args[5], n_ty, types.intp)
        for group in _groups(size):
            slots = [cgutils.alloca_once(builder, _piece_type(width)) for _, width in group]
            for slot, (at, width) in zip(slots, group):
                builder.store(_load_piece(builder, py, at, width) if keep
                              else ir.Constant(_piece_type(width), None), slot)
            with cgutils.for_range(builder, count) as loop:
                t = loop.index
                c = builder.load(builder.gep(pc, [t]), align=4)
                row = _row_pointer(context, builder, base, stride, ids, r_ty, t)
                for slot, (at, width) in zip(slots, group):
                    builder.store(_fma(builder, _splat(builder, c, width), _load_piece(builder, row, at, width),
                                       builder.load(slot)), slot)
            for slot, (at, width) in zip(slots, group):
                builder.store(builder.load(slot), _piece_pointer(builder, py, at, width), align=4)
        return context.get_dummy_value()

    return types.void(y, init, coefs, matrix, rows, n, dim), codegen
