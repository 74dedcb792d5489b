"""s2s.eager: one runner that emits a staged function's module once and keeps it in the
Staged's artifacts (jit(backend="python") and the transforms called on NumPy values)."""

import numpy as np
import pytest

import s2s
from s2s import eager
from s2s.transformed import staged_or_error
from s2s.tree import tree_map


def tanh_sum(x):
    return np.tanh(x).sum()


def test_transforms_emit_their_module_once_and_keep_it_in_the_staged_artifacts(monkeypatch):
    loaded = []
    original = eager.load_source
    monkeypatch.setattr(eager, "load_source", lambda *a, **k: loaded.append(a[1]) or original(*a, **k))
    x = np.linspace(-1.0, 1.0, 4)

    def loss(v):   # fresh for this test: nothing emitted for it yet
        return np.tanh(v).sum()
    for _ in range(3):
        np.testing.assert_allclose(s2s.grad(loss)(x), 1 - np.tanh(x) ** 2)
    assert len(loaded) == 1
    staged = staged_or_error(loss, (x,), {})   # what grad(loss) derives from
    assert [key[1][0] for key in staged.artifacts if key[0] == "python"] == ["derived"]


def test_jit_python_and_vjp_share_the_runner(monkeypatch):
    loaded = []
    original = eager.load_source
    monkeypatch.setattr(eager, "load_source", lambda *a, **k: loaded.append(a[1]) or original(*a, **k))
    x = np.linspace(-1.0, 1.0, 4)

    def scale(v):
        return 3.0 * v
    f = s2s.jit(scale, backend="python")
    for _ in range(2):
        np.testing.assert_allclose(f(x), 3 * x)
        out, vjp_fn = s2s.vjp(scale, x)
        np.testing.assert_allclose(vjp_fn(np.ones(4))[0], 3.0)
    assert loaded == ["scale", "f", "f"]   # jit's module, vjp's forward and backward


def test_emitted_call_args_canonicalize_to_the_staged_dtypes():
    with_x64_off = staged_or_error(tanh_sum, (np.ones(2, np.float32),), {})
    signature = s2s.emit.signature.emitted_signature(with_x64_off)
    (arg,), _ = eager.emitted_call_args(with_x64_off, signature, with_x64_off.bind_call((np.ones(2),), {}),
                                        canonicalize=True)
    assert arg.dtype == np.float32


def sin_sum(v):
    return np.sum(np.sin(v))


def weighted_sin_sum(params):
    return np.sum(np.sin(params["a"])) * params["b"] + params["c"][0] ** 2


PYTHON_NUMBER_ARGUMENTS = {
    "list of floats": [0.5, 1.0],
    "tuple of floats": (0.5, -1.25, 2.0),
    "float": 0.5,
}


@pytest.mark.parametrize("value", PYTHON_NUMBER_ARGUMENTS.values(), ids=PYTHON_NUMBER_ARGUMENTS)
def test_python_backend_takes_python_floats_and_lists(value):
    """grad(f)([0.5, 1.0]) failed in the emitted code ("'float' object is not subscriptable"):
    Python numbers reached it unconverted. Each entry point that runs emitted code now gets
    arrays of the staged dtypes, and agrees with the XLA backend and with NumPy."""
    x = np.asarray(value, np.float64)
    expected_grad = np.cos(x)
    expected_value = np.sum(np.sin(x))

    def as_array(tree):
        return np.asarray(tree, np.float64)
    np.testing.assert_allclose(as_array(s2s.grad(sin_sum)(value)), expected_grad)
    got_value, got_grad = s2s.value_and_grad(sin_sum)(value)
    np.testing.assert_allclose(got_value, expected_value)
    np.testing.assert_allclose(as_array(got_grad), expected_grad)
    np.testing.assert_allclose(s2s.jit(sin_sum, backend="python")(value), expected_value)
    np.testing.assert_allclose(s2s.jit(sin_sum, backend="python")(value), s2s.jit(sin_sum)(value))
    np.testing.assert_allclose(as_array(s2s.jit(s2s.grad(sin_sum), backend="python")(value)),
                               expected_grad)
    ones = tree_map(lambda _: 1.0, value)
    primal_out, tangent_out = s2s.jvp(sin_sum, (value,), (ones,))
    np.testing.assert_allclose(primal_out, expected_value)
    np.testing.assert_allclose(tangent_out, np.sum(np.cos(x)))
    (cotangent,) = s2s.vjp(sin_sum, value)[1](2.0)
    np.testing.assert_allclose(as_array(cotangent), 2.0 * expected_grad)


