"""autograd's wrappers met in staged code (`s2s/frontend/autograd_calls.py`): each stages as
what it stands for, never through the wrapper's body.

A function of `autograd.numpy` (or `autograd.scipy`) is the NumPy (SciPy) function it wraps
or is named as, so a program written with `import autograd.numpy as np` stages, and
differentiates, exactly as the same program written with NumPy: held to NumPy's values,
autograd's gradients, and the plain-NumPy program's emitted module. A program's own
autograd primitive is handed to s2s.autograd.extend (tests/autograd/test_extend.py holds
its rules to autograd's); autograd's plain Python code is staged as any other code."""
import importlib.util
import sys

import numpy as np
import pytest
import scipy.special
import scipy.stats

import s2s
from s2s.autograd.extend import primitive
from s2s.frontend import autograd_calls
from s2s.frontend.autograd_calls import autograd_callee

autograd = pytest.importorskip("autograd")
anp = pytest.importorskip("autograd.numpy")
asp = pytest.importorskip("autograd.scipy.special")
anorm = pytest.importorskip("autograd.scipy.stats.norm")
ag_extend = pytest.importorskip("autograd.extend")
ag_util = pytest.importorskip("autograd.util")

rng = np.random.default_rng(0)


@pytest.mark.parametrize("wrapper, numpy_function", [
    (anp.sin, np.sin), (anp.dot, np.dot), (anp.sum, np.sum), (anp.linalg.inv, np.linalg.inv),
    (anp.fft.fft, np.fft.fft), (asp.logsumexp, scipy.special.logsumexp),
    (anorm.logpdf, scipy.stats.norm.logpdf),                            # primitives: their `.fun`
    (anp.concatenate, np.concatenate), (anp.vstack, np.vstack),          # lambdas in autograd.numpy
    (anp.mean, np.mean), (anp.stack, np.stack), (anp.array, np.array),    # Python functions there
    (anp.where, np.where), (anp.shape, np.shape),
], ids=lambda f: getattr(f, "__name__", "?"))
def test_autograd_numpy_functions_stand_for_numpys(wrapper, numpy_function):
    assert autograd_callee(wrapper) == numpy_function


def test_a_random_draw_is_the_generator_method_it_wraps():
    assert autograd_callee(anp.random.randn) == np.random.randn


@ag_extend.primitive
def ag_cube(x):
    return x ** 3


ag_extend.defvjp(ag_cube, lambda ans, x: lambda g: g * 3.0 * x ** 2)
own_sin = ag_extend.primitive(np.sin)   # a program's own primitive of a NumPy function: its rules are its own
ag_extend.defvjp(own_sin, lambda ans, x: lambda g: g * 0.0)


def test_a_programs_own_primitive_is_translated_with_its_rules():
    for wrapper, function in ((ag_cube, ag_cube.fun), (own_sin, np.sin)):
        translated = autograd_callee(wrapper)
        assert isinstance(translated, primitive) and translated.fun is function
        assert translated.vjp_rule is not None and translated.jvp_rule is None
    assert s2s.grad(lambda x: own_sin(x))(1.0) == 0.0   # its own zero vjp, not np.sin's cos


def test_autograds_plain_code_and_everything_else_is_not_resolved():
    for fn in (ag_util.subvals, np.sin, test_autograd_numpy_functions_stand_for_numpys, len):
        assert autograd_callee(fn) is None


def test_without_the_translator_a_primitive_is_refused_not_run(monkeypatch):
    monkeypatch.setattr(autograd_calls, "_translator", None)
    with pytest.raises(s2s.UnsupportedFunctionError, match="ag_cube is an autograd primitive") as error:
        s2s.grad(lambda x: ag_cube(x) * 2.0)(1.0)
    assert "ag_cube(x) * 2.0" in str(error.value)


def autograd_numpy_program(x, A):
    """The functions of autograd.numpy a program calls, primitives and Python functions."""
    a = anp.concatenate([x, anp.array([1.0, 2.0])])
    b = anp.stack([x, x ** 2])
    c = anp.mean(b, axis=0) + anp.var(a) + anp.std(a)
    d = anp.where(x > 0, x, 0.1 * x)
    e = anp.linalg.solve(A, x) + anp.dot(anp.linalg.inv(A), x) + anp.linalg.det(A)
    f = asp.logsumexp(anp.outer(x, x), axis=1) + anorm.logpdf(x, 0.5, 2.0)
    g = anp.einsum("ij,j->i", A, x) + anp.vstack([x, x]).sum(0) + anp.hstack([x, x])[:3]
    return anp.sum(c * d + e + f + g * anp.tanh(x)) + anp.max(anp.abs(x)) + anp.linalg.norm(x)


