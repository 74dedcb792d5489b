"""Implicit differentiation: `custom_root` and `custom_linear_solve`.

Both compute their value with a user's solver (any code: a Newton `while` loop, conjugate
gradients), staged as their `call` jaxpr, and differentiate by the implicit function
theorem instead of through the solver's iterations. `s2s.lax` stages every function of
the user's these rules need into jaxprs when it binds the primitive; the rules only apply
those jaxprs:

- `custom_root[call, f_jaxpr, tangent_jaxpr](*f_consts, *tangent_consts, *solve_consts, *x0)`:
  x* with f(x*) = 0, where f closes over f_consts (θ). Its tangent solves
  ∂f/∂x · dx = -∂f/∂θ · dθ with `tangent_jaxpr(*tangent_consts, *θ, *x, *y)`, the user's
  `tangent_solve(g, y)` staged with g being v ↦ ∂f/∂x · v at (θ, x). The solver itself is
  never differentiated, so reverse mode works even when it is a while loop.
- `custom_linear_solve[...](*matvec_consts, *solve_consts, *transpose_consts, *b)`: x = A⁻¹ b
  for the linear map A = `matvec_jaxpr`, computed by `solve_jaxpr`. It is linear in b: its
  jvp is another solve, dx = A⁻¹ (db - dA · x), and its transpose solves with Aᵀ
  (`vecmat_jaxpr`) by `transpose_solve_jaxpr` (None when the user gave no solver for it).

Emitters inline `call`, so generated code shows the solver as written. Batching batches
every jaxpr the primitive carries, so the batched solve differentiates as the unbatched one.
"""
from __future__ import annotations

from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray, Var
from s2s.errors import StagingError
from s2s.primitives.custom_derivatives import call_abstract, call_impl
from s2s.passes import inline as _inline, jvp as _jvp, transpose as _transpose, vmap as _vmap
from s2s.passes.jvp import jvp_eqns
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.passes.transpose import is_linear
from s2s.passes.vmap import batch_jaxpr, to_front
from s2s.staging import Primitive, inline_jaxpr


custom_root = Primitive("custom_root", call_abstract, call_impl, multiple_results=True)
custom_linear_solve = Primitive("custom_linear_solve", call_abstract, call_impl, multiple_results=True)
_inline.register_call(custom_root)
_inline.register_call(custom_linear_solve)


def padded(solver: ClosedJaxpr, n_consts: int, before: list[ShapedArray],
           between: list[ShapedArray] = ()) -> ClosedJaxpr:
    """A call jaxpr takes every operand of its primitive, also those only the rules use:
    `solver` (its `n_consts` constants, then its arguments) taking unused inputs of types
    `before` first and `between` after its constants."""
    invars = list(solver.jaxpr.invars)
    return ClosedJaxpr(Jaxpr([], [Var(a) for a in before] + invars[:n_consts] + [Var(a) for a in between]
                             + invars[n_consts:], solver.jaxpr.outvars, solver.jaxpr.eqns), [])


def _custom_root_jvp(primals, tangents, **params):
    """dx solves ∂f/∂x · dx = -∂f/∂θ · dθ at the root x: the staged tangent_solve, applied."""
    x = custom_root.bind(*primals, **params)
    n_f_consts, n_tangent_consts = params["n_f_consts"], params["n_tangent_consts"]
    theta, dtheta = primals[:n_f_consts], tangents[:n_f_consts]
    x_zeros = [Zero(tangent_aval(v.aval)) for v in params["call"].jaxpr.outvars]
    if all(is_zero(t) for t in dtheta):
        return x, x_zeros
    _, f_dot = jvp_eqns(params["f_jaxpr"], list(theta) + list(x), list(dtheta) + x_zeros)
    rhs = [-instantiate(t) for t in f_dot]
    tangent_consts = primals[n_f_consts:n_f_consts + n_tangent_consts]
    return x, inline_jaxpr(params["tangent_jaxpr"], [*tangent_consts, *theta, *x, *rhs])


_jvp.register(custom_root, _custom_root_jvp)


def linear_solve(matvec_consts, matvec_jaxpr: ClosedJaxpr, vecmat_jaxpr: ClosedJaxpr | None,
                 solve_consts, solve_jaxpr: ClosedJaxpr, transpose_consts,
                 transpose_solve_jaxpr: ClosedJaxpr | None, b_leaves) -> list:
    """Binds custom_linear_solve: x = A⁻¹ b by `solve_jaxpr(*solve_consts, *b)`, A applying
    `matvec_jaxpr(*matvec_consts, *x)`. Its transpose solves with Aᵀ (`vecmat_jaxpr`, taking
    the same constants) by `transpose_solve_jaxpr(*transpose_consts, *b)`, both None when
    the user gave no solver for the transposed system."""
    transpose_avals = [] if transpose_solve_jaxpr is None else \
        transpose_solve_jaxpr.in_avals[:len(transpose_consts)]
    call = padded(solve_jaxpr, len(solve_consts), matvec_jaxpr.in_avals[:len(matvec_consts)], transpose_avals)
    return custom_linear_solve.bind(*matvec_consts, *solve_consts, *transpose_consts, *b_leaves, call=call,
                                    matvec_jaxpr=matvec_jaxpr, vecmat_jaxpr=vecmat_jaxpr,
                                    solve_jaxpr=solve_jaxpr, transpose_solve_jaxpr=transpose_solve_jaxpr,
                                    n_matvec_consts=len(matvec_consts), n_solve_consts=len(solve_consts),
                                    n_transpose_consts=len(transpose_consts))