@pytest.mark.parametrize("value", [3, [0.5, 3], (2, 1.5)], ids=["int", "list", "tuple"])
def test_python_backend_takes_python_ints(value):
    """Ints are not differentiable, but jit runs them, on both backends alike."""
    np.testing.assert_allclose(s2s.jit(sin_sum, backend="python")(value),
                               np.sum(np.sin(np.asarray(value, np.float64))))
    np.testing.assert_allclose(s2s.jit(sin_sum, backend="python")(value), s2s.jit(sin_sum)(value))


def test_python_backend_takes_python_numbers_nested_in_pytrees():
    params = {"a": (0.5, 1.0), "b": 2, "c": [1.5]}
    a = np.array([0.5, 1.0])
    value, grads = s2s.value_and_grad(weighted_sin_sum)({**params, "b": 2.0})
    np.testing.assert_allclose(value, np.sum(np.sin(a)) * 2.0 + 1.5 ** 2)
    np.testing.assert_allclose(grads["a"], 2.0 * np.cos(a))
    np.testing.assert_allclose(grads["b"], np.sum(np.sin(a)))
    np.testing.assert_allclose(grads["c"], [3.0])
    np.testing.assert_allclose(s2s.jit(weighted_sin_sum, backend="python")(params),
                               s2s.jit(weighted_sin_sum)(params))


BIG = np.arange(4000.0)   # it and its halves: more elements than a module writes as a literal


def times_big(x):
    return np.sum(x * BIG)


def big_rows(x, k):
    return np.sum(x * BIG[k * 2000:(k + 1) * 2000])


@pytest.fixture
def big(monkeypatch):
    """This module's BIG as a fresh array for one test (so a test may change it in place)."""
    array = np.arange(4000.0)
    monkeypatch.setitem(globals(), "BIG", array)   # (another test may drop this module from sys.modules)
    return array


pytestmark = pytest.mark.filterwarnings("ignore:.* reads the global 'BIG'")


def test_a_large_constant_is_handed_to_the_module_not_written_out(monkeypatch, big):
    sources = []
    original = eager.load_source
    monkeypatch.setattr(eager, "load_source", lambda *a, **k: sources.append(a[0]) or original(*a, **k))
    np.testing.assert_array_equal(s2s.grad(times_big)(np.ones(4000)), big)
    assert "_consts[" in sources[0] and "base64" not in sources[0]


def test_a_gradient_that_is_a_global_array_is_the_callers_own(big):
    gradient = s2s.grad(times_big)(np.ones(4000))
    gradient *= 2.0
    np.testing.assert_array_equal(big, np.arange(4000.0))
    np.testing.assert_array_equal(s2s.grad(times_big)(np.ones(4000)), np.arange(4000.0))
    rows = s2s.jit(lambda x: BIG[2000:], backend="python")(np.ones(3))
    rows[:] = 0.0
    np.testing.assert_array_equal(big, np.arange(4000.0))


@pytest.mark.parametrize("run", [lambda x, k: s2s.grad(big_rows)(x, k),
                                 lambda x, k: s2s.grad(s2s.jit(big_rows, backend="python"))(x, k),
                                 lambda x, k: s2s.value_and_grad(big_rows)(x, k)[1]])
def test_a_large_global_changed_in_place_is_seen_by_the_python_backend(run, big):
    x = np.ones(2000)
    np.testing.assert_array_equal(run(x, 1), big[2000:])
    big[2000:] *= -3.0   # the same call again: the same staging, reading the array as it is now
    np.testing.assert_array_equal(run(x, 1), big[2000:])
    np.testing.assert_array_equal(run(x, 0), big[:2000])


SMALL = np.arange(5.0)   # written in the module as a literal


def times_small(x):
    return np.sum(x * SMALL)


def test_a_gradient_that_is_a_small_constant_is_the_callers_own_too():
    gradient = s2s.grad(times_small)(np.ones(5))
    gradient[:] = 0.0
    np.testing.assert_array_equal(s2s.grad(times_small)(np.ones(5)), np.arange(5.0))
