"""Explicit structured control flow with JAX's signatures: `cond`, `switch`, `while_loop`,
`fori_loop`, `scan` and `map`; implicit differentiation: `custom_root` and
`custom_linear_solve`; and the collectives over a vmap's named axis: `psum`, `pmean`,
`pmax`, `pmin`, `all_gather`, `axis_index`, `ppermute`, `psum_scatter` and `all_to_all`.

The user-level API over `s2s/frontend/structured.py`, which stages bodies into the `cond`,
`while_loop` and `scan` primitives (`s2s/primitives/cond.py`, `loops/`): here each function
the user passes is wrapped so that every call stages it with `call_user`, like any user
function. Values they read from the enclosing function become explicit operands. Outside
any staging they run too, on NumPy values. Each is an entry point (`api_boundary`): a
mistake in what it is given is shown at the user's call.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence

import numpy as np

from s2s.core import ClosedJaxpr
from s2s.errors import StagingError, StagingTypeError, UnboundAxisError, api_boundary
from s2s.frontend import structured
from s2s.frontend.args import aval_of_arg
from s2s.frontend.checkpointed import checkpointed
from s2s.frontend.structured import Direct, StagedBody, param_names, unroll
from s2s.frontend.walker import call_user, stage_python_function
from s2s.ode import lax_odeint as odeint
from s2s.passes.jvp import jvp_eqns
from s2s.passes.tangents import Zero, instantiate, tangent_aval
from s2s.passes.transpose import transpose_jaxpr
from s2s.primitives import collectives, implicit, ops
from s2s.staging import Tracer, axis_env, inline_jaxpr
from s2s.tree import tree_flatten, tree_leaves, tree_map

__all__ = ["all_gather", "all_to_all", "axis_index", "cond", "custom_linear_solve", "custom_root", "fori_loop",
           "map", "odeint", "pmax", "pmean", "pmin", "ppermute", "psum", "psum_scatter", "scan", "switch", "unroll",
           "while_loop", "checkpointed"]


# A collective's axis: a name given to vmap or pmap, or a tuple of them (the axes together).
AxisName = Hashable | tuple[Hashable, ...]

def __dir__() -> list[str]:
    """`dir(s2s.lax)` lists the API, not the names this module imports to build it."""
    return sorted(__all__)


def _staging(fn) -> Direct:
    """The user's `fn` as a function of staged values: each call stages it with call_user."""
    return Direct(lambda *args: call_user(fn, args, {}), param_names(fn))


@api_boundary
def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """`branches[index](*operands)`, with `index` clamped into range (jax.lax.switch)."""
    return structured.switch(index, [_staging(b) for b in branches], *operands)


@api_boundary
def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any) -> Any:
    """`true_fun(*operands) if pred else false_fun(*operands)`, staged as one `cond`
    (jax.lax.cond); a static `pred` just calls the branch it picks."""
    if not isinstance(pred, (Tracer, np.ndarray, np.generic)):
        return call_user(true_fun if pred else false_fun, operands, {})
    if aval_of_arg(pred).shape != ():
        raise StagingTypeError(f"cond needs a scalar predicate, got shape {aval_of_arg(pred).shape}",
                               "reduce it to one bool (e.g. with .any() or .all())")
    return switch(pred, [false_fun, true_fun], *operands)


@api_boundary
def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any,
               max_iters: int | None = None) -> Any:
    """`while cond_fun(val): val = body_fun(val)`, staged as one `while_loop`.

    With `max_iters` (beyond jax.lax.while_loop) the loop also stops after `max_iters`
    steps, and reverse mode works: differentiated, it runs as a scan of `max_iters` steps,
    each running the body only while `cond_fun` has held, with each step's residuals in
    buffers of `max_iters` rows. Run or differentiated in forward mode, the loop stops as
    soon as `cond_fun` is false.
    """
    return structured.while_loop(_staging(cond_fun), _staging(body_fun), init_val, max_iters)


@api_boundary
def scan(f: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any = None, length: int | None = None,
         reverse: bool = False, unroll: int | bool = 1, checkpoints: int | None = None) -> tuple[Any, Any]:
    """jax.lax.scan: `carry, y = f(carry, x)` over the leading axis of `xs` (a pytree, or
    None with `length`); returns the final carry and the stacked ys.

    With `checkpoints=k` (beyond JAX) reverse mode keeps at most k carries instead of
    every step's residuals, and recomputes the steps in between in the backward pass with
    a binomial (revolve) schedule: each step at most r times, r the least with
    C(k + r, r) >= length (k = 32 and 10,000 steps: 4). `checkpoints="sqrt"` is the
    one-level schedule: about sqrt(length) carries and one segment of sqrt(length) steps'
    residuals kept, each step recomputed once."""
    return structured.scan(_staging(f), init, xs, length, reverse, unroll, checkpoints)


