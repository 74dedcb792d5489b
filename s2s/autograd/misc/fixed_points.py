"""autograd's `autograd.misc.fixed_points.fixed_point`, on s2s's transforms.

    fixed_point(f, a, x0, distance, tol)

iterates `x = f(a)(x)` from `x0` (f is curried: `f(a)` is the map of one step) until two
successive iterates are within `tol` by `distance(x, x_previous)`, and returns the last.
Its derivative with respect to `a` is not that of the iterations: at the fixed point
x* = f(a)(x*), the implicit function theorem gives the cotangent of `a` for a cotangent
x̄ as vjp_a(u), where u = x̄ + vjp_x(u) is itself a fixed point (the adjoint), reached by
the same iteration from zero with the same `distance` and `tol`. The result does not
depend on `x0` (its cotangent is zero), as in autograd.

s2s's version is a `custom_vjp`: the forward runs the iteration as one `lax.while_loop`
(a loop whose length is found while it runs), and the backward rule solves the adjoint
with `fixed_point` itself, so a derivative of the backward rule (a second derivative) is
again an adjoint solve, to any order. `f` and `distance` are the user's code, staged with
the calls (`call_user_code`); `tol` is a number fixed at staging, as `f` and `distance` are.
A program's `autograd.misc.fixed_points.fixed_point` stages as this function
(`s2s.autograd.extend`).
"""
from __future__ import annotations

import functools

import numpy as np

from s2s.autodiff import vjp
from s2s.autograd.wrap_util import call_user_code
from s2s.custom_derivatives import custom_vjp
from s2s.lax import while_loop

__all__ = ["fixed_point"]


@functools.partial(custom_vjp, nondiff_argnums=(0, 3, 4))
def fixed_point(f, a, x0, distance, tol):
    """The fixed point of `f(a)` from `x0`: one step, then steps until two successive
    iterates are within `tol` (see the module's docstring)."""
    step = call_user_code(f, (a,), {})
    first = call_user_code(step, (x0,), {})

    def not_converged(iterates):
        x, previous = iterates
        return call_user_code(distance, (x, previous), {}) > tol

    def next_iterates(iterates):
        x, _ = iterates
        return call_user_code(step, (x,), {}), x
    # (x0 as the first step's dtype: the loop carries one dtype, a Python int x0 a float)
    start = call_user_code(np.asarray, (x0,), {"dtype": np.result_type(_dtype_of(first))})
    x, _ = while_loop(not_converged, next_iterates, (first, start))
    return x


def _forward(f, a, x0, distance, tol):
    """The fixed point, computed by `fixed_point` itself (so a derivative of the residual
    is by this same rule), with `a` and the fixed point as residuals."""
    x = fixed_point(f, a, x0, distance, tol)
    return x, (a, x)


def _backward(f, distance, tol, residuals, x_bar):
    """The cotangent of `a` by the implicit function theorem: the adjoint u = x̄ + vjp_x(u)
    as a fixed point of its own (from zero, with the forward's `distance` and `tol`), then
    pulled back through `f(a)(x*)` as a function of `a`."""
    a, x = residuals
    zeros = call_user_code(np.zeros_like, (x,), {})
    adjoint = fixed_point(functools.partial(_adjoint_step, f), (a, x, x_bar), zeros, distance, tol)
    _, vjp_a = vjp(functools.partial(_step_at, f, x), a)
    (a_bar,) = vjp_a(adjoint)
    return a_bar, None


def _step_at(f, x, a):
    """`f(a)(x)` as a function of `a`."""
    return call_user_code(call_user_code(f, (a,), {}), (x,), {})


def _adjoint_step(f, point):
    """The adjoint's step at `point = (a, x*, x̄)`, curried as `f` is: u -> x̄ + vjp_x(u),
    the vjp of `f(a)` at x*."""
    a, x, x_bar = point
    _, vjp_x = vjp(call_user_code(f, (a,), {}), x)
    return lambda u: vjp_x(u)[0] + x_bar


def _dtype_of(value):
    return value.dtype if hasattr(value, "dtype") else np.result_type(value)


fixed_point.defvjp(_forward, _backward)
