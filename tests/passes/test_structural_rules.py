"""Derivative rules of the structural primitives, held to jax's.

Every primitive in s2s/primitives/structural.py is linear in its array operands, so its
jvp is the primitive applied to the tangents and its transpose moves the cotangent back.
Each test writes one function twice, with the NumPy surface (or `prim.bind` where NumPy
has no spelling: negative and interior padding, broadcast_in_dim) and with jax.numpy /
jax.lax, and `check_derivatives` compares s2s.jvp and s2s.vjp with jax's on
hypothesis-drawn shapes and parameters. The last tests compare s2s.grad with jax.grad
and check that the backward pass holds only linear (structural) equations.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import s2s
from s2s.autodiff import vjp_parts
from s2s.numpy_api import indexing as snp_indexing
from s2s.passes.transpose import transpose_rules
from s2s.primitives import structural as S
from tests.helpers import check_derivatives

SETTINGS = settings(max_examples=15, deadline=None)

# What a backward pass of structural code may contain: the structural primitives, sums
# (broadcast and pad transposes), and the adds that accumulate cotangents.
LINEAR_PRIMITIVES = {"broadcast_in_dim", "reshape", "transpose", "squeeze", "expand_dims",
                     "concatenate", "pad", "slice", "dynamic_slice", "dynamic_update_slice",
                     "rev", "gather", "scatter_add", "reduce_sum", "add_any", "sub", "neg"}


def rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@st.composite
def float_arrays(draw, min_dims=1, max_dims=3, min_side=1, max_side=4):
    shape = draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                                  max_side=max_side))
    return rand(shape, draw(st.integers(0, 2 ** 16)))


# ---------------------------------------------------------------------------------------
# broadcast_in_dim, reshape, transpose, squeeze, expand_dims


@st.composite
def broadcast_cases(draw):
    """An operand shape, an output shape and where the operand's dims go in it."""
    x = draw(float_arrays(min_dims=0, max_dims=3, max_side=3))
    n_new = draw(st.integers(0, 2))
    out_ndim = x.ndim + n_new
    dims = tuple(sorted(draw(st.permutations(range(out_ndim)))[:x.ndim]))
    shape = [draw(st.integers(1, 3)) for _ in range(out_ndim)]
    for i, d in enumerate(dims):
        if x.shape[i] != 1:
            shape[d] = x.shape[i]
    return x, tuple(shape), dims


@SETTINGS
@given(broadcast_cases())
def test_broadcast_in_dim(case):
    x, shape, dims = case

    def f(x):
        return S.broadcast_in_dim.bind(x, shape=shape, broadcast_dimensions=dims)

    check_derivatives(f, lambda x: jax.lax.broadcast_in_dim(x, shape, dims), x)


@SETTINGS
@given(float_arrays(min_dims=0, max_dims=2, max_side=3), st.integers(1, 3))
def test_broadcast_to(x, lead):
    shape = (lead, 2) + tuple(3 if d == 1 else d for d in x.shape)

    def f(x):
        return np.broadcast_to(x, shape) * 1.5

    check_derivatives(f, lambda x: jnp.broadcast_to(x, shape) * 1.5, x)