def test_an_autograd_numpy_program_matches_numpy_and_autograd():
    x, A = rng.standard_normal(3), rng.standard_normal((3, 3)) + 3.0 * np.eye(3)
    expected = autograd_numpy_program(x, A)   # autograd.numpy's functions on NumPy values: NumPy's
    np.testing.assert_allclose(s2s.jit(autograd_numpy_program)(x, A), expected, rtol=1e-13)
    np.testing.assert_allclose(s2s.jit(autograd_numpy_program, backend="python")(x, A), expected, rtol=1e-13)
    grads = s2s.grad(autograd_numpy_program, argnums=(0, 1))(x, A)
    for got, want in zip(grads, autograd.grad(autograd_numpy_program, argnum=(0, 1))(x, A)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_an_unsupported_numpy_function_is_named_at_its_line():
    def program(x):
        return anp.sum(anp.trapezoid(x))
    with pytest.raises(s2s.UnsupportedFunctionError, match="np.trapezoid is not supported") as error:
        s2s.grad(program)(np.ones(3))
    assert "anp.trapezoid(x)" in str(error.value)


def test_autograds_own_primitives_are_refused_with_the_fix():
    def program(d):
        return anp.sum(anp.make_diagonal(d, axis1=-1, axis2=-2))
    with pytest.raises(s2s.UnsupportedFunctionError, match="primitive of autograd's own") as error:
        s2s.grad(program)(np.ones(3))
    assert "s2s.autograd.extend" in str(error.value)


# --- a program that switches to autograd.numpy by its import alone ----------------------------

MLP_SOURCE = '''\
import autograd.numpy as np
from autograd.scipy.special import logsumexp


def predict(params, x):
    for W, b in params[:-1]:
        x = np.tanh(np.dot(x, W) + b)
    W, b = params[-1]
    logits = np.dot(x, W) + b
    return logits - logsumexp(logits, axis=1, keepdims=True)


def loss(params, x, y):
    log_probs = predict(params, x)
    l2 = sum(np.sum(W ** 2) for W, _ in params)
    return -np.mean(np.sum(log_probs * y, axis=1)) + 1e-3 * l2
'''


def module_from(source: str, path) -> object:
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def mlp_modules(tmp_path):
    """The MLP written with autograd.numpy, and the same file with NumPy's imports."""
    with_autograd = module_from(MLP_SOURCE, tmp_path / "mlp_autograd.py")
    with_numpy = module_from(MLP_SOURCE.replace("import autograd.numpy as np", "import numpy as np")
                             .replace("from autograd.scipy.special", "from scipy.special"),
                             tmp_path / "mlp_numpy.py")
    yield with_autograd, with_numpy
    del sys.modules["mlp_autograd"], sys.modules["mlp_numpy"]


def test_an_mlp_written_with_autograd_numpy_differentiates_as_with_numpy(mlp_modules):
    with_autograd, with_numpy = mlp_modules
    params = [(rng.standard_normal((4, 8)) * 0.3, rng.standard_normal(8) * 0.1),
              (rng.standard_normal((8, 3)) * 0.3, rng.standard_normal(3) * 0.1)]
    x, y = rng.standard_normal((5, 4)), np.eye(3)[rng.integers(0, 3, 5)]
    expected = autograd.grad(with_autograd.loss)(params, x, y)
    for grads in (s2s.grad(with_autograd.loss)(params, x, y), s2s.jit(s2s.grad(with_autograd.loss))(params, x, y),
                  s2s.grad(with_numpy.loss)(params, x, y)):
        for got, want in zip(s2s.tree_leaves(grads), s2s.tree_leaves(expected)):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    emitted = s2s.emit_python(s2s.grad(with_autograd.loss), params, x, y)
    assert emitted.replace("mlp_autograd", "mlp_numpy") == s2s.emit_python(s2s.grad(with_numpy.loss), params, x, y)
