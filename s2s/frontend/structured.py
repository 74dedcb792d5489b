"""Staging function bodies into the structured control-flow primitives: the bodies of
`cond`, `while_loop` and `scan` (`s2s/primitives/cond.py`, `s2s/primitives/loops/`).

Both the walker (an `if`, `while` or `for` on arrays) and `s2s.lax` (the user's own
`cond`, `scan` ...) build their loops and branches here. The functions handed in are
functions of staged values, called as they are: the walker passes the `Direct` bodies it
makes of its blocks, and `s2s.lax` wraps the user's callables so that each call stages them
with `call_user`. A body's reads from the enclosing function become explicit operands
(closure conversion).
"""
from __future__ import annotations

import inspect

import numpy as np

from s2s import dtypes
from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray, Var
from s2s.errors import StagingError, StagingTypeError, StagingValueError
from s2s.frontend.args import aval_of_arg
from s2s.frontend.checkpointed import bind_scan, schedule
from s2s.primitives import loops as primitive_loops
from s2s.primitives.cond import cond
from s2s.primitives.control_flow_bodies import closure_convert
from s2s.primitives.elementwise import convert_element_type
from s2s.staging import JaxprBuilder, Tracer, paused_gc
from s2s.tree import PyTreeDef, tree_flatten, tree_leaves


class unroll:
    """`for i in s2s.unroll(range(n)):` asks for a Python loop to be unrolled at staging time
    (one copy of the body per iteration) instead of staged as one scan. Iterating it
    outside staging just iterates the wrapped iterable."""

    def __init__(self, iterable):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def __len__(self):
        return len(self.iterable)


class Direct:
    """A function of staged values that s2s calls as it is, rather than staging it from its
    source (the bodies the front end makes of `if`/`for`/`while` blocks, the user's
    callables as `s2s.lax` wraps them, the linear maps handed to custom_root's
    tangent_solve). `names` name its parameters, for readable names in jaxprs and emitted
    code."""

    def __init__(self, run, names=()):
        self.run = run
        self.signature = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                            for n in names])

    def __call__(self, *args):
        return self.run(*args)


def param_names(fn) -> list[str]:
    """`fn`'s parameter names (hints for a body's inputs): from the `signature` that a
    `Direct` carries, else from inspect (which a def made while staging answers too)."""
    signature = getattr(fn, "signature", None)
    try:
        return list((signature or inspect.signature(fn)).parameters)
    except (TypeError, ValueError):
        return []


class StagedBody:
    """A function of staged values staged once on arguments of given types, closure-converted:
    `jaxpr` takes the values it read from the enclosing function (`consts`) first."""

    def __init__(self, fn, args: tuple, what: str):
        leaves, in_tree = tree_flatten(args)
        names = param_names(fn)
        with paused_gc(), JaxprBuilder() as builder:
            hints = _leaf_hints(names, in_tree)
            staged = in_tree.unflatten([builder.new_arg(aval_of_arg(l), h) for l, h in zip(leaves, hints)])
            out = fn(*staged)
            out_leaves, self.out_tree = tree_flatten(out)
            for leaf in out_leaves:
                if not (isinstance(leaf, (Tracer, np.ndarray, np.generic, bool, int, float, complex))):
                    raise StagingTypeError(f"{what} returns a {type(leaf).__name__}, which is not an array",
                                           "return arrays, numbers, or tuples/lists/dicts of them")
            closed = builder.build(out_leaves)
        self.jaxpr, self.consts = closure_convert(closed)
        self.in_tree = in_tree
        self.fn = fn

    @property
    def out_avals(self) -> list[ShapedArray]:
        return list(self.jaxpr.out_avals)

    @property
    def out_types(self):
        """What the function returns, as a tree of ShapedArrays."""
        return self.out_tree.unflatten(self.out_avals)


def _leaf_hints(names: list[str], in_tree: PyTreeDef) -> list[str | None]:
    """A readable hint per leaf: the parameter's name when the parameter is one leaf (or
    one name per leaf when there are as many names as leaves)."""
    if len(names) == in_tree.num_leaves and len(names) != len(in_tree.children):
        return list(names)
    hints = []
    for i, child in enumerate(in_tree.children):
        name = names[i] if i < len(names) else None
        hints.extend([name] if child.is_leaf else [None] * child.num_leaves)
    return hints