@SETTINGS
@given(float_arrays(max_dims=3), st.data())
def test_reshape(x, data):
    sizes = [d for d in range(1, x.size + 1) if x.size % d == 0]
    first = data.draw(st.sampled_from(sizes))
    new_shape = (first, -1) if data.draw(st.booleans()) else (x.size // first, 1, first)

    def f(x):
        return np.reshape(x, new_shape)

    check_derivatives(f, lambda x: jnp.reshape(x, new_shape), x)


@SETTINGS
@given(float_arrays(max_dims=4), st.data())
def test_transpose(x, data):
    perm = tuple(data.draw(st.permutations(range(x.ndim))))

    def f(x):
        return np.transpose(x, perm)

    check_derivatives(f, lambda x: jnp.transpose(x, perm), x)


def test_transpose_attribute():
    def f(x):
        return x.T * np.sin(x.T)

    check_derivatives(f, lambda x: x.T * jnp.sin(x.T), rand((3, 2)))


@SETTINGS
@given(float_arrays(max_dims=3, max_side=3), st.data())
def test_squeeze_and_expand_dims(x, data):
    out_ndim = x.ndim + data.draw(st.integers(1, 2))
    new = tuple(sorted(data.draw(st.permutations(range(out_ndim)))[:out_ndim - x.ndim]))

    def f(x):
        y = np.expand_dims(x, new)
        return np.squeeze(y * y, axis=new[0]), y

    def g(x):
        y = jnp.expand_dims(x, new)
        return jnp.squeeze(y * y, axis=new[0]), y

    check_derivatives(f, g, x)


def test_squeeze_all_unit_axes():
    def f(x):
        return np.squeeze(x) * 2.0

    check_derivatives(f, lambda x: jnp.squeeze(x) * 2.0, rand((1, 3, 1, 2)))


# ---------------------------------------------------------------------------------------
# concatenate


@SETTINGS
@given(float_arrays(max_dims=3), st.data())
def test_concatenate(x, data):
    axis = data.draw(st.integers(0, x.ndim - 1))
    shape_b = list(x.shape)
    shape_b[axis] = data.draw(st.integers(1, 3))
    b = rand(shape_b, 1)

    def f(x, b):
        return np.concatenate([x, b, x], axis=axis)

    check_derivatives(f, lambda x, b: jnp.concatenate([x, b, x], axis=axis), x, b)


def test_concatenate_with_a_constant_piece():
    """A constant operand has a zero tangent and gets no cotangent."""
    def f(x):
        return np.concatenate([np.ones((2, 3)), x, np.zeros((1, 3))]) * x[0]

    def g(x):
        return jnp.concatenate([jnp.ones((2, 3)), x, jnp.zeros((1, 3))]) * x[0]

    check_derivatives(f, g, rand((4, 3)))


def test_stack():
    def f(x, y):
        return np.stack([x, y, x * y], axis=1)

    check_derivatives(f, lambda x, y: jnp.stack([x, y, x * y], axis=1), rand((2, 3)),
                      rand((2, 3), 1))


# ---------------------------------------------------------------------------------------
# pad (negative and interior too)


@st.composite
def pad_cases(draw):
    x = draw(float_arrays(max_dims=3, max_side=3))
    config = []
    for d in x.shape:
        interior = draw(st.integers(0, 2))
        inner = d + max(d - 1, 0) * interior
        lo = draw(st.integers(-inner, 2))
        hi = draw(st.integers(-(inner + lo) if inner + lo > 0 else 0, 2))
        config.append((lo, hi, interior))
    return x, tuple(config)


@SETTINGS
@given(pad_cases())
def test_pad(case):
    x, config = case
    value = np.float64(0.75)

    def f(x, v):
        return S.pad.bind(x, v, padding_config=config)

    check_derivatives(f, lambda x, v: jax.lax.pad(x, v, config), x, value)


@SETTINGS
@given(pad_cases())
def test_pad_with_a_constant_value(case):
    x, config = case

    def f(x):
        return S.pad.bind(x, np.float64(-1.0), padding_config=config)

    check_derivatives(f, lambda x: jax.lax.pad(x, -1.0, config), x)


@pytest.mark.parametrize("config", [((-1, -1, 0),), ((-3, 0, 2),), ((2, -4, 1),),
                                    ((0, 0, 3),), ((-2, -3, 1),)])
def test_pad_negative_and_interior(config):
    def f(x, v):
        return S.pad.bind(x, v, padding_config=config)

    check_derivatives(f, lambda x, v: jax.lax.pad(x, v, config), rand((4,)), np.float64(0.5))


def test_np_pad_constant_values():
    def f(x, v):
        return np.pad(x, ((1, 2), (0, 1)), constant_values=v)

    def g(x, v):
        return jnp.pad(x, ((1, 2), (0, 1)), constant_values=v)

    check_derivatives(f, g, rand((2, 3)), np.float64(3.0))


# ---------------------------------------------------------------------------------------
# slice and rev (static indexing)


@st.composite
def slice_cases(draw):
    x = draw(float_arrays(max_dims=3, max_side=5))
    index = []
    for d in x.shape:
        kind = draw(st.sampled_from(["slice", "int", "all"]))
        if kind == "int":
            index.append(draw(st.integers(-d, d - 1)))
        elif kind == "all":
            index.append(slice(None))
        else:
            start = draw(st.none() | st.integers(-d - 1, d + 1))
            stop = draw(st.none() | st.integers(-d - 1, d + 1))
            step = draw(st.none() | st.sampled_from([1, 2, 3, -1, -2, -3]))
            index.append(slice(start, stop, step))
    return x, tuple(index)



@SETTINGS
@given(slice_cases())
def test_static_indexing(case):
    x, index = case

    def f(x):
        return x[index]

    check_derivatives(f, lambda x: x[index], x)


@pytest.mark.parametrize("index", [np.s_[::-2], np.s_[1::2], np.s_[::3], np.s_[-2::-1],
                                   np.s_[5:1:-2], np.s_[3:3], np.s_[None, 1:, None]])
def test_strided_and_reversed_slices(index):
    def f(x):
        return x[index]

    check_derivatives(f, lambda x: x[index], rand((7,)))


def test_slice_primitive_with_strides():
    def f(x):
        return S.slice.bind(x, start_indices=(1, 0), limit_indices=(5, 3), strides=(3, 2))

    def g(x):
        return jax.lax.slice(x, (1, 0), (5, 3), (3, 2))

    check_derivatives(f, g, rand((6, 3)))


@SETTINGS
@given(float_arrays(max_dims=3), st.data())
def test_flip(x, data):
    axes = tuple(data.draw(st.permutations(range(x.ndim)))[:data.draw(st.integers(1, x.ndim))])

    def f(x):
        return np.flip(x, axes)

    check_derivatives(f, lambda x: jnp.flip(x, axes), x)


# ---------------------------------------------------------------------------------------
# dynamic_slice, dynamic_update_slice (staged start indices, clamped like XLA)


@st.composite
def window_cases(draw):
    x = draw(float_arrays(max_dims=3, max_side=4))
    sizes = tuple(draw(st.integers(0, d)) for d in x.shape)
    starts = tuple(np.int64(draw(st.integers(0, d + 1))) for d in x.shape)   # some clamp
    return x, sizes, starts


@SETTINGS
@given(window_cases())
def test_dynamic_slice(case):
    x, sizes, starts = case

    def f(x, *starts):
        return snp_indexing.dynamic_slice(x, starts, sizes)

    check_derivatives(f, lambda x, *starts: jax.lax.dynamic_slice(x, starts, sizes), x, *starts)


@SETTINGS
@given(window_cases())
def test_dynamic_update_slice(case):
    x, sizes, starts = case
    update = rand(sizes, 3)

    def f(x, update, *starts):
        return snp_indexing.dynamic_update_slice(x, update, starts)

    def g(x, update, *starts):
        return jax.lax.dynamic_update_slice(x, update, starts)

    check_derivatives(f, g, x, update, *starts)


def test_dynamic_update_slice_of_a_constant_operand():
    """Only the update is linear: the operand's tangent is instantiated as zeros."""
    def f(update, i):
        return snp_indexing.dynamic_update_slice(np.ones((5, 2)), update * update, (i, 0))

    def g(update, i):
        return jax.lax.dynamic_update_slice(jnp.ones((5, 2)), update * update, (i, 0))

    check_derivatives(f, g, rand((2, 2)), np.int64(2))


@pytest.mark.parametrize("i", [0, 2, -1, -4])
def test_staged_scalar_index(i):
    """`x[i]` with a staged int: a dynamic_slice and a squeeze (negative i wraps)."""
    def f(x, i):
        return x[i] * x[i]

    check_derivatives(f, lambda x, i: x[i] * x[i], rand((4, 3)), np.int64(i))


def test_staged_scalar_index_on_a_middle_axis():
    def f(x, i):
        return x[:, i, 1:]

    check_derivatives(f, lambda x, i: x[:, i, 1:], rand((2, 4, 3)), np.int64(3))


# ---------------------------------------------------------------------------------------
# grad against jax.grad, and the backward pass is linear


def model(x, w, i):
    h = np.concatenate([x, np.flip(x, 0)], axis=1)                   # (4, 6)
    h = np.pad(h, ((1, 0), (0, 2))).reshape(5, 2, 4).transpose(2, 0, 1)
    row = h[i]                                                       # dynamic_slice
    window = snp_indexing.dynamic_slice(h, (i, 1, 0), (2, 3, 2))
    scaled = np.broadcast_to(w, (2, 3, 2)) * window
    h = snp_indexing.dynamic_update_slice(h, scaled, (1, i, 0))
    return np.sum(np.tanh(h[::2, 1:, :]) ** 2) + np.sum(row[:, ::-1] * row) \
        + np.sum(np.expand_dims(np.squeeze(w, 0), 0) * window[0])


def jax_model(x, w, i):
    h = jnp.concatenate([x, jnp.flip(x, 0)], axis=1)
    h = jnp.pad(h, ((1, 0), (0, 2))).reshape(5, 2, 4).transpose(2, 0, 1)
    row = h[i]
    window = jax.lax.dynamic_slice(h, (i, 1, 0), (2, 3, 2))
    scaled = jnp.broadcast_to(w, (2, 3, 2)) * window
    h = jax.lax.dynamic_update_slice(h, scaled, (1, i, 0))
    return jnp.sum(jnp.tanh(h[::2, 1:, :]) ** 2) + jnp.sum(row[:, ::-1] * row) \
        + jnp.sum(jnp.expand_dims(jnp.squeeze(w, 0), 0) * window[0])


MODEL_ARGS = (rand((4, 3)), rand((1, 2)), np.int64(1))


def test_grad_matches_jax():
    got = s2s.grad(model, argnums=(0, 1))(*MODEL_ARGS)
    expected = jax.grad(jax_model, argnums=(0, 1))(*MODEL_ARGS)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)


