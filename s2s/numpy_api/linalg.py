"""NumPy's products and `np.linalg`, staged onto dot_general and the factorizations.

Every product (`@`, dot, vdot, inner, outer, tensordot, einsum, kron) becomes one
`dot_general` per pair of operands, plus the reshapes, transposes and reductions that put
NumPy's result layout on XLA's fixed one (batch, lhs free, rhs free). Solves, inverses and
determinants are one primitive each (`solve`, `det`, `slogdet`; an inverse is a solve
against the identity), so their derivatives are the textbook formulas.

Result dtypes are NumPy's. The products treat a Python scalar as NumPy does here: as a
strongly typed 0-d array (`np.dot(x32, 2.0)` is float64), unlike the arithmetic operators.
`np.linalg` computes integers in float64 and mixed float32/float64 in float64, and rejects
float16.

Differences from NumPy, by design: singular matrices give inf/nan from solve, inv and det
instead of raising LinAlgError (as XLA's do). The decompositions (eigh, svd, qr and what
is built on them) are in `decompositions`; norm's 'nuc', 2 and -2 matrix norms use its SVD.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from s2s import dtypes
from s2s.core import Literal, ShapedArray
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.numpy_api._base import (aval, asarray, convert, implements, is_python_scalar,
                                 normalize_axis, promote)
from s2s.primitives import elementwise as ew
from s2s.numpy_api import math as np_math
from s2s.numpy_api import reductions as np_reductions
from s2s.numpy_api.creation import zeros_like
from s2s.numpy_api.shaping import diagonal, moveaxis, stack
from s2s.primitives import indexing as ix
from s2s.primitives import linalg as la
from s2s.primitives import ops
from s2s.primitives import reductions as reduction_primitives
from s2s.primitives import structural as st
from s2s.staging import Tracer

# ---------------------------------------------------------------------------------------
# Helpers: operands, structural ops, reductions, masks


def _strong(x):
    """An operand as `np.asarray` would type it: Python scalars become strong 0-d arrays.

    A weak-typed staged value stands for a Python scalar, so it becomes strong as well.
    """
    x = asarray(x)
    if is_python_scalar(x):
        value = np.asarray(x)
        return value.astype(dtypes.canonicalize_dtype(value.dtype))[()]
    if isinstance(x, Literal) and x.aval.weak_type:
        return _literal(x.value, x.aval.dtype)
    if isinstance(x, Tracer) and x.weak_type:
        return convert(x, x.dtype, weak_type=False)
    return x


def _operands(*xs):
    """NumPy's products: strong operands promoted to their common dtype."""
    return promote(*[_strong(x) for x in xs])


def _shape(x) -> tuple[int, ...]:
    return aval(x).shape


def _ndim(x) -> int:
    return len(aval(x).shape)


def _dtype(x) -> np.dtype:
    return aval(x).dtype


def _shape_text(shape) -> str:
    return str(tuple(shape)).replace(",)", ")")


def _swap_last(x):
    n = _ndim(x)
    return ops.transpose(x, list(range(n - 2)) + [n - 1, n - 2])


def _reduce(kind: str, x, axes):
    """reduce_{sum,prod,max,min} over `axes`, keeping x's dtype (or/and for booleans)."""
    axes = tuple(sorted(int(a) for a in axes))
    if not axes:
        return x
    if _dtype(x) == dtypes.bool_:
        kind = {"sum": "or", "max": "or", "prod": "and", "min": "and"}[kind]
    return getattr(reduction_primitives, f"reduce_{kind}").bind(x, axes=axes)


def _zero(dtype):
    return convert(0, dtype)


def _literal(value, dtype):
    """A strong scalar of `dtype`, for operands of elementwise primitives."""
    return Literal(np.asarray(value, dtype=dtype)[()], ShapedArray((), dtype))


def _dot_general(a, b, lc, rc, lb=(), rb=()):
    return la.dot_general.bind(
        a, b, dimension_numbers=((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb))),
        preferred_element_type=None)


def _broadcast_batch(name: str, *shapes) -> tuple[int, ...]:
    try:
        return ew.broadcast_shapes(*shapes)
    except ShapeError as e:
        raise ShapeError(f"{name}: batch dimensions do not broadcast: {e.what}") from None


# ---------------------------------------------------------------------------------------
# Products


