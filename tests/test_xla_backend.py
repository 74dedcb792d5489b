"""jit(backend="xla"): staged, lowered to StableHLO, compiled and run by jaxlib alone."""
import inspect
import linecache
import os
import re
import subprocess
import sys
import textwrap
import traceback

import numpy as np
import pytest

import s2s
import s2s_runtime.fastcall
from tests.helpers import BLOCK_JAX
from s2s.emit.stablehlo import lower

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlp_loss(params, x):
    h = np.tanh(x @ params["W"] + params["b"])
    return np.sum(h * h) / 2.0


def solve_sum(a, b):
    return np.linalg.solve(a, b).sum()


def a_third(v):
    return v / 3


def test_jit_xla_matches_numpy():
    rng = np.random.default_rng(0)
    params = {"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)}
    x = rng.standard_normal((5, 4))
    np.testing.assert_allclose(s2s.jit(mlp_loss, backend="xla")(params, x), mlp_loss(params, x), rtol=1e-12)


def test_jit_xla_of_grad_matches_the_python_backend():
    rng = np.random.default_rng(1)
    params = {"W": rng.standard_normal((4, 3)).astype(np.float32), "b": np.zeros(3, np.float32)}
    x = rng.standard_normal((5, 4)).astype(np.float32)
    g_xla = s2s.jit(s2s.grad(mlp_loss), backend="xla")(params, x)
    g_py = s2s.grad(mlp_loss)(params, x)
    for k in params:
        np.testing.assert_allclose(g_xla[k], g_py[k], rtol=1e-5, atol=1e-6)
        assert g_xla[k].dtype == np.float32


def test_lowered_text_is_readable_and_located():
    text = lower(s2s.make_jaxpr(mlp_loss)({"W": np.ones((4, 3)), "b": np.ones(3)}, np.ones((5, 4))))
    assert "func.func public @main(%W: tensor<4x3xf64>, %b: tensor<3xf64>, %x: tensor<5x4xf64>)" in text
    assert "stablehlo.dot_general %x, %W" in text
    tanh_line = inspect.getsourcelines(mlp_loss)[1] + 1
    assert re.search(rf'%h = stablehlo.tanh .* loc\(".*test_xla_backend.py":{tanh_line}:\d+\)', text)


def test_omnistaged_constants_keep_the_module_small():
    def big():
        return np.ones((300, 1024, 1024)).sum()
    text = lower(s2s.make_jaxpr(big)())
    assert len(text) < 2000


NO_JAX_SCRIPT = BLOCK_JAX + textwrap.dedent("""
    import numpy as np
    import s2s
    from s2s_runtime import disk_cache
    hits = []
    compile_or_load = disk_cache.get_or_compile
    def recording(*args):
        result = compile_or_load(*args)
        hits.append(result[1])
        return result
    disk_cache.get_or_compile = recording
    sys.path.insert(0, "tests")
    from test_xla_backend import a_third, mlp_loss, sgd, solve_sum

    params = {"W": np.ones((4, 3)) * 0.1, "b": np.zeros(3)}
    x = np.ones((5, 4))
    g = s2s.jit(s2s.grad(mlp_loss))(params, x)
    expected = s2s.grad(mlp_loss)(params, x)
    assert np.allclose(g["W"], expected["W"]) and np.allclose(g["b"], expected["b"])

    from s2s.jit import Jitted              # jaxlib's C++ dispatcher makes the calls it has seen
    python_calls = []
    through_python = Jitted._call_in_python
    Jitted._call_in_python = lambda self, args, kwargs: python_calls.append(1) or through_python(self, args, kwargs)
    grad_fn = s2s.jit(s2s.grad(mlp_loss))
    for _ in range(3):
        assert np.allclose(grad_fn(params, x)["W"], expected["W"])
    assert len(python_calls) == 1, python_calls
    s2s.config.update("enable_x64", False)   # the dispatcher takes float64 for float32 too
    third = s2s.jit(a_third)
    for v in (np.ones(2), np.ones(2, np.float32), np.ones(2)):
        assert third(v).dtype == np.float32 and np.allclose(third(v), 1 / 3)
    assert len(python_calls) == 2, python_calls
    s2s.config.update("enable_x64", True)
    assert third(np.ones(2)).dtype == np.float64
    Jitted._call_in_python = through_python

    a = np.array([[4.0, 1.0], [2.0, 3.0]])       # LU through jaxlib's LAPACK custom call
    assert np.isclose(s2s.jit(solve_sum)(a, np.ones(2)), np.linalg.solve(a, np.ones(2)).sum())

    step = s2s.jit(sgd, donate_argnums=0)
    new = step(g, g, 0.5)            # g (an s2s.Array tree) is donated
    assert np.allclose(new["W"], 0.5 * expected["W"])
    try:
        np.asarray(g["W"])
        raise AssertionError("a donated array was readable")
    except s2s.DonatedBufferError as e:
        assert "donated as `params['W']` of sgd" in str(e), e
    assert not any(m == "jax" or m.startswith("jax.") for m in sys.modules), "jax was imported"
    print("ok without jax; disk cache hits:", hits)
""")


def test_jit_of_grad_donation_and_disk_cache_run_without_jax(tmp_path):
    """jaxlib imports jax by itself when it can, and jax patches jaxlib: block it. Two
    processes share a fresh disk cache: the second loads every executable from it."""
    env = dict(os.environ, S2S_CACHE_DIR=str(tmp_path))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)    # s2s sets it itself, before jaxlib loads
    outputs = []
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", NO_JAX_SCRIPT], cwd=ROOT, capture_output=True,
                                text=True, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "pjrt_client" not in result.stderr, result.stderr   # no XLA INFO lines
        outputs.append(result.stdout)
    assert "ok without jax; disk cache hits: [False, False, False, False, False]" in outputs[0]
    assert "ok without jax; disk cache hits: [True, True, True, True, True]" in outputs[1]