def test_model_derivatives_match_jax():
    check_derivatives(model, jax_model, *MODEL_ARGS)


def _structural_only(x, v, i):
    y = np.concatenate([x, x[::-1]], axis=0)
    y = S.pad.bind(y, v, padding_config=((1, -2, 1), (0, 1, 0)))
    y = np.broadcast_to(y.T[:, None, :], (3, 2, y.shape[0]))
    y = snp_indexing.dynamic_slice(y, (0, i, 0), (3, 1, 4))
    return np.squeeze(np.expand_dims(y, 0), (0, 2)).reshape(-1)


def test_backward_pass_is_linear_and_structural():
    args = (rand((3, 2)), np.float64(0.5), np.int64(1))
    closed = s2s.make_jaxpr(_structural_only)(*args)
    parts = vjp_parts(closed, [True, True, False], [True])
    used = {eqn.primitive.name for eqn in parts.backward.eqns}
    assert used <= LINEAR_PRIMITIVES, used - LINEAR_PRIMITIVES
    forward_prims = {eqn.primitive.name for eqn in closed.eqns}
    assert {"concatenate", "pad", "broadcast_in_dim", "dynamic_slice", "squeeze",
            "expand_dims", "reshape", "rev", "transpose"} <= forward_prims

    def jax_fn(x, v, i):
        y = jnp.concatenate([x, x[::-1]], axis=0)
        y = jax.lax.pad(y, v, ((1, -2, 1), (0, 1, 0)))
        y = jnp.broadcast_to(y.T[:, None, :], (3, 2, y.shape[0]))
        y = jax.lax.dynamic_slice(y, (0, i, 0), (3, 1, 4))
        return jnp.squeeze(jnp.expand_dims(y, 0), (0, 2)).reshape(-1)

    check_derivatives(_structural_only, jax_fn, *args)


