"""The op layer rules are written with: each op binds the primitive it names, looked up in
the registry, and the layer imports no primitive family (so families never import each
other in a cycle); families reach each other's primitives only through it."""
import ast
import importlib
import inspect
import pathlib

import numpy as np
import pytest

import s2s  # noqa: F401  (declares every primitive)
from s2s.core import ShapedArray
from s2s.passes import lax_ops
from s2s.primitives import ops
from s2s.staging import PRIMITIVES, JaxprBuilder, Primitive

F64 = np.dtype(np.float64)


def staged(fn, *avals):
    """The primitive names `fn` stages on fresh arguments of `avals`, in order."""
    with JaxprBuilder() as builder:
        args = [builder.new_arg(ShapedArray(shape, dtype)) for shape, dtype in avals]
        out = fn(*args)
        closed = builder.build(list(out) if isinstance(out, tuple) else [out])
    return [eqn.primitive.name for eqn in closed.jaxpr.eqns]


MATRIX = ((3, 4), F64)
INDEX = ((), np.dtype(np.int32))
BOOLS = ((3, 4), np.dtype(bool))
# Elementwise ops on float matrices, staging the primitive of their name (less a trailing _).
UNARY = ("exp", "sqrt", "sin", "cos", "sinh", "cosh", "floor", "ceil", "expm1", "log1p", "lgamma",
         "digamma", "erf", "erfc")
BINARY = ("add", "add_any", "pow_", "eq", "ne", "lt", "le", "gt", "ge")
ONE_PRIMITIVE = {
    # op call on the arguments: (argument avals, the one primitive it stages)
    **{name: (getattr(ops, name), [MATRIX], name) for name in UNARY},
    **{name: (getattr(ops, name), [MATRIX, MATRIX], name.rstrip("_")) for name in BINARY},
    "not_": (lambda p: ops.not_(p), [BOOLS], "not"),
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
    "argmax": (lambda x: ops.argmax(x, 1, np.int32), [MATRIX], "argmax"),
    "dynamic_slice": (lambda x, i: ops.dynamic_slice(x, [i, i], (1, 4)), [MATRIX, INDEX], "dynamic_slice"),
    "dynamic_update_slice": (lambda x, y, i: ops.dynamic_update_slice(x, y, [i, i]),
                             [MATRIX, ((1, 4), F64), INDEX], "dynamic_update_slice"),
    "gather": (lambda x, i: ops.gather(x, i, axes=(1,)), [MATRIX, ((5,), np.dtype(np.int64))],
               "gather"),
}


@pytest.mark.parametrize("name", sorted(ONE_PRIMITIVE))
def test_each_op_stages_exactly_its_primitive(name):
    fn, avals, primitive = ONE_PRIMITIVE[name]
    assert staged(fn, *avals) == [primitive]


def test_every_primitive_an_op_binds_is_declared():
    declared = {name: op.primitive_name for module in (ops, lax_ops) for name, op in vars(module).items()
                if hasattr(op, "primitive_name")}
    assert len(declared) > 40, declared
    missing = sorted(name for name, primitive in declared.items() if primitive not in PRIMITIVES)
    assert not missing, f"ops bind undeclared primitives: {missing}"
    assert all(ops.primitive(getattr(ops, name)) is PRIMITIVES[p] for name, p in declared.items() if hasattr(ops, name))


def _closed(fn, *avals):
    with JaxprBuilder() as builder:
        args = [builder.new_arg(ShapedArray(shape, dtype)) for shape, dtype in avals]
        return builder.build(list(fn(*args)))


def test_control_flow_ops_stage_their_primitive():
    scalar = ((), F64)
    double, negate = _closed(lambda x: [ops.add(x, x)], scalar), _closed(lambda x: [ops.neg(x)], scalar)
    assert staged(lambda p, x: tuple(ops.cond(p, x, branches=[double, negate])),
                  ((), np.dtype(bool)), scalar) == ["cond"]
    below = _closed(lambda x: [ops.lt(x, ops.literal(10, F64))], scalar)
    assert staged(lambda x: tuple(ops.while_loop(x, cond_jaxpr=below, body_jaxpr=double)), scalar) == ["while_loop"]
    np.testing.assert_array_equal(ops.while_loop(np.float64(1.5), cond_jaxpr=below, body_jaxpr=double), [12.0])


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


# A family is a module of s2s/primitives or a package of them (`loops/`, `linalg/`), whose
# modules share its primitives directly. Any other module reaches them through ops.
PRIMITIVES_DIR = pathlib.Path(ops.__file__).parent


def _family(module: str) -> str:
    """The family of a module named below s2s.primitives (`loops.reverse` -> `loops`)."""
    return module.split(".")[0]


def _primitives_reached_directly(module: str, source: str) -> list[str]:
    """The other families' primitives `module` (named below s2s.primitives) imports: by
    name (`from s2s.primitives.cond import cond`) or read off an imported module (`ew.exp`)."""
    tree = ast.parse(source)
    reached = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("s2s.primitives"):
            continue
        for alias in node.names:
            if node.module == "s2s.primitives":
                other, local = alias.name, alias.asname or alias.name
                names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                         and isinstance(n.value, ast.Name) and n.value.id == local}
            else:
                other, names = node.module.removeprefix("s2s.primitives."), {alias.name}
            if other == "ops" or _family(other) == _family(module):
                continue
            imported = importlib.import_module(f"s2s.primitives.{other}")
            reached += [f"{module} -> {other}.{n}" for n in sorted(names)
                        if isinstance(getattr(imported, n, None), Primitive)]
    return reached


def _module_name(path: pathlib.Path) -> str:
    """`loops.reverse` for s2s/primitives/loops/reverse.py, `loops` for its __init__.py."""
    parts = path.relative_to(PRIMITIVES_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_families_reach_each_other_only_through_ops():
    """Helpers may be imported across families; a primitive is staged (`ops.argmax(...)`)
    or recognized (`ops.primitive(ops.pad)`) through ops, the one way in."""
    modules = {_module_name(path): path for path in sorted(PRIMITIVES_DIR.rglob("*.py"))}
    reached = [r for module, path in modules.items() if module not in ("", "ops")
               for r in _primitives_reached_directly(module, path.read_text())]
    assert not reached, "primitives of another family imported directly (use ops):\n" + "\n".join(reached)


def test_direct_reaches_are_seen():
    """The finder itself: a primitive by name, one read off a module, one of a family's
    package, a helper, and the same family."""
    source = ("from s2s.primitives import elementwise as ew\nfrom s2s.primitives.cond import cond\n"
              "from s2s.primitives.elementwise import broadcast_shapes\ny = ew.exp.bind(x)")
    assert _primitives_reached_directly("special", source) == ["special -> elementwise.exp", "special -> cond.cond"]
    assert _primitives_reached_directly("bessel", "from s2s.primitives.loops.definitions import scan") == [
        "bessel -> loops.definitions.scan"]
    assert _primitives_reached_directly("loops.reverse", "from s2s.primitives.loops.definitions import scan") == []