def test_lower_and_compile_expose_stablehlo_hlo_and_xla_figures():
    f = s2s.jit(lambda x: np.tanh(x) * 2.0, backend="xla")
    lowered = f.lower(np.ones(4))
    assert "stablehlo.tanh" in lowered.as_text()
    assert "tanh" in lowered.as_hlo_text() and "ENTRY" in lowered.as_hlo_text()
    compiled = lowered.compile()
    assert "ENTRY" in compiled.as_hlo_text()
    assert compiled.memory_analysis().temp_size_in_bytes >= 0
    assert compiled.cost_analysis() is not None


def test_devices():
    assert s2s.device_count() >= 1
    assert s2s.devices()[0].platform == "cpu"
    assert s2s.local_device_count() == s2s.device_count()
    assert s2s.process_index() == 0 and s2s.process_count() == 1


def test_xla_is_the_default_backend_and_results_are_arrays():
    out = s2s.jit(mlp_loss)({"W": np.ones((4, 3)), "b": np.ones(3)}, np.ones((5, 4)))
    assert isinstance(out, s2s.Array) and out.shape == () and out.dtype == np.float64
    assert s2s.jit(mlp_loss, backend="python")({"W": np.ones((4, 3)), "b": np.ones(3)},
                                              np.ones((5, 4))).__class__ is not s2s.Array


def sgd(params, grads, lr):
    return {k: params[k] - lr * grads[k] for k in params}


