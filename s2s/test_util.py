"""Checking derivatives without trusting s2s: `check_grads(f, args, order=2)`.

Forward mode is held to central finite differences of `f` itself, run by NumPy in
float64. Reverse mode is held to them too, by the dot-product test
`<vjp(ct), t> == <ct, df(t)>` for random `t` and `ct`, `df(t)` the central difference
along `t`. Higher orders apply the same checks to the derivative functions themselves.

Arguments are pytrees (tuples, lists, dicts of arrays), as everywhere in s2s: every leaf
is perturbed, and the tangents and cotangents have the arguments' structure.

Complex leaves stay complex (complex128) and are perturbed in both parts. The dot-product
test then pairs values as JAX's convention for complex numbers does, by Re(sum(a * b))
(no conjugate: a vjp is the transpose of the jvp, not its adjoint).
"""
from __future__ import annotations

import numpy as np

from s2s import autodiff
from s2s.errors import api_boundary
from s2s.tree import tree_flatten, tree_map


def random_like(rng, tree):
    """Standard normal values in the structure, shapes and dtypes of `tree` (both parts
    of a complex leaf)."""
    def draw(x):
        dtype = np.asarray(x).dtype
        value = rng.standard_normal(np.shape(x))
        if np.issubdtype(dtype, np.complexfloating):
            value = value + 1j * rng.standard_normal(np.shape(x))
        return value.astype(dtype)
    return tree_map(draw, tree)


def _widened(x) -> np.ndarray:
    """`x` as a float64 array, or complex128 if it is complex."""
    x = np.asarray(x)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def _float64(args) -> tuple:
    """The arguments with every leaf a float64 (or complex128) array, their pytree
    structure kept."""
    return tuple(tree_map(_widened, a) for a in args)


def _inner(a, b) -> float:
    la, _ = tree_flatten(a)
    lb, _ = tree_flatten(b)
    return float(sum(np.real(np.sum(_widened(x) * _widened(y))) for x, y in zip(la, lb)))


def _add(a, b, scale):
    return tree_map(lambda x, y: np.asarray(x) + scale * np.asarray(y), a, b)


def _assert_close(got, expected, atol, rtol, what):
    for g, e in zip(tree_flatten(got)[0], tree_flatten(expected)[0]):
        np.testing.assert_allclose(_widened(g), _widened(e), atol=atol, rtol=rtol, err_msg=what)


def _numeric_jvp(f, args, tangents, eps):
    """The directional derivative of f at args along tangents, by central differences."""
    plus = f(*_add(args, tangents, eps))
    minus = f(*_add(args, tangents, -eps))
    return tree_map(lambda p, m: (np.asarray(p) - np.asarray(m)) / (2 * eps), plus, minus)


@api_boundary
def check_jvp(f, args, atol=1e-5, rtol=1e-5, eps=1e-6, seed=0):
    """jvp(f) against central differences of f along a random direction."""
    rng = np.random.default_rng(seed)
    args = _float64(args)
    tangents = random_like(rng, args)
    _, t_out = autodiff.jvp(f, args, tangents)
    _assert_close(t_out, _numeric_jvp(f, args, tangents, eps), atol, rtol,
                  "jvp vs central finite differences")


@api_boundary
def check_vjp(f, args, atol=1e-5, rtol=1e-5, eps=1e-6, seed=0):
    """vjp(f) against central differences by the dot-product test (forward mode is not
    used, so a function with only a reverse rule, a custom_vjp, is checked too)."""
    rng = np.random.default_rng(seed + 1)
    args = _float64(args)
    tangents = random_like(rng, args)
    out, vjp_fn = autodiff.vjp(f, *args)
    cotangent = random_like(rng, out)
    cts = vjp_fn(cotangent)
    lhs, rhs = _inner(cts, tangents), _inner(cotangent, _numeric_jvp(f, args, tangents, eps))
    np.testing.assert_allclose(lhs, rhs, atol=atol, rtol=rtol,
                               err_msg="vjp vs central differences: <vjp(ct), t> != <ct, df(t)>")


@api_boundary
def check_grads(f, args, order: int = 1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5,
                eps=1e-6, seed=0):
    """Checks derivatives of `f` at `args` (a sequence of pytrees) up to `order`, in
    forward and/or reverse mode."""
    args = _float64(args)
    if "fwd" in modes:
        check_jvp(f, args, atol, rtol, eps, seed)
    if "rev" in modes:
        check_vjp(f, args, atol, rtol, eps, seed)
    if order > 1:
        rng = np.random.default_rng(seed + 2)
        directions = random_like(rng, args)
        if "fwd" in modes:
            def tangent_of_f(*primals):
                return autodiff.jvp(f, primals, directions)[1]
            check_grads(tangent_of_f, args, order - 1, ("fwd",), atol, rtol, eps, seed + 3)
        if "rev" in modes:
            cotangent = random_like(rng, f(*args))

            def cotangent_of_f(*primals):
                return autodiff.vjp(f, *primals)[1](cotangent)
            check_grads(cotangent_of_f, args, order - 1, ("rev",), atol, rtol, eps, seed + 4)
