"""scipy.special's functions in model code: SciPy is the oracle for values and dtypes (on
eval_jaxpr, the emitted module and XLA, via check_function), jax.scipy.special for
derivatives (jvp and vjp, and second order), over hypothesis values that reach the tails
(logsumexp of values whose exp overflows, xlogy at x == 0, erfc far right). SciPy stays
optional: s2s imports and runs without it, and importing s2s never imports it."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import jax.scipy.special
import numpy as np
import pytest
import scipy.special as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import s2s
from s2s.errors import UnsupportedFunctionError
from tests.helpers import BLOCK_JAX, CHECKOUT_PATH, check_derivatives, check_function

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SETTINGS = settings(max_examples=10, deadline=None)
# jax compiles each oracle afresh: fewer examples, of one shape, keep these quick.
DERIVATIVE_SETTINGS = settings(max_examples=4, deadline=None)


def jax_twin(fn, **modules):
    """`fn` (and the functions of its module it calls) with `np` and `sp` read as jax.numpy
    and jax.scipy.special (and `modules` as given): the same source as the derivative oracle."""
    namespace = dict(fn.__globals__, np=jnp, sp=jax.scipy.special, **modules)
    for name, value in list(namespace.items()):
        if (isinstance(value, types.FunctionType) and value.__module__ == fn.__module__
                and value.__closure__ is None):
            namespace[name] = types.FunctionType(value.__code__, namespace, name, value.__defaults__)
    return namespace[fn.__name__]


# Model-code functions, written as a user writes them.

def logsumexp_rows(x):
    return sp.logsumexp(x, axis=-1)


def logsumexp_all(x):
    return sp.logsumexp(x)


def logsumexp_weighted(x, b):
    return sp.logsumexp(x, axis=0, b=b, keepdims=True)


def logsumexp_signed(x, b):
    return sp.logsumexp(x, b=b, axis=1, return_sign=True)


def softmax_columns(x):
    return sp.softmax(x, axis=0)


def log_softmax_rows(x):
    return sp.log_softmax(x, axis=1)


def softmax_everything(x):
    return sp.softmax(x) + sp.log_softmax(x)


def special_unary(x):
    positive = x * x + 0.5
    return (sp.expit(x) + sp.logit(sp.expit(0.5 * x)) + sp.gammaln(positive) + sp.digamma(positive)
            + sp.erf(x) + sp.erfc(x))


def x_log_y(x, y):
    return sp.xlogy(x, y) + sp.xlog1py(x, y)


# Shape parameters held constant: betainc is differentiable in x only (as JAX's).
BETA_A = np.array([0.5, 2.0, 30.0, 0.1])
BETA_B = np.array([0.5, 7.5, 2.0, 3.0])


def betainc_of_x(x):
    return sp.betainc(BETA_A, BETA_B, x)


def scalar_loss(x):
    return np.sum(sp.logsumexp(x, axis=1) - sp.log_softmax(x, axis=1)[:, 0]) + np.sum(special_unary(x))


def finite_floats(lo, hi):
    """No subnormals: XLA on CPU flushes them to 0 (as it does for JAX)."""
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def matrices(elements=None, shape=None):
    shapes = hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=4) if shape is None else st.just(shape)
    return hnp.arrays(np.float64, shapes, elements=finite_floats(-30, 30) if elements is None else elements)


# Values whose exp overflows and underflows, ties at the maximum, and -inf entries.
TAIL_ELEMENTS = st.one_of(finite_floats(-30, 30), st.sampled_from([800.0, 1000.0, -800.0, -np.inf, 0.0]))


@SETTINGS
@given(matrices(TAIL_ELEMENTS))
def test_logsumexp_and_softmaxes_match_scipy_in_the_tails(x):
    for fn in (logsumexp_rows, logsumexp_all, softmax_columns, log_softmax_rows):
        check_function(fn, x, rtol=1e-10, atol=1e-12)


@SETTINGS
@given(matrices(), st.data())
def test_weighted_and_signed_logsumexp_match_scipy(x, data):
    weights = data.draw(hnp.arrays(np.float64, x.shape, elements=st.sampled_from([0.0, 1.0, -2.0, 0.5])))
    check_function(logsumexp_weighted, x, np.abs(weights), rtol=1e-10, atol=1e-12)
    # A signed sum that cancels (-2e + e + e + e^-17) is known only to eps times its terms'
    # size over its own: both sides round, so rows whose condition passes 1e4 are left out.
    scaled = weights * np.exp(x - x.max(axis=1, keepdims=True))
    condition = np.abs(scaled).sum(axis=1) / np.maximum(np.abs(scaled.sum(axis=1)), 1e-300)
    assume(np.all(condition < 1e4))
    check_function(logsumexp_signed, x, weights, rtol=1e-10, atol=1e-12)


def test_logsumexp_of_infinities_and_ignored_weights_is_scipys():
    x = np.array([[np.inf, 1.0], [-np.inf, -np.inf], [1000.0, 1000.0]])
    check_function(logsumexp_rows, x, rtol=1e-15)
    check_function(logsumexp_weighted, np.array([[np.inf, 1.0]]), np.array([[0.0, 1.0]]))
    assert s2s.jit(logsumexp_rows)(x)[2] == 1000.0 + np.log(2.0)


@SETTINGS
@given(matrices(finite_floats(-40, 40)))
def test_special_functions_match_scipy(x):
    check_function(special_unary, x, rtol=1e-9, atol=1e-300)


@SETTINGS
@given(st.data())
def test_betainc_matches_scipy(data):
    shape = data.draw(st.sampled_from([(3,), (2, 4)]))
    parameters = hnp.arrays(np.float64, shape, elements=st.one_of(finite_floats(0.05, 80), st.sampled_from([0.0, -1.0])))
    x = hnp.arrays(np.float64, shape, elements=st.one_of(finite_floats(0, 1), st.sampled_from([0.0, 1.0, 1.5, np.nan])))
    check_function(sp.betainc, data.draw(parameters), data.draw(parameters), data.draw(x),
                   rtol=1e-10, atol=1e-300)


def test_erfc_keeps_its_digits_far_right_on_both_backends():
    x = np.array([5.0, 10.0, 20.0, 26.0, -3.0, np.inf, -np.inf, np.nan])
    check_function(sp.erfc, x, rtol=1e-13, atol=0)
    assert s2s.jit(sp.erfc)(x)[2] > 0


@SETTINGS
@given(matrices(st.sampled_from([0.0, 1.0, -2.5, 3.0])), st.data())
def test_xlogy_is_zero_at_x_zero_as_scipy(x, data):
    y = data.draw(hnp.arrays(np.float64, x.shape, elements=st.sampled_from(
        [0.0, -1.0, -3.0, 2.0, 0.5, np.inf, -np.inf, np.nan])))
    check_function(x_log_y, x, y, rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.float16, np.bool_])
def test_result_dtypes_are_scipys(dtype):
    x = np.array([[0.0, 1.0], [1.0, 0.0]]).astype(dtype)
    fns = [lambda v: sp.expit(v), lambda v: sp.erfc(v), lambda v: sp.xlogy(v, v),
           lambda v: sp.xlogy(v, 2.0), lambda v: sp.logsumexp(v, axis=0)]
    if dtype is not np.bool_:   # SciPy's softmax subtracts booleans, which NumPy refuses
        fns.append(lambda v: sp.softmax(v, axis=1))
    for fn in fns:
        check_function(fn, x, rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------------------
# Derivatives against jax.scipy.special


@DERIVATIVE_SETTINGS
@given(matrices(finite_floats(-20, 20), shape=(3, 4)))
def test_derivatives_match_jax(x):
    for fn in (logsumexp_rows, logsumexp_all, softmax_columns, log_softmax_rows, softmax_everything,
               special_unary):
        check_derivatives(fn, jax_twin(fn), x, rtol=1e-9, atol=1e-12)


@DERIVATIVE_SETTINGS
@given(matrices(st.sampled_from([0.0, 1.5, -2.0]), shape=(3, 4)), st.data())
def test_xlogy_derivatives_match_jax_including_x_zero(x, data):
    y = data.draw(hnp.arrays(np.float64, x.shape, elements=finite_floats(0.01, 50)))
    check_derivatives(x_log_y, jax_twin(x_log_y), x, y, rtol=1e-10, atol=1e-12)


@DERIVATIVE_SETTINGS
@given(matrices(shape=(3, 4)), st.data())
def test_weighted_logsumexp_derivatives_match_jax(x, data):
    b = data.draw(hnp.arrays(np.float64, x.shape, elements=finite_floats(0.1, 3)))
    check_derivatives(logsumexp_weighted, jax_twin(logsumexp_weighted), x, b, rtol=1e-9, atol=1e-12)


@DERIVATIVE_SETTINGS
@given(hnp.arrays(np.float64, (4,), elements=finite_floats(0.02, 0.98)))
def test_betainc_derivatives_in_x_match_jax(x):
    check_derivatives(betainc_of_x, jax_twin(betainc_of_x), x, rtol=1e-9, atol=1e-12)
    want = jax.vmap(jax.hessian(lambda v: jax.scipy.special.betainc(BETA_A[1], BETA_B[1], v)))(x)
    second = s2s.vmap(s2s.hessian(lambda v: sp.betainc(BETA_A[1], BETA_B[1], v)))(x)
    np.testing.assert_allclose(second, want, rtol=1e-8, atol=1e-12)


def betainc_sum(a, b, x):
    return np.sum(sp.betainc(a, b, x))


def test_betainc_refuses_derivatives_in_a_and_b_as_jax_does():
    a, b, x = np.array([2.0]), np.array([3.0]), np.array([0.4])
    with pytest.raises(UnsupportedFunctionError, match="with respect to a and b"):
        s2s.grad(betainc_sum, argnums=0)(a, b, x)
    np.testing.assert_allclose(s2s.grad(betainc_sum, argnums=2)(a, b, x), [0.4 ** 1 * 0.6 ** 2 * 12], rtol=1e-12)


def test_second_order_matches_jax_on_both_backends():
    x = np.array([[0.3, -1.2, 2.0], [1.0, 1.0, -0.5]])
    want = jax.hessian(jax_twin(scalar_loss))(x)
    hessian = s2s.hessian(scalar_loss)
    for run in (hessian, s2s.jit(hessian), s2s.jit(hessian, backend="python")):
        np.testing.assert_allclose(run(x), want, rtol=1e-9, atol=1e-12)


def test_batched_over_leading_dimensions():
    x = np.random.default_rng(0).standard_normal((5, 3, 4))
    batched = s2s.vmap(log_softmax_rows)
    np.testing.assert_allclose(batched(x), np.stack([sp.log_softmax(m, axis=1) for m in x]), rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.vmap(special_unary))(x), special_unary(x), rtol=1e-9)


def test_emitted_code_imports_no_scipy_and_calls_the_runtime_under_scipys_names():
    source = s2s.emit_python(special_unary, np.ones((2, 2))) + s2s.emit_python(betainc_of_x, np.ones(4) / 2)
    imports = {line for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports == {"import numpy as np", "import s2s_runtime as rt"}
    assert "rt.erfc(" in source and "rt.lgamma(" in source and "rt.betainc(" in source


def test_readme_lists_the_scipy_functions():
    from tests.test_readme import test_every_supported_numpy_function_is_in_the_table
    s2s.make_jaxpr(expit_sum)(np.ones(2))      # the table is read with SciPy imported
    test_every_supported_numpy_function_is_in_the_table()


# ---------------------------------------------------------------------------------------
# Bad inputs


def complex_expit(x):
    return sp.expit(x * 1j)


def expit_into(x, out):
    return sp.expit(x, out)


def test_bad_inputs_say_what_to_write_instead():
    with pytest.raises(UnsupportedFunctionError, match="complex"):
        s2s.jit(complex_expit)(np.ones(2))
    with pytest.raises(UnsupportedFunctionError, match="assign the result instead"):
        s2s.jit(expit_into)(np.ones(2), np.ones(2))


# ---------------------------------------------------------------------------------------
# SciPy stays optional


BLOCK_SCIPY = BLOCK_JAX.replace("jax", "scipy")   # the same import blocker, for SciPy


MODELS = {
    "plain_model.py": "import numpy as np\n\n\ndef softplus_sum(x):\n    return np.sum(np.log1p(np.exp(x)))\n",
    "scipy_model.py": ("import numpy as np\nimport scipy.special as sp\n\n\n"
                       "def expit_sum(x):\n    return np.sum(sp.expit(x))\n"),
}


def _run(script: str, folder) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter that can import the MODELS, written to `folder`."""
    for name, source in MODELS.items():
        (folder / name).write_text(source)
    return subprocess.run([sys.executable, "-c", script], cwd=folder, capture_output=True, text=True,
                          env={"PYTHONPATH": f"{CHECKOUT_PATH}:{folder}", "PATH": "/usr/bin:/bin"})