def _no_out(name: str, out=None, **kwargs):
    if out is not None:
        raise UnsupportedFunctionError(f"{name}(..., out=) is not supported: s2s arrays are "
                                       f"immutable", "use the returned array")
    if kwargs:
        raise UnsupportedFunctionError(f"{name} does not support the arguments "
                                       f"{', '.join(sorted(kwargs))}")


@implements(np.matmul, np.linalg.matmul)
def matmul(a, b, /, out=None, **kwargs):
    """`a @ b`: matrix products over broadcast leading (batch) dimensions."""
    _no_out("np.matmul", out, **kwargs)
    a, b = _operands(a, b)
    sa, sb = _shape(a), _shape(b)
    for i, s in enumerate((sa, sb)):
        if not s:
            raise ShapeError(f"matmul: operand {i} is a scalar, which has no dimensions to "
                             f"multiply", "use `*` to multiply by a scalar")
    k_a = sa[-1]
    k_b = sb[0] if len(sb) == 1 else sb[-2]
    if k_a != k_b:
        raise ShapeError(f"matmul: shapes {_shape_text(sa)} and {_shape_text(sb)} do not "
                         f"align: {k_a} (last dim of the first) != {k_b} "
                         f"({'only' if len(sb) == 1 else 'second-to-last'} dim of the second)")
    la_, lb_ = len(sa), len(sb)
    if lb_ == 1:
        return _dot_general(a, b, (la_ - 1,), (0,))
    if la_ == 1:
        return _dot_general(a, b, (0,), (lb_ - 2,))
    if lb_ == 2:        # (..., m, k) @ (k, n): b has no batch dims to pair up
        return _dot_general(a, b, (la_ - 1,), (0,))
    if la_ == 2:        # (m, k) @ (..., k, n): (m, ..., n), then m moves behind the batch
        out = _dot_general(a, b, (1,), (lb_ - 2,))
        nb = lb_ - 2
        return ops.transpose(out, list(range(1, nb + 1)) + [0, nb + 1])
    batch = _broadcast_batch("matmul", sa[:-2], sb[:-2])
    a = ops.broadcast_to(a, batch + sa[-2:])
    b = ops.broadcast_to(b, batch + sb[-2:])
    nb = len(batch)
    return _dot_general(a, b, (nb + 1,), (nb,), tuple(range(nb)), tuple(range(nb)))


def _not_aligned(sa, sb, da, db):
    return ShapeError(f"shapes {_shape_text(sa)} and {_shape_text(sb)} not aligned: "
                      f"{sa[da]} (dim {da}) != {sb[db]} (dim {db})")


@implements(np.dot)
def dot(a, b, out=None):
    """np.dot: sums over the last axis of a and the second-to-last (or only) axis of b."""
    _no_out("np.dot", out)
    a, b = _operands(a, b)
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:
        return ew.mul.bind(a, b)
    da, db = len(sa) - 1, max(len(sb) - 2, 0)
    if sa[da] != sb[db]:
        raise _not_aligned(sa, sb, da, db)
    return _dot_general(a, b, (da,), (db,))


@implements(np.linalg.multi_dot)
def multi_dot(arrays):
    """Chained np.dot, left to right (NumPy picks the cheapest order; values agree)."""
    arrays = list(arrays)
    if len(arrays) < 2:
        raise ShapeError("multi_dot needs at least two arrays")
    out = arrays[0]
    for x in arrays[1:]:
        out = dot(out, x)
    return out


@implements(np.vdot)
def vdot(a, b):
    """The dot product of the flattened arrays, conjugating a."""
    a, b = _operands(a, b)
    if _dtype(a).kind == "c":
        a = np_math.conjugate(a)
    na, nb = math.prod(_shape(a)), math.prod(_shape(b))
    if na != nb:
        raise ShapeError(f"vdot: arrays of {na} and {nb} elements cannot be multiplied "
                         f"element by element")
    return _dot_general(ops.reshape(a, (na,)), ops.reshape(b, (nb,)), (0,), (0,))


@implements(np.inner)
def inner(a, b):
    """Sums over the last axes of both: shape a.shape[:-1] + b.shape[:-1]."""
    a, b = _operands(a, b)
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:
        return ew.mul.bind(a, b)
    if sa[-1] != sb[-1]:
        raise ShapeError(f"inner: shapes {_shape_text(sa)} and {_shape_text(sb)} differ in "
                         f"their last dimension ({sa[-1]} != {sb[-1]})")
    return _dot_general(a, b, (len(sa) - 1,), (len(sb) - 1,))