def test_donated_arrays_alias_outputs_and_are_invalid_after_the_call():
    params = {"W": np.ones((4, 3)), "b": np.ones(3)}
    grads = {"W": np.full((4, 3), 2.0), "b": np.full(3, 2.0)}
    step = s2s.jit(sgd, donate_argnums=0)
    text = step.lower(params, grads, 0.5).as_text()
    assert text.count("tf.aliasing_output") == 2
    assert "input_output_alias" in step.lower(params, grads, 0.5).compile().as_hlo_text()
    first = step(params, grads, 0.5)
    np.testing.assert_array_equal(params["W"], 1.0)     # NumPy inputs are copied, never consumed
    raw = np.ones((1 << 16) + 8)                         # one jaxlib could alias: 64-byte aligned
    start = (-raw.ctypes.data % 64) // 8
    aligned = {"W": raw[start:start + (1 << 16)], "b": np.ones(3)}
    s2s.block_until_ready(step(aligned, {"W": np.ones(1 << 16), "b": np.ones(3)}, 0.5))
    np.testing.assert_array_equal(aligned["W"], 1.0)
    second = step(first, grads, 0.5)
    np.testing.assert_allclose(second["W"], -1.0)
    for leaf in (first["W"], first["b"]):
        assert leaf.is_donated()
        for use in (np.asarray, lambda a: a + 1, lambda a: a.shape, repr_of_values, lambda a: step(first, grads, 0.5)):
            with pytest.raises(s2s.DonatedBufferError, match=r"donated as `params\['[Wb]'\]` of sgd"):
                use(leaf)
    assert not second["W"].is_donated()


def repr_of_values(a):
    return np.array2string(np.asarray(a))


def test_donation_that_no_output_can_alias_warns():
    def total(x, y):
        return (x * y).sum()
    with pytest.warns(UserWarning, match=r"Some donated buffers were not usable.*f64\[3\] \(`x` of total\)") as shown:
        out = s2s.jit(total, donate_argnums=0)(np.ones(3), np.ones(3))
    assert float(out) == 3.0
    # at the user's call, never at a line of s2s's own
    assert shown[0].filename == __file__ and "s2s.jit(total" in linecache.getline(__file__, shown[0].lineno)


def test_donation_and_device_options_are_checked():
    with pytest.raises(ValueError, match="both static and donated"):
        s2s.jit(sgd, static_argnums=2, donate_argnums=2)
    with pytest.raises(ValueError, match="backend='xla'"):
        s2s.jit(sgd, donate_argnums=0, backend="python")
    with pytest.raises(TypeError, match="s2s.devices"):
        s2s.jit(sgd, device="cpu:1")


DEVICE_SCRIPT = textwrap.dedent("""
    import numpy as np
    import s2s
    s2s.config.update("num_cpu_devices", 4)
    assert s2s.device_count() == 4
    devices = s2s.devices()
    f = s2s.jit(lambda x: x * 2.0 + 1.0, device=devices[2])
    out = f(np.arange(3.0))
    assert out.device == devices[2], out.device
    g = s2s.jit(lambda x: x - 1.0, device=devices[3])
    moved = g(out)                         # the device argument alone decides placement
    assert moved.device == devices[3] and np.allclose(moved, 2 * np.arange(3.0))
    assert s2s.jit(lambda x: -x)(moved).device == devices[0]
    try:
        s2s.config.update("num_cpu_devices", 2)
        raise AssertionError("changing the device count after first use was accepted")
    except RuntimeError as e:
        assert "before the first jit call" in str(e)
    print("ok devices")
""")