def _from_source(helper) -> Direct:
    """One of this module's own helpers, staged from its source as user code is (so the
    names it assigns, `i` and `val`, name the loop's values in emitted code); the user's
    function it calls is a call in that source, staged by call_user."""
    return Direct(lambda *args: stage_python_function(helper, args, {}), param_names(helper))


@api_boundary
def fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    """`for i in range(lower, upper): val = body_fun(i, val)`. With static bounds it is a
    scan (so reverse mode works, as in JAX); with staged bounds a while_loop."""
    if not any(isinstance(b, Tracer) for b in (lower, upper)):
        lower, upper = int(lower), int(upper)

        def step(carry, _):
            i, val = carry
            return (i + 1, body_fun(i, val)), None
        (_, result), _ = structured.scan(_from_source(step), (np.asarray(lower), init_val), None,
                                         length=max(upper - lower, 0))
        return result

    def keep_going(carry):
        return carry[0] < carry[1]

    def step_while(carry):
        i, stop, val = carry
        return i + 1, stop, body_fun(i, val)
    start = lower if isinstance(lower, Tracer) else np.asarray(lower)
    _, _, result = structured.while_loop(_from_source(keep_going), _from_source(step_while),
                                         (start, upper, init_val))
    return result


@api_boundary
def map(f: Callable[[Any], Any], xs: Any) -> Any:
    """`np.stack([f(x) for x in xs])` over the leading axis (of every leaf), as a scan."""
    def step(carry, x):
        return carry, f(x)
    _, ys = structured.scan(_from_source(step), (), xs)
    return ys


# ---------------------------------------------------------------------------------------
# Implicit differentiation (the primitives are in s2s/primitives/implicit.py). The user's
# solvers are staged here, when the primitive is bound, into jaxprs its rules apply.


@api_boundary
def custom_root(f: Callable[[Any], Any], initial_guess: Any, solve: Callable[[Callable[[Any], Any], Any], Any],
                tangent_solve: Callable[[Callable[[Any], Any], Any], Any], has_aux: bool = False) -> Any:
    """x with f(x) = 0, found by `solve(f, initial_guess)` (any code: a Newton while loop);
    differentiated by the implicit function theorem with `tangent_solve(g, y)`, which solves
    g(x) = y for the linear map g = ∂f/∂x (jax.lax.custom_root). Derivatives flow to what f
    closes over; the solver's iterations are never differentiated."""
    if has_aux:
        raise StagingError("custom_root(has_aux=True) is not supported yet",
                           "return only the root from solve")
    x_leaves, x_tree = tree_flatten(initial_guess)
    f_body = StagedBody(_staging(f), (initial_guess,), "custom_root's f")
    solve_body = StagedBody(Direct(lambda x0: call_user(solve, (f, x0), {}), ["x0"]), (initial_guess,),
                            "custom_root's solve")
    if solve_body.out_tree != x_tree:
        raise StagingTypeError(f"custom_root's solve returns {solve_body.out_tree}, but the initial "
                               f"guess is {x_tree}", "return x in the structure of the initial guess")
    theta_avals = f_body.jaxpr.in_avals[:len(f_body.consts)]
    x_avals = solve_body.out_avals

    def solve_tangent(theta, x, y):      # tangent_solve(v ↦ ∂f/∂x · v at (θ, x), y)
        g = _linear_map(f_body.jaxpr, list(theta) + tree_leaves(x), len(theta), x_tree)
        return call_user(tangent_solve, (g, y), {})
    tangent_body = StagedBody(Direct(solve_tangent, ["theta", "x", "y"]),
                              (theta_avals, x_tree.unflatten(x_avals),
                               x_tree.unflatten([tangent_aval(a) for a in x_avals])),
                              "custom_root's tangent_solve")
    unused_by_solve = theta_avals + tangent_body.jaxpr.in_avals[:len(tangent_body.consts)]
    outs = implicit.custom_root.bind(
        *f_body.consts, *tangent_body.consts, *solve_body.consts, *x_leaves,
        call=implicit.padded(solve_body.jaxpr, len(solve_body.consts), unused_by_solve),
        f_jaxpr=f_body.jaxpr, tangent_jaxpr=tangent_body.jaxpr, n_f_consts=len(f_body.consts),
        n_tangent_consts=len(tangent_body.consts))
    return x_tree.unflatten(outs)