@implements(np.outer, np.linalg.outer)
def outer(a, b):
    """The outer product of the flattened arrays."""
    a, b = _operands(a, b)
    a = ops.reshape(a, (math.prod(_shape(a)),))
    b = ops.reshape(b, (math.prod(_shape(b)),))
    return _dot_general(a, b, (), ())


def _axes_list(axes, ndim: int) -> list[int]:
    if isinstance(axes, (int, np.integer)):
        axes = [axes]
    return [normalize_axis(a, ndim, "tensordot axis") for a in axes]


@implements(np.tensordot, np.linalg.tensordot)
def tensordot(a, b, axes=2):
    """Sums over `axes` (the last n of a with the first n of b, or two sequences)."""
    a, b = _operands(a, b)
    sa, sb = _shape(a), _shape(b)
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0 or n > len(sa) or n > len(sb):
            raise ShapeError(f"tensordot: cannot contract {n} axes of arrays of shapes "
                             f"{_shape_text(sa)} and {_shape_text(sb)}")
        axes_a, axes_b = list(range(len(sa) - n, len(sa))), list(range(n))
    else:
        try:
            axes_a, axes_b = axes
        except (TypeError, ValueError):
            raise ShapeError(f"tensordot: axes must be an int or a pair of sequences, got "
                             f"{axes!r}") from None
        axes_a, axes_b = _axes_list(axes_a, len(sa)), _axes_list(axes_b, len(sb))
    if len(axes_a) != len(axes_b):
        raise ShapeError(f"tensordot: {len(axes_a)} axes of a paired with {len(axes_b)} of b")
    for x, y in zip(axes_a, axes_b):
        if sa[x] != sb[y]:
            raise ShapeError(f"tensordot: shape-mismatch for sum: axis {x} of "
                             f"{_shape_text(sa)} has {sa[x]}, axis {y} of {_shape_text(sb)} "
                             f"has {sb[y]}")
    if len(set(axes_a)) != len(axes_a) or len(set(axes_b)) != len(axes_b):
        raise ShapeError("tensordot: repeated axis")
    return _dot_general(a, b, axes_a, axes_b)


@implements(np.kron)
def kron(a, b):
    """The Kronecker product: blocks a[i, j] * b, as one broadcast multiply and a reshape."""
    a, b = _operands(a, b)
    sa, sb = _shape(a), _shape(b)
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    a = ops.reshape(a, [d for s in sa for d in (s, 1)])
    b = ops.reshape(b, [d for s in sb for d in (1, s)])
    return ops.reshape(ew.mul.bind(a, b), [x * y for x, y in zip(sa, sb)])


def _times(x, y):
    """x * y, where None stands for a component that is zero (a 2-vector's third)."""
    return None if x is None or y is None else np_math.multiply(x, y)


def _minus(p, q):
    """p - q, where None is zero: the terms NumPy's cross product leaves out for 2-vectors."""
    if q is None:
        return p
    return np_math.negative(q) if p is None else np_math.subtract(p, q)