def test_device_argument_decides_placement_and_device_count_is_configurable(tmp_path):
    script = tmp_path / "devices_script.py"   # a file: s2s reads the lambdas' source
    script.write_text(DEVICE_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok devices" in result.stdout


def test_block_until_ready_waits_for_every_array_in_a_tree():
    params = {"W": np.ones((4, 3)), "b": np.ones(3)}
    grads = s2s.jit(s2s.grad(mlp_loss))(params, np.ones((5, 4)))
    tree = {"grads": grads, "step": 3}
    assert s2s.block_until_ready(tree) is tree
    np.testing.assert_allclose(grads["b"], s2s.grad(mlp_loss)(params, np.ones((5, 4)))["b"])


# jaxlib's C++ dispatcher makes the calls it has seen without Python; everything it must
# not take over (values s2s keeps static, keywords, donation, byte order) comes back.

def counting_python_calls(monkeypatch) -> list:
    """The calls that reach s2s's Python path (staging-cache lookup, or the first of a kind)."""
    from s2s.jit import Jitted
    calls = []
    python_call = Jitted._call_in_python
    monkeypatch.setattr(Jitted, "_call_in_python", lambda self, args, kwargs: calls.append(args) or
                        python_call(self, args, kwargs))
    return calls


def scale_and_shift(x, scale, shift=np.float32(1.0)):
    return x * scale + shift


def test_calls_seen_before_run_without_python(monkeypatch):
    params = {"W": np.ones((4, 3)), "b": np.zeros(3)}
    on_device = {"W": s2s.jit(lambda w: w)(params["W"]), "b": params["b"]}   # an Array leaf
    calls = counting_python_calls(monkeypatch)
    f = s2s.jit(mlp_loss)
    for k in range(4):
        x = np.full((5, 4), 0.1 * k)
        np.testing.assert_allclose(f(params, x), mlp_loss(params, x), rtol=1e-12)
    assert len(calls) == 1
    f(params, np.ones((6, 4)))                         # a new shape: once through Python
    f(on_device, np.ones((6, 4)))
    assert len(calls) == 3
    out = f(on_device, np.ones((6, 4)))
    assert len(calls) == 3 and isinstance(out, s2s.Array) and out.shape == () and out.dtype == np.float64
    np.testing.assert_allclose(out, mlp_loss(params, np.ones((6, 4))), rtol=1e-12)


def test_what_the_dispatcher_must_not_take_over_still_gives_the_right_result():
    f = s2s.jit(scale_and_shift)
    x = np.arange(4, dtype=np.float32)
    for scale in (2.0, 3.0, 2, np.float32(5.0)):       # Python numbers may be static to s2s
        np.testing.assert_array_equal(f(x, scale), scale_and_shift(x, scale))
    np.testing.assert_array_equal(f(x, np.float32(5.0), shift=np.float32(-1.0)), x * 5 - 1)
    np.testing.assert_array_equal(f(shift=np.float32(2.0), scale=x, x=np.float32(3.0)), 3.0 * x + 2.0)
    np.testing.assert_array_equal(f(np.arange(4, dtype=np.int32), np.float32(2.0)),
                                  np.arange(4, dtype=np.int32) * np.float32(2.0) + np.float32(1.0))
    swapped = np.arange(5, dtype=">f4")     # byte-swapped, a signature not seen before: read right
    np.testing.assert_array_equal(f(swapped, np.float32(3.0)), 3 * np.arange(5) + 1)
    strided = np.arange(16, dtype=np.float32).reshape(4, 4)
    for view in (strided.T, strided[::2, 1::2], strided[:, 0]):
        for _ in range(2):
            np.testing.assert_array_equal(f(view, np.float32(2.0)), view * 2 + 1)


def test_static_arguments_key_the_dispatcher_by_value_and_type():
    f = s2s.jit(lambda x, n: x * n + n, static_argnums=1)
    x = np.arange(3)
    for n in (2, 3, 2.0, True, 2):
        result = f(x, n)
        np.testing.assert_array_equal(result, x * n + n)
        assert result.dtype == (x * n + n).dtype
    from_the_end = s2s.jit(lambda x, n, m: x * n + m, static_argnums=(1, -1))
    for n, m in ((2, 3), (3, 2), (2, 3), (3, 2)):
        np.testing.assert_array_equal(from_the_end(x, n, m), x * n + m)
    g = s2s.jit(lambda x, t: x + np.array(t), static_argnums=1)   # tuples equal across types
    x = np.arange(2, dtype=np.int32)
    for t in ((1, 2), (1.0, 2.0), (1, 2), (True, False), (1, 0), (True, False)):
        result, expected = g(x, t), x + np.array(t)
        assert result.dtype == expected.dtype, t
        np.testing.assert_array_equal(result, expected)


def test_with_jax_x64_off_s2s_calls_keep_their_types_and_their_speed(monkeypatch):
    """jax's x64 setting is the dispatcher's once jax is loaded: s2s's calls set it to
    s2s's for their own thread, and jax's calls keep jax's."""
    import jax
    calls = counting_python_calls(monkeypatch)
    f = s2s.jit(lambda x: x * 3)
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        inputs = (np.array([1.0, 2.0], np.float32), np.array([1.0 / 3, 2.0]),
                  np.array([1, 2], np.int32), np.array([2 ** 40, 2], np.int64), np.float64(1 / 3))
        for x in inputs:
            for _ in range(3):
                result = f(x)
                assert result.dtype == (x * 3).dtype
                np.testing.assert_array_equal(result, x * 3)
        assert len(calls) == len(inputs)           # each kind once through Python, then in C++
        assert jax.jit(lambda x: x * 3)(np.ones(2)).dtype == np.float32
        JAX_X64_SEEN.clear()                       # jax called by the user's code, while staged,
        s2s.jit(calls_jax)(np.ones(2))             # sees jax's x64 as the caller has it
        assert JAX_X64_SEEN == [False]
        s2s.config.update("enable_x64", 0)         # any truth value, as in NumPy
        assert s2s.jit(lambda x: x * 3)(np.ones(2)).dtype == np.float32
    finally:
        s2s.config.update("enable_x64", True)
        jax.config.update("jax_enable_x64", before)


def test_with_jax_x64_on_s2s_calls_need_no_swap_and_staging_sees_it():
    """When jax's x64 already is s2s's, a call swaps nothing (its fast path), and user
    code calling jax while staged sees jax's setting as it is."""
    import jax
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        JAX_X64_SEEN.clear()
        result = s2s.jit(calls_jax)(np.ones(2))
        assert JAX_X64_SEEN == [True] and result.dtype == np.float64
    finally:
        jax.config.update("jax_enable_x64", before)


JAX_X64_SEEN = []


def calls_jax(x):
    import jax
    JAX_X64_SEEN.append(jax.config.jax_enable_x64)
    return x * 2


def test_dict_keys_that_do_not_sort_go_through_python():
    f = s2s.jit(lambda d: {"a": d[1] * 2, 1: d["x"]})
    x = np.arange(3.0)
    for _ in range(2):
        out = f({1: x, "x": -x})
        np.testing.assert_array_equal(out["a"], 2 * x)
        np.testing.assert_array_equal(out[1], -x)


def test_a_copied_jitted_function_has_its_own_dispatcher():
    import copy
    import gc
    f = s2s.jit(lambda a: a * 2)
    f(np.ones(2))
    deep, shallow = copy.deepcopy(f), copy.copy(f)
    del f
    gc.collect()
    for g in (deep, shallow):
        for _ in range(2):   # a kind of call the original saw too, and a new one
            np.testing.assert_array_equal(g(np.ones(2)), 2.0)
            np.testing.assert_array_equal(g(np.ones(3)), 2.0)


def test_a_parameter_named_self_can_be_passed_by_keyword():
    f = s2s.jit(lambda self, x: self * x)
    for _ in range(3):
        np.testing.assert_array_equal(f(self=np.full(2, 3.0), x=np.ones(2)), 3.0)


def test_a_copied_result_owns_its_data():
    """A copy shared the result's buffer: once the result was donated, np.asarray(copy)
    was a 0-d object array holding a jaxlib object. A copy (and a deep copy, as in
    `copy.deepcopy(params)`) owns its data, as a copy of a jax Array does, on each path
    that builds results (the first call's, then the dispatcher's)."""
    import copy
    increment, double = s2s.jit(lambda x: x + 1), s2s.jit(lambda x: x * 2, donate_argnums=0)
    for _ in range(3):
        result = increment(np.arange(3.0))
        copies = [copy.copy(result), copy.deepcopy({"w": result})["w"]]
        double(result)
        for copied in copies:
            assert type(copied) is s2s.Array and copied.shape == (3,) and copied.dtype == np.float64
            np.testing.assert_array_equal(np.asarray(copied), [1.0, 2.0, 3.0])
            np.testing.assert_array_equal(increment(copied), [2.0, 3.0, 4.0])   # passed where it lives
        with pytest.raises(s2s.DonatedBufferError):
            copy.copy(result)


def test_changing_the_configuration_reaches_the_dispatcher():
    f = s2s.jit(lambda x: x * 2)
    x = np.ones(3)
    assert f(x).dtype == np.float64
    s2s.config.update("enable_x64", False)
    try:
        assert f(x).dtype == np.float32
        assert f(x).dtype == np.float32
    finally:
        s2s.config.update("enable_x64", True)
    assert f(x).dtype == np.float64


def test_results_of_every_tree_kind_come_back_as_arrays(monkeypatch):
    from collections import namedtuple
    Pair = namedtuple("Pair", "first second")
    calls = counting_python_calls(monkeypatch)
    f = s2s.jit(lambda x: {"b": (x, [x * 2]), "a": Pair(x + 1, None), "c": x.sum()})
    x = np.arange(3.0)
    for _ in range(3):
        out = f(x)
        assert sorted(out) == ["a", "b", "c"] and isinstance(out["a"], Pair) and out["a"].second is None
        for got, expected in ((out["b"][0], x), (out["b"][1][0], 2 * x), (out["a"].first, x + 1),
                              (out["c"], 3.0)):
            assert isinstance(got, s2s.Array)
            np.testing.assert_array_equal(got, expected)
    assert len(calls) == 1


def test_a_donated_array_passed_again_says_so():
    step = s2s.jit(lambda w, g: w - 0.1 * g, donate_argnums=0)
    w = s2s.jit(lambda v: v * 1.0)(np.ones(3))
    for _ in range(3):
        new = step(w, np.ones(3))
        with pytest.raises(s2s.DonatedBufferError, match="donated as"):
            step(w, np.ones(3))
        w = new
    np.testing.assert_allclose(w, 0.7)


def scaled_sine(x, k):
    return np.sin(x) * k


def test_a_jitted_function_called_while_staging_is_inlined():
    inner = s2s.jit(scaled_sine, static_argnums=1)
    inner_py = s2s.jit(scaled_sine, backend="python", static_argnums=1)
    x = np.array([0.5, 1.0, 2.0])
    outer = s2s.jit(lambda v: inner(v, 2.0) * 3.0 + inner_py(v, 3))
    for _ in range(2):
        np.testing.assert_allclose(outer(x), np.sin(x) * 9.0, rtol=1e-12)
    np.testing.assert_allclose(s2s.grad(lambda v: inner(v, 2.0).sum())(x), 2 * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.grad(lambda v: inner(v, 2.0).sum()))(x), 2 * np.cos(x), rtol=1e-12)
    equations = [e.primitive.name for e in s2s.make_jaxpr(lambda v: inner(v, 2.0))(x).jaxpr.eqns]
    assert "sin" in equations                        # the inner function's own equations