def _linear_map(closed: ClosedJaxpr, point: list, n_fixed: int, tree) -> Direct:
    """v ↦ the jvp of `closed` at `point` along v in the inputs after the first `n_fixed`:
    a function on pytrees that stages its equations where it is called."""
    def apply(v):
        zeros = [Zero(tangent_aval(var.aval)) for var in closed.jaxpr.invars[:n_fixed]]
        _, out = jvp_eqns(closed, point, zeros + tree_leaves(v))
        return tree.unflatten([instantiate(t) for t in out])
    return Direct(apply, ["v"])


def _staged_solver(solve, linear_map: ClosedJaxpr, consts: list, b, what: str) -> StagedBody:
    """`solve(A, b)` staged, A applying `linear_map` (which takes `consts` first)."""
    _, b_tree = tree_flatten(b)

    def apply(x):
        return b_tree.unflatten(inline_jaxpr(linear_map, list(consts) + tree_leaves(x)))
    what = f"custom_linear_solve's {what}"
    body = StagedBody(Direct(lambda rhs: call_user(solve, (Direct(apply, ["x"]), rhs), {}), ["b"]), (b,), what)
    if body.out_tree != b_tree:
        raise StagingTypeError(f"{what} returns {body.out_tree}, but b is {b_tree}", "return x in the structure of b")
    return body


@api_boundary
def custom_linear_solve(matvec: Callable[[Any], Any], b: Any, solve: Callable[[Callable[[Any], Any], Any], Any],
                        transpose_solve: Callable[[Callable[[Any], Any], Any], Any] | None = None,
                        symmetric: bool = False) -> Any:
    """x = A⁻¹ b for the linear map `matvec`, computed by `solve(matvec, b)` and
    differentiated implicitly: forward mode solves again, reverse mode solves with Aᵀ
    (`transpose_solve(vecmat, b)`, or `solve` when `symmetric`) — jax.lax.custom_linear_solve."""
    _, b_tree = tree_flatten(b)
    matvec_body = StagedBody(_staging(matvec), (b,), "custom_linear_solve's matvec")
    if matvec_body.out_tree != b_tree:
        raise StagingTypeError(f"custom_linear_solve's matvec returns {matvec_body.out_tree} for b of "
                               f"structure {b_tree}", "matvec must map x to a value shaped like b")
    consts, n_consts, n_b = matvec_body.consts, len(matvec_body.consts), len(tree_leaves(b))
    solve_body = _staged_solver(solve, matvec_body.jaxpr, consts, b, "solve")
    transpose_solve = solve if symmetric else transpose_solve
    if transpose_solve is None:     # reverse mode says that it needs one
        vecmat_jaxpr, transpose_consts, transpose_solve_jaxpr = None, [], None
    else:
        vecmat_jaxpr = transpose_jaxpr(matvec_body.jaxpr, [False] * n_consts + [True] * n_b)
        transpose_body = _staged_solver(transpose_solve, vecmat_jaxpr, consts, b, "transpose_solve")
        transpose_consts, transpose_solve_jaxpr = transpose_body.consts, transpose_body.jaxpr
    x = implicit.linear_solve(consts, matvec_body.jaxpr, vecmat_jaxpr, solve_body.consts, solve_body.jaxpr,
                              transpose_consts, transpose_solve_jaxpr, tree_leaves(b))
    return b_tree.unflatten(x)


# ---------------------------------------------------------------------------------------
# Collectives over named axes (the primitives are in s2s/primitives/collectives.py). Each
# checks here, where the user called it, that every name it reduces over is bound by an
# enclosing `vmap(..., axis_name=...)`, and records the sizes bound to them.


def _bound_axes(what: str, axis_name) -> tuple:
    """`axis_name` (a name or a tuple of names) as the primitives' ((name, size), ...)."""
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    bound = dict(axis_env())     # the innermost binding of a name wins
    if not names:
        raise StagingError(f"{what} needs an axis name, got an empty tuple",
                           "name the axis given to s2s.vmap(fn, axis_name=...)")
    if len(set(names)) != len(names):
        raise StagingError(f"{what} names an axis twice in {names!r}", "name each axis once")
    for name in names:
        if name is None or name not in bound:
            listed = ", ".join(repr(n) for n in bound if n is not None)
            raise UnboundAxisError(
                f"unbound axis name: {what} over axis {name!r}, but "
                + (f"only {listed} {'is' if len(bound) == 1 else 'are'} bound here" if listed
                   else "no enclosing vmap binds an axis name"),
                f"call this function through s2s.vmap(fn, axis_name={name!r}), which runs it "
                f"for every example of the axis {name!r} at once")
    return tuple((name, bound[name]) for name in names)


