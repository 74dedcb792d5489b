"""The autodiff API: jvp, linearize, vjp, linear_transpose, grad, value_and_grad, jacfwd,
jacrev, hessian.

Reverse mode is built the JAX way: the JVP of the staged function (`passes/jvp.py`),
partial evaluation with primals known and tangents unknown (`passes/partial_eval.py`),
then transposition of the linear part (`passes/transpose.py`). `grad` fuses the forward
jaxpr and the transposed one into a single jaxpr, cleaned by DCE and CSE, so its emitted
module reads as a forward pass with the user's names followed by a backward pass with
`_bar` cotangents.

Derived functions are `Transformed` objects. Called on NumPy values they run (the
derivative jaxpr emitted as Python once per kind of arguments, see `s2s.eager`); called on staged values
— inside make_jaxpr, emit_python, jit, or another transform — they stage the derivative's
equations in place. So transforms compose: `grad(grad(f))`, `jacfwd(jacrev(f))`. A call's
arguments are bound and flattened once (`frontend.BoundCall`): what a derivative needs of
their structure (which leaves argnums names, the trees its gradients take) is read off
that once per staging, and kept with the derived jaxpr.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Sequence

import numpy as np

from s2s import dtypes
from s2s.core import ClosedJaxpr, Jaxpr, Literal, ShapedArray
from s2s.eager import run
from s2s.errors import StagingTypeError, StagingValueError, TransformTypeError, api_boundary
from s2s.frontend import BoundCall, Staged, bind_function_call, stage_call
from s2s.frontend.args import aval_of_arg, is_bare_argnums, normalize_argnums
from s2s.frontend.source import last_return_info
from s2s.passes.vmap import Axis, batch_jaxpr
from s2s.primitives import ops
from s2s.passes.dce import dce
from s2s.passes.jvp import jvp_jaxpr
from s2s.passes.partial_eval import partial_eval_jaxpr, splits_by_rule
from s2s.passes.simplify import tidy
from s2s.passes.transpose import transpose_jaxpr
from s2s.staging import JaxprBuilder, inline_jaxpr, paused_gc
from s2s.transformed import TransformedFunction, function_name
from s2s.tree import PyTreeDef, tree_flatten

__all__ = ["grad", "hessian", "jacfwd", "jacrev", "jvp", "linear_transpose", "linearize",
           "value_and_grad", "vjp"]


# ---------------------------------------------------------------------------------------
# Running a derived jaxpr: emitted once when called on NumPy values, inlined when staged.


def _float_mask(avals) -> list[bool]:
    return [dtypes.is_differentiable(a.dtype) for a in avals]


def _select_outputs(closed: ClosedJaxpr, keep: list[bool]) -> ClosedJaxpr:
    jaxpr = closed.jaxpr
    outs = [v for v, k in zip(jaxpr.outvars, keep) if k]
    return dce(ClosedJaxpr(Jaxpr(jaxpr.constvars, jaxpr.invars, outs, jaxpr.eqns), closed.consts))


@dataclasses.dataclass
class VjpParts:
    forward: ClosedJaxpr      # inputs -> outputs + residuals
    backward: ClosedJaxpr     # residuals + output cotangents -> input cotangents (diff inputs)
    num_residuals: int


def vjp_parts(closed: ClosedJaxpr, diff: list[bool], diff_out: list[bool],
              tidy_forward: bool = True) -> VjpParts:
    """linearize (jvp + partial eval) and transpose, for the outputs flagged in `diff_out`.
    The backward part is tidied even where a caller tidies it again once joined (grad):
    with the seed a literal, its first equations read only literals, which cse leaves
    alone, so tidying only the joined jaxpr wrote some gradients twice as long. A caller
    that tidies the joined jaxpr passes `tidy_forward=False`: the forward part reads no
    seed, and the joined tidy finds in it all that tidying it first would (a quarter of
    a 16k-equation grad's staging was its three tidies)."""
    n_in, n_out = len(closed.jaxpr.invars), len(closed.jaxpr.outvars)
    jvp_closed, _ = jvp_jaxpr(closed, diff, instantiate_out=diff_out)
    # Keep every primal output and the tangents of the differentiated outputs (they come
    # first: an aux output follows the primary ones). Where that is every output, dead
    # code is left to partial evaluation, unless one of its rules would see it.
    n_kept = n_out + sum(diff_out)
    if len(jvp_closed.jaxpr.outvars) > n_kept or splits_by_rule(closed):
        jvp_closed = _select_outputs(jvp_closed, [True] * n_kept)
    pe = partial_eval_jaxpr(jvp_closed, [False] * n_in + [True] * sum(diff),
                            instantiate=[False] * n_out + [True] * sum(diff_out))
    backward = transpose_jaxpr(pe.unknown, [False] * pe.num_residuals + [True] * sum(diff))
    return VjpParts(tidy(pe.known) if tidy_forward else pe.known, tidy(backward), pe.num_residuals)


# ---------------------------------------------------------------------------------------
# Transformed functions


class Transformed(TransformedFunction):
    """A function derived by an s2s transform (see the module docstring); `params` are the
    transform's parameters, which with the transform's name key its caches. `derive`
    builds the derivative of one staging for one kind of call."""

    def __init__(self, fn, name: str, derive: Callable[[Staged, BoundCall], "Derived"], params: tuple = (),
                 summary: str | None = None):
        super().__init__(fn, name, params, summary)
        self._derive = derive

    @api_boundary
    def __call__(self, *args, **kwargs):
        call = bind_function_call(self.fn, args, kwargs)
        staged = stage_call(self.fn, call)
        # argnums count positional arguments, so their number is part of the key.
        key = ("derived", self.cache_params, call.n_args)
        derived = staged.artifact(key, lambda: self._derived(staged, call))
        outs = run(staged, key, derived.closed, staged.inputs(call))
        return derived.assemble(staged, outs)

    def _derived(self, staged: Staged, call: BoundCall) -> "Derived":
        with paused_gc():
            return self._derive(staged, call)

@dataclasses.dataclass
class Derived:
    closed: ClosedJaxpr
    # (staged, flat outputs) -> the result pytree. Handed the staging rather than holding
    # it: a Derived is one of the staging's artifacts, and a cycle through them outlived a
    # dropped function by a full collection.
    assemble: Callable[[Staged, list], Any]


def _diff_leaves(staged: Staged, call: BoundCall, argnums, allow_int: bool,
                 what: str) -> tuple[tuple[int, ...], list[bool]]:
    """Which jaxpr inputs are differentiated: the float leaves of positional args `argnums`.

    A leaf of those arguments without a gradient (an int, static or staged) is an error
    naming the argument, unless `allow_int` (it then gets float0 zeros).
    """
    argnums = normalize_argnums(argnums, call.n_args)
    ranges = call.positional_leaf_ranges
    wanted = {i: a for a in argnums for i in ranges[a]}
    in_avals = iter(staged.closed.in_avals)
    diff = []
    for index, staged_leaf in enumerate(staged.staged_mask):
        aval = next(in_avals) if staged_leaf else None
        differentiable = aval is not None and dtypes.is_differentiable(aval.dtype)
        if index in wanted and not differentiable and not allow_int:
            kind = "a static value" if aval is None else f"dtype {aval.dtype}"
            raise TransformTypeError(   # a TypeError, as JAX's and autograd's
                f"{what} with respect to positional argument {wanted[index]} "
                f"({staged.param_names[min(wanted[index], len(staged.param_names) - 1)]!r}), which "
                f"holds {kind}: only floating-point inputs have gradients",
                "pass allow_int=True to get float0 zeros for it, or differentiate with respect "
                "to float arguments only (argnums=...)")
        if staged_leaf:
            diff.append(index in wanted and differentiable)
    return argnums, diff


@dataclasses.dataclass(frozen=True)
class _ArgCotangents:
    """How the cotangents of the differentiated inputs become one tree per argument of
    `argnums` (float0 zeros where a leaf has no gradient): the trees and shapes of one
    kind of call, read once, when its derivative is built."""
    trees: tuple[PyTreeDef, ...]                     # per argument of argnums
    sources: tuple[tuple[int | tuple, ...], ...]     # per leaf: its cotangent's position, or the zeros' shape

    @classmethod
    def of(cls, staged: Staged, call: BoundCall, argnums, diff) -> "_ArgCotangents":
        position_of_leaf, position, staged_index = {}, 0, 0
        for index, staged_leaf in enumerate(staged.staged_mask):
            if staged_leaf:
                if diff[staged_index]:
                    position_of_leaf[index] = position
                    position += 1
                staged_index += 1
        ranges = call.positional_leaf_ranges
        sources = tuple(tuple(position_of_leaf.get(i, np.shape(call.leaves[i])) for i in ranges[a])
                        for a in argnums)
        return cls(tuple(call.positional_trees[a] for a in argnums), sources)

    def __call__(self, cts: list) -> list:
        return [tree.unflatten([cts[s] if isinstance(s, int) else np.zeros(s, dtypes.float0) for s in sources])
                for tree, sources in zip(self.trees, self.sources)]


def _check_holomorphic_inputs(staged: Staged, call: BoundCall, argnums: tuple[int, ...], diff, what: str):
    """holomorphic=True promises complex inputs: each differentiated leaf must be one."""
    ranges = call.positional_leaf_ranges
    in_avals = iter(staged.closed.in_avals)
    flags = iter(diff)
    for index, staged_leaf in enumerate(staged.staged_mask):
        if not staged_leaf:
            continue
        aval, differentiated = next(in_avals), next(flags)
        if differentiated and not dtypes.is_complex(aval.dtype):
            arg = next(a for a in argnums if index in ranges[a])
            name = staged.param_names[min(arg, len(staged.param_names) - 1)]
            raise TransformTypeError(
                f"{what} with holomorphic=True requires inputs with complex dtype, but "
                f"positional argument {arg} ({name!r}) holds {aval.dtype.name}",
                f"pass complex values (x.astype(complex)), or drop holomorphic=True for a "
                f"real-valued function of real inputs")


def _check_output_dtype(staged: Staged, holomorphic: bool, what: str, fn):
    """Like jax.grad: a complex output needs holomorphic=True (the derivative of a complex
    function of a real or non-holomorphic input is not one number: use vjp), and
    holomorphic=True needs a complex output."""
    dtype = staged.closed.out_avals[0].dtype
    if holomorphic and not dtypes.is_complex(dtype):
        raise TransformTypeError(
            f"{what} with holomorphic=True requires outputs with complex dtype, but "
            f"{staged.description} returns {dtype.name}",
            f"drop holomorphic=True: {what} of a real-valued function needs no promise",
            last_return_info(fn))
    if not holomorphic and dtypes.is_complex(dtype):
        raise TransformTypeError(
            f"{what} requires real-valued outputs (a floating-point dtype), but "
            f"{staged.description} returns {dtype.name}",
            f"for a holomorphic function of complex inputs pass holomorphic=True (the "
            f"gradient is then f'(z)); for other functions with complex outputs use "
            f"s2s.vjp with the cotangent you need",
            last_return_info(fn))


def _check_scalar_output(staged: Staged, has_aux: bool, what: str, fn):
    out_avals = staged.closed.out_avals
    container = staged.out_tree.node_type
    if not has_aux and container in (tuple, list, dict):
        _raise_container_output(staged, what, fn)
    if has_aux:
        if not (staged.out_tree.node_type in (tuple, list) and len(staged.out_tree.children) == 2):
            raise StagingTypeError(f"{what}(has_aux=True) needs the function to return a pair "
                                   "(output, aux)", "return `value, aux`")
        n_primary = staged.out_tree.children[0].num_leaves
    else:
        n_primary = len(out_avals)
    # One element of any shape ((1,), (1, 1)) counts as a scalar, as in autograd and plain
    # NumPy code (`x.T @ A @ x` of a column x): its cotangent is ones of that shape.
    if n_primary != 1 or out_avals[0].size != 1 or not dtypes.is_inexact(out_avals[0].dtype):
        shown = ", ".join(a.str_short() for a in out_avals[:n_primary])
        raise TransformTypeError(
            f"{what} needs a function with one scalar floating-point output (or an array of "
            f"one element), but "
            f"{staged.description} returns ({shown})",
            "reduce the output to a scalar (e.g. .sum()), or use jacrev / vjp for "
            "outputs of more than one element")
    return n_primary


def _raise_container_output(staged: Staged, what: str, fn):
    """grad of a function returning a tuple, list or dict: JAX's "Gradient only defined for
    scalar-output functions", at the `return`, with `has_aux=True` suggested for a pair."""
    out_tree = staged.out_tree
    kind = {tuple: "a tuple", list: "a list", dict: "a dict"}[out_tree.node_type]
    n = len(out_tree.children)
    name = staged.name if staged.name.isidentifier() else "f"
    shown = ", ".join(a.str_short() for a in staged.closed.out_avals)
    if n == 2 and out_tree.node_type in (tuple, list):
        help = (f"if the second value is auxiliary data (a metric, a state), pass has_aux=True: "
                f"{what}({name}, has_aux=True) differentiates the first and returns the "
                f"second beside the gradient; otherwise return one scalar")
    else:
        help = ("return one scalar (e.g. the sum of the outputs), or return (loss, aux) and "
                "pass has_aux=True; use jacrev or vjp for several outputs")
    raise TransformTypeError(f"{what} needs a function with one scalar output, but {staged.description} "
                       f"returns {kind} of {n} value{'s' if n != 1 else ''} ({shown})", help, last_return_info(fn))


def _grad_derive(fn, argnums, has_aux, allow_int, holomorphic, with_value, what):
    def derive(staged: Staged, call: BoundCall) -> Derived:
        argnums_t, diff = _diff_leaves(staged, call, argnums, allow_int, what)
        if holomorphic:
            _check_holomorphic_inputs(staged, call, argnums_t, diff, what)
        _check_scalar_output(staged, has_aux, what, fn)
        _check_output_dtype(staged, holomorphic, what, fn)
        closed = staged.closed
        n_out = len(closed.jaxpr.outvars)
        diff_out = [i == 0 for i in range(n_out)]
        parts = vjp_parts(closed, diff, diff_out, tidy_forward=False)   # (tidied once joined)
        out_aval = closed.out_avals[0]
        with JaxprBuilder() as builder:
            forward = builder.adopt(parts.forward)   # (its inputs are the function's)
            outs, residuals = forward[:n_out], forward[n_out:]
            seed = ops.full(out_aval.shape, 1.0, out_aval.dtype) if out_aval.shape else \
                Literal(1.0, ShapedArray((), out_aval.dtype))
            cts = inline_jaxpr(parts.backward, list(residuals) + [seed], lent=True)   # (`parts` are ours)
            result = builder.build((list(outs) if with_value else list(outs[1:])) + list(cts))
        fused = tidy(result)
        n_values = n_out if with_value else n_out - 1
        arg_cotangents = _ArgCotangents.of(staged, call, argnums_t, diff)

        def assemble(staged, flat):
            values, cts = flat[:n_values], flat[n_values:]
            grads = arg_cotangents(cts)
            grads = grads[0] if is_bare_argnums(argnums) else tuple(grads)
            if with_value:
                out = staged.out_tree.unflatten(values)
                return (out, grads) if not has_aux else ((out[0], out[1]), grads)
            if has_aux:
                aux = staged.out_tree.children[1].unflatten(values)
                return grads, aux
            return grads
        return Derived(fused, assemble)
    return derive


def _argnums_param(argnums) -> tuple:
    """`argnums` as it keys a derivative's caches: the numbers, and whether they were given
    bare (`argnums=0` gives the gradient itself, `argnums=(0,)` a tuple of one: the two must
    never share a cached derivative)."""
    return normalize_argnums(argnums), is_bare_argnums(argnums)


@api_boundary
def grad(fn: Callable[..., Any] | None = None, argnums: int | Sequence[int] = 0, has_aux: bool = False,
         holomorphic: bool = False, allow_int: bool = False) -> Callable[..., Any]:
    """The gradient of a scalar function with respect to argument(s) `argnums`.

    Usable as `s2s.grad(f)` or as a decorator, bare (`@s2s.grad`) or with arguments
    (`@s2s.grad(argnums=1)`). With `has_aux`, f returns `(value, aux)` and the result is
    `(grads, aux)`. Integer arguments have no gradient: an error names them, unless
    `allow_int=True`, which gives float0 zeros. As in JAX, the output must be real unless
    `holomorphic=True`, which promises a holomorphic f of complex inputs with a complex
    output and gives f'(z) (a TypeError otherwise).
    """
    if fn is None:
        return functools.partial(grad, argnums=argnums, has_aux=has_aux, holomorphic=holomorphic,
                                 allow_int=allow_int)
    return Transformed(fn, "grad", _grad_derive(fn, argnums, has_aux, allow_int, holomorphic, False, "grad"),
                       (*_argnums_param(argnums), has_aux, holomorphic, allow_int),
                       _derivative_summary("Gradient", fn, argnums,
                                           "the gradient, shaped as the arguments it is taken for"))


@api_boundary
def value_and_grad(fn: Callable[..., Any] | None = None, argnums: int | Sequence[int] = 0,
                   has_aux: bool = False, holomorphic: bool = False,
                   allow_int: bool = False) -> Callable[..., Any]:
    """`(f(x), grad(f)(x))` in one pass; with `has_aux`, `((value, aux), grads)`."""
    if fn is None:
        return functools.partial(value_and_grad, argnums=argnums, has_aux=has_aux,
                                 holomorphic=holomorphic, allow_int=allow_int)
    return Transformed(fn, "value_and_grad",
                       _grad_derive(fn, argnums, has_aux, allow_int, holomorphic, True, "value_and_grad"),
                       (*_argnums_param(argnums), has_aux, holomorphic, allow_int),
                       _derivative_summary("Value and gradient", fn, argnums,
                                           f"the pair ({function_name(fn)}'s value, its gradient)"))


def _derivative_summary(what: str, fn, argnums, returns: str) -> str:
    """The head of a derivative's docstring: what it is of, and what a call returns."""
    name = function_name(fn)
    return (f"{what} of {name} with respect to positional argument(s) {argnums}. "
            f"Called with {name}'s arguments, it returns {returns}.")


# ---------------------------------------------------------------------------------------
# jvp, linearize, vjp, linear_transpose


def _staged_primals(fn, primals) -> tuple[Staged, BoundCall]:
    """`fn` staged for a call on `primals` (positional), and that call bound once."""
    call = bind_function_call(fn, tuple(primals), {})
    return stage_call(fn, call), call


def _check_tuples(primals, tangents) -> None:
    """jvp takes its primals and tangents as tuples (or lists) of positional arguments, as
    JAX's does: an array passed bare would be read as one argument per row."""
    for what, value in (("primals", primals), ("tangents", tangents)):
        if type(value) not in (tuple, list):
            raise StagingTypeError(f"jvp takes the {what} as a tuple or list with one entry per positional "
                                   f"argument, got {type(value).__name__}",
                                   "write s2s.jvp(f, (x,), (dx,)) for one argument")


def _tangent_leaves(staged: Staged, call: BoundCall, tangents) -> list:
    """The tangents of the staged inputs: one per primal leaf, in the primals' structure
    (else a TypeError, as JAX raises), each shaped like its primal (else a ValueError) and
    of a floating dtype where the primal is (else a TypeError)."""
    leaves, treedef = tree_flatten(tuple(tangents))
    if list(treedef.children) != call.positional_trees:
        primal_tree = PyTreeDef(tuple, None, tuple(call.positional_trees))
        raise StagingTypeError(f"tangents have structure {treedef} but primals have {primal_tree}",
                               "pass one tangent per primal leaf, in the same structure")
    staged_tangents = [t for t, m in zip(leaves, staged.staged_mask) if m]
    for tangent, aval in zip(staged_tangents, staged.closed.in_avals):
        _check_like(tangent, aval, "tangent", "primal", StagingTypeError)
    return staged_tangents


def _check_like(value, aval: ShapedArray, what: str, like: str, dtype_error) -> None:
    """`value` (a tangent or cotangent) has `aval`'s shape and, where `aval` is of a
    floating dtype, a floating dtype too: a tangent of another shape would be broadcast
    into a wrong derivative, and an integer one is no tangent. A wrong shape is JAX's
    ValueError; a wrong dtype its TypeError for a tangent, ValueError for a cotangent."""
    given = aval_of_arg(value)
    if given.shape != aval.shape:
        raise StagingValueError(f"a {what} of shape {given.shape} for a {like} of shape {aval.shape}",
                          f"give each {what} its {like}'s shape")
    if dtypes.is_inexact(aval.dtype) and not dtypes.is_inexact(given.dtype):
        raise dtype_error(f"a {what} of dtype {np.dtype(given.dtype).name} for a {like} of dtype "
                          f"{np.dtype(aval.dtype).name}", f"give each {what} its {like}'s floating dtype")


@api_boundary
def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, Any]:
    """`(fn(*primals), tangent of fn at primals along tangents)`, as pytrees."""
    _check_tuples(primals, tangents)
    staged, call = _staged_primals(fn, primals)
    closed = staged.closed
    diff = _float_mask(closed.in_avals)
    jvp_closed = staged.artifact("jvp", lambda: tidy(jvp_jaxpr(closed, diff, instantiate_out=True)[0]))
    flat_t = [t for t, d in zip(_tangent_leaves(staged, call, tangents), diff) if d]
    outs = run(staged, "jvp", jvp_closed, staged.inputs(call) + flat_t)
    n = len(closed.jaxpr.outvars)
    return staged.out_tree.unflatten(outs[:n]), staged.out_tree.unflatten(outs[n:])