def difference(x, y, scale=1.0):
    return (x - 2 * y) * scale


def test_keyword_calls_run_in_the_dispatcher_with_each_value_in_its_place(monkeypatch):
    calls = counting_python_calls(monkeypatch)
    f = s2s.jit(difference, static_argnames="scale")
    a, b = np.array([1.0, 2.0]), np.array([10.0, 20.0])
    for _ in range(3):
        for got in (f(a, b), f(x=a, y=b), f(y=b, x=a), f(a, y=b), f(b, a, scale=1.0)[::-1] * 0 + f(a, b)):
            np.testing.assert_array_equal(got, a - 2 * b)
        np.testing.assert_array_equal(f(y=a, x=b), b - 2 * a)
        np.testing.assert_array_equal(f(a, b, scale=3.0), (a - 2 * b) * 3)
        np.testing.assert_array_equal(f(a, b, scale=3), (a - 2 * b) * 3)
        np.testing.assert_array_equal(f(scale=(2.0), y=b, x=a), (a - 2 * b) * 2)
    assert len(calls) == 7          # each kind of call through Python once (keyword order is no kind)


def python_frames_of_s2s(call) -> list[str]:
    """The Python functions of s2s (and s2s_runtime) that run during `call()`, but for
    s2s_runtime.fastcall's where its Python versions are in use (they are the C ones)."""
    frames = []
    fastcall_file = s2s_runtime.fastcall.__file__

    def profile(frame, event, arg):
        filename = frame.f_code.co_filename
        if event == "call" and os.sep + "s2s" in filename and filename != fastcall_file:
            frames.append(frame.f_code.co_name)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return frames


