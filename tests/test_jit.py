"""jit, both backends: compiled once per kind of arguments, caches that live as long as the
function, the fast path for array arguments, threads, static arguments."""
import functools
import gc
import importlib
import os
import subprocess
import sys
import textwrap
import types
import weakref

import numpy as np
import pytest

import s2s
from s2s import StagingError
from s2s.transformed import staged_or_error
from tests.concurrency import run_together
from tests.frontend.test_errors import expect_error
from tests.frontend.test_walker import assert_matches_jax

JIT_MODULE = importlib.import_module("s2s.jit")   # `s2s.jit` is the function


def affine(x, w, b):
    return np.tanh(x @ w + b)


def test_jit_runs_the_emitted_module_and_matches_numpy():
    rng = np.random.default_rng(0)
    args = rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal(2)
    np.testing.assert_allclose(s2s.jit(affine)(*args), affine(*args))



def test_jit_as_decorator_with_and_without_arguments():
    @s2s.jit
    def square(x):
        return x * x

    @s2s.jit(static_argnums=1)
    def power(x, n):
        return x ** n

    np.testing.assert_allclose(square(np.arange(3.0)), [0.0, 1.0, 4.0])
    np.testing.assert_allclose(power(np.arange(3.0), 3), [0.0, 1.0, 8.0])



@pytest.mark.parametrize("backend, compiler", [("python", "emitted_module"), ("xla", "_compile_xla")])
def test_jit_compiles_once_per_kind_of_arguments(monkeypatch, backend, compiler):
    compiled = []
    original = getattr(JIT_MODULE, compiler)
    monkeypatch.setattr(JIT_MODULE, compiler, lambda *a, **k: compiled.append(1) or original(*a, **k))

    def affine_here(x, W, b):   # fresh for this test: nothing compiled for it yet
        return x @ W + b
    f = s2s.jit(affine_here, backend=backend)
    args = np.ones((4, 3)), np.ones((3, 2)), np.ones(2)
    for _ in range(3):
        f(*args)
    assert len(compiled) == 1
    f(np.ones((5, 3)), np.ones((3, 2)), np.ones(2))
    assert len(compiled) == 2
    s2s.jit(affine_here, backend=backend)(*args)   # a new jit of the same function: cached
    assert len(compiled) == 2



def test_rebuilt_transform_chains_share_compiled_code(monkeypatch):
    compiled = []
    original = JIT_MODULE._compile_xla
    monkeypatch.setattr(JIT_MODULE, "_compile_xla", lambda *a, **k: compiled.append(1) or original(*a, **k))

    def loss(w, x):
        return np.sum(np.tanh(x @ w) ** 2)
    args = np.ones((3, 2)), np.ones((4, 3))
    for _ in range(3):
        s2s.jit(s2s.grad(loss))(*args)
    assert len(compiled) == 1
    s2s.jit(s2s.grad(loss, argnums=1))(*args)   # other transform parameters: compiled anew
    assert len(compiled) == 2



def test_cache_keys_include_the_code_object():
    def f(x):
        return x * 2.0

    def g(x):
        return x * 3.0
    jitted = s2s.jit(f)
    np.testing.assert_allclose(jitted(np.ones(2)), 2.0)
    f.__code__ = g.__code__
    np.testing.assert_allclose(s2s.jit(f)(np.ones(2)), 3.0)



def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="python"):
        s2s.jit(affine, backend="tpu")



def test_results_have_numpys_dtypes():
    def mixed(i32, f32, f64):
        return i32 * 2, i32 / 2, f32 * 2.5, f32 + f64, i32 + f32
    args = np.arange(3, dtype=np.int32), np.ones(3, np.float32), np.ones(3)
    expected = mixed(*args)
    got = s2s.jit(mixed)(*args)
    assert [g.dtype for g in got] == [e.dtype for e in expected]