def _groups(what: str, axes, axis_index_groups):
    """`axis_index_groups` (lists of example indices, as JAX takes them) as the primitives'
    tuple of tuples, checked to cover the axis in groups of equal size; or None."""
    if axis_index_groups is None:
        return None
    try:
        groups = tuple(tuple(int(i) for i in group) for group in axis_index_groups)
    except (TypeError, ValueError):
        raise StagingError(f"{what}: axis_index_groups must be a list of lists of example indices, "
                           f"got {axis_index_groups!r}", "e.g. axis_index_groups=[[0, 1], [2, 3]]") from None
    collectives.check_groups(what, axes, groups)
    return groups


@api_boundary
def psum(x: Any, axis_name: AxisName, *, axis_index_groups: Sequence[Sequence[int]] | None = None) -> Any:
    """The sum of `x` over every example of the named axis (or axes), the same for each
    example (jax.lax.psum); `x` may be a pytree. `axis_index_groups` (lists of example
    indices covering one axis in groups of equal size): each group's sum, in its members."""
    axes = _bound_axes("psum", axis_name)
    groups = _groups("psum", axes, axis_index_groups)
    return tree_map(lambda leaf: collectives.psum.bind(leaf, axes=axes, groups=groups), x)


@api_boundary
def pmean(x: Any, axis_name: AxisName, *, axis_index_groups: Sequence[Sequence[int]] | None = None) -> Any:
    """The mean of `x` over the named axis (or axes, or each group): a psum divided by their
    size, as in JAX (an integer `x` gives a float mean)."""
    axes = _bound_axes("pmean", axis_name)
    groups = _groups("pmean", axes, axis_index_groups)
    size = collectives.group_size(axes, groups)
    return tree_map(lambda leaf: collectives.psum.bind(leaf, axes=axes, groups=groups) / size, x)


@api_boundary
def pmax(x: Any, axis_name: AxisName, *, axis_index_groups: Sequence[Sequence[int]] | None = None) -> Any:
    """The elementwise maximum of `x` over the named axis (or axes, or each group)
    (jax.lax.pmax)."""
    axes = _bound_axes("pmax", axis_name)
    groups = _groups("pmax", axes, axis_index_groups)
    return tree_map(lambda leaf: collectives.pmax.bind(leaf, axes=axes, groups=groups), x)


@api_boundary
def pmin(x: Any, axis_name: AxisName, *, axis_index_groups: Sequence[Sequence[int]] | None = None) -> Any:
    """The elementwise minimum of `x` over the named axis (or axes, or each group)
    (jax.lax.pmin)."""
    axes = _bound_axes("pmin", axis_name)
    groups = _groups("pmin", axes, axis_index_groups)
    return tree_map(lambda leaf: collectives.pmin.bind(leaf, axes=axes, groups=groups), x)


@api_boundary
def all_gather(x: Any, axis_name: AxisName, *, axis_index_groups: Sequence[Sequence[int]] | None = None,
               axis: int = 0, tiled: bool = False) -> Any:
    """Every example's `x`, stacked along a new axis `axis` (tiled: concatenated along
    `x`'s axis `axis`) in the order of the named axis (jax.lax.all_gather); with
    `axis_index_groups`, the members of the example's group, in the group's order."""
    axes = _bound_axes("all_gather", axis_name)
    groups = _groups("all_gather", axes, axis_index_groups)

    def gather(leaf):
        rank = aval_of_arg(leaf).ndim + (0 if tiled else 1)
        if not -rank <= axis < rank:
            raise StagingError(f"all_gather axis {axis} is out of range for a result of rank {rank}"
                               + (" (tiled: the operand's own axes)" if tiled else ""),
                               f"give an axis in {-rank}..{rank - 1}")
        return collectives.all_gather.bind(leaf, axes=axes, dimension=axis % rank, tiled=bool(tiled),
                                           groups=groups)
    return tree_map(gather, x)


@api_boundary
def axis_index(axis_name: AxisName) -> Any:
    """This example's position along the named axis (int32; over a tuple of names, the
    first is the major one) (jax.lax.axis_index)."""
    return collectives.axis_index.bind(axes=_bound_axes("axis_index", axis_name))