def test_a_call_seen_before_runs_no_python_of_s2s():
    import jax
    f = s2s.jit(lambda x, y: x * y + 1.0)
    x = np.arange(4, dtype=np.float32)
    before = jax.config.jax_enable_x64
    try:
        for jax_x64 in (True, False):   # with jax's x64 off, each call sets it to s2s's (in C)
            jax.config.update("jax_enable_x64", jax_x64)
            for _ in range(3):
                f(x, x)
            assert python_frames_of_s2s(lambda: f(x, x)) == []
            result = f(x, x)
            # NumPy reads it through its memory (the buffer protocol, which only C can give)
            assert python_frames_of_s2s(lambda: np.asarray(result)) == (
                [] if s2s_runtime.fastcall.COMPILED else ["__array__", "_numpy"])
            f(result, result)
            assert python_frames_of_s2s(lambda: f(result, result)) == []    # Arrays passed back
    finally:
        jax.config.update("jax_enable_x64", before)
    assert f._target is f._backend._dispatch   # (the Python Caller's target too)


SCALE = 2.0


def test_a_function_reading_a_global_that_can_change_is_checked_on_each_call():
    global SCALE
    f = s2s.jit(lambda x: x * SCALE)
    try:
        for _ in range(2):
            np.testing.assert_array_equal(f(np.ones(2)), 2.0)
        assert f._target == f._backend.call
        SCALE = 3.0
        np.testing.assert_array_equal(f(np.ones(2)), 3.0)
    finally:
        SCALE = 2.0