@implements(np.cross)
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    """The cross product of 3-vectors (or 2-vectors, whose third component is zero; two
    2-vectors give the scalar z component) along `axisa`/`axisb`, broadcast over the rest;
    the result's vectors lie along `axisc`."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = _operands(a, b)
    a = moveaxis(a, normalize_axis(axisa, max(_ndim(a), 1), "axisa"), -1)
    b = moveaxis(b, normalize_axis(axisb, max(_ndim(b), 1), "axisb"), -1)
    na, nb = _shape(a)[-1], _shape(b)[-1]
    if na not in (2, 3) or nb not in (2, 3):
        raise ShapeError(f"np.cross: incompatible dimensions for cross product: vectors of "
                         f"length {na} and {nb} (each must be 2 or 3)",
                         "pass axisa=/axisb= (or axis=) to pick the axis holding the vectors")
    a0, a1, a2 = [ops.index_in_dim(a, i, _ndim(a) - 1) if i < na else None for i in range(3)]
    b0, b1, b2 = [ops.index_in_dim(b, i, _ndim(b) - 1) if i < nb else None for i in range(3)]
    z = _minus(_times(a0, b1), _times(a1, b0))
    if na == nb == 2:
        return z
    x = _minus(_times(a1, b2), _times(a2, b1))
    y = _minus(_times(a2, b0), _times(a0, b2))
    out = stack([x, y, z], axis=-1)
    return moveaxis(out, -1, normalize_axis(axisc, _ndim(out), "axisc"))


@implements(np.polyval)
def polyval(p, x):
    """The polynomial with coefficients `p` (highest power first) at `x`: Horner's rule
    as NumPy writes it, `y = y * x + p[i]` from `y = zeros_like(x)`."""
    p, x = _strong(p), _strong(x)
    if not _shape(p):
        raise ShapeError("np.polyval: the coefficients must be a sequence, got a scalar",
                         "pass the coefficients as a 1-d array, highest power first")
    y = zeros_like(x)
    for i in range(_shape(p)[0]):
        y = np_math.add(np_math.multiply(y, x), ops.index_in_dim(p, i, 0))
    return y


_CORRELATE_MODES = ("full", "same", "valid")


def _correlation_window(n: int, m: int, mode: str) -> tuple[int, int]:
    """(start, size) of NumPy's `mode` within the full correlation of lengths n and m."""
    if mode == "full":
        return 0, n + m - 1
    if mode == "same":
        return ((m - 1) // 2 if n >= m else n // 2), max(n, m)
    return min(n, m) - 1, abs(n - m) + 1


def _correlate(name: str, a, v, mode, conjugate_v: bool):
    """c[k] = sum_j a[k + j - (m - 1)] * v[j] (a read as zero outside; v conjugated if
    `conjugate_v`, as np.correlate does and np.convolve does not), for the k of `mode`:
    one gather of the sliding windows of the zero-padded `a` and one dot with `v`."""
    a, v = _operands(a, v)
    if _ndim(a) != 1 or _ndim(v) != 1:
        raise ShapeError(f"np.{name} takes two 1-d arrays, got shapes {_shape_text(_shape(a))}"
                         f" and {_shape_text(_shape(v))}",
                         "flatten them with np.ravel, or map over rows with s2s.vmap")
    n, m = _shape(a)[0], _shape(v)[0]
    if not n or not m:
        raise ShapeError(f"np.{name}: {'a' if not n else 'v'} cannot be empty")
    if mode not in _CORRELATE_MODES:
        raise ShapeError(f"np.{name}: mode {mode!r} is not supported",
                         "use mode='full', 'same' or 'valid'")
    start, size = _correlation_window(n, m, mode)
    left, right = max(0, m - 1 - start), max(0, start + size - n)
    if left or right:
        a = ops.pad(a, _zero(_dtype(a)), ((left, right, 0),))
    rows = start + left - (m - 1) + np.arange(size)
    index = (rows[:, None] + np.arange(m)[None, :]).astype(dtypes.default_int())
    windows = ix.gather.bind(a, index, axes=(0,))        # (size, m)
    return _dot_general(windows, np_math.conjugate(v) if conjugate_v else v, (1,), (0,))


@implements(np.correlate)
def correlate(a, v, mode="valid"):
    """np.correlate of 1-d arrays in modes 'valid' (NumPy's default), 'same' and 'full'."""
    return _correlate("correlate", a, v, mode, conjugate_v=True)


@implements(np.convolve)
def convolve(a, v, mode="full"):
    """np.convolve: the correlation with `v` reversed (the longer array slides, as NumPy)."""
    a, v = _operands(a, v)
    if _ndim(a) == 1 and _ndim(v) == 1 and _shape(v)[0] > _shape(a)[0]:
        a, v = v, a
    if _ndim(v) == 1:
        v = st.rev.bind(v, dimensions=(0,))
    return _correlate("convolve", a, v, mode, conjugate_v=False)


# ---------------------------------------------------------------------------------------
# einsum


class _Ellipsis(int):
    """The label of an ellipsis dimension: its position counted from the right."""


def _parse_spec(spec: str, what: str) -> tuple[list[str], bool]:
    labels, has_ellipsis, i = [], False, 0
    while i < len(spec):
        if spec.startswith("...", i):
            if has_ellipsis:
                raise ShapeError(f"einsum: {what} contains '...' more than once")
            labels.append("...")
            has_ellipsis = True
            i += 3
            continue
        c = spec[i]
        if not ("a" <= c <= "z" or "A" <= c <= "Z"):
            raise ShapeError(f"einsum: invalid subscript {c!r} in {what}: subscripts must be "
                             f"letters")
        labels.append(c)
        i += 1
    return labels, has_ellipsis


def _expand_ellipsis(labels: list[str], ndim: int, what: str) -> list:
    letters = [l for l in labels if l != "..."]
    extra = ndim - len(letters)
    if extra < 0 or (extra > 0 and "..." not in labels):
        raise ShapeError(f"einsum: {what} has {len(letters)} subscripts for an operand of "
                         f"{ndim} dimensions")
    out = []
    for l in labels:
        out.extend([_Ellipsis(extra - 1 - j) for j in range(extra)] if l == "..." else [l])
    return out


# NumPy's letters for sublist subscripts: 0-25 are 'A'-'Z', 26-51 'a'-'z'. The order
# matters: an implicit output lists the subscripts in the order of their letters.
_SUBLIST_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _sublist_text(sublist, what: str) -> str:
    """A sublist of subscripts (ints 0-51, `...` as Ellipsis) as the letters it stands for."""
    if not isinstance(sublist, (list, tuple)):
        raise ShapeError(f"einsum: {what} must be a list of ints, got {type(sublist).__name__}",
                         "write np.einsum(a, [0, 1], b, [1, 2], [0, 2]), or the string form "
                         "np.einsum('ij,jk->ik', a, b)")
    text = ""
    for s in sublist:
        if s is Ellipsis:
            text += "..."
        elif isinstance(s, (int, np.integer)) and not isinstance(s, bool) and 0 <= s < len(_SUBLIST_LETTERS):
            text += _SUBLIST_LETTERS[s]
        else:
            raise ShapeError(f"einsum: {what} holds {s!r}; subscripts in a sublist are ints "
                             f"from 0 to {len(_SUBLIST_LETTERS) - 1} or Ellipsis")
    return text


def _interleaved_as_string(first, rest: tuple) -> tuple[str, tuple]:
    """NumPy's interleaved form `einsum(a, [0, 1], b, [1, 2], [0, 2])` as the subscripts
    string ('ab,bc->ac') and the operands."""
    items = (first,) + tuple(rest)
    operands, sublists = items[0::2], items[1::2]
    output = None
    if len(items) % 2 == 1:   # a trailing output sublist
        operands, output = operands[:-1], items[-1]
    specs = [_sublist_text(s, f"operand {i}'s sublist") for i, s in enumerate(sublists)]
    text = ",".join(specs)
    if output is not None:
        text += "->" + _sublist_text(output, "the output sublist")
    return text, operands


@implements(np.einsum)
def einsum(subscripts, *operands, out=None, dtype=None, order="K", casting="safe",
           optimize=False):
    """Einstein summation, as dot_generals contracting the operands pairwise, left to right.

    Diagonals (a label repeated in one operand) are taken with np.diagonal; labels that one
    operand has and the output lacks are summed first; size-1 dimensions broadcast.
    """
    _no_out("np.einsum", out)
    if not isinstance(subscripts, str):
        subscripts, operands = _interleaved_as_string(subscripts, operands)
    if not 1 <= len(operands) <= 3:
        raise UnsupportedFunctionError(f"np.einsum of {len(operands)} operands is not "
                                       f"supported (1 to 3 are)",
                                       "split it into several einsums")
    spec = subscripts.replace(" ", "")
    explicit = "->" in spec
    inputs, _, output = spec.partition("->")
    in_specs = inputs.split(",")
    if len(in_specs) != len(operands):
        raise ShapeError(f"einsum: {subscripts!r} names {len(in_specs)} operands, "
                         f"{len(operands)} were given")
    xs = _operands(*operands)
    if dtype is not None:
        dtype = dtypes.canonicalize_dtype(dtype)
        if not all(np.can_cast(_dtype(x), dtype, casting) for x in xs):
            raise ShapeError(f"einsum: cannot cast {_dtype(xs[0])} to {dtype} under "
                             f"casting={casting!r}")
        xs = [convert(x, dtype) for x in xs]

    labels = []
    for i, (s, x) in enumerate(zip(in_specs, xs)):
        parsed, _ = _parse_spec(s, f"operand {i}'s subscripts {s!r}")
        labels.append(_expand_ellipsis(parsed, _ndim(x), f"operand {i}'s subscripts {s!r}"))
    n_ellipsis = max((sum(isinstance(l, _Ellipsis) for l in ls) for ls in labels), default=0)
    ellipsis_labels = [_Ellipsis(j) for j in reversed(range(n_ellipsis))]
    if explicit:
        parsed, has_ellipsis = _parse_spec(output, f"the output subscripts {output!r}")
        if n_ellipsis and not has_ellipsis:
            raise ShapeError(f"einsum: {subscripts!r}: the operands have '...' dimensions "
                             f"but the output has no '...' to put them in")
        out_labels = []
        for l in parsed:
            out_labels.extend(ellipsis_labels if l == "..." else [l])
        seen = set()
        for l in out_labels:
            if l in seen:
                raise ShapeError(f"einsum: output subscript {l!r} appears more than once")
            seen.add(l)
        for l in out_labels:
            if not isinstance(l, _Ellipsis) and not any(l in ls for ls in labels):
                raise ShapeError(f"einsum: output subscript {l!r} appears in no operand")
    else:
        counts = {}
        for ls in labels:
            for l in ls:
                if not isinstance(l, _Ellipsis):
                    counts[l] = counts.get(l, 0) + 1
        out_labels = ellipsis_labels + sorted(l for l, c in counts.items() if c == 1)

    # 1. Diagonals: a label repeated within one operand.
    for i in range(len(xs)):
        xs[i], labels[i] = _take_diagonals(xs[i], labels[i])
    # 2. Sizes agree or broadcast from 1; operands drop the size-1 dims that broadcast.
    sizes: dict = {}
    for x, ls in zip(xs, labels):
        for l, n in zip(ls, _shape(x)):
            if sizes.get(l, 1) not in (1, n) and n != 1:
                raise ShapeError(f"einsum: subscript {_label_text(l)} has size {sizes[l]} in "
                                 f"one operand and {n} in another")
            sizes[l] = n if sizes.get(l, 1) == 1 else sizes[l]
    for i, (x, ls) in enumerate(zip(xs, labels)):
        keep = [j for j, l in enumerate(ls) if not (_shape(x)[j] == 1 and sizes[l] != 1)]
        if len(keep) != len(ls):
            xs[i] = ops.reshape(x, [_shape(x)[j] for j in keep])
            labels[i] = [ls[j] for j in keep]
    # 3. Contract pairwise, left to right, summing each label once nothing later needs it.
    x, ls = xs[0], labels[0]
    for i in range(1, len(xs)):
        y, ms = xs[i], labels[i]
        later = set(out_labels).union(*[set(l) for l in labels[i + 1:]])
        x, ls = _sum_unneeded(x, ls, later | set(ms))
        y, ms = _sum_unneeded(y, ms, later | set(ls))
        batch = [l for l in ls if l in ms and l in later]
        contract = [l for l in ls if l in ms and l not in later]
        x = _dot_general(x, y, [ls.index(l) for l in contract], [ms.index(l) for l in contract],
                         [ls.index(l) for l in batch], [ms.index(l) for l in batch])
        ls = batch + [l for l in ls if l not in ms] + [l for l in ms if l not in ls]
    x, ls = _sum_unneeded(x, ls, set(out_labels))
    return ops.transpose(x, [ls.index(l) for l in out_labels])


def _label_text(label) -> str:
    return "'...'" if isinstance(label, _Ellipsis) else repr(label)


def _take_diagonals(x, labels):
    labels = list(labels)
    while True:
        repeated = next((l for l in labels if labels.count(l) > 1), None)
        if repeated is None:
            return x, labels
        p = labels.index(repeated)
        q = labels.index(repeated, p + 1)
        shape = _shape(x)
        if shape[p] != shape[q]:
            raise ShapeError(f"einsum: subscript {_label_text(repeated)} is repeated over "
                             f"dimensions of sizes {shape[p]} and {shape[q]}")
        x = diagonal(x, 0, p, q)
        labels = [l for j, l in enumerate(labels) if j not in (p, q)] + [repeated]


def _sum_unneeded(x, labels, needed):
    axes = [j for j, l in enumerate(labels) if l not in needed]
    if not axes:
        return x, labels
    return _reduce("sum", x, axes), [l for l in labels if l in needed]


# ---------------------------------------------------------------------------------------
# trace


@implements(np.trace)
def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """The sum along a diagonal: np.sum of np.diagonal, as NumPy computes it."""
    _no_out("np.trace", out)
    a = _strong(a)
    nd = _ndim(a)
    if nd < 2:
        raise ShapeError(f"trace needs an array of at least 2 dimensions, got shape "
                         f"{_shape_text(_shape(a))}")
    axis1, axis2 = normalize_axis(axis1, nd, "axis1"), normalize_axis(axis2, nd, "axis2")
    if axis1 == axis2:
        raise ShapeError("trace: axis1 and axis2 cannot be the same")
    if not isinstance(offset, (int, np.integer)):
        raise ShapeError(f"trace: offset must be a static int, got {offset!r}")
    return np_reductions.sum(diagonal(a, int(offset), axis1, axis2), axis=-1, dtype=dtype)


# ---------------------------------------------------------------------------------------
# np.linalg


def _linalg_dtype(name: str, *xs) -> np.dtype:
    """np.linalg's computation dtype: single precision only if every operand is."""
    kinds = [_dtype(x) for x in xs]
    for d in kinds:
        if d == dtypes.float16:
            raise ShapeError(f"{name}: array type float16 is unsupported in linalg",
                             "convert to float32 first")
    single = all(d in (dtypes.float32, dtypes.complex64) for d in kinds)
    complex_ = any(d.kind == "c" for d in kinds)
    dt = {(False, False): dtypes.float64, (True, False): dtypes.float32,
          (False, True): dtypes.complex128, (True, True): dtypes.complex64}[single, complex_]
    return dtypes.canonicalize_dtype(dt)


def linalg_matrices(name: str, *xs, square: bool = True):
    """Strong operands converted to np.linalg's dtype; a checked to be matrices (square
    ones unless `square` is false)."""
    xs = [_strong(x) for x in xs]
    dt = _linalg_dtype(name, *xs)
    xs = [convert(x, dt) for x in xs]
    sa = _shape(xs[0])
    if len(sa) < 2:
        raise ShapeError(f"{name}: {len(sa)}-dimensional array given. Array must be at least "
                         f"two-dimensional")
    if square and sa[-1] != sa[-2]:
        raise ShapeError(f"{name}: last 2 dimensions of the array must be square, got shape "
                         f"{_shape_text(sa)}")
    return xs


def _real_only(name: str, x):
    if _dtype(x).kind == "c":
        raise UnsupportedFunctionError(f"{name} of complex arrays is not supported")


@implements(np.linalg.cholesky)
def cholesky(a, upper=False):
    """The lower Cholesky factor L with a = L @ L.T (its transpose if upper=True)."""
    (a,) = linalg_matrices("cholesky", a)
    factor = la.cholesky.bind(a)
    if upper:
        _real_only("cholesky(upper=True)", a)
        return _swap_last(factor)
    return factor


@implements(np.linalg.solve)
def solve(a, b):
    """x with a @ x = b; b is a vector if 1-D, else a stack of matrices (NumPy 2)."""
    a, b = linalg_matrices("solve", a, b)
    sa, sb = _shape(a), _shape(b)
    n = sa[-1]
    if len(sb) == 0:
        raise ShapeError("solve: b must be at least one-dimensional")
    rows = sb[0] if len(sb) == 1 else sb[-2]
    if rows != n:
        raise ShapeError(f"solve: a of shape {_shape_text(sa)} and b of shape "
                         f"{_shape_text(sb)} do not align: {n} != {rows}")
    if len(sb) == 1:
        batch = sa[:-2]
        b_mat = ops.broadcast_to(ops.reshape(b, (n, 1)), batch + (n, 1))
    else:
        batch = _broadcast_batch("solve", sa[:-2], sb[:-2])
        a = ops.broadcast_to(a, batch + sa[-2:])
        b_mat = ops.broadcast_to(b, batch + sb[-2:])
    x = la.solve.bind(a, b_mat)
    return ops.reshape(x, batch + (n,)) if len(sb) == 1 else x


@implements(np.linalg.inv)
def inv(a):
    """a^-1, as the solve of a @ x = I (so its derivative is the one of solve)."""
    (a,) = linalg_matrices("inv", a)
    identity = ops.broadcast_to(ops.eye(_shape(a)[-1], dtype=_dtype(a)), _shape(a))
    return la.solve.bind(a, identity)


@implements(np.linalg.det)
def det(a):
    """The determinant of each matrix (its derivative is det(a) * inv(a).T)."""
    (a,) = linalg_matrices("det", a)
    return la.det.bind(a)


class SlogdetResult(NamedTuple):
    sign: object
    logabsdet: object


@implements(np.linalg.slogdet)
def slogdet(a):
    """(sign, log|det|): a sum of logs rather than a product that can overflow."""
    (a,) = linalg_matrices("slogdet", a)
    _real_only("np.linalg.slogdet", a)
    return SlogdetResult(*la.slogdet.bind(a))


# ---------------------------------------------------------------------------------------
# norm


def _keepdims(x, nd: int, axes) -> object:
    shape = list(_shape(x))
    for axis in sorted(axes):
        shape.insert(axis, 1)
    return ops.reshape(x, shape)


def _is(ord, value) -> bool:
    return not isinstance(ord, str) and ord is not None and ord == value


@implements(np.linalg.norm)
def norm(x, ord=None, axis=None, keepdims=False):
    """Vector norms (any ord) and matrix norms ('fro', 'nuc', 1, -1, 2, -2, inf, -inf), as
    np.linalg.norm."""
    x = _strong(x)
    dt = _dtype(x)
    if not dtypes.is_inexact(dt):
        x = convert(x, dtypes.default_float())
    if dtypes.is_complex(dt):
        of_matrices = len(_axis_tuple(axis)) == 2 if axis is not None else _ndim(x) == 2
        if not (of_matrices and (ord == "nuc" or _is(ord, 2) or _is(ord, -2))):
            # Every norm but the singular values' (the complex SVD's, real) is the norm
            # of the moduli (a real array).
            x = ew.abs.bind(x)
    dt = _dtype(x)
    nd = _ndim(x)
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (_is(ord, 2) and nd == 1):
            out = ew.sqrt.bind(_reduce("sum", ew.mul.bind(x, x), range(nd)))
            return ops.reshape(out, (1,) * nd) if keepdims else out
        if nd not in (1, 2):
            raise ShapeError("norm: improper number of dimensions to norm: an ord needs a "
                             "vector or a matrix, or axis=")
        axes = tuple(range(nd))
    elif isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, nd) for a in axis)
    else:
        axes = (normalize_axis(axis, nd),)
    if len(axes) == 1:
        out = _vector_norm(x, ord, axes, dt)
    elif len(axes) == 2:
        if axes[0] == axes[1]:
            raise ShapeError("norm: duplicate axes given")
        out = _matrix_norm(x, ord, axes)
    else:
        raise ShapeError("norm: improper number of dimensions to norm: axis names "
                         f"{len(axes)} axes (1 or 2 are norms)")
    return _keepdims(out, nd, axes) if keepdims else out


