"""Shared test helpers: hold a staged function to NumPy through every backend.

`check_staged(s2s_fn, numpy_fn, *args)` stages `s2s_fn` on abstract versions of `args`
(NumPy arrays become staged arguments; Python ints, tuples, None ... are passed through
as static values), then checks:
  1. the jaxpr is well-formed (`check_jaxpr`),
  2. `eval_jaxpr` on the concrete args equals `numpy_fn(*args)` (values, shape, dtype),
  3. the emitted Python module, executed, equals it too.
It returns the ClosedJaxpr so a test can also assert on its equations.

`run_s2s(*args)` runs the `s2s` command in a subprocess, as a user would; `run_s2s_in(repo,
*args)` runs it from a user's repository as the console script runs, with no path tricks.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from s2s.core import aval_of_value, check_jaxpr, eval_jaxpr
from s2s.emit.python import emit_jaxpr_source, load_source
from s2s.staging import JaxprBuilder


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_path(checkout: str) -> str:
    """The PYTHONPATH that runs the code of the checkout at `checkout` uninstalled: s2s at
    its root, s2s_runtime in runtime/ (a distribution of its own)."""
    return os.pathsep.join((checkout, os.path.join(checkout, "runtime")))


# What a subprocess puts on its PYTHONPATH to run this checkout's s2s and s2s_runtime.
CHECKOUT_PATH = import_path(ROOT)


def run_s2s(*args, pythonpath: str = CHECKOUT_PATH, cwd: str = ROOT) -> subprocess.CompletedProcess:
    """Runs the `s2s` command in a subprocess, as a user would, with the s2s found on
    `pythonpath` (this checkout's unless another is named, `import_path(baseline)`, to
    compare against a baseline; then `cwd` must not be a checkout, since `python -m` looks
    there first)."""
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run([sys.executable, "-m", "s2s", *args], cwd=cwd, env=env, capture_output=True, text=True)


def run_s2s_in(repository, *args) -> subprocess.CompletedProcess:
    """Runs `s2s` in a subprocess from the user's `repository` as the installed console
    script runs there: s2s importable (PYTHONPATH names only this checkout), and neither the
    working folder nor the user's package on sys.path (`-P`, as for a console script), so
    that what finds the user's modules is s2s's loading alone."""
    env = dict(os.environ, PYTHONPATH=CHECKOUT_PATH)
    return subprocess.run([sys.executable, "-P", "-m", "s2s", *args], cwd=str(repository), env=env,
                          capture_output=True, text=True)


def _is_array_arg(a) -> bool:
    return isinstance(a, (np.ndarray, np.generic, float))


def stage(s2s_fn, *args):
    """Stages `s2s_fn`; array (and float) args become jaxpr inputs. Returns (closed, outs_is_tuple)."""
    with JaxprBuilder() as builder:
        staged_args = [builder.new_arg(aval_of_value(a)) if _is_array_arg(a) else a for a in args]
        out = s2s_fn(*staged_args)
        multiple = isinstance(out, (tuple, list))
        closed = builder.build(list(out) if multiple else [out])
    return closed, multiple


def assert_same(actual, expected, rtol=1e-6, atol=1e-6, what=""):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, f"{what}shape {actual.shape} != NumPy's {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}dtype {actual.dtype} != NumPy's {expected.dtype}"
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected, err_msg=what)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)


def check_staged(s2s_fn, numpy_fn, *args, rtol=1e-6, atol=1e-6):
    closed, multiple = stage(s2s_fn, *args)
    check_jaxpr(closed)
    array_args = [a for a in args if _is_array_arg(a)]
    expected = numpy_fn(*args)
    expected = list(expected) if multiple else [expected]

    got = eval_jaxpr(closed, *array_args)
    for g, e in zip(got, expected, strict=True):
        assert_same(g, e, rtol, atol, "eval_jaxpr: ")

    source = emit_jaxpr_source(closed, "f")
    module = load_source(source, "f")
    emitted = module.f(*array_args)
    emitted = list(emitted) if multiple and len(expected) > 1 else [emitted]
    for g, e in zip(emitted, expected, strict=True):
        assert_same(g, e, rtol, atol, "emitted module: ")
    return closed


def check_function(fn, *args, rtol=1e-6, atol=1e-6, static_argnums=(), **kwargs):
    """Holds a user function staged by the front end to the function itself, run by NumPy.

    Compares NumPy's result with eval_jaxpr of `s2s.make_jaxpr(fn)`, with the module
    `s2s.emit_python(fn)` writes, and with `s2s.jit(fn)`. Returns the ClosedJaxpr.
    """
    import s2s
    expected = fn(*args, **kwargs)
    closed = s2s.make_jaxpr(fn, static_argnums=static_argnums)(*args, **kwargs)
    check_jaxpr(closed)
    staged = s2s.transformed.staged_or_error(fn, args, kwargs, static_argnums)
    staged_inputs = staged.flat_inputs(args, kwargs)
    got = staged.out_tree.unflatten(eval_jaxpr(closed, *staged_inputs))
    _compare_trees(got, expected, rtol, atol, "eval_jaxpr: ")

    source = s2s.emit_python(fn, *args, static_argnums=static_argnums, **kwargs)
    assert "import jax" not in source
    name = getattr(fn, "__name__", "f")
    name = name if name.isidentifier() else "f"
    module = load_source(source, name)
    signature = s2s.emit.signature.emitted_signature(staged)
    call_args, call_kwargs = s2s.eager.emitted_call_args(staged, signature, staged.bind_call(args, kwargs))
    emitted = getattr(module, name)(*call_args, **call_kwargs)
    if signature.output_builder is None:
        emitted = staged.out_tree.unflatten(emitted if staged.out_tree.num_leaves != 1 else [emitted])
    _compare_trees(emitted, expected, rtol, atol, "emitted module: ")

    jitted = s2s.jit(fn, static_argnums=static_argnums)(*args, **kwargs)
    _compare_trees(jitted, expected, rtol, atol, "jit: ")
    return closed


def check_numpy_and_jax(fn, *args, rtol=1e-6, atol=1e-6, derivatives=True):
    """`fn` (written with `np`) against NumPy's values on every backend (check_function,
    and s2s.jit with the Python backend), and, if `derivatives`, its jvp and vjp against
    jax's of the same source run by jax.numpy."""
    import jax.numpy as jnp
    import s2s
    check_function(fn, *args, rtol=rtol, atol=atol)
    _compare_trees(s2s.jit(fn, backend="python")(*args), fn(*args), rtol, atol,
                   "jit (Python backend): ")
    if derivatives:
        check_derivatives(fn, with_numpy(fn, jnp), *args, rtol=rtol, atol=atol)


