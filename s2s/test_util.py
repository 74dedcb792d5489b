"""Checking derivatives without trusting s2s: `check_grads(f, args, order=2)`.

Forward mode is held to central finite differences of `f` itself, run by NumPy in
float64. Reverse mode is held to forward mode by the dot-product test
`<vjp(ct), t> == <ct, jvp(t)>` for random `t` and `ct`. Higher orders apply the same
checks to the derivative functions themselves.
"""
from __future__ import annotations

import numpy as np

from s2s import autodiff
from s2s.tree import tree_flatten, tree_map


def _random_like(rng, x):
    x = np.asarray(x)
    return rng.standard_normal(x.shape).astype(x.dtype)


def _inner(a, b) -> float:
    la, _ = tree_flatten(a)
    lb, _ = tree_flatten(b)
    return float(sum(np.vdot(np.asarray(x, np.float64), np.asarray(y, np.float64))
                     for x, y in zip(la, lb)))


def _add(a, b, scale):
    return tree_map(lambda x, y: np.asarray(x) + scale * np.asarray(y), a, b)


def _assert_close(got, expected, atol, rtol, what):
    for g, e in zip(tree_flatten(got)[0], tree_flatten(expected)[0]):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(e, np.float64),
                                   atol=atol, rtol=rtol, err_msg=what)


def check_jvp(f, args, atol=1e-5, rtol=1e-5, eps=1e-6, seed=0):
    """jvp(f) against central differences of f along a random direction."""
    rng = np.random.default_rng(seed)
    args = tuple(np.asarray(a, np.float64) for a in args)
    tangents = tuple(_random_like(rng, a) for a in args)
    _, t_out = autodiff.jvp(f, args, tangents)
    plus = f(*_add(args, tangents, eps))
    minus = f(*_add(args, tangents, -eps))
    numeric = tree_map(lambda p, m: (np.asarray(p) - np.asarray(m)) / (2 * eps), plus, minus)
    _assert_close(t_out, numeric, atol, rtol, "jvp vs central finite differences")


def check_vjp(f, args, atol=1e-5, rtol=1e-5, seed=0):
    """vjp(f) against jvp(f) by the dot-product test."""
    rng = np.random.default_rng(seed + 1)
    args = tuple(np.asarray(a, np.float64) for a in args)
    tangents = tuple(_random_like(rng, a) for a in args)
    out, t_out = autodiff.jvp(f, args, tangents)
    cotangent = tree_map(lambda o: _random_like(rng, o), out)
    _, vjp_fn = autodiff.vjp(f, *args)
    cts = vjp_fn(cotangent)
    lhs, rhs = _inner(cts, tangents), _inner(cotangent, t_out)
    np.testing.assert_allclose(lhs, rhs, atol=atol, rtol=rtol,
                               err_msg="vjp vs jvp: <vjp(ct), t> != <ct, jvp(t)>")


def check_grads(f, args, order: int = 1, modes=("fwd", "rev"), atol=1e-5, rtol=1e-5,
                eps=1e-6, seed=0):
    """Checks derivatives of `f` at `args` up to `order`, in forward and/or reverse mode."""
    args = tuple(args)
    if "fwd" in modes:
        check_jvp(f, args, atol, rtol, eps, seed)
    if "rev" in modes:
        check_vjp(f, args, atol, rtol, seed)
    if order > 1:
        rng = np.random.default_rng(seed + 2)
        directions = tuple(_random_like(rng, a) for a in args)
        if "fwd" in modes:
            def tangent_of_f(*primals):
                return autodiff.jvp(f, primals, directions)[1]
            check_grads(tangent_of_f, args, order - 1, ("fwd",), atol, rtol, eps, seed + 3)
        if "rev" in modes:
            cotangent = tree_map(lambda o: _random_like(rng, o), f(*args))

            def cotangent_of_f(*primals):
                return autodiff.vjp(f, *primals)[1](cotangent)
            check_grads(cotangent_of_f, args, order - 1, ("rev",), atol, rtol, eps, seed + 4)