@implements(np.linalg.matrix_norm)
def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    """norm over the last two axes (NumPy 2's array-API spelling)."""
    return norm(x, ord=ord, axis=(-2, -1), keepdims=keepdims)


def _axis_tuple(axis) -> tuple:
    return tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)


def _vector_norm(x, ord, axes, dt):
    if isinstance(ord, str):
        raise ShapeError(f"norm: invalid norm order {ord!r} for vectors")
    if ord is None or _is(ord, 2):
        return ew.sqrt.bind(_reduce("sum", ew.mul.bind(x, x), axes))
    if _is(ord, np.inf):
        return _reduce("max", ew.abs.bind(x), axes)
    if _is(ord, -np.inf):
        return _reduce("min", ew.abs.bind(x), axes)
    if _is(ord, 0):
        nonzero = ew.ne.bind(x, _zero(dt))
        return _reduce("sum", ew.convert_element_type.bind(nonzero, new_dtype=dt,
                                                           weak_type=False), axes)
    if _is(ord, 1):
        return _reduce("sum", ew.abs.bind(x), axes)
    if isinstance(ord, Tracer):
        raise ShapeError("norm: ord must be a static number")
    p = float(ord)
    total = _reduce("sum", ew.pow.bind(ew.abs.bind(x), _literal(p, dt)), axes)
    return ew.pow.bind(total, _literal(1.0 / p, dt))


def _matrix_norm(x, ord, axes):
    row, col = axes
    if ord is None or ord in ("fro", "f"):
        return ew.sqrt.bind(_reduce("sum", ew.mul.bind(x, x), axes))
    if ord == "nuc" or _is(ord, 2) or _is(ord, -2):
        # The sum, largest or smallest of the singular values of each matrix.
        last_two = [d for d in range(_ndim(x)) if d not in axes] + [row, col]
        (singular_values,) = la.svd.bind(ops.transpose(x, last_two),
                                         full_matrices=False, compute_uv=False)
        kind = "sum" if ord == "nuc" else "max" if ord == 2 else "min"
        return _reduce(kind, singular_values, (_ndim(singular_values) - 1,))
    if _is(ord, 1) or _is(ord, -1):
        sums, along = _reduce("sum", ew.abs.bind(x), (row,)), col - (col > row)
    elif _is(ord, np.inf) or _is(ord, -np.inf):
        sums, along = _reduce("sum", ew.abs.bind(x), (col,)), row - (row > col)
    else:
        raise ShapeError(f"norm: invalid norm order {ord!r} for matrices")
    return _reduce("max" if ord > 0 else "min", sums, (along,))
