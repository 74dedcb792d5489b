"""Complex numbers end to end: NumPy's values and dtypes on every backend (the reference
interpreter, the emitted module, XLA), and JAX's derivatives (jvp, vjp, grad of real-valued
functions, holomorphic Jacobians), with the transpose of linear maps left unconjugated."""
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

import s2s
from s2s.errors import ShapeError, UnsupportedFunctionError
from s2s.primitives import complex_parts as cx
from tests.helpers import (check_derivatives, check_function, check_lowered, check_numpy_and_jax,
                           check_staged, with_numpy)
from tests.strategies import examples

Z = np.array([0.3 + 0.7j, -1.2 + 0.1j, 2.0 - 0.5j, 0.5 + 2.0j])
W = np.array([1.0 - 1.0j, 0.5j, -0.25 + 0.3j, 1.5 + 0.0j])
M = np.array([[1.0 + 2.0j, -0.5j], [0.25 - 1.0j, 3.0 + 0.5j], [-1.0 + 0.0j, 0.75 + 0.75j]])
SETTINGS = examples(5, 12)


def jax_numpy():
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jnp


# ---------------------------------------------------------------------------------------
# Parts, modulus and argument


def real_part(z):
    return np.real(z)


def imaginary_part(z):
    return np.imag(z)


def conjugate(z):
    return np.conj(z) * np.conjugate(z + 1.0)


def modulus(z):
    return np.abs(z)


def argument(z):
    return np.angle(z)


def argument_in_degrees(z):
    return np.angle(z, deg=True)


def attributes(z):
    return z.real * 2.0 - z.imag + z.conj().imag


def rebuilt(z):
    return np.real(z) + 1j * np.imag(z)


@pytest.mark.parametrize("fn", [real_part, imaginary_part, conjugate, modulus, argument,
                                argument_in_degrees, attributes, rebuilt])
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_parts_modulus_and_argument_match_numpy_and_jax(fn, dtype):
    tol = 1e-5 if dtype == np.complex64 else 1e-10
    check_numpy_and_jax(fn, Z.astype(dtype), rtol=tol, atol=tol)


def test_parts_of_real_arrays_and_python_scalars_are_numpys():
    x = np.array([1.5, -2.0, 0.0])
    for fn in (real_part, imaginary_part, conjugate, argument, attributes):
        check_function(fn, x)
    check_function(lambda x: np.angle(x.astype(np.int8)), x)   # arctan2(0, int8) is float16
    check_function(lambda x: x * np.real(2 + 3j) + np.imag(2 + 3j), x)


def test_classification_matches_numpy():
    z = np.array([1.0 + 0.0j, 2.0 - 0.0j, np.inf + 1j, 1.0 + np.nan * 1j, 3j])

    def classify(z):
        return (np.iscomplex(z), np.isreal(z), np.isinf(z), np.isfinite(z), np.isnan(z),
                np.iscomplex(z.real), np.isreal(z.real))
    check_function(classify, z)


def test_iscomplexobj_is_a_static_fact_of_the_dtype():
    def doubled_if_complex(z):
        if np.iscomplexobj(z) and not np.isrealobj(z):
            return z * 2.0
        return z
    check_function(doubled_if_complex, Z)
    check_function(doubled_if_complex, Z.real)


def test_real_if_close_of_real_values_and_refusal_for_staged_complex():
    check_function(lambda x: np.real_if_close(x) * 2.0, Z.real)
    np.testing.assert_array_equal(s2s.numpy_api.NUMPY_IMPLS[np.real_if_close](Z + 0.0), Z)
    with pytest.raises(UnsupportedFunctionError) as caught:
        s2s.jit(lambda z: np.real_if_close(z))(Z)
    message = str(caught.value)
    assert "depending on the values" in message and "np.real(z)" in message
    assert "test_complex.py" in message


# ---------------------------------------------------------------------------------------
# Elementwise math on complex values