@api_boundary
def linearize(fn: Callable[..., Any], *primals: Any) -> tuple[Any, Callable[..., Any]]:
    """`(fn(*primals), f_jvp)` where `f_jvp(*tangents)` evaluates only the linear part."""
    staged, call = _staged_primals(fn, primals)
    closed = staged.closed
    diff = _float_mask(closed.in_avals)
    n_in, n_out = len(closed.jaxpr.invars), len(closed.jaxpr.outvars)

    def split():
        jvp_closed, _ = jvp_jaxpr(closed, diff, instantiate_out=True)
        pe = partial_eval_jaxpr(jvp_closed, [False] * n_in + [True] * sum(diff),
                                instantiate=[False] * n_out + [True] * n_out)
        return tidy(pe.known), tidy(pe.unknown)
    known, linear = staged.artifact("linearize", split)
    forward = run(staged, ("linearize", "known"), known, staged.inputs(call))
    outs, residuals = forward[:n_out], forward[n_out:]

    @api_boundary
    def f_jvp(*tangents):
        flat_t = [t for t, d in zip(_tangent_leaves(staged, call, tangents), diff) if d]
        return staged.out_tree.unflatten(run(staged, ("linearize", "linear"), linear,
                                             list(residuals) + flat_t))
    return staged.out_tree.unflatten(outs), f_jvp


