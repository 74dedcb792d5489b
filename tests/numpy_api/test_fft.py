"""np.fft on staged values: NumPy's values and dtypes on every backend over hypothesis
shapes, axes, lengths and norms; jax.numpy.fft's derivatives (jvp, vjp with complex
cotangents, grad and hessian of real losses); vmap; and clear errors for what NumPy refuses."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import s2s
from s2s.errors import ShapeError
from tests.helpers import check_derivatives, check_function, check_numpy_and_jax, with_numpy

SETTINGS = settings(max_examples=12, deadline=None)
NORMS = [None, "backward", "ortho", "forward"]


def jax_numpy():
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jnp


def random_array(shape, kind, rng, dtype=np.float64):
    x = rng.standard_normal(shape)
    if kind == "complex":
        x = x + 1j * rng.standard_normal(shape)
        return x.astype(np.result_type(dtype, np.complex64))
    return x.astype(dtype)


def check_against_numpy_and_jax(fn, x, *static):
    """`fn(x, *static)` against NumPy on every backend and its derivatives against the same
    source run by jax.numpy (the static lengths, axes and norm bound)."""
    def transform(x):
        return fn(x, *static)

    def jax_transform(x):
        return with_numpy(fn, jax_numpy())(x, *static)

    check_function(transform, x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s2s.jit(transform, backend="python")(x), fn(x, *static), rtol=1e-9, atol=1e-9)
    check_derivatives(transform, jax_transform, x, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------------------------------
# One-axis transforms: n pads or truncates, axis anywhere, every norm


def one_axis(x, name, n, axis, norm):
    return getattr(np.fft, name)(x, n=n, axis=axis, norm=norm)


ONE_AXIS = {"fft": ["real", "complex"], "ifft": ["complex"], "rfft": ["real"],
            "irfft": ["complex"], "hfft": ["complex"], "ihfft": ["real"]}


@SETTINGS
@given(st.sampled_from(sorted(ONE_AXIS)), st.data())
def test_one_axis_transforms_match_numpy_and_jax(name, data):
    shape = data.draw(st.lists(st.integers(2, 5), min_size=1, max_size=3), "shape")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), "axis")
    n = data.draw(st.none() | st.integers(2, 9), "n")
    norm = data.draw(st.sampled_from(NORMS), "norm")
    kind = data.draw(st.sampled_from(ONE_AXIS[name]), "kind")
    x = random_array(tuple(shape), kind, np.random.default_rng(data.draw(st.integers(0, 999))))

    check_against_numpy_and_jax(one_axis, x, name, n, axis, norm)


# ---------------------------------------------------------------------------------------
# 2-D and n-D transforms: s and axes (any order, more than XLA's 3 at once)


def n_axes(x, name, s, axes, norm):
    return getattr(np.fft, name)(x, s=s, axes=axes, norm=norm)


N_AXES = {"fftn": "complex", "ifftn": "complex", "rfftn": "real", "irfftn": "complex"}


@SETTINGS
@given(st.sampled_from(sorted(N_AXES)), st.data())
def test_n_dimensional_transforms_match_numpy_and_jax(name, data):
    shape = tuple(data.draw(st.lists(st.integers(2, 4), min_size=1, max_size=5), "shape"))
    axes = tuple(data.draw(st.permutations(range(len(shape))), "order")[
        :data.draw(st.integers(1, len(shape)), "how many")])
    s = data.draw(st.none() | st.tuples(*[st.integers(2, 5) for _ in axes]), "s")
    norm = data.draw(st.sampled_from(NORMS), "norm")
    x = random_array(shape, N_AXES[name], np.random.default_rng(data.draw(st.integers(0, 999))))

    check_against_numpy_and_jax(n_axes, x, name, s, axes, norm)


def two_dimensional(x, z):
    return (np.fft.fft2(x)[..., :3], np.fft.ifft2(z, s=(3, 5), norm="ortho"),
            np.fft.rfft2(x, axes=(0, 2)), np.fft.irfft2(z, norm="forward"))


def every_axis_by_default(x, z):
    return np.fft.fftn(z), np.fft.rfftn(x), np.fft.irfftn(z), np.fft.ifftn(x, norm="ortho")


@pytest.mark.parametrize("fn", [two_dimensional, every_axis_by_default])
def test_defaults_and_2d_forms(fn):
    rng = np.random.default_rng(1)
    x, z = random_array((2, 3, 4), "real", rng), random_array((3, 2, 4), "complex", rng)
    check_numpy_and_jax(fn, x, z, rtol=1e-9, atol=1e-9)


def more_axes_than_xla_transforms_at_once(x, z):
    return (np.fft.fftn(z, axes=(4, 0, 2, 1)), np.fft.rfftn(x, axes=(1, 2, 3, 4, 0)),
            np.fft.irfftn(z, s=(2, 3, 4, 5), axes=(3, 0, 1, 2)))


def test_more_than_three_axes_go_in_groups():
    """XLA transforms at most 3 axes at once: the rest go in further groups, the real
    transform first (rfftn) or last (irfftn)."""
    rng = np.random.default_rng(8)
    x, z = random_array((2, 3, 2, 3, 4), "real", rng), random_array((2, 3, 2, 3, 4), "complex", rng)
    check_numpy_and_jax(more_axes_than_xla_transforms_at_once, x, z, rtol=1e-9, atol=1e-9)


def minus_one_keeps_the_size(x, z):
    return np.fft.fft2(x, s=[-1, 6]), np.fft.irfftn(z, s=(2, -1), axes=(0, 2))


def test_minus_one_in_s_keeps_the_axis_size_as_numpy_2():
    """NumPy 2's s=-1, which jax.numpy.fft does not take: values on every backend only."""
    rng = np.random.default_rng(9)
    check_function(minus_one_keeps_the_size, random_array((2, 3, 4), "real", rng),
                   random_array((3, 2, 4), "complex", rng), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------
# Dtypes as NumPy 2


def float32_in_complex64_out(x):
    return np.fft.fft(x), np.fft.rfft2(x), np.fft.irfft(np.fft.rfft(x), 4)


def integers_become_complex128(k):
    return np.fft.fft(k), np.fft.rfft(k)


def test_dtypes_are_numpy_2s():
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    check_function(float32_in_complex64_out, x, rtol=1e-5, atol=1e-5)
    check_function(float32_in_complex64_out, x.astype(np.float16), rtol=1e-3, atol=1e-3)
    check_function(integers_become_complex128, np.arange(6).reshape(2, 3), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------
# Derivatives of real losses, complex cotangents, vmap


def power_spectrum_loss(x):
    return np.sum(np.abs(np.fft.fft(x)) ** 2) + np.sum(np.real(np.fft.irfft(np.fft.rfft(x) * 1.5j)))


def smoothed(x):
    spectrum = np.fft.rfft(x, axis=0)
    return np.fft.irfft(spectrum * np.exp(-np.fft.rfftfreq(x.shape[0]))[:, None], n=x.shape[0], axis=0)


def test_grad_and_hessian_of_real_losses_match_jax():
    import jax
    jnp = jax_numpy()
    x = np.random.default_rng(3).standard_normal(6)
    np.testing.assert_allclose(s2s.grad(power_spectrum_loss)(x),
                               jax.grad(with_numpy(power_spectrum_loss, jnp))(x), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(s2s.hessian(power_spectrum_loss)(x),
                               jax.hessian(with_numpy(power_spectrum_loss, jnp))(x), rtol=1e-9, atol=1e-9)


def test_grad_of_a_real_loss_of_complex_inputs_matches_jax():
    import jax
    jnp = jax_numpy()
    z = random_array((5,), "complex", np.random.default_rng(4))

    def loss(z):
        return np.sum(np.abs(np.fft.ifft(z, n=8)) ** 2)

    np.testing.assert_allclose(s2s.grad(loss)(z), jax.grad(with_numpy(loss, jnp))(z), rtol=1e-9, atol=1e-9)


def test_vjp_with_complex_cotangents_of_a_filter():
    x = np.random.default_rng(5).standard_normal((7, 2))
    check_derivatives(smoothed, with_numpy(smoothed, jax_numpy()), x, rtol=1e-9, atol=1e-9)


def test_vmap_of_transforms_matches_a_loop():
    xs = np.random.default_rng(6).standard_normal((4, 3, 6))

    def per_example(x):
        return np.fft.fftshift(np.abs(np.fft.fft2(x, s=(3, 8), axes=(1, 0))))

    want = np.stack([per_example(x) for x in xs])
    for run in (s2s.vmap(per_example), s2s.jit(s2s.vmap(per_example))):
        np.testing.assert_allclose(run(xs), want, rtol=1e-10, atol=1e-10)
    batch_last = np.moveaxis(xs, 0, 2)
    np.testing.assert_allclose(s2s.vmap(per_example, in_axes=2)(batch_last), want, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------
# Shifts and frequencies


def shifts(x):
    return np.fft.fftshift(x), np.fft.ifftshift(x, axes=-1), np.fft.ifftshift(np.fft.fftshift(x, axes=(0,)), axes=0)


def frequencies(x):
    return x * np.fft.fftfreq(5, d=0.5), np.fft.rfftfreq(8, 0.1) * x[0]


def test_shifts_and_frequencies():
    x = np.random.default_rng(7).standard_normal((3, 5))
    check_numpy_and_jax(shifts, x)
    check_numpy_and_jax(frequencies, x)


# ---------------------------------------------------------------------------------------
# Bad inputs


def length_zero(x):
    return np.fft.fft(x, n=0)


def axis_out_of_range(x):
    return np.fft.rfft(x, axis=2)


def repeated_axes(x):
    return np.fft.fftn(x, axes=(0, 0))


def unknown_norm(x):
    return np.fft.fft(x, norm="unitary")


def rfft_of_complex(x):
    return np.fft.rfft(x * 1j)


def mismatched_s(x):
    return np.fft.fftn(x, s=(2, 2), axes=(0,))


def too_short_for_irfft(x):
    return np.fft.irfft(x[:, :1])


@pytest.mark.parametrize("fn, message", [
    (length_zero, r"invalid number of FFT data points \(0\)"),
    (axis_out_of_range, "axis 2 is out of bounds for an array of dimension 2"),
    (repeated_axes, r"repeated axes \(0, 0\)"),
    (unknown_norm, "invalid norm 'unitary'"),
    (rfft_of_complex, "np.fft.rfft needs a real array"),
    (mismatched_s, "must have the same length"),
    (too_short_for_irfft, r"invalid number of FFT data points \(0\)"),
])
def test_bad_inputs_are_clear_errors(fn, message):
    with pytest.raises(ShapeError, match=message) as caught:
        s2s.jit(fn)(np.ones((3, 4)))
    assert "test_fft.py" in str(caught.value)