def test_calls_the_dispatcher_refuses_are_made_in_python_after_it_took_others():
    f = s2s.jit(lambda d: d["x"] * 2)
    for _ in range(3):
        np.testing.assert_array_equal(f({"x": np.ones(2)}), 2.0)
    np.testing.assert_array_equal(f({1: np.zeros(2), "x": np.ones(2)}), 2.0)   # keys that do not sort
    with pytest.warns(PendingDeprecationWarning):
        matrix = np.matrix([[1.0, 2.0]])
    with pytest.raises(s2s.errors.S2SError, match="np.matrix"):
        f({"x": matrix})
    deep = np.ones(2)
    for _ in range(1000):
        deep = [deep]
    with pytest.raises(s2s.errors.S2SError, match="nested too deeply"):
        f({"x": deep})
    g = s2s.jit(lambda a, b: a @ b)
    g(np.ones((2, 3)), np.ones((3, 2)))
    g(np.ones((2, 3)), np.ones((3, 2)))
    with pytest.raises(s2s.errors.S2SError) as info:   # a new kind of call, which fails to stage
        g(np.ones((2, 3)), np.ones((2, 3)))
    assert not [frame for frame in traceback.extract_tb(info.value.__traceback__)
                if os.sep + "s2s" + os.sep in frame.filename], "internal frames shown"