def _compare_trees(got, expected, rtol, atol, what):
    import s2s
    got_leaves, got_tree = s2s.tree_flatten(got)
    exp_leaves, exp_tree = s2s.tree_flatten(expected)
    assert got_tree == exp_tree, f"{what}tree {got_tree} != {exp_tree}"
    for g, e in zip(got_leaves, exp_leaves):
        assert_same(g, e, rtol, atol, what)


def check_derivatives(s2s_fn, jax_fn, *args, rtol=1e-6, atol=1e-6, seed=0):
    """jvp and vjp of `s2s_fn` at `args` against jax's of `jax_fn` (the same math in jnp).

    Tangents and cotangents are random, of each value's own dtype (complex ones with random
    real and imaginary parts). Returns nothing; fails with the first mismatch.
    """
    import jax
    import s2s
    rng = np.random.default_rng(seed)

    def like(x):
        x = np.asarray(x)
        if x.dtype.kind == "c":
            return (rng.standard_normal(x.shape) + 1j * rng.standard_normal(x.shape)).astype(x.dtype)
        return rng.standard_normal(x.shape).astype(x.dtype) if x.dtype.kind == "f" else np.zeros(x.shape, jax.dtypes.float0)

    tangents = tuple(like(a) for a in args)
    out, t_out = s2s.jvp(s2s_fn, args, tangents)
    j_out, j_t_out = jax.jvp(jax_fn, args, tangents)
    _compare_loose(out, j_out, rtol, atol, "jvp primal: ")
    _compare_loose(t_out, j_t_out, rtol, atol, "jvp tangent: ")

    out, vjp_fn = s2s.vjp(s2s_fn, *args)
    cotangent = s2s.tree_map(like, out)
    cts = vjp_fn(cotangent)
    _, j_vjp = jax.vjp(jax_fn, *args)
    j_cts = j_vjp(s2s.tree_map(lambda c: np.asarray(c), cotangent))
    for i, (c, jc, a) in enumerate(zip(cts, j_cts, args)):
        if np.asarray(a).dtype.kind in "fc":
            _compare_loose(c, jc, rtol, atol, f"vjp cotangent of argument {i}: ")