@pytest.mark.parametrize("backend", ["python", "xla"])
def test_fast_path_for_array_arguments_respects_shapes_dtypes_and_config(backend):
    f = s2s.jit(affine, backend=backend)
    small = np.ones((2, 3)), np.ones((3, 4)), np.ones(4)
    for _ in range(2):   # the second call takes the fast path
        np.testing.assert_allclose(f(*small), affine(*small))
    big = np.ones((5, 3), np.float32), np.ones((3, 4), np.float32), np.ones(4, np.float32)
    assert f(*big).shape == (5, 4) and f(*big).dtype == np.float32
    try:
        s2s.config.update("enable_x64", False)
        assert f(*small).dtype == np.float32
    finally:
        s2s.config.update("enable_x64", True)
    assert f(*small).dtype == np.float64



def test_dropping_a_function_frees_what_was_compiled_for_it():
    def make():
        def scaled_sine(x):
            return np.sin(x) * 2.0
        return scaled_sine
    f = make()
    function_ref = weakref.ref(f)
    x = np.ones(3)
    s2s.jit(f)(x)
    s2s.jit(s2s.grad(lambda v: f(v).sum()))(x)
    staged = staged_or_error(f, (x,), {})
    (compiled,) = [a for key, a in staged.artifacts.items() if key[0] == "xla"]
    executable_ref, staged_ref = weakref.ref(compiled.executable), weakref.ref(staged)
    del f, staged, compiled
    gc.collect()
    assert function_ref() is None and staged_ref() is None and executable_ref() is None



REBINDING_SCRIPT = textwrap.dedent("""
    import numpy as np
    import s2s

    def rss_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20
    sizes = []
    for i in range(40):
        f = s2s.jit(lambda: 1. * np.ones((16, 1024, 1024)))   # 128 MiB per result
        f()
        sizes.append(rss_mib())
    print("growth MiB", sizes[-1] - sizes[4])
""")