UNARY = {
    "exp": lambda z: np.exp(z), "log": lambda z: np.log(z), "log1p": lambda z: np.log1p(z),
    "expm1": lambda z: np.expm1(z), "sin": lambda z: np.sin(z), "cos": lambda z: np.cos(z),
    "tan": lambda z: np.tan(z), "sinh": lambda z: np.sinh(z), "cosh": lambda z: np.cosh(z),
    "tanh": lambda z: np.tanh(z), "arcsin": lambda z: np.arcsin(z), "arccos": lambda z: np.arccos(z),
    "arctan": lambda z: np.arctan(z), "arcsinh": lambda z: np.arcsinh(z),
    "arccosh": lambda z: np.arccosh(z), "arctanh": lambda z: np.arctanh(z),
    "sqrt": lambda z: np.sqrt(z), "square": lambda z: np.square(z),
    "reciprocal": lambda z: np.reciprocal(z), "log10": lambda z: np.log10(z),
    "exp2": lambda z: np.exp2(z), "negative": lambda z: -z,
    "power": lambda z: z ** 2.5, "integer_power": lambda z: z ** 3 + z ** -2,
    "arithmetic": lambda z: (z * (1 + 2j) - 3.0) / (1.0 + z * z),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_elementwise_math_matches_numpy_and_jax(name):
    check_numpy_and_jax(UNARY[name], Z, rtol=1e-9, atol=1e-9)
    check_function(UNARY[name], Z.astype(np.complex64), rtol=2e-5, atol=2e-5)


def test_binary_functions_of_two_complex_arrays():
    def mixed(z, w):
        return z * w - z / w + z ** w + np.exp(z - w)
    check_numpy_and_jax(mixed, Z, W, rtol=1e-9, atol=1e-9)


def test_rounding_and_nan_replacement_act_on_each_part_as_numpy():
    z = np.array([0.25 + 2.5j, -1.5 - 0.75j, np.inf + 2.0j, np.nan - np.inf * 1j, 1.26 - 0.35j, 3.5 + np.nan * 1j])

    def cleaned(z):
        return (np.round(z), np.round(z, 1), np.around(z, -1), np.rint(z), np.nan_to_num(z),
                np.nan_to_num(z, nan=1.0, posinf=2.0, neginf=-2.0))
    check_function(cleaned, z)
    check_function(cleaned, z.astype(np.complex64))


def test_derivatives_through_parts_put_back_together_match_jax():
    """nan_to_num of a complex array is complex(f(re), f(im)): the complex primitive's jvp
    and transpose carry the derivative."""
    def rebuilt_loss(z):
        return np.nan_to_num(z) * z + np.abs(np.nan_to_num(z * 1j)) ** 2
    check_numpy_and_jax(rebuilt_loss, Z, rtol=1e-10, atol=1e-12)


def test_convolve_conjugates_nothing_and_correlate_conjugates_v_as_numpy():
    def filtered(z, w):
        return np.convolve(z, w), np.correlate(z, w, "full"), np.correlate(w, z, "same")
    check_numpy_and_jax(filtered, Z, W[:3], rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------
# Promotion


@pytest.mark.parametrize("fn, args", [
    (lambda z, x: z + x, (Z.astype(np.complex64), np.ones(4))),            # -> complex128
    (lambda z, x: z * x, (Z.astype(np.complex64), np.ones(4, np.float32))),  # -> complex64
    (lambda z: z * 2.5 - 1, (Z.astype(np.complex64),)),                     # weak scalars
    (lambda x: x * (1 + 2j), (np.ones(3, np.float32),)),                    # weak complex
    (lambda x: x + 1j, (np.arange(3),)),                                    # int -> complex128
    (lambda x: x * np.complex64(1j), (np.ones(3, np.float32),)),
    (lambda z: z.astype(np.complex64) + np.float64(1.0), (Z,)),
])
def test_promotion_is_numpys(fn, args):
    check_function(fn, *args)


# ---------------------------------------------------------------------------------------
# Reductions and products


def reductions(z):
    return (np.sum(z), np.mean(z, axis=0), np.prod(z, axis=1), np.var(z), np.std(z, axis=1, ddof=1),
            np.var(z, axis=0, keepdims=True), np.cumsum(z, axis=0))


def norms(z):
    return (np.linalg.norm(z), np.linalg.norm(z, "fro"), np.linalg.norm(z, 1), np.linalg.norm(z, np.inf),
            np.linalg.norm(z[0]), np.linalg.norm(z[:, 0], 3), np.linalg.norm(z, axis=1))


def products(z, w):
    return (z @ w, np.dot(w.T, z.T), np.einsum("ij,jk->ik", z, w), np.vdot(z, z), np.outer(z[0], w[0]),
            np.matmul(z.T, z))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_reductions_norms_and_products_match_numpy_on_every_backend(dtype):
    tol = 1e-5 if dtype == np.complex64 else 1e-10
    m, w = M.astype(dtype), (M.T * (1 - 0.5j)).astype(dtype)
    check_numpy_and_jax(reductions, m, rtol=tol, atol=tol)
    check_numpy_and_jax(norms, m, rtol=tol, atol=tol)
    check_numpy_and_jax(products, m, w, rtol=tol, atol=tol)


@pytest.mark.parametrize("ord, axis", [("nuc", None), (2, None), (-2, (0, 1)), ("nuc", (1, 2))])
def test_matrix_norms_of_complex_matrices_are_of_their_singular_values(ord, axis):
    """Not of the moduli, |z| elementwise, whose singular values are not z's (a port of
    autograd's tests found 11.59 for NumPy's 13.79); derivatives in
    tests/numpy_api/test_complex_decompositions.py."""
    z = (np.arange(24).reshape(2, 3, 4) * (1 + 2j)) if axis == (1, 2) else np.arange(12).reshape(3, 4) * (1 + 2j)
    check_numpy_and_jax(lambda z: np.linalg.norm(z, ord, axis), z, derivatives=False)
    vector = z.reshape(-1)[:5]
    assert np.isclose(s2s.jit(lambda v: np.linalg.norm(v, 2))(vector), np.linalg.norm(vector, 2))


def test_variance_of_complex_values_is_real():
    for dtype, part in [(np.complex64, np.float32), (np.complex128, np.float64)]:
        assert s2s.jit(lambda z: np.var(z))(Z.astype(dtype)).dtype == part
        assert s2s.jit(lambda z: np.std(z, dtype=np.complex128))(Z.astype(dtype)).dtype == np.float64


# ---------------------------------------------------------------------------------------
# Derivatives with JAX's convention


def squared_modulus(z):
    return np.sum(np.abs(z) ** 2)


def phase_loss(z):
    return np.sum(np.angle(z) ** 2 + np.real(z) * np.imag(z))


def spread(z):
    return np.var(z) + np.std(z * 2.0)


def norm_loss(z):
    return np.linalg.norm(z) + np.linalg.norm(z, 1)


def inner(z, w):
    return np.real(np.vdot(z, w) * (1 - 1j)) + np.sum(np.abs(np.exp(z) * w))


def through_complex(x):
    return np.sum(np.abs(np.exp(1j * x) * (x + 2j)) + np.real(np.sqrt(x + 1j)))


@pytest.mark.parametrize("fn", [squared_modulus, phase_loss, spread, norm_loss])
def test_grad_of_a_real_function_of_complex_inputs_is_jaxs(fn):
    """jax.grad of f: C -> R is ∂f/∂x - i ∂f/∂y: for |z|² it is 2 conj(z)."""
    import jax
    jax_numpy()
    want = jax.grad(with_numpy(fn, jax_numpy()))(Z)
    for derived in (s2s.grad(fn), s2s.jit(s2s.grad(fn)), s2s.jit(s2s.grad(fn), backend="python")):
        got = derived(Z)
        assert np.asarray(got).dtype == np.complex128
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    if fn is squared_modulus:
        np.testing.assert_allclose(want, 2 * np.conj(Z))


def test_grad_with_respect_to_two_complex_arguments_and_a_real_one():
    import jax
    want = jax.grad(with_numpy(inner, jax_numpy()), argnums=(0, 1))(Z, W)
    for derived in (s2s.grad(inner, argnums=(0, 1)), s2s.jit(s2s.grad(inner, argnums=(0, 1)))):
        for got, expected in zip(derived(Z, W), want):
            np.testing.assert_allclose(got, expected, rtol=1e-10)
    check_derivatives(inner, with_numpy(inner, jax_numpy()), Z, W, rtol=1e-9, atol=1e-9)


def test_real_functions_through_complex_intermediates_first_and_second_order():
    import jax
    x = np.array([0.1, -0.4, 0.7])
    jax_fn = with_numpy(through_complex, jax_numpy())
    check_numpy_and_jax(through_complex, x, rtol=1e-9, atol=1e-9)
    for derived, want in [(s2s.grad(through_complex), jax.grad(jax_fn)(x)),
                          (s2s.hessian(through_complex), jax.hessian(jax_fn)(x))]:
        for run in (derived, s2s.jit(derived)):
            np.testing.assert_allclose(run(x), want, rtol=1e-9, atol=1e-9)


def holomorphic(z):
    return np.sin(z) * z ** 2 + np.exp(z) / (2.0 + z)


@pytest.mark.parametrize("transform", ["jacfwd", "jacrev", "hessian"])
def test_holomorphic_jacobians_match_jax(transform):
    import jax
    fn = holomorphic if transform != "hessian" else (lambda z: np.sum(holomorphic(z)))
    jax_fn = with_numpy(holomorphic, jax_numpy()) if transform != "hessian" else \
        (lambda z: jax_numpy().sum(with_numpy(holomorphic, jax_numpy())(z)))
    want = getattr(jax, transform)(jax_fn, holomorphic=True)(Z)
    derived = getattr(s2s, transform)(fn, holomorphic=True)
    for run in (derived, s2s.jit(derived), s2s.jit(derived, backend="python")):
        got = run(Z)
        assert np.asarray(got).dtype == np.complex128
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_jacobians_refuse_complex_without_the_holomorphic_promise_as_jax():
    with pytest.raises(TypeError, match="(?s)jacfwd requires real-valued inputs.*holomorphic=True"):
        s2s.jacfwd(squared_modulus)(Z)
    with pytest.raises(TypeError, match="(?s)jacrev requires real-valued outputs.*holomorphic=True"):
        s2s.jacrev(holomorphic)(Z)
    with pytest.raises(TypeError, match="requires outputs with complex dtype"):
        s2s.jacrev(squared_modulus, holomorphic=True)(Z)
    with pytest.raises(TypeError, match="requires inputs with complex dtype"):
        s2s.jacfwd(holomorphic, holomorphic=True)(Z.real)
    # Without a promise: jacrev of a real output of complex inputs, jacfwd of real inputs.
    import jax
    np.testing.assert_allclose(s2s.jacrev(squared_modulus)(Z),
                               jax.jacrev(with_numpy(squared_modulus, jax_numpy()))(Z))
    np.testing.assert_allclose(s2s.jacfwd(lambda x: np.exp(1j * x))(Z.real),
                               jax.jacfwd(lambda x: jax_numpy().exp(1j * x))(Z.real))


def test_jvp_and_vjp_of_non_holomorphic_complex_functions_match_jax():
    def non_holomorphic(z, w):
        return np.conj(z) * w + np.abs(z) * 1j + np.real(w) * np.imag(z)
    check_derivatives(non_holomorphic, with_numpy(non_holomorphic, jax_numpy()), Z, W, rtol=1e-10, atol=1e-12)


def test_sign_of_complex_values_has_its_derivative_where_jax_gives_0():
    """NumPy 2's sign(z) is z / |z|, smooth away from 0; jax's jvp gives 0 (a port of
    autograd's tests found s2s doing the same). Held to central differences instead, and 0
    at z == 0."""
    from s2s.test_util import check_grads
    z = np.array([0.6 + 0.12j, -1.0 + 2.0j, 3.0 - 0.5j])
    check_grads(lambda v: np.sign(v), (z,), order=2)
    check_grads(lambda v: np.sum(np.abs(np.sign(v) - 0.3j) ** 2), (z,), order=2)
    _, tangent = s2s.jvp(lambda v: np.sign(v), (np.array([0j, 1j]),), (np.array([1 + 1j, 1 + 1j]),))
    assert tangent.tolist() == [0j, 1 + 0j]
    x = np.array([0.5, -2.0, 0.0])   # real sign stays piecewise constant: tangent 0
    assert s2s.jvp(lambda v: np.sign(v), (x,), (np.ones(3),))[1].tolist() == [0.0, 0.0, 0.0]
    assert s2s.jit(s2s.grad(lambda v: np.sum(np.abs(np.sign(v * (1 + 0.5j)) - 0.3))))(x).shape == (3,)


def test_the_transpose_of_a_complex_linear_map_is_not_conjugated():
    """JAX's transpose of `z -> c z` is `ct -> c ct`, not conj(c) ct; of real and imag it is
    complex(ct, 0) and complex(0, -ct)."""
    import jax
    c = np.array([2.0 - 3.0j, 1j, 0.5, -1.0 + 1.0j])
    ct = np.array([1.0 + 1.0j, -2.0j, 3.0, 0.5 - 0.25j])
    (got,) = s2s.linear_transpose(lambda z: c * z, Z)(ct)
    np.testing.assert_allclose(got, c * ct)
    for fn, jax_fn in [(np.real, jax_numpy().real), (np.imag, jax_numpy().imag)]:
        (got,) = s2s.linear_transpose(lambda z: fn(z), Z)(ct.real)
        (want,) = jax.linear_transpose(lambda z: jax_fn(z), Z)(ct.real)
        np.testing.assert_allclose(got, want)
    (got,) = s2s.linear_transpose(lambda z: np.conj(z), Z)(ct)
    np.testing.assert_allclose(got, np.conj(ct))


# ---------------------------------------------------------------------------------------
# Emitted code, lowering and batching


def test_emitted_derivatives_convert_complex_cotangents_without_warnings():
    """A real input's cotangent is the real part of a complex one: `np.real(...)` in the
    emitted code, never `float(z)` or `np.float64(z)` of a complex value (which warn or fail)."""
    def scalar_loss(x):
        return np.abs(np.exp(1j * x) * (x + 2j)) ** 2
    source = s2s.emit_python(s2s.grad(scalar_loss), 0.3)
    assert "np.float64(np.real(" in source and "float(" not in source.replace("np.float64(np.real(", "")
    assert "complex =" not in source   # never shadows the builtin
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for run in (s2s.grad(scalar_loss), s2s.jit(s2s.grad(scalar_loss), backend="python"),
                    s2s.jit(s2s.grad(scalar_loss))):
            got = run(0.3)
            assert np.asarray(got).dtype == np.float64
            np.testing.assert_allclose(got, _jax_grad(scalar_loss, 0.3), rtol=1e-10)


def _jax_grad(fn, *args):
    import jax
    return jax.grad(with_numpy(fn, jax_numpy()))(*args)


def test_converting_complex_to_real_keeps_the_real_part_on_every_backend():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)   # NumPy's own astype warns
        check_function(lambda z: (z.astype(np.float32), z.astype(bool), z.astype(np.int32)), Z * 3)


def test_complex_from_parts_is_exact_with_infinite_parts_on_both_backends():
    re = np.array([0.0, np.inf, -1.5, np.nan], np.float32)
    im = np.array([np.inf, 0.0, -np.inf, 2.0], np.float32)

    def expected(re, im):
        out = np.empty(re.shape, np.complex64)
        out.real, out.imag = re, im
        return out
    check_staged(cx.complex.bind, expected, re, im)
    check_lowered(cx.complex.bind, expected, re, im)
    check_lowered(lambda z: (cx.conj.bind(z), cx.real.bind(z), cx.imag.bind(z)),
                  lambda z: (np.conj(z), z.real, z.imag), expected(re, im))


def test_vmap_of_parts_and_modulus():
    batch = np.stack([Z, W, Z * W])

    def per_example(z):
        return (np.real(z) * np.abs(z) + np.angle(np.conj(z)) + np.imag(z * (1 + 1j))
                + np.nan_to_num(z) * np.round(z[0], 1))
    expected = np.stack([per_example(z) for z in batch])
    for run in (s2s.vmap(per_example), s2s.jit(s2s.vmap(per_example))):
        np.testing.assert_allclose(run(batch), expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------
# Refusals: ordering and real-only functions


@pytest.mark.parametrize("fn, what", [
    (lambda z: z < z.conj(), "lt"), (lambda z: np.maximum(z, 0), "max"),
    (lambda z: np.floor(z), "floor"), (lambda z: np.cbrt(z), "cbrt"),
    (lambda z: np.arctan2(z, z), "atan2"), (lambda z: np.clip(z, 0, 1), "clamp"),
    (lambda z: np.fmod(z, 2), "rem"), (lambda z: z // 2, "rem"),
])
def test_ordering_and_real_only_functions_refuse_complex_clearly(fn, what):
    with pytest.raises(ShapeError) as caught:
        s2s.jit(fn)(Z)
    message = str(caught.value)
    assert f"{what} needs a real" in message and "c128" in message
    assert "complex numbers have no order" in message and "np.abs(z)" in message
    assert "test_complex.py" in message and "^" in message


@pytest.mark.parametrize("fn", [np.degrees, np.radians, np.deg2rad, np.rad2deg])
def test_angle_conversions_refuse_complex_as_numpy(fn):
    with pytest.raises(ShapeError, match="(?s)not defined for complex numbers.*help: apply it to np.real"):
        s2s.jit(lambda z: fn(z))(Z)


# ---------------------------------------------------------------------------------------
# Hypothesis: shapes and complex values


def complex_arrays(dtype):
    parts = arrays(np.float64, array_shapes(min_dims=1, max_dims=3, max_side=4),
                   elements=st.floats(-3, 3, allow_nan=False).filter(lambda v: abs(v) > 0.05))
    return parts.map(lambda re: (re + 1j * np.flip(re)).astype(dtype))


def mixed_loss(z):
    return np.sum(np.abs(np.exp(z / 4) - z) ** 2 + np.angle(z) * np.real(z)) + np.var(z)


@SETTINGS
@given(z=complex_arrays(np.complex128))
def test_values_and_derivatives_over_shapes_and_values(z):
    import jax
    check_numpy_and_jax(mixed_loss, z, rtol=1e-8, atol=1e-8)
    want = jax.grad(with_numpy(mixed_loss, jax_numpy()))(z)
    for derived in (s2s.grad(mixed_loss), s2s.jit(s2s.grad(mixed_loss))):
        np.testing.assert_allclose(derived(z), want, rtol=1e-8, atol=1e-8)


@SETTINGS
@given(z=complex_arrays(np.complex64))
def test_complex64_values_over_shapes(z):
    def values(z):
        return np.abs(z), np.conj(z) * z, np.sum(z, axis=0), np.mean(np.sqrt(z)), np.var(z)
    check_function(values, z, rtol=1e-4, atol=1e-4)


def test_the_cotangent_seed_through_real_is_written_as_a_number():
    """grad's seed 1.0 transposed through np.real is complex(1.0, 0.0): folded to the
    literal 1+0j, which `z * (1+0j)` then drops."""
    def real_of_rotation(x):
        return np.real(np.exp(1j * x) * (x + 2j))
    source = s2s.emit_python(s2s.grad(real_of_rotation), 0.3)
    assert "complex_from_parts" not in source and "(1+0j)" not in source
    np.testing.assert_allclose(s2s.grad(real_of_rotation)(0.3), _jax_grad(real_of_rotation, 0.3), rtol=1e-12)
