"""Implicit differentiation: `custom_root` and `custom_linear_solve`.

Both compute their value with a user's solver (any code: a Newton `while` loop, conjugate
gradients), staged as their `call` jaxpr, and differentiate by the implicit function
theorem instead of through the solver's iterations:

- `custom_root[call, f_jaxpr, rule](*f_consts, *solve_consts, *x0)`: x* with f(x*) = 0,
  where f closes over f_consts (θ). Its tangent solves ∂f/∂x · dx = -∂f/∂θ · dθ with the
  user's `tangent_solve(g, y)`, g being v ↦ ∂f/∂x · v. The solver itself is never
  differentiated, so reverse mode works even when it is a while loop.
- `custom_linear_solve[call, matvec_jaxpr, rule](*matvec_consts, *solve_consts, *b)`:
  x = A⁻¹ b for the linear map A = matvec. It is linear in b: its jvp is another solve,
  dx = A⁻¹ (db - dA · x), and its transpose solves with Aᵀ (`transpose_solve`, or `solve`
  when `symmetric`).

Emitters inline `call`, so generated code shows the solver as written.
"""
from __future__ import annotations

from s2s.primitives.custom_derivatives import call_abstract, call_impl
from s2s.passes import inline as _inline, jvp as _jvp, transpose as _transpose
from s2s.passes.jvp import jvp_eqns
from s2s.passes.tangents import Zero, instantiate, is_zero, tangent_aval
from s2s.passes.transpose import is_linear
from s2s.staging import Primitive


custom_root = Primitive("custom_root", call_abstract, call_impl, multiple_results=True)
custom_linear_solve = Primitive("custom_linear_solve", call_abstract, call_impl, multiple_results=True)
_inline.register_call(custom_root)
_inline.register_call(custom_linear_solve)


class ImplicitRule:
    """What the derivative rules need from the user beyond jaxprs: the solvers to call on
    linear maps, and the pytree structure of x. Hashable by identity (a parameter)."""

    def __init__(self, x_tree, tangent_solve=None, solve=None, transpose_solve=None):
        self.x_tree = x_tree
        self.tangent_solve = tangent_solve
        self.solve = solve
        self.transpose_solve = transpose_solve

    def transposed(self) -> "ImplicitRule":
        if self.transpose_solve is None:
            from s2s.errors import StagingError
            raise StagingError(
                "reverse mode through custom_linear_solve needs a solver for the transposed "
                "system", "pass transpose_solve=..., or symmetric=True when A is symmetric")
        return ImplicitRule(self.x_tree, solve=self.transpose_solve, transpose_solve=self.solve)

    def __repr__(self):
        return "ImplicitRule"


def _linear_map(closed, fixed: list, n_fixed: int, tree):
    """v ↦ the jvp of `closed` at (fixed, point) along v in the last inputs only: a
    Python function on pytrees that stages its equations where it is called."""
    from s2s.lax import Direct

    def apply(v):
        from s2s.tree import tree_leaves
        leaves = tree_leaves(v)
        zeros = [Zero(tangent_aval(var.aval)) for var in closed.jaxpr.invars[:n_fixed]]
        _, out = jvp_eqns(closed, list(fixed), zeros + list(leaves))
        return tree.unflatten([instantiate(t) for t in out])
    return Direct(apply, ["v"])


def _custom_root_jvp(primals, tangents, *, call, f_jaxpr, n_f_consts, rule):
    from s2s.lax import _call_user
    x = custom_root.bind(*primals, call=call, f_jaxpr=f_jaxpr, n_f_consts=n_f_consts, rule=rule)
    theta, dtheta = primals[:n_f_consts], tangents[:n_f_consts]
    if all(is_zero(t) for t in dtheta):
        return x, [Zero(tangent_aval(v.aval)) for v in call.jaxpr.outvars]
    x_zeros = [Zero(tangent_aval(v.aval)) for v in call.jaxpr.outvars]
    _, f_dot = jvp_eqns(f_jaxpr, list(theta) + list(x), list(dtheta) + x_zeros)
    rhs = rule.x_tree.unflatten([-instantiate(t) for t in f_dot])
    g = _linear_map(f_jaxpr, list(theta) + list(x), n_f_consts, rule.x_tree)
    from s2s.tree import tree_leaves
    return x, tree_leaves(_call_user(rule.tangent_solve, (g, rhs)))


_jvp.register(custom_root, _custom_root_jvp)


def _custom_linear_solve_jvp(primals, tangents, *, call, matvec_jaxpr, n_matvec_consts, rule):
    from s2s.lax import linear_solve_call
    n_b = len(call.jaxpr.outvars)
    consts, b_avals = primals[:n_matvec_consts], [v.aval for v in call.jaxpr.outvars]
    x = custom_linear_solve.bind(*primals, call=call, matvec_jaxpr=matvec_jaxpr,
                                 n_matvec_consts=n_matvec_consts, rule=rule)
    dconsts, db = tangents[:n_matvec_consts], tangents[len(primals) - n_b:]
    if all(is_zero(t) for t in list(dconsts) + list(db)):
        return x, [Zero(tangent_aval(a)) for a in b_avals]
    rhs = [instantiate(t) if not is_zero(t) else instantiate(Zero(tangent_aval(a))) for t, a in zip(db, b_avals)]
    if not all(is_zero(t) for t in dconsts):      # dx = A⁻¹ (db - dA · x)
        _, dAx = jvp_eqns(matvec_jaxpr, list(consts) + list(x),
                          list(dconsts) + [Zero(tangent_aval(a)) for a in b_avals])
        rhs = [r - instantiate(d) for r, d in zip(rhs, dAx)]
    return x, linear_solve_call(matvec_jaxpr, n_matvec_consts, consts, rhs, rule)


_jvp.register(custom_linear_solve, _custom_linear_solve_jvp)


def _custom_linear_solve_transpose(cts, *args, call, matvec_jaxpr, n_matvec_consts, rule):
    """b̄ = A⁻ᵀ x̄: a solve with the transposed map and the transposed solver."""
    from s2s.lax import linear_solve_call
    from s2s.passes.transpose import transpose_jaxpr
    n_b = len(call.jaxpr.outvars)
    consts, b = args[:n_matvec_consts], args[len(args) - n_b:]
    if any(is_linear(c) for c in args[:len(args) - n_b]) or not all(is_linear(v) for v in b):
        raise _transpose.NonLinearEquationError("custom_linear_solve is linear in b only")
    cts = [instantiate(c) if not is_zero(c) else instantiate(Zero(v.aval))
           for c, v in zip(cts, call.jaxpr.outvars)]
    vecmat = transpose_jaxpr(matvec_jaxpr, [False] * n_matvec_consts + [True] * n_b)
    b_bar = linear_solve_call(vecmat, n_matvec_consts, consts, cts, rule.transposed())
    return [None] * (len(args) - n_b) + list(b_bar)


_transpose.register(custom_linear_solve, _custom_linear_solve_transpose)