def test_turning_jax_x64_off_never_runs_a_float64_call_as_float32(monkeypatch):
    import jax
    calls = counting_python_calls(monkeypatch)
    f = s2s.jit(lambda x: x * 3)
    before = jax.config.jax_enable_x64
    try:
        jax.config.update("jax_enable_x64", True)    # as s2s's: calls go straight to the dispatcher
        for _ in range(2):
            assert f(np.ones(2, np.float32)).dtype == np.float32
        jax.config.update("jax_enable_x64", False)   # the dispatcher would now key float64 as float32
        for x in (np.array([1.0 / 3, 2.0]), np.ones(2, np.float32), np.array([1.0 / 3, 2.0])):
            result = f(x)
            assert result.dtype == x.dtype
            np.testing.assert_array_equal(result, x * 3)
        assert len(calls) <= 4
    finally:
        jax.config.update("jax_enable_x64", before)


def test_transforms_of_a_jitted_function_inline_it():
    def f(x):
        return np.sum(np.sin(x) * 2.0)
    x = np.arange(3.0)
    np.testing.assert_allclose(s2s.grad(s2s.jit(f))(x), 2.0 * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(s2s.jit(s2s.grad(s2s.jit(f)))(x), 2.0 * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(s2s.vmap(s2s.jit(f))(np.ones((2, 3))), [f(np.ones(3))] * 2, rtol=1e-12)
    assert s2s.jit(s2s.grad(f)).describe() == f"jit(grad({f.__qualname__}))"
    # each transform of a chain says its own name, whatever wraps what
    assert s2s.grad(s2s.jit(f)).describe() == f"grad(jit({f.__qualname__}))"
    assert s2s.vmap(s2s.jit(s2s.grad(f))).describe() == f"vmap(jit(grad({f.__qualname__})))"


JAX_LOADED_LATER = """
import numpy as np
import s2s
f = s2s.jit(lambda x: x * 3)
x64, x32 = np.array([1.0 / 3, 2.0]), np.ones(2, np.float32)
for _ in range(2):
    assert f(x64).dtype == np.float64 and f(x32).dtype == np.float32
import jax   # jax's x64 setting (off) replaces s2s's as the one the dispatcher types calls by
assert not jax.config.jax_enable_x64
for _ in range(3):
    assert f(x64).dtype == np.float64 and f(x32).dtype == np.float32
    np.testing.assert_array_equal(f(x64), x64 * 3)
assert jax.jit(lambda x: x * 3)(x64).dtype == np.float32
print("ok")
"""


def test_jax_loaded_after_s2s_calls_changes_no_result(tmp_path):
    script = tmp_path / "jax_later.py"    # (s2s reads the function's source from a file)
    script.write_text(JAX_LOADED_LATER)
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0 and "ok" in result.stdout, result.stdout + result.stderr


def test_no_fast_path_is_typed_32_bit_where_s2s_types_64_bit():
    """A call not swapped (jax loaded, its x64 off, not yet seen by s2s) is typed by jax's
    x64, under which a float64 array keys as a float32 one: the dispatcher must get no
    fast path from such a call, or float64 calls would run the float32 executable."""
    import jax
    from s2s_runtime import xla
    f = s2s.jit(lambda x: x * 3)
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    s2s_runtime.fastcall.set_jax_x64(None, True)    # as before s2s finds jax: nothing swapped
    try:
        for _ in range(2):
            assert f(np.ones(2, np.float32)).dtype == np.float32
        x = np.array([1.0 / 3, 2.0])
        assert f(x).dtype == np.float64
        np.testing.assert_array_equal(f(x), x * 3)
    finally:
        xla.set_dispatch_x64(xla._x64_default)
        jax.config.update("jax_enable_x64", before)
