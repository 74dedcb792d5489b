"""The constants of a lowered program with calls in it (custom_jvp_call, custom_vjp_call,
custom_root ...), which the lowering inlines first (issue 42): @main takes the jaxpr's
constants in the jaxpr's order, whatever order the inlined equations first read them in,
and constants a call's body brings of its own are written into the module. The oracle is
NumPy on the same program, and jax for the custom rule's gradient."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import s2s
from s2s.emit.stablehlo import lower
from tests.helpers import assert_same, check_function

WEIGHTS = np.arange(3.0) + 1.0
OFFSETS = np.array([0.5, -1.0, 2.0, 0.25])
MASK = np.array([True, False, True])


@s2s.custom_jvp
def weighted(x):
    return np.sum(WEIGHTS * np.where(MASK, x, 0.0))


@weighted.defjvp
def weighted_jvp(primals, tangents):
    return weighted(primals[0]), 3.0 * np.sum(tangents[0])   # a rule that is not the derivative


def reads_its_constant_after_the_calls(x):
    """The call reads WEIGHTS and MASK, its caller OFFSETS: three constants, each only in
    one place."""
    return weighted(x) * np.sum(OFFSETS)


def test_constants_of_a_call_body_are_written_into_the_module():
    x = np.array([0.3, -1.2, 2.0])
    closed = check_function(reads_its_constant_after_the_calls, x, rtol=1e-12)   # NumPy, emitted, jit
    text = lower(closed)
    assert text.count('stablehlo.constant dense<"0x') == 2, text   # WEIGHTS and MASK
    assert "func.func public @main(%OFFSETS: tensor<4xf64>, %x: tensor<3xf64>)" in text, text

    def jax_fn(x):
        return 3.0 * jnp.sum(x) * jnp.sum(OFFSETS)   # what the custom rule says the derivative is
    for backend in ("xla", "python"):
        assert_same(s2s.jit(s2s.grad(reads_its_constant_after_the_calls), backend=backend)(x),
                    np.asarray(jax.grad(jax_fn)(x)), rtol=1e-12)


FIRST = np.array([1.0, 2.0])
SECOND = np.linspace(0.0, 1.0, 5)


@s2s.custom_jvp
def read_in_the_other_order(y, s):
    return SECOND[1] * y + s * FIRST


@read_in_the_other_order.defjvp
def read_in_the_other_order_jvp(primals, tangents):
    return read_in_the_other_order(*primals), SECOND[1] * tangents[0] + tangents[1] * FIRST


def passes_both_into_a_call(s):
    """FIRST is read before SECOND in the source, SECOND first in the call's body."""
    return np.sum(read_in_the_other_order(FIRST, s) * np.sum(SECOND))


def test_main_takes_the_constants_in_the_jaxprs_order():
    closed = check_function(passes_both_into_a_call, np.float64(0.7), rtol=1e-12)
    shapes = [np.shape(c) for c in closed.consts]
    assert shapes == [(2,), (5,)], shapes
    assert "@main(%FIRST: tensor<2xf64>, %SECOND: tensor<5xf64>, %s: tensor<f64>)" in lower(closed)