@api_boundary
def vjp(fn: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """`(fn(*primals), vjp_fn)`; `vjp_fn(cotangent)` returns one cotangent per primal.

    With `has_aux`, fn returns `(out, aux)` and vjp returns `(out, vjp_fn, aux)`.
    """
    staged, call = _staged_primals(fn, primals)
    closed = staged.closed
    n_out = len(closed.jaxpr.outvars)
    diff = _float_mask(closed.in_avals)
    n_primary = staged.out_tree.children[0].num_leaves if has_aux else n_out
    diff_out = [i < n_primary and dtypes.is_differentiable(a.dtype)
                for i, a in enumerate(closed.out_avals)]
    key = ("vjp", has_aux)
    parts = staged.artifact(key, lambda: vjp_parts(closed, diff, diff_out))
    forward = run(staged, (key, "forward"), parts.forward, staged.inputs(call))
    outs, residuals = forward[:n_out], forward[n_out:]
    out_tree = staged.out_tree.children[0] if has_aux else staged.out_tree
    arg_cotangents = _ArgCotangents.of(staged, call, range(len(primals)), diff)

    @api_boundary
    def vjp_fn(cotangent):
        ct_leaves, ct_tree = tree_flatten(cotangent)
        if ct_tree != out_tree:
            raise StagingValueError(f"vjp_fn got a cotangent of structure {ct_tree}, but the "
                                    f"function's output has structure {out_tree}",
                                    "pass a cotangent with the output's structure")
        for ct, aval in zip(ct_leaves, closed.out_avals):
            _check_like(ct, aval, "cotangent", "output", StagingValueError)
        cts = [c for c, d in zip(ct_leaves, diff_out) if d]
        in_cts = run(staged, (key, "backward"), parts.backward, list(residuals) + cts)
        return tuple(arg_cotangents(in_cts))

    if has_aux:
        out = staged.out_tree.unflatten(outs)
        return out[0], vjp_fn, out[1]
    return staged.out_tree.unflatten(outs), vjp_fn


@api_boundary
def linear_transpose(fn: Callable[..., Any], *primals: Any) -> Callable[..., tuple[Any, ...]]:
    """The transpose of a linear `fn`, evaluated at example `primals` (only their types matter)."""
    staged, call = _staged_primals(fn, primals)
    closed = staged.closed
    n_in = len(closed.jaxpr.invars)

    def split():
        # Parts that read no input (constants) become residuals; the rest must be linear.
        pe = partial_eval_jaxpr(closed, [True] * n_in, instantiate=True)
        return pe.known, transpose_jaxpr(pe.unknown, [False] * pe.num_residuals + [True] * n_in)
    known, backward = staged.artifact("linear_transpose", split)
    residuals = run(staged, ("linear_transpose", "known"), known, [])
    arg_cotangents = _ArgCotangents.of(staged, call, range(len(primals)), [True] * n_in)

    @api_boundary
    def transposed(cotangent):
        ct_leaves, _ = tree_flatten(cotangent)
        in_cts = run(staged, ("linear_transpose", "backward"), backward, list(residuals) + ct_leaves)
        return tuple(arg_cotangents(in_cts))
    return transposed


# ---------------------------------------------------------------------------------------
# Jacobians and the Hessian: one batched pass over the basis vectors (as JAX builds them on
# vmap), not one pass per basis vector.


def _basis(total: int, offset: int, aval: ShapedArray):
    """Rows `offset .. offset + aval.size` of the identity of size `total`, as a batch of
    `total` values of `aval`'s shape: the seeds of one argument (or output) when all of
    them are stacked on one batch axis."""
    block = ops.eye(total, aval.size, -offset, aval.dtype)
    return ops.reshape(block, (total, *aval.shape))


def _jacobian_block(batched, batch_dim: int, offset: int, seed_aval: ShapedArray,
                    value_aval: ShapedArray, seeds_first: bool):
    """The part of a batched derivative that belongs to one seed argument: its rows
    `offset ..` along the batch axis, shaped `value + seed` (or `seed + value`)."""
    block = ops.slice_in_dim(batched, offset, offset + seed_aval.size, batch_dim)
    shape = (*seed_aval.shape, *value_aval.shape) if seeds_first else (*value_aval.shape, *seed_aval.shape)
    return ops.reshape(block, shape)


def _offsets(avals) -> list[int]:
    return [sum(a.size for a in avals[:i]) for i in range(len(avals))]


def _jacrev_blocks(closed: ClosedJaxpr, diff: list[bool], args: list, in_avals, out_avals) -> list:
    """blocks[o][j]: d out_o / d in_j, by one backward pass batched over the rows of the
    identity (one row per output element)."""
    n_out = len(out_avals)
    parts = vjp_parts(closed, diff, [True] * n_out)
    forward = inline_jaxpr(parts.forward, args)
    residuals = forward[n_out:]
    total, offsets = sum(a.size for a in out_avals), _offsets(out_avals)
    backward, _ = batch_jaxpr(parts.backward, [None] * len(residuals) + [0] * n_out, Axis(total),
                              [0] * len(in_avals))
    seeds = [_basis(total, off, a) for off, a in zip(offsets, out_avals)]
    rows = inline_jaxpr(backward, list(residuals) + seeds)
    return [[_jacobian_block(row, 0, off, out_aval, in_aval, seeds_first=True)
             for row, in_aval in zip(rows, in_avals)]
            for off, out_aval in zip(offsets, out_avals)]


def _jacfwd_blocks(closed: ClosedJaxpr, diff: list[bool], args: list, in_avals, out_avals) -> list:
    """blocks[o][j]: d out_o / d in_j, by one forward pass batched over the columns of the
    identity (one column per input element), the batch kept last so no transpose is needed."""
    n_out = len(out_avals)
    jvp_closed, _ = jvp_jaxpr(closed, diff, instantiate_out=True)
    tangents_only = _select_outputs(jvp_closed, [False] * n_out + [True] * n_out)
    total, offsets = sum(a.size for a in in_avals), _offsets(in_avals)
    batched, _ = batch_jaxpr(tangents_only, [None] * len(args) + [0] * len(in_avals), Axis(total),
                             [a.ndim for a in out_avals])
    seeds = [_basis(total, off, a) for off, a in zip(offsets, in_avals)]
    columns = inline_jaxpr(batched, list(args) + seeds)
    return [[_jacobian_block(col, out_aval.ndim, off, in_aval, out_aval, seeds_first=False)
             for off, in_aval in zip(offsets, in_avals)]
            for col, out_aval in zip(columns, out_avals)]


def _check_jacobian_dtypes(staged: Staged, in_avals, out_avals, holomorphic: bool, mode: str):
    """JAX's rules: jacfwd needs real inputs and jacrev real outputs (each column of
    jacfwd is a jvp, each row of jacrev a vjp, which are one complex number per element
    only for a holomorphic function), unless holomorphic=True promises complex inputs and
    outputs of a holomorphic function."""
    for a in out_avals:
        if not dtypes.is_inexact(a.dtype):
            raise TransformTypeError(f"{mode} needs floating-point outputs, got {a.str_short()}",
                                     "convert the output to a float type")
    promise = "for a holomorphic function of complex inputs pass holomorphic=True"
    if holomorphic:
        if not all(dtypes.is_complex(a.dtype) for a in out_avals):
            raise TransformTypeError(
                f"{mode} with holomorphic=True requires outputs with complex dtype, but "
                f"{staged.description} returns {', '.join(a.str_short() for a in out_avals)}",
                f"drop holomorphic=True for a real-valued function")
    elif mode == "jacfwd" and any(dtypes.is_complex(a.dtype) for a in in_avals):
        raise TransformTypeError(
            f"jacfwd requires real-valued inputs (a floating-point dtype), but "
            f"{staged.description} is differentiated with respect to complex inputs",
            f"{promise}; for a real-valued function use jacrev, for others s2s.jvp")
    elif mode == "jacrev" and any(dtypes.is_complex(a.dtype) for a in out_avals):
        raise TransformTypeError(
            f"jacrev requires real-valued outputs (a floating-point dtype), but "
            f"{staged.description} returns {', '.join(a.str_short() for a in out_avals)}",
            f"{promise}; for other functions with complex outputs use jacfwd of real inputs, "
            f"or s2s.vjp")


def _jac_derive(argnums, mode: str, holomorphic: bool, has_aux: bool):
    def derive(staged: Staged, call: BoundCall) -> Derived:
        argnums_t, diff = _diff_leaves(staged, call, argnums, False, mode)
        if holomorphic:
            _check_holomorphic_inputs(staged, call, argnums_t, diff, mode)
        n_out = len(staged.closed.jaxpr.outvars)
        out_tree = staged.out_tree
        if has_aux:   # (out, aux): the Jacobian of `out`, and `aux` as it is, as JAX's
            if not (out_tree.node_type in (tuple, list) and len(out_tree.children) == 2):
                raise StagingTypeError(f"{mode}(has_aux=True) needs the function to return a pair (output, aux)",
                                       "return `value, aux`")
            out_tree = out_tree.children[0]
        n_primary = out_tree.num_leaves
        primary = _select_outputs(staged.closed, [i < n_primary for i in range(n_out)])
        in_avals = [a for a, d in zip(staged.closed.in_avals, diff) if d]
        out_avals = primary.out_avals
        _check_jacobian_dtypes(staged, in_avals, out_avals, holomorphic, mode)
        blocks_of = _jacrev_blocks if mode == "jacrev" else _jacfwd_blocks
        with JaxprBuilder() as builder:
            args = [builder.new_arg(v.aval, v.hint) for v in staged.closed.jaxpr.invars]
            blocks = blocks_of(primary, diff, args, in_avals, out_avals)
            aux = inline_jaxpr(staged.closed, args)[n_primary:] if has_aux else []
            result = builder.build([b for row in blocks for b in row] + list(aux))
        fused = tidy(result)
        n_in = len(in_avals)
        arg_cotangents = _ArgCotangents.of(staged, call, argnums_t, diff)

        def assemble(staged, flat):
            per_out = []
            for o in range(n_primary):
                trees = arg_cotangents(flat[o * n_in:(o + 1) * n_in])
                per_out.append(trees[0] if is_bare_argnums(argnums) else tuple(trees))
            jacobian = out_tree.unflatten(per_out)
            if has_aux:
                return jacobian, staged.out_tree.children[1].unflatten(flat[n_primary * n_in:])
            return jacobian
        return Derived(fused, assemble)
    return derive


@api_boundary
def jacrev(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable[..., Any]:
    """The Jacobian by reverse mode: one backward pass, batched over the output elements.
    Real outputs, as jax.jacrev, unless `holomorphic=True` (then df/dz of complex z). With
    `has_aux`, fn returns `(out, aux)` and the result is `(jacobian of out, aux)`."""
    return Transformed(fn, "jacrev", _jac_derive(argnums, "jacrev", holomorphic, has_aux),
                       (*_argnums_param(argnums), holomorphic, has_aux),
                       _derivative_summary("Jacobian", fn, argnums,
                                           "the Jacobian: the result's shape followed by the argument's"))


@api_boundary
def jacfwd(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
           holomorphic: bool = False) -> Callable[..., Any]:
    """The Jacobian by forward mode: one tangent pass, batched over the input elements.
    Real inputs, as jax.jacfwd, unless `holomorphic=True` (then df/dz of complex z). With
    `has_aux`, fn returns `(out, aux)` and the result is `(jacobian of out, aux)`."""
    return Transformed(fn, "jacfwd", _jac_derive(argnums, "jacfwd", holomorphic, has_aux),
                       (*_argnums_param(argnums), holomorphic, has_aux),
                       _derivative_summary("Jacobian", fn, argnums,
                                           "the Jacobian: the result's shape followed by the argument's"))


def hessian(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
            holomorphic: bool = False) -> Callable[..., Any]:
    """The Hessian: forward over reverse, `jacfwd(jacrev(fn))`; with `has_aux`, fn returns
    `(out, aux)` and the result is `(hessian of out, aux)`, as jax.hessian's."""
    return jacfwd(jacrev(fn, argnums, has_aux=has_aux, holomorphic=holomorphic), argnums, has_aux=has_aux,
                  holomorphic=holomorphic)