@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
def test_rebinding_a_jitted_lambda_in_a_loop_does_not_grow_memory(tmp_path):
    script = tmp_path / "rebinding.py"   # a file: s2s reads the lambda's source
    script.write_text(REBINDING_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    growth = float(result.stdout.split("growth MiB")[1])
    assert growth < 64, result.stdout     # one leaked result would be 128 MiB



def test_many_threads_calling_one_jitted_function_compile_it_once(monkeypatch):
    compiled = []
    original = JIT_MODULE._compile_xla
    monkeypatch.setattr(JIT_MODULE, "_compile_xla", lambda *a, **k: compiled.append(1) or original(*a, **k))

    def threaded_affine(x, w, b):
        return np.tanh(x @ w + b)
    f = s2s.jit(threaded_affine)
    args = np.ones((4, 3)), np.ones((3, 2)), np.ones(2)
    results = []

    def work():
        for _ in range(200):
            results.append(f(*args))
    errors = run_together(work, 16)
    assert not errors and len(compiled) == 1
    expected = threaded_affine(*args)
    assert len(results) == 3200 and all(np.allclose(r, expected) for r in results)



def test_static_true_and_1_are_different_cache_entries():
    def power(x, n):
        return x * 10.0 if isinstance(n, bool) else x ** n
    f = s2s.jit(power, static_argnums=1)
    np.testing.assert_allclose(f(np.full(2, 3.0), True), 30.0)
    np.testing.assert_allclose(f(np.full(2, 3.0), 1), 3.0)
    np.testing.assert_allclose(f(np.full(2, 3.0), False), 30.0)
    np.testing.assert_allclose(f(np.full(2, 3.0), 0), 1.0)



def scaled_by(x, scale=1.0):
    return x * scale



def test_static_argnames_takes_one_name_as_a_string():
    x = np.ones(2)
    for names in ("scale", ("scale",)):
        closed = s2s.make_jaxpr(scaled_by, static_argnames=names)(x, scale=2.0)
        assert len(closed.jaxpr.invars) == 1      # the float is static, not its letters
        np.testing.assert_array_equal(s2s.jit(scaled_by, static_argnames=names)(x, scale=2.0), 2.0)



def test_same_array_donated_twice_is_named():
    donating = s2s.jit(lambda a, b: (a + b, a - b), donate_argnums=(0, 1))
    x = s2s.jit(lambda v: v * 1)(np.ones(2))
    with pytest.raises(s2s.errors.StagingError, match=r"donated twice: as `a` of <lambda> and as `b` of <lambda>"):
        donating(x, x)
    np.testing.assert_array_equal(x, np.ones(2))   # refused before anything was donated


def test_dispatcher_refuses_a_matrix_after_plain_arrays():
    with pytest.warns(PendingDeprecationWarning):   # NumPy discourages np.matrix; users still pass them
        m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    squared = s2s.jit(lambda a: a * a)
    for _ in range(3):
        squared(np.ones((2, 2)))
    with pytest.raises(s2s.errors.StagingError, match=r"argument `a` is a numpy.matrix"):
        squared(m)


# --- called while another function is staged: inlined, whatever it closes over -----------
# Each program is written against a library (`t` = s2s or jax, `np` = numpy or jax.numpy):
# JAX runs the same source as the oracle (tests/frontend/test_walker.py).

def no_argument_closure(t, np):
    return lambda x: t.jit(lambda: x * 2.0)()


def def_closing_over_the_argument(t, np):
    def f(x):
        def g():
            return np.sin(x) * x
        return t.jit(g)()
    return f


def partial_over_the_argument(t, np):
    return lambda x: t.jit(functools.partial(np.multiply, x))(3.0)


def closure_called_on_a_constant(t, np):
    return lambda x: t.jit(lambda y: y * np.cos(x))(2.5)


@pytest.mark.parametrize("program", [no_argument_closure, def_closing_over_the_argument, partial_over_the_argument,
                                     closure_called_on_a_constant])
def test_a_jitted_closure_called_while_staging_is_inlined(program):
    assert_matches_jax(program)


def closure_whose_names_are_rebound_between_calls(t, np):
    def f(x):
        g = t.jit(lambda y: y * c * d)
        c, d = x, 2.0
        first = g(x)
        c, d = np.sin(x), 3.0
        return first + g(x)
    return f


def test_a_jitted_closure_reads_the_names_it_closes_over_at_each_call():
    """The second call must not be served the first call's staging (it was, from the
    staging cache: 2x*x + 2x*x, not 2x*x + 3x sin x). JAX's jit serves it so (its cache
    is keyed by the function object), so the oracle is the program without jit, as
    Python runs it, differentiated by JAX."""
    without_jit = types.SimpleNamespace(jit=lambda fn: fn)
    assert_matches_jax(closure_whose_names_are_rebound_between_calls, transforms=without_jit)
    np.testing.assert_allclose(s2s.jit(closure_whose_names_are_rebound_between_calls(s2s, np))(0.7),
                               2 * 0.7 * 0.7 + 3 * np.sin(0.7) * 0.7, rtol=1e-12)


def warmed_function_without_arguments(t, np):
    doubled = t.jit(lambda: np.ones(3) * 2.0)
    doubled()   # its later calls are made by jaxlib's dispatcher, those while staging too
    return lambda x: np.sum(doubled() * x)


def jitted_result_read_as_a_constant(t, np):
    weights = t.jit(lambda y: y * 2.0)(np.arange(3.0))
    return lambda x: np.sum(np.sin(weights * x))


@pytest.mark.parametrize("program", [warmed_function_without_arguments, jitted_result_read_as_a_constant])
def test_a_jitted_result_is_read_as_a_constant_while_staging(program):
    """An s2s.Array (a jitted call's result) met while staging is a constant, as an ndarray
    is: it was refused ("expected an array, got Array")."""
    assert_matches_jax(program)


def test_an_inlined_jit_leaves_no_call_in_the_emitted_module():
    source = s2s.emit_python(s2s.grad(def_closing_over_the_argument(s2s, np)), 0.7)
    assert source.count("def ") == 1 and "np.cos" in source   # g's derivative, inline


def called_with_an_argument_too_many(x):
    return s2s.jit(lambda: x * 2.0)(x)  # ERROR


def test_a_jitted_closure_called_with_the_wrong_arguments_is_refused_at_the_call():
    expect_error(called_with_an_argument_too_many, StagingError, 0.7, contains="called with the wrong arguments")
