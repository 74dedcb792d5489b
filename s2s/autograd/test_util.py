"""autograd's derivative checks, curried as autograd's: `check_grads(f, modes=["fwd",
"rev"], order=2)(*args)` checks s2s's derivatives of `f` with respect to argument(s)
`argnum` against central finite differences.

Each order is checked by `s2s.test_util` (forward mode against the differences along a
random direction, reverse mode by the dot-product test). As in autograd, a second order
checks the first-order derivative maps themselves, `(x, v) -> jvp` and `(x, ct) -> vjp`,
as functions of both their arguments and in every mode asked for, so `order=2` with both
modes also holds forward over reverse and reverse over forward. A failure is an
AssertionError naming what disagreed.
"""
from __future__ import annotations

import itertools

import numpy as np

from s2s import autodiff, test_util
from s2s.autograd.wrap_util import unary_to_nary

__all__ = ["check_grads", "check_jvp", "check_vjp", "combo_check"]

MODES = ("fwd", "rev")


def check_jvp(f, x):
    """Forward mode of `f` at `x` against central differences along a random direction."""
    test_util.check_jvp(f, (x,))


def check_vjp(f, x):
    """Reverse mode of `f` at `x` against central differences: <vjp(ct), t> == <ct, df(t)>."""
    test_util.check_vjp(f, (x,))


@unary_to_nary
def check_grads(f, x, modes=MODES, order=2):
    """Checks `f`'s derivatives at `x` in `modes` up to `order` (autograd's
    `check_grads(f, argnum=0, modes=..., order=2)(*args, **kwargs)`)."""
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        raise ValueError(f"check_grads modes are 'fwd' and 'rev', not {unknown}")
    rng = np.random.default_rng(order)
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:
            def tangent_of_f(x, tangent):
                return autodiff.jvp(f, (x,), (tangent,))[1]
            check_grads(tangent_of_f, (0, 1), modes, order - 1)(x, test_util.random_like(rng, x))
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:
            def cotangent_of_f(x, cotangent):
                return autodiff.vjp(f, x)[1](cotangent)[0]
            check_grads(cotangent_of_f, (0, 1), modes, order - 1)(x, test_util.random_like(rng, f(x)))


def combo_check(fun, *check_args, **check_kwargs):
    """`check_grads(fun, *check_args, **check_kwargs)` at every combination of argument
    values: `combo_check(f, [0])(xs, ys, axis=[0, 1])` checks each x in xs with each y
    in ys and each axis."""
    check = check_grads(fun, *check_args, **check_kwargs)

    def check_every_combination(*arg_choices, **kwarg_choices):
        names = list(kwarg_choices)
        for args in itertools.product(*arg_choices):
            for values in itertools.product(*(kwarg_choices[name] for name in names)):
                check(*args, **dict(zip(names, values)))
    return check_every_combination