def expit_sum(x):
    return np.sum(sp.expit(x))


def test_s2s_works_without_scipy(tmp_path):
    """s2s itself never needs SciPy. (jaxlib does: its CPU client loads LAPACK through
    scipy.linalg, so the XLA backend is left out here and run in the next test.)"""
    result = _run(BLOCK_SCIPY + BLOCK_JAX + textwrap.dedent("""
        import numpy as np
        import s2s
        from plain_model import softplus_sum
        x = np.array([0.5, -1.0])
        assert np.allclose(s2s.grad(softplus_sum)(x), 1 / (1 + np.exp(-x)))
        assert np.allclose(s2s.jit(softplus_sum, backend="python")(x), np.sum(np.log1p(np.exp(x))))
        assert not any(m == "scipy" or m.startswith("scipy.") for m in sys.modules)
        print("ok")
    """), tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_scipy_special_is_imported_by_the_users_code_only(tmp_path):
    """Neither importing s2s nor a jit on XLA (whose jaxlib imports scipy.linalg) imports
    scipy.special or scipy.stats (0.8 s); a function that calls them maps them then."""
    result = _run(BLOCK_JAX + textwrap.dedent("""
        import numpy as np
        import s2s
        from plain_model import softplus_sum
        x = np.array([0.0, 2.0])
        s2s.jit(s2s.grad(softplus_sum))(x)
        assert "scipy.special" not in sys.modules and "scipy.stats" not in sys.modules
        from scipy_model import expit_sum, sp
        expected = sp.expit(x) * (1 - sp.expit(x))
        assert np.allclose(s2s.jit(s2s.grad(expit_sum))(x), expected)
        print("ok")
    """), tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def bessel_of_staged(x):
    return sp.kv(2, x)


def skewnorm_of_staged(x):
    import scipy.stats
    return scipy.stats.skewnorm.logpdf(x, 2.0)


def bessel_of_a_constant(x):
    return sp.gammaln(x) + sp.kv(2, 3.0)


def test_scipy_functions_s2s_lacks_name_themselves_on_staged_values():
    """They failed inside NumPy's ufunc machinery ("operand 'Tracer' does not support
    ufuncs") or SciPy's own code; on static values they still run as they are."""
    x = np.array([1.0, 2.0])
    for fn, name in ((bessel_of_staged, "scipy.special.kv"), (skewnorm_of_staged, "scipy.stats.skewnorm.logpdf")):
        with pytest.raises(UnsupportedFunctionError, match=f"{name} is not supported on arrays by s2s"):
            s2s.jit(fn)(x)
    np.testing.assert_allclose(s2s.jit(bessel_of_a_constant)(x), bessel_of_a_constant(x))