def _matching(init_leaves: list, out_avals: list[ShapedArray]) -> list:
    """The initial values, with weakly typed ones (Python scalars) converted to the type
    the body gives them, as JAX does; other mismatches are left for the type check."""
    matched = []
    for leaf, out in zip(init_leaves, out_avals):
        aval = aval_of_arg(leaf)
        if aval.weak_type and aval.shape == out.shape and aval.dtype != out.dtype:
            leaf = convert_element_type.bind(leaf, new_dtype=out.dtype, weak_type=False) \
                if isinstance(leaf, Tracer) else np.asarray(leaf, out.dtype)
        matched.append(leaf)
    return matched


def _check_carry(what: str, init_tree: PyTreeDef, out_tree: PyTreeDef):
    if init_tree != out_tree:
        raise StagingTypeError(f"{what} must return a carry with the structure of the initial value: "
                               f"it starts as {init_tree} and the function returns {out_tree}",
                               "return the carry in the same structure (same tuple/dict/list nesting)")


# ---------------------------------------------------------------------------------------


def staged_branch(fn, what: str = "a branch") -> StagedBody:
    """`fn` of no arguments, staged once: `.out_types` says what it returns, and `switch`
    takes it as a branch without staging it again (a branch that must be staged to type
    another one would otherwise be staged twice, and twice again at each nesting level)."""
    return StagedBody(fn, (), what)


def switch(index, branches, *operands):
    """`branches[index](*operands)`, with `index` clamped into range (jax.lax.switch)."""
    branches = list(branches)
    if not branches:
        raise StagingValueError("switch needs at least one branch", "pass a list of functions")
    if not isinstance(index, (Tracer, np.ndarray, np.generic)):
        chosen = min(max(int(index), 0), len(branches) - 1)   # static: just call it
        return branches[chosen](*operands)
    bodies = [b if isinstance(b, StagedBody) and not operands   # from staged_branch
              else StagedBody(b, operands, f"branch {i} of switch") for i, b in enumerate(branches)]
    for body in bodies[1:]:
        if body.out_tree != bodies[0].out_tree:
            raise StagingTypeError(f"the branches give different structures: "
                                   f"{bodies[0].out_tree} and {body.out_tree}",
                                   "make every branch give the same tuple/dict/list structure (a path "
                                   "through a function that ends without `return` returns None)")
    bodies = _weak_results_promoted(bodies, operands)
    # Every branch takes every branch's constants, so that all share one signature.
    all_consts = [c for body in bodies for c in body.consts]
    const_avals = [a for body in bodies for a in body.jaxpr.in_avals[:len(body.consts)]]
    branches_closed, start = [], 0
    for body in bodies:
        branches_closed.append(_taking_all_consts(body, start, const_avals))
        start += len(body.consts)
    if not (len(branches) == 2 and aval_of_arg(index).dtype == np.dtype(bool)):   # cond keeps its bool
        index = convert_element_type.bind(index, new_dtype=np.dtype(np.int32), weak_type=False)
    outs = cond.bind(index, *all_consts, *tree_leaves(operands), branches=tuple(branches_closed))
    return bodies[0].out_tree.unflatten(outs)


