"""The op layer rules are written with: each op binds the primitive it names, looked up in
the registry, and the layer imports no primitive family (so families never import each
other in a cycle)."""
import ast
import inspect
import re

import numpy as np
import pytest

import s2s  # noqa: F401  (declares every primitive)
from s2s.core import ShapedArray
from s2s.primitives import ops
from s2s.staging import PRIMITIVES, JaxprBuilder

F64 = np.dtype(np.float64)


def staged(fn, *avals):
    """The primitive names `fn` stages on fresh arguments of `avals`, in order."""
    with JaxprBuilder() as builder:
        args = [builder.new_arg(ShapedArray(shape, dtype)) for shape, dtype in avals]
        out = fn(*args)
        closed = builder.build(list(out) if isinstance(out, tuple) else [out])
    return [eqn.primitive.name for eqn in closed.jaxpr.eqns]


MATRIX = ((3, 4), F64)
BOOLS = ((3, 4), np.dtype(bool))
ONE_PRIMITIVE = {
    # op call on the arguments: (argument avals, the one primitive it stages)
    "exp": (lambda x: ops.exp(x), [MATRIX], "exp"),
    "sqrt": (lambda x: ops.sqrt(x), [MATRIX], "sqrt"),
    "sin": (lambda x: ops.sin(x), [MATRIX], "sin"),
    "cos": (lambda x: ops.cos(x), [MATRIX], "cos"),
    "sinh": (lambda x: ops.sinh(x), [MATRIX], "sinh"),
    "cosh": (lambda x: ops.cosh(x), [MATRIX], "cosh"),
    "floor": (lambda x: ops.floor(x), [MATRIX], "floor"),
    "ceil": (lambda x: ops.ceil(x), [MATRIX], "ceil"),
    "add": (lambda x, y: ops.add(x, y), [MATRIX, MATRIX], "add"),
    "eq": (lambda x, y: ops.eq(x, y), [MATRIX, MATRIX], "eq"),
    "ne": (lambda x, y: ops.ne(x, y), [MATRIX, MATRIX], "ne"),
    "lt": (lambda x, y: ops.lt(x, y), [MATRIX, MATRIX], "lt"),
    "le": (lambda x, y: ops.le(x, y), [MATRIX, MATRIX], "le"),
    "ge": (lambda x, y: ops.ge(x, y), [MATRIX, MATRIX], "ge"),
    "and_": (lambda p, q: ops.and_(p, q), [BOOLS, BOOLS], "and"),
    "select": (lambda p, x, y: ops.select(p, x, y), [BOOLS, MATRIX, MATRIX], "select"),
    "convert": (lambda x: ops.convert(x, np.float32), [MATRIX], "convert_element_type"),
    "iota": (lambda: ops.iota((3, 4), 1), [], "iota"),
    "full": (lambda: ops.full((3, 4), 1.5, F64), [], "broadcast_in_dim"),
    "broadcast_in_dim": (lambda x: ops.broadcast_in_dim(x, (2, 3, 4), (1, 2)), [MATRIX],
                         "broadcast_in_dim"),
    "broadcast_to": (lambda x: ops.broadcast_to(x, (2, 3, 4)), [MATRIX], "broadcast_in_dim"),
    "reshape": (lambda x: ops.reshape(x, (4, 3)), [MATRIX], "reshape"),
    "transpose": (lambda x: ops.transpose(x, (1, 0)), [MATRIX], "transpose"),
    "expand_dims": (lambda x: ops.expand_dims(x, (0,)), [MATRIX], "expand_dims"),
    "squeeze": (lambda x: ops.squeeze(x, (0,)), [((1, 4), F64)], "squeeze"),
    "concatenate": (lambda x, y: ops.concatenate([x, y], 0), [MATRIX, MATRIX], "concatenate"),
    "pad": (lambda x: ops.pad(x, ops.scalar(0, F64), [(1, 0, 0), (0, 2, 1)]), [MATRIX], "pad"),
    "slice": (lambda x: ops.slice(x, (1, 0), (3, 4)), [MATRIX], "slice"),
    "slice_in_dim": (lambda x: ops.slice_in_dim(x, 1, 3, axis=1), [MATRIX], "slice"),
    "reduce_sum": (lambda x: ops.reduce_sum(x, (0,)), [MATRIX], "reduce_sum"),
    "gather": (lambda x, i: ops.gather(x, i, axes=(1,)), [MATRIX, ((5,), np.dtype(np.int64))],
               "gather"),
}