def _axis_of(what: str, leaf, axis: int) -> int:
    """`axis` of `leaf` counted from 0 (negative from the end), checked in range."""
    rank = aval_of_arg(leaf).ndim
    if not -rank <= axis < rank:
        raise StagingError(f"{what} axis {axis} is out of range for an operand of rank {rank}",
                           f"give an axis in {-rank}..{rank - 1}")
    return axis % rank


@api_boundary
def ppermute(x: Any, axis_name: AxisName, perm: Sequence[tuple[int, int]]) -> Any:
    """`x` sent along the named axis by `perm`, (source, destination) pairs: example
    `destination` gets `source`'s `x`, examples no pair sends to get zeros (jax.lax.ppermute)."""
    axes = _bound_axes("ppermute", axis_name)
    try:
        pairs = tuple((int(src), int(dst)) for src, dst in perm)
    except (TypeError, ValueError):
        raise StagingError(f"ppermute: perm must be (source, destination) pairs, got {perm!r}",
                           "e.g. perm=[(0, 1), (1, 0)]") from None
    collectives.check_perm(axes, pairs)
    return tree_map(lambda leaf: collectives.ppermute.bind(leaf, axes=axes, perm=pairs), x)


@api_boundary
def psum_scatter(x: Any, axis_name: AxisName, *, scatter_dimension: int = 0,
                 axis_index_groups: Sequence[Sequence[int]] | None = None, tiled: bool = False) -> Any:
    """The sum of `x` over the named axis, split along `scatter_dimension` among the
    examples: example i gets part i (that axis, of the axis's size, dropped; tiled: the
    i-th of its equal parts) (jax.lax.psum_scatter); with `axis_index_groups`, the sum over
    the example's group, its part at its position in the group."""
    axes = _bound_axes("psum_scatter", axis_name)
    groups = _groups("psum_scatter", axes, axis_index_groups)
    return tree_map(lambda leaf: collectives.psum_scatter.bind(
        leaf, axes=axes, dimension=_axis_of("psum_scatter", leaf, scatter_dimension), tiled=bool(tiled),
        groups=groups), x)


@api_boundary
def all_to_all(x: Any, axis_name: AxisName, split_axis: int, concat_axis: int, *,
               axis_index_groups: Sequence[Sequence[int]] | None = None, tiled: bool = False) -> Any:
    """`x` split along `split_axis` into one part per example, part j sent to example j,
    the parts received stacked along a new axis `concat_axis` in the examples' order (the
    split axis, of the axis's size, dropped; tiled: concatenated along `concat_axis`)
    (jax.lax.all_to_all); with `axis_index_groups`, exchanged within each group, j the
    position in the group."""
    axes = _bound_axes("all_to_all", axis_name)
    groups = _groups("all_to_all", axes, axis_index_groups)

    def exchange(leaf):
        split = _axis_of("all_to_all", leaf, split_axis)
        if tiled:
            concat = _axis_of("all_to_all", leaf, concat_axis)
            return collectives.all_to_all.bind(leaf, axes=axes, split_axis=split, concat_axis=concat, groups=groups)
        # As JAX: a new axis of size 1 at concat_axis (counted without the split axis)
        # receives the parts; then the split axis, of size 1, is dropped.
        aval, size = aval_of_arg(leaf), collectives.group_size(axes, groups)
        if aval.shape[split] != size:
            raise StagingError(f"all_to_all along axis {split} of {aval.str_short()}: its size "
                               f"{aval.shape[split]} must equal the axis size {size}",
                               "split an axis with one part per example, or pass tiled=True")
        rank = aval.ndim
        if not -rank <= concat_axis < rank:
            raise StagingError(f"all_to_all concat_axis {concat_axis} is out of range for a result of rank {rank}",
                               f"give an axis in {-rank}..{rank - 1}")
        concat = concat_axis % rank
        if split < concat:
            concat += 1
        elif concat < split:
            split += 1
        if split == concat:   # the parts replace the split axis in place
            return collectives.all_to_all.bind(leaf, axes=axes, split_axis=split, concat_axis=concat, groups=groups)
        exchanged = collectives.all_to_all.bind(ops.expand_dims(leaf, (concat,)), axes=axes,
                                                split_axis=split, concat_axis=concat, groups=groups)
        return ops.squeeze(exchanged, (split,))
    return tree_map(exchange, x)