def _weak_results_promoted(bodies: list[StagedBody], operands) -> list[StagedBody]:
    """The branches, where one returns a Python number (weakly typed) for a result that
    another returns as an array of the same or a higher kind, restaged to return that
    number in the array's dtype, as JAX does: `y = 0.0` in one branch and `y = x.sum()` of
    float32 in the other is float32."""
    targets = []
    for results in zip(*(b.out_avals for b in bodies)):
        strong = {a.dtype for a in results if not a.weak_type}
        weak_kinds = {_KIND_ORDER[a.dtype.kind] for a in results if a.weak_type}
        if len(strong) == 1 and all(k <= _KIND_ORDER[next(iter(strong)).kind] for k in weak_kinds):
            targets.append(strong.pop())
        elif not strong and len({a.dtype for a in results}) > 1:   # `0` here, `0.5` there
            targets.append(np.result_type(*(a.dtype for a in results)))
        else:
            targets.append(None)    # the same everywhere, or a real mismatch cond reports
    promoted = []
    for i, body in enumerate(bodies):
        if all(t is None or a.dtype == t for a, t in zip(body.out_avals, targets)):
            promoted.append(body)
            continue

        def cast_results(*args, branch=body.fn):
            leaves, tree = tree_flatten(branch(*args))
            return tree.unflatten([leaf if t is None else _as_dtype(leaf, t) for leaf, t in zip(leaves, targets)])
        promoted.append(StagedBody(Direct(cast_results, param_names(body.fn)), operands, f"branch {i} of switch"))
    return promoted


# A Python number only takes an array's dtype of the same or a higher kind: `0.5` against
# an int array stays a type mismatch (cond reports it), never a truncation to 0.
_KIND_ORDER = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def _as_dtype(value, dtype):
    if isinstance(value, Tracer):
        return value if value.aval.dtype == dtype else convert_element_type.bind(value, new_dtype=dtype,
                                                                                 weak_type=False)
    try:
        converted = np.asarray(value, dtype)
    except OverflowError:
        converted = None
    if converted is None or converted != value:
        raise StagingTypeError(f"one branch gives {value!r}, which {dtype.name}, the type another branch "
                               "gives, cannot hold", f"make every branch give the same type (e.g. cast "
                               f"the other branch with .astype(...)), or give a value that fits {dtype.name}")
    return converted


def _taking_all_consts(body: StagedBody, start: int, const_avals: list[ShapedArray]) -> ClosedJaxpr:
    """`body`'s jaxpr taking every branch's constants (its own at `start`), then operands."""
    jaxpr = body.jaxpr.jaxpr
    n = len(body.consts)
    before = [Var(a) for a in const_avals[:start]]
    after = [Var(a) for a in const_avals[start + n:]]
    return ClosedJaxpr(Jaxpr([], before + list(jaxpr.invars[:n]) + after + list(jaxpr.invars[n:]),
                             jaxpr.outvars, jaxpr.eqns), [])


def while_loop(cond_fun, body_fun, init_val, max_iters=None):
    """`while cond_fun(val): val = body_fun(val)`, staged as one `while_loop` (stopping after
    `max_iters` steps too, if given: see `s2s.lax.while_loop`)."""
    if max_iters is not None and (isinstance(max_iters, bool) or not isinstance(max_iters, (int, np.integer))
                                  or max_iters < 0):
        raise StagingError(f"while_loop's max_iters must be a non-negative int, not {max_iters!r}",
                           "pass a Python int bound, e.g. max_iters=100")
    init_leaves, init_tree = tree_flatten(init_val)
    body = StagedBody(body_fun, (init_val,), "while_loop's body")
    _check_carry("while_loop's body", init_tree, body.out_tree)
    init_leaves = _matching(init_leaves, body.out_avals)
    init_val = init_tree.unflatten(init_leaves)
    body = StagedBody(body_fun, (init_val,), "while_loop's body")
    condition = StagedBody(cond_fun, (init_val,), "while_loop's condition")
    (pred,) = condition.out_avals if len(condition.out_avals) == 1 else (None,)
    if pred is None or pred.shape != () or pred.dtype != dtypes.bool_:
        raise StagingTypeError("while_loop's condition must return one scalar bool",
                               "return a comparison such as `val[0] < n`")
    outs = primitive_loops.while_loop.bind(*condition.consts, *body.consts, *init_leaves,
                                           cond_jaxpr=condition.jaxpr, body_jaxpr=body.jaxpr,
                                           cond_nconsts=len(condition.consts), body_nconsts=len(body.consts),
                                           max_iters=None if max_iters is None else int(max_iters))
    return init_tree.unflatten(outs)