def _compare_loose(got, expected, rtol, atol, what):
    """Values and shapes (dtypes may differ where jax's differ from NumPy's)."""
    import s2s
    got_leaves = s2s.tree_leaves(got)
    exp_leaves = [np.asarray(e) for e in s2s.tree_leaves(expected)]
    assert len(got_leaves) == len(exp_leaves), f"{what}{len(got_leaves)} leaves != {len(exp_leaves)}"
    for g, e in zip(got_leaves, exp_leaves):
        g = np.asarray(g)
        assert g.shape == e.shape, f"{what}shape {g.shape} != jax's {e.shape}"
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=what)


def with_numpy(fn, np_module):
    """A copy of `fn` whose module-level `np` (and that of the functions of its module it
    calls) is `np_module`: the same source run by autograd.numpy or jax.numpy as an oracle."""
    import types
    namespace = dict(fn.__globals__)
    namespace["np"] = np_module
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
            namespace[name] = types.FunctionType(value.__code__, namespace, value.__name__,
                                                 value.__defaults__, value.__closure__)
    return types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)


def check_values_and_gradient(fn, *args):
    """`fn` against itself run by Python on every backend (eval_jaxpr, the emitted module,
    jit on XLA and on the Python backend), and the gradient of its sum in its first
    argument against autograd's of the same source run by autograd.numpy."""
    import autograd
    import autograd.numpy as anp
    import s2s
    check_function(fn, *args)
    assert_same(s2s.jit(fn, backend="python")(*args), fn(*args), what="jit (Python backend): ")
    with_autograd = with_numpy(fn, anp)
    expected = autograd.grad(lambda x: anp.sum(with_autograd(x, *args[1:])))(args[0])
    got = s2s.grad(lambda x: np.sum(fn(x, *args[1:])))(args[0])
    assert_same(got, expected, rtol=1e-10, atol=1e-12, what="grad: ")


def check_lowered(s2s_fn, numpy_fn, *args, rtol=1e-6, atol=1e-6):
    """Stages `s2s_fn`, lowers it to StableHLO, compiles it with jaxlib, runs it, and
    compares every output with `numpy_fn(*args)` (values and shapes; dtypes too)."""
    from s2s.emit.stablehlo import lower
    from s2s_runtime.xla import Executable
    closed, multiple = stage(s2s_fn, *args)
    array_args = [a for a in args if _is_array_arg(a)]
    text = lower(closed)
    exe = Executable(text, [v.aval.dtype for v in closed.jaxpr.constvars + closed.jaxpr.invars])
    got = exe(*closed.consts, *array_args)
    expected = numpy_fn(*args)
    expected = list(expected) if multiple else [expected]
    for g, e in zip(got, expected, strict=True):
        assert_same(g, e, rtol, atol, "XLA: ")
    return text


# The first lines of a script run in a subprocess where `import jax` fails: s2s must work
# with jaxlib alone (JAXLIB_NOTES.md, "jax must stay out").
BLOCK_JAX = """\
import sys
class BlockJax:
    def find_spec(self, name, path, target=None):
        if name == "jax" or name.startswith("jax."):
            raise ImportError("jax is blocked in this test")
sys.meta_path.insert(0, BlockJax())
"""


def check_hessian_on_every_backend(s2s_fn, jax_fn, *args, argnums, rtol=1e-6, atol=1e-6):
    """s2s.hessian of `s2s_fn` in `argnums` (eagerly, jitted on XLA, jitted on the Python
    backend) against jax.hessian of `jax_fn`, block by block."""
    import jax
    import s2s
    want = jax.hessian(jax_fn, argnums=argnums)(*args)
    hessian = s2s.hessian(s2s_fn, argnums=argnums)
    for run in (hessian, s2s.jit(hessian), s2s.jit(hessian, backend="python")):
        got = run(*args)
        for i in range(len(argnums)):
            for j in range(len(argnums)):
                np.testing.assert_allclose(got[i][j], want[i][j], rtol=rtol, atol=atol)
