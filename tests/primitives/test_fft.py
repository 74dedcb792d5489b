"""The `fft` primitive: its four transforms against NumPy on every backend, its transposes
against jax.lax.fft's and against the defining identity of a transpose, its batching
against a loop, and the operands it refuses."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.errors import ShapeError
from s2s.primitives.fft import fft
from tests.helpers import check_lowered, check_staged

SETTINGS = settings(max_examples=12, deadline=None)
NUMPY_TRANSFORMS = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn, "IRFFT": np.fft.irfftn}


def jax_lax():
    import jax
    jax.config.update("jax_enable_x64", True)
    return jax


def operand_for(fft_type, batch, lengths, real_dtype, rng):
    """A random operand of the shape and dtype the transform takes."""
    trailing = lengths[:-1] + (lengths[-1] // 2 + 1,) if fft_type == "IRFFT" else lengths
    shape = tuple(batch) + tuple(trailing)
    x = rng.standard_normal(shape)
    if fft_type != "RFFT":
        x = x + 1j * rng.standard_normal(shape)
        return x.astype(np.result_type(real_dtype, np.complex64))
    return x.astype(real_dtype)


def transform(fft_type, lengths):
    def apply(x):
        return fft.bind(x, fft_type=fft_type, fft_lengths=lengths)
    return apply


def numpy_transform(fft_type, lengths):
    """NumPy's transform over the trailing axes, written out independently of the impl."""
    axes = tuple(range(-len(lengths), 0))
    return lambda x: NUMPY_TRANSFORMS[fft_type](x, s=lengths, axes=axes)


fft_cases = st.tuples(st.sampled_from(sorted(NUMPY_TRANSFORMS)),
                      st.lists(st.integers(1, 3), max_size=2),
                      st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
                      st.sampled_from([np.float32, np.float64]),
                      st.integers(0, 2 ** 16))


@SETTINGS
@given(fft_cases)
def test_values_match_numpy_on_every_backend(case):
    fft_type, batch, lengths, real_dtype, seed = case
    x = operand_for(fft_type, batch, lengths, real_dtype, np.random.default_rng(seed))
    tol = 1e-4 if real_dtype == np.float32 else 1e-10
    check_staged(transform(fft_type, lengths), numpy_transform(fft_type, lengths), x, rtol=tol, atol=tol)
    check_lowered(transform(fft_type, lengths), numpy_transform(fft_type, lengths), x, rtol=tol, atol=tol)


def test_result_dtypes_are_numpy_2s():
    rng = np.random.default_rng(0)
    for real_dtype, complex_dtype in [(np.float32, np.complex64), (np.float64, np.complex128)]:
        x = rng.standard_normal((2, 6)).astype(real_dtype)
        spectrum = s2s.jit(transform("RFFT", (6,)))(x)
        assert spectrum.dtype == complex_dtype and spectrum.shape == (2, 4)
        back = s2s.jit(transform("IRFFT", (6,)))(spectrum)
        assert back.dtype == real_dtype and back.shape == (2, 6)
        np.testing.assert_allclose(back, x, rtol=1e-5, atol=1e-5)


@SETTINGS
@given(fft_cases)
def test_jvp_and_vjp_match_jax_lax_fft(case):
    """Linear maps: the jvp is the map of the tangent and the vjp its transpose, with JAX's
    unconjugated convention (the IRFFT weights and conjugate included)."""
    jax = jax_lax()
    fft_type, batch, lengths, _, seed = case
    rng = np.random.default_rng(seed)
    x = operand_for(fft_type, batch, lengths, np.float64, rng)
    f = transform(fft_type, lengths)

    def jax_f(v):
        return jax.lax.fft(v, fft_type, lengths)

    tangent = operand_for(fft_type, batch, lengths, np.float64, rng)
    _, t_out = s2s.jvp(f, (x,), (tangent,))
    np.testing.assert_allclose(t_out, jax.jvp(jax_f, (x,), (tangent,))[1], rtol=1e-10, atol=1e-10)

    out, vjp_fn = s2s.vjp(f, x)
    ct = rng.standard_normal(out.shape) + (1j * rng.standard_normal(out.shape) if out.dtype.kind == "c" else 0)
    (got,) = vjp_fn(ct.astype(out.dtype))
    (want,) = jax.vjp(jax_f, x)[1](ct.astype(out.dtype))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("fft_type", sorted(NUMPY_TRANSFORMS))
@pytest.mark.parametrize("lengths", [(1,), (2,), (7,), (8,), (3, 4), (2, 3, 5)])
def test_transpose_satisfies_the_pairing_identity(fft_type, lengths):
    """Re sum(ct * A(t)) == Re sum(A^T(ct) * t), the real pairing JAX's convention uses,
    for odd and even last lengths (IRFFT's Hermitian weights differ between them)."""
    rng = np.random.default_rng(len(lengths))
    f = transform(fft_type, lengths)
    t = operand_for(fft_type, (2,), lengths, np.float64, rng)
    out, vjp_fn = s2s.vjp(f, t)
    ct = rng.standard_normal(out.shape) + (1j * rng.standard_normal(out.shape) if out.dtype.kind == "c" else 0)
    (ct_in,) = vjp_fn(ct.astype(out.dtype))
    np.testing.assert_allclose(np.real(np.sum(ct * numpy_transform(fft_type, lengths)(t))),
                               np.real(np.sum(ct_in * t)), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("fft_type", sorted(NUMPY_TRANSFORMS))
@pytest.mark.parametrize("in_axis", [0, 1, 2])
def test_vmap_moves_a_batch_off_the_transformed_axes(fft_type, in_axis):
    rng = np.random.default_rng(in_axis)
    lengths = (3, 4)
    per_example = operand_for(fft_type, (), lengths, np.float64, rng)
    xs = np.stack([per_example * (k + 1) for k in range(5)], axis=in_axis)
    want = np.stack([numpy_transform(fft_type, lengths)(np.take(xs, k, in_axis)) for k in range(5)])
    for run in (s2s.vmap(transform(fft_type, lengths), in_axes=in_axis),
                s2s.jit(s2s.vmap(transform(fft_type, lengths), in_axes=in_axis))):
        np.testing.assert_allclose(run(xs), want, rtol=1e-10, atol=1e-10)


def test_emitted_python_calls_numpy_fft():
    x = np.ones((2, 8))
    assert "np.fft.rfft(x)" in s2s.emit_python(transform("RFFT", (8,)), x)
    z = np.ones((2, 3, 5), complex)
    assert "np.fft.irfftn(x, s=(3, 8), axes=(-2, -1))" in s2s.emit_python(transform("IRFFT", (3, 8)), z)


@pytest.mark.parametrize("fft_type, operand, lengths, message", [
    ("FFT", np.ones(4), (4,), "FFT needs a complex operand"),
    ("RFFT", np.ones(4, complex), (4,), "RFFT needs a float32 or float64 operand"),
    ("FFT", np.ones((2, 4), complex), (3,), r"needs trailing axes \(3,\)"),
    ("IRFFT", np.ones(4, complex), (4,), r"needs trailing axes \(3,\)"),
    ("FFT", np.ones((1, 1, 1, 1), complex), (1, 1, 1, 1), "1 to 3 positive lengths"),
    ("FFT", np.ones(4, complex), (4, 1), "1 to 3 positive lengths"),
    ("DCT", np.ones(4, complex), (4,), "fft_type must be one of"),
])
def test_refuses_operands_it_cannot_transform(fft_type, operand, lengths, message):
    with pytest.raises(ShapeError, match=message):
        s2s.make_jaxpr(transform(fft_type, lengths))(operand)