def _is_counter(x, length: int) -> bool:
    """Whether `x` is the staged `np.arange(length)` a loop counts its steps with."""
    if not isinstance(x, Tracer):
        return False
    eqn = x.builder.producer(x.variable)
    return (eqn is not None and eqn.primitive.name == "iota" and eqn.params["shape"] == (length,)
            and np.dtype(eqn.params["dtype"]).kind in "iu"
            and length - 1 <= np.iinfo(eqn.params["dtype"]).max)   # a narrow counter wraps: not a row


def _rows_scanned(body, num_carry: int, x_leaves: list, length: int):
    """The scan's constants, scanned inputs and body once the constants the body reads one
    row per step at its counter are scanned inputs (`primitive_loops.scanned_rows`)."""
    chosen, jaxpr = primitive_loops.scanned_rows(body.jaxpr, len(body.consts), num_carry, length,
                                                 [_is_counter(x, length) for x in x_leaves])
    rows = [body.consts[k] if np.shape(body.consts[k])[0] == length else body.consts[k][:length] for k in chosen]
    # A step's row stays nameless, so a loop reading it once writes `xs_rows[t]` where the
    # source had `xs[t]` (emission names it after `xs` where it is read more often).
    for k, rows_read in zip(chosen, rows):
        if isinstance(rows_read, Tracer) and rows_read is not body.consts[k]:   # `xs_rows = xs[:n]`
            name = body.consts[k].variable.hint if isinstance(body.consts[k], Tracer) else None
            rows_read.variable.hint = f"{name}_rows" if name else "rows"
    return [c for k, c in enumerate(body.consts) if k not in chosen], list(x_leaves) + rows, jaxpr


def scan(f, init, xs=None, length=None, reverse=False, unroll=1, checkpoints=None):
    """jax.lax.scan: `carry, y = f(carry, x)` over the leading axis of `xs` (a pytree, or
    None with `length`); returns the final carry and the stacked ys. With `checkpoints`,
    reverse mode keeps at most that many carries (`frontend/checkpointed.py`)."""
    x_leaves, x_tree = tree_flatten(xs)
    lengths = {aval_of_arg(x).shape[0] if aval_of_arg(x).shape else None for x in x_leaves}
    if None in lengths:
        raise StagingValueError("scan slices its xs along their leading axis: a scalar has none",
                                "pass arrays with at least one dimension")
    if length is None:
        if len(lengths) != 1:
            raise StagingValueError(f"scan's xs have different leading sizes {sorted(lengths)}"
                                    if lengths else "scan needs `length` when there are no xs",
                                    "pass xs of one length, or `length=`")
        (length,) = lengths
    elif lengths - {length}:
        raise StagingValueError(f"scan was given length={length} but xs of leading sizes {sorted(lengths)}",
                                "make `length` match the xs")
    length = int(length)
    if isinstance(unroll, bool):
        unroll = length if unroll else 1
    if not isinstance(unroll, int) or unroll < 1:
        raise StagingError(f"scan's unroll must be a positive int or a bool, not {unroll!r}",
                           "pass unroll=1 (no unrolling), k, or True (fully)")
    x_slices = x_tree.unflatten([ShapedArray(aval_of_arg(x).shape[1:], aval_of_arg(x).dtype) for x in x_leaves])
    init_leaves, init_tree = tree_flatten(init)

    def staged_body(carry):
        return StagedBody(f, (carry, x_slices), "scan's function")
    body = staged_body(init)
    if not (body.out_tree.node_type in (tuple, list) and len(body.out_tree.children) == 2):
        raise StagingTypeError("scan's function must return a pair (carry, y)",
                               "return `new_carry, y` (y may be None)")
    carry_tree = body.out_tree.children[0]
    _check_carry("scan's function", init_tree, carry_tree)
    init_leaves = _matching(init_leaves, body.out_avals[:len(init_leaves)])
    init = init_tree.unflatten(init_leaves)
    body = staged_body(init)
    plan = None if checkpoints is None else schedule(length, checkpoints)
    consts, x_leaves, jaxpr = _rows_scanned(body, len(init_leaves), x_leaves, length)
    outs = bind_scan(jaxpr, consts, init_leaves, x_leaves, length, bool(reverse), unroll, plan)
    n = len(init_leaves)
    return init_tree.unflatten(outs[:n]), body.out_tree.children[1].unflatten(outs[n:])