def _operands(args, params) -> tuple[list, list, list, list]:
    """custom_linear_solve's operands, split: matvec's, solve's and transpose_solve's
    constants, and b."""
    solve_start = params["n_matvec_consts"]
    transpose_start = solve_start + params["n_solve_consts"]
    b_start = transpose_start + params["n_transpose_consts"]
    return (list(args[:solve_start]), list(args[solve_start:transpose_start]),
            list(args[transpose_start:b_start]), list(args[b_start:]))


def _custom_linear_solve_jvp(primals, tangents, **params):
    """dx = A⁻¹ (db - dA · x): the same solve again, on another right-hand side."""
    consts, solve_consts, transpose_consts, _ = _operands(primals, params)
    dconsts, _, _, db = _operands(tangents, params)
    x_zeros = [Zero(tangent_aval(v.aval)) for v in params["call"].jaxpr.outvars]
    x = custom_linear_solve.bind(*primals, **params)
    if all(is_zero(t) for t in dconsts + db):
        return x, x_zeros
    rhs = [instantiate(t) if not is_zero(t) else instantiate(zero) for t, zero in zip(db, x_zeros)]
    if not all(is_zero(t) for t in dconsts):
        _, dAx = jvp_eqns(params["matvec_jaxpr"], consts + list(x), dconsts + x_zeros)
        rhs = [r - instantiate(d) for r, d in zip(rhs, dAx)]
    return x, custom_linear_solve.bind(*consts, *solve_consts, *transpose_consts, *rhs, **params)


_jvp.register(custom_linear_solve, _custom_linear_solve_jvp)


def _custom_linear_solve_transpose(cts, *args, **params):
    """b̄ = A⁻ᵀ x̄: a solve with the transposed map and the transposed solver."""
    consts, solve_consts, transpose_consts, b = _operands(args, params)
    if any(is_linear(c) for c in args[:len(args) - len(b)]) or not all(is_linear(v) for v in b):
        raise _transpose.NonLinearEquationError("custom_linear_solve is linear in b only")
    if params["transpose_solve_jaxpr"] is None:
        raise StagingError(
            "reverse mode through custom_linear_solve needs a solver for the transposed "
            "system", "pass transpose_solve=..., or symmetric=True when A is symmetric")
    cts = [instantiate(c) if not is_zero(c) else instantiate(Zero(v.aval))
           for c, v in zip(cts, params["call"].jaxpr.outvars)]
    b_bar = linear_solve(consts, params["vecmat_jaxpr"], params["matvec_jaxpr"], transpose_consts,
                         params["transpose_solve_jaxpr"], solve_consts, params["solve_jaxpr"], cts)
    return [None] * (len(args) - len(b)) + list(b_bar)


_transpose.register(custom_linear_solve, _custom_linear_solve_transpose)


# ---------------------------------------------------------------------------------------
# Batching: every jaxpr the primitive carries is batched, the constants where they are
# (an unbatched θ or matrix stays unbatched) and the solution, right-hand sides and
# residuals of f at 0: the rules feed one jaxpr's outputs to another (f(x) into the
# tangent solve, a solve's x into matvec), so their batches must lie at one agreed place.


def _custom_root_batch(axis, args, dims, *, call, f_jaxpr, tangent_jaxpr, n_f_consts, n_tangent_consts):
    theta_dims = list(dims[:n_f_consts])
    tangent_const_dims = list(dims[n_f_consts:n_f_consts + n_tangent_consts])
    x_dims = [0] * len(call.out_avals)
    f_dims = [0] * len(f_jaxpr.out_avals)
    batched_call, _ = batch_jaxpr(call, dims, axis, x_dims)
    batched_f, _ = batch_jaxpr(f_jaxpr, theta_dims + x_dims, axis, f_dims)
    batched_tangent, _ = batch_jaxpr(tangent_jaxpr, tangent_const_dims + theta_dims + x_dims + f_dims, axis, x_dims)
    return custom_root.bind(*args, call=batched_call, f_jaxpr=batched_f, tangent_jaxpr=batched_tangent,
                            n_f_consts=n_f_consts, n_tangent_consts=n_tangent_consts), x_dims


def _custom_linear_solve_batch(axis, args, dims, **params):
    consts, solve_consts, transpose_consts, b = _operands(args, params)
    const_dims, solve_dims, transpose_dims, b_dims = _operands(dims, params)
    b = [to_front(x, d, axis.size) for x, d in zip(b, b_dims)]
    x_dims = [0] * len(b)

    def batched(closed: ClosedJaxpr | None, fixed_dims: list) -> ClosedJaxpr | None:
        return None if closed is None else batch_jaxpr(closed, fixed_dims + x_dims, axis, x_dims)[0]
    x = linear_solve(consts, batched(params["matvec_jaxpr"], const_dims), batched(params["vecmat_jaxpr"], const_dims),
                     solve_consts, batched(params["solve_jaxpr"], solve_dims), transpose_consts,
                     batched(params["transpose_solve_jaxpr"], transpose_dims), b)
    return x, x_dims


_vmap.register(custom_root, _custom_root_batch)
_vmap.register(custom_linear_solve, _custom_linear_solve_batch)