@pytest.mark.parametrize("name", sorted(ONE_PRIMITIVE))
def test_each_op_stages_exactly_its_primitive(name):
    fn, avals, primitive = ONE_PRIMITIVE[name]
    assert staged(fn, *avals) == [primitive]


def test_every_primitive_an_op_binds_is_declared():
    names = set(re.findall(r'_bind\(\s*"(\w+)"', inspect.getsource(ops)))
    names |= set(re.findall(r'_(?:unary|binary)\("(\w+)"\)', inspect.getsource(ops)))
    assert names, "no primitive names found in ops.py"
    missing = sorted(n for n in names if n not in PRIMITIVES)
    assert not missing, f"ops bind undeclared primitives: {missing}"


def test_ops_that_change_nothing_stage_nothing():
    assert staged(lambda x: ops.broadcast_to(x, (3, 4)), MATRIX) == []
    assert staged(lambda x: ops.reshape(x, (3, 4)), MATRIX) == []
    assert staged(lambda x: ops.transpose(x, (0, 1)), MATRIX) == []
    assert staged(lambda x: ops.slice_in_dim(x, 0, 3), MATRIX) == []


def test_compositions_stage_what_the_numpy_surface_stages():
    assert staged(lambda x: ops.trunc(x), MATRIX) == ["lt", "ceil", "floor", "select"]
    assert staged(lambda: ops.eye(3, dtype=F64)) == ["iota", "iota", "eq", "convert_element_type"]
    assert staged(lambda: ops.eye(3, 4, k=1, dtype=bool)) == ["iota", "iota", "add", "eq"]
    assert staged(lambda x: ops.tril(x, -1), MATRIX) == ["iota", "add", "iota", "ge", "select"]
    assert staged(lambda x: ops.triu(x), MATRIX) == ["iota", "iota", "le", "select"]
    assert staged(lambda x: ops.index_in_dim(x, 2), MATRIX) == ["slice", "squeeze"]


def test_values_match_numpy():
    x = np.arange(12.0).reshape(3, 4) - 5.5
    np.testing.assert_array_equal(ops.trunc(x), np.trunc(x))
    np.testing.assert_array_equal(ops.eye(3, 4, k=1, dtype=F64), np.eye(3, 4, k=1))
    np.testing.assert_array_equal(ops.tril(x, -1), np.tril(x, -1))
    np.testing.assert_array_equal(ops.triu(x, 1), np.triu(x, 1))
    np.testing.assert_array_equal(ops.full((2, 2), 3, np.int32), np.full((2, 2), 3, np.int32))
    np.testing.assert_array_equal(ops.index_in_dim(x, 1, axis=1), x[:, 1])


def test_literals_are_typed_scalars():
    weak = ops.literal(2, F64)
    assert weak.value == 2.0 and isinstance(weak.value, float) and weak.aval.weak_type
    assert not ops.literal(True, bool, weak=False).aval.weak_type
    with pytest.raises(OverflowError):
        ops.literal(300, np.int8)
    assert ops.scalar(0, np.float32).dtype == np.float32


def test_ops_imports_no_primitive_family():
    tree = ast.parse(inspect.getsource(ops))
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for a in node.names]
    assert not [m for m in imported if m and m.startswith("s2s.primitives")], imported
