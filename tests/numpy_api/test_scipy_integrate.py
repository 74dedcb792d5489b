"""scipy.integrate.odeint in model code (s2s/ode.py): SciPy's odeint is the oracle for
values (on eval_jaxpr, the emitted module and XLA, via check_function), and
jax.experimental.ode.odeint, the same Dormand-Prince method and adjoint, for reverse-mode
derivatives in y0, t and args (first and second order), besides central differences."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate as integrate
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from jax.experimental.ode import odeint as jax_odeint

import s2s
from s2s.errors import S2SError, ShapeError, UnsupportedFunctionError
from tests.helpers import assert_same, check_function

# The blow-ups _stays_bounded looks for make SciPy warn.
pytestmark = pytest.mark.filterwarnings("ignore::scipy.integrate.ODEintWarning")

SETTINGS = settings(max_examples=5, deadline=None)
# jax compiles its oracle afresh for each example: fewer of them.
DERIVATIVE_SETTINGS = settings(max_examples=3, deadline=None)


# Dynamics, written as a user writes them: func(y, t, *args).

def decay(y, t):
    return -0.5 * y


def oscillator(y, t, omega):
    return np.stack([y[1], -omega ** 2 * y[0]])


def nonlinear(y, t, arg1, arg2):
    return -np.sqrt(t) - y + arg1 - np.mean((y + arg2) ** 2)


def decay_path(y0, t):
    return integrate.odeint(decay, y0, t)


def oscillator_path(y0, t, omega):
    return integrate.odeint(oscillator, y0, t, args=(omega,))


def nonlinear_path(y0, t, arg1, arg2):
    # Tight tolerances: where this system grows fast, LSODA's global error at its default
    # ones reaches 1e-5 (s2s's stays nearer the true path), too loose for an oracle.
    return integrate.odeint(nonlinear, y0, t, (arg1, arg2), rtol=1e-10, atol=1e-10)


def nonlinear_loss(y0, t, arg1, arg2):
    return np.sum(np.sin(nonlinear_path(y0, t, arg1, arg2)))


def jax_nonlinear_loss(y0, t, arg1, arg2):
    def func(y, t, arg1, arg2):
        return -jnp.sqrt(t) - y + arg1 - jnp.mean((y + arg2) ** 2)
    return jnp.sum(jnp.sin(jax_odeint(func, y0, t, arg1, arg2, rtol=1e-10, atol=1e-10)))


def _nonlinear_args(seed: int):
    rng = np.random.RandomState(seed)
    return rng.randn(3), np.linspace(0.1, 0.2 + rng.rand(), 4), rng.randn(3), rng.randn(3)


def _stays_bounded(args) -> bool:
    """Whether the nonlinear system (whose -mean((y + arg2)**2) can blow up in finite
    time, where SciPy returns garbage and s2s nan) stays moderate over t."""
    with np.errstate(all="ignore"):
        return bool(np.all(np.abs(integrate.odeint(nonlinear, args[0], args[1], args[2:])) < 1e3))


# ---------------------------------------------------------------------------------------
# Values, against SciPy's LSODA


def test_exponential_decay_matches_scipy_and_the_closed_form():
    y0, t = np.array([1.0, -2.0, 3.0]), np.linspace(0.0, 4.0, 9)
    check_function(decay_path, y0, t, rtol=1e-6, atol=1e-7)
    assert_same(s2s.jit(decay_path)(y0, t), y0 * np.exp(-0.5 * t)[:, None], rtol=1e-6, atol=1e-7)


@SETTINGS
@given(st.floats(0.5, 3.0), st.floats(-1.0, 1.0))
def test_harmonic_oscillator_matches_scipy(omega, velocity):
    y0, t = np.array([1.0, velocity]), np.linspace(0.0, 3.0, 7)
    check_function(oscillator_path, y0, t, np.float64(omega), rtol=1e-6, atol=1e-6)


@SETTINGS
@given(st.integers(0, 1000))
def test_nonlinear_with_args_matches_scipy(seed):
    assume(_stays_bounded(_nonlinear_args(seed)))
    check_function(nonlinear_path, *_nonlinear_args(seed), rtol=1e-6, atol=1e-6)


def test_tfirst_calls_func_with_the_time_first():
    def path(y0, t):
        return integrate.odeint(lambda t, y: -t * y, y0, t, tfirst=True)
    check_function(path, np.array([1.0, 2.0]), np.linspace(0.0, 2.0, 5), rtol=1e-6, atol=1e-7)


def test_lax_odeint_takes_jax_signature_with_pytree_args():
    def path(y0, t, params):
        return s2s.lax.odeint(lambda y, t, p: -p["rate"] * y + p["drive"][0], y0, t, params, rtol=1e-10, atol=1e-10)
    y0, t = np.array([1.0, 2.0]), np.linspace(0.0, 1.0, 4)
    params = {"rate": np.float64(0.5), "drive": (np.float64(0.1),)}
    expected = integrate.odeint(lambda y, t: -0.5 * y + 0.1, y0, t, rtol=1e-10, atol=1e-10)
    assert_same(s2s.jit(path)(y0, t, params), expected, rtol=1e-7, atol=1e-9)
    assert_same(path(y0, t, params), expected, rtol=1e-7, atol=1e-9)   # on NumPy values, unstaged
    got = s2s.grad(lambda p: np.sum(path(y0, t, p)))(params)
    steady, decay_t = 0.1 / 0.5, np.exp(-0.5 * t)[:, None]   # y = (y0 - d/r) e^(-rt) + d/r
    d_dr = steady / 0.5 * decay_t - t[:, None] * decay_t * (y0 - steady) - steady / 0.5
    assert_same(got["rate"], np.sum(d_dr), rtol=1e-6)
    assert_same(got["drive"][0], np.sum((1 - decay_t) / 0.5 * np.ones(2)), rtol=1e-6)


def test_lax_odeint_takes_y0_of_any_shape_and_matches_jax():
    def loss(y0, a):
        return np.sum(np.tanh(s2s.lax.odeint(lambda y, t, a: a @ y - y ** 3, y0, np.linspace(0.0, 1.0, 3), a)))

    def jax_loss(y0, a):
        return jnp.sum(jnp.tanh(jax_odeint(lambda y, t, a: a @ y - y ** 3, y0, jnp.linspace(0.0, 1.0, 3), a)))
    rng = np.random.RandomState(5)
    y0, a = rng.randn(2, 3), 0.5 * rng.randn(2, 2)
    assert_same(s2s.jit(loss)(y0, a), np.asarray(jax_loss(y0, a)), rtol=1e-6)
    for got, expected in zip(s2s.grad(loss, argnums=(0, 1))(y0, a), jax.grad(jax_loss, argnums=(0, 1))(y0, a)):
        assert_same(got, np.asarray(expected), rtol=1e-5, atol=1e-7)


def test_float32_and_scalar_y0_integrate_in_float64_as_scipy():
    def path(y0, t):
        return integrate.odeint(lambda y, t: -y, y0, t)
    check_function(path, np.float32(1.5), np.linspace(0.0, 1.0, 3, dtype=np.float32), rtol=1e-6, atol=1e-7)


def test_a_single_time_gives_y0_and_its_gradient():
    t = np.array([0.3])
    assert_same(s2s.jit(decay_path)(np.array([2.0]), t), np.array([[2.0]]))
    got = s2s.grad(lambda y0, t: np.sum(decay_path(y0, t)), argnums=(0, 1))(np.array([2.0]), t)
    assert_same(got[0], np.array([1.0]))
    assert_same(got[1], np.array([0.0]))


def test_mxstep_exhausted_gives_nan_not_a_wrong_value():
    def stiff(y0, t):
        return integrate.odeint(lambda y, t: -1e6 * (y - np.cos(t)), y0, t, mxstep=5)
    ys = s2s.jit(stiff)(np.array([0.0]), np.array([0.0, 10.0]))
    assert ys[0, 0] == 0.0 and np.isnan(ys[1, 0])


def test_times_going_back_give_nan_not_a_wrong_value():
    ys = s2s.jit(decay_path)(np.array([1.0]), np.array([1.0, 0.5]))
    assert ys[0, 0] == 1.0 and np.isnan(ys[1, 0])


# ---------------------------------------------------------------------------------------
# Reverse mode: the adjoint method, against jax's odeint and central differences


@DERIVATIVE_SETTINGS
@given(st.integers(0, 1000))
def test_grad_in_y0_t_and_args_matches_jax(seed):
    args = _nonlinear_args(seed)
    assume(_stays_bounded(args))
    got = s2s.grad(nonlinear_loss, argnums=(0, 1, 2, 3))(*args)
    expected = jax.grad(jax_nonlinear_loss, argnums=(0, 1, 2, 3))(*args)
    for g, e in zip(got, expected):
        assert_same(g, np.asarray(e), rtol=1e-5, atol=1e-6)


def test_grad_matches_central_differences():
    args = _nonlinear_args(3)
    got = s2s.grad(nonlinear_loss, argnums=(0, 1, 2, 3))(*args)
    eps = 1e-6
    for which, g in enumerate(got):
        numeric = np.zeros_like(args[which])
        for i in range(args[which].size):
            up, down = [list(args) for _ in range(2)]
            up[which], down[which] = args[which].copy(), args[which].copy()
            up[which][i] += eps
            down[which][i] -= eps
            numeric[i] = (nonlinear_loss(*up) - nonlinear_loss(*down)) / (2 * eps)
        assert_same(g, numeric, rtol=1e-5, atol=1e-6)


def test_vjp_of_the_whole_path_matches_jax():
    y0, t, omega = np.array([1.0, 0.3]), np.linspace(0.0, 2.0, 5), np.float64(1.7)
    cotangent = np.random.RandomState(0).randn(5, 2)
    _, pullback = s2s.vjp(oscillator_path, y0, t, omega)

    def jax_path(y0, t, omega):
        return jax_odeint(lambda y, t, w: jnp.stack([y[1], -w ** 2 * y[0]]), y0, t, omega)
    _, jax_pullback = jax.vjp(jax_path, y0, t, omega)
    expected = jax_pullback(cotangent)
    for g, e in zip(pullback(cotangent), expected):
        assert_same(g, np.asarray(e), rtol=1e-5, atol=1e-6)


def test_second_order_reverse_matches_jax():
    args = _nonlinear_args(7)
    got = s2s.jacrev(s2s.grad(nonlinear_loss, argnums=2), argnums=2)(*args)
    expected = jax.jacrev(jax.grad(jax_nonlinear_loss, argnums=2), argnums=2)(*args)
    assert_same(got, np.asarray(expected), rtol=1e-4, atol=1e-6)


def test_jit_grad_on_both_backends():
    args = _nonlinear_args(11)
    expected = s2s.grad(nonlinear_loss, argnums=(0, 1, 2, 3))(*args)
    for backend in ("xla", "python"):
        got = s2s.jit(s2s.grad(nonlinear_loss, argnums=(0, 1, 2, 3)), backend=backend)(*args)
        for g, e in zip(got, expected):
            assert_same(g, e, rtol=1e-9, atol=1e-12)


# A state and times the model reads as globals (issue 42): jit's program took them as its
# constants in another order than it was passed them (f64[15] expected, f64[2] given).
GLOBAL_Y0 = np.array([1.0, 0.5])
GLOBAL_T = np.linspace(0.0, 1.0, 15)


def damped_rotation(y, t, a):
    return np.stack([-a * y[1], a * y[0]]) * 0.5 - 0.1 * y


def energy_from_globals(a):
    return np.sum(integrate.odeint(damped_rotation, GLOBAL_Y0, GLOBAL_T, args=(a,), rtol=1e-10, atol=1e-10)
                  * np.array([1.0, 2.0]))


def jax_energy_from_globals(a):
    def func(y, t, a):
        return jnp.stack([-a * y[1], a * y[0]]) * 0.5 - 0.1 * y
    return jnp.sum(jax_odeint(func, GLOBAL_Y0, GLOBAL_T, a, rtol=1e-10, atol=1e-10) * jnp.array([1.0, 2.0]))


def test_y0_and_t_read_from_globals_under_jit():
    a = np.float64(1.3)
    check_function(energy_from_globals, a, rtol=1e-7, atol=1e-9)   # SciPy, eval_jaxpr, emitted, jit
    expected = jax.grad(jax_energy_from_globals)(a)
    for backend in ("xla", "python"):
        assert_same(s2s.jit(s2s.grad(energy_from_globals), backend=backend)(a), np.asarray(expected), rtol=1e-6)


def test_closure_over_a_staged_value_gets_its_gradient():
    def loss(y0, rate):
        return np.sum(integrate.odeint(lambda y, t: -rate * y, y0, np.array([0.0, 1.0, 2.0])))
    y0, rate = np.array([1.0, 2.0]), np.float64(0.7)
    got = s2s.grad(loss, argnums=(0, 1))(y0, rate)
    t = np.array([1.0, 2.0])
    expected_y0 = 1 + np.exp(-rate * t).sum()
    expected_rate = np.sum(y0) * np.sum(-t * np.exp(-rate * t))
    assert_same(got[0], np.full(2, expected_y0), rtol=1e-6)
    assert_same(got[1], expected_rate, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Bad inputs


def test_func_returning_the_wrong_shape_is_refused():
    def path(y0, t):
        return integrate.odeint(lambda y, t: np.sum(y) * np.ones(4), y0, t)
    with pytest.raises(ShapeError, match="odeint's func returns shape .4,., but y0 has shape .3,."):
        s2s.jit(path)(np.ones(3), np.linspace(0.0, 1.0, 3))


def test_t_not_1d_is_refused():
    with pytest.raises(ShapeError, match="1-d array of times"):
        s2s.jit(decay_path)(np.ones(3), np.ones((2, 2)))


def test_y0_of_two_dimensions_is_refused_as_scipy_refuses_it():
    with pytest.raises(ShapeError, match="y0 one-dimensional"):
        s2s.jit(decay_path)(np.ones((2, 2)), np.linspace(0.0, 1.0, 3))


def test_vmap_over_initial_conditions_and_its_grad():
    y0s, t = np.array([[1.0, 0.0], [0.5, 0.3], [0.0, -1.0]]), np.linspace(0.0, 2.0, 5)
    omega = np.float64(1.3)
    got = s2s.vmap(oscillator_path, in_axes=(0, None, None))(y0s, t, omega)
    assert_same(got, np.stack([integrate.odeint(oscillator, y0, t, args=(omega,)) for y0 in y0s]), rtol=1e-6)
    grads = s2s.vmap(s2s.grad(lambda y0, w: np.sum(oscillator_path(y0, t, w)), argnums=1), in_axes=(0, None))(y0s, omega)
    eps = 1e-6
    for y0, g in zip(y0s, grads):
        numeric = (integrate.odeint(oscillator, y0, t, args=(omega + eps,)).sum()
                   - integrate.odeint(oscillator, y0, t, args=(omega - eps,)).sum()) / (2 * eps)
        assert_same(g, numeric, rtol=1e-5)


def test_lsoda_options_are_refused():
    def path(y0, t):
        return integrate.odeint(decay, y0, t, hmax=0.1)
    with pytest.raises(UnsupportedFunctionError, match="hmax"):
        s2s.jit(path)(np.ones(3), np.linspace(0.0, 1.0, 3))


def test_complex_args_are_refused():
    with pytest.raises(UnsupportedFunctionError, match="complex args"):
        s2s.jit(oscillator_path)(np.ones(2), np.linspace(0.0, 1.0, 3), np.complex128(1.0))


def test_forward_mode_is_refused_clearly():
    with pytest.raises(S2SError, match="forward-mode differentiation"):
        s2s.jvp(decay_path, (np.ones(2), np.linspace(0.0, 1.0, 3)), (np.ones(2), np.zeros(3)))