def test_every_structural_primitive_has_derivative_rules():
    from s2s.passes.jvp import jvp_rules
    prims = [p for p in vars(S).values() if isinstance(p, s2s.staging.Primitive)]
    assert {p.name for p in prims} >= {"broadcast_in_dim", "reshape", "transpose", "squeeze",
                                       "expand_dims", "concatenate", "pad", "slice",
                                       "dynamic_slice", "dynamic_update_slice", "rev"}
    for p in prims:
        assert p in jvp_rules, p
        assert p in transpose_rules, p


def _mixed(x, i):
    y = np.pad(x[i], ((1, 0),))[::-1]
    z = snp_indexing.dynamic_update_slice(np.broadcast_to(x, (2, 4)), y[None, :2] ** 2,
                                          (np.int64(1), np.int64(1)))
    return np.sum(np.tanh(z) * np.concatenate([x, x[::-2]])[:4])


def _jax_mixed(x, i):
    y = jnp.pad(x[i], ((1, 0),))[::-1]
    z = jax.lax.dynamic_update_slice(jnp.broadcast_to(x, (2, 4)), y[None, :2] ** 2, (1, 1))
    return jnp.sum(jnp.tanh(z) * jnp.concatenate([x, x[::-2]])[:4])


def test_second_order_matches_jax():
    """The transposes are built from the same primitives, so they differentiate again."""
    x, i = rand((4,)), np.array([3, 0, 3])
    np.testing.assert_allclose(s2s.hessian(_mixed)(x, i), jax.hessian(_jax_mixed)(x, i),
                               rtol=1e-10, atol=1e-12)

    def s2s_grad_norm(x, i):
        return np.sum(s2s.grad(_mixed)(x, i) ** 2)

    def jax_grad_norm(x, i):
        return jnp.sum(jax.grad(_jax_mixed)(x, i) ** 2)

    np.testing.assert_allclose(s2s.grad(s2s_grad_norm)(x, i), jax.grad(jax_grad_norm)(x, i),
                               rtol=1e-10, atol=1e-12)
