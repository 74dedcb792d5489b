"""s2s_runtime.fastcall: the jitted call and the result storage, in C and in Python. Each
behaviour is checked on both; the whole jit path in Python is run by the last test."""
import gc
import os
import shutil
import subprocess
import sys
import traceback
import weakref

import numpy as np
import pytest

from s2s_runtime import fastcall

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Implementation = tuple   # (Caller, ResultBase, set_jax_x64, callers_jax_x64)
IMPLEMENTATIONS = {"python": (fastcall.PythonCaller, fastcall.PythonResultBase, fastcall.python_set_jax_x64,
                              fastcall.python_callers_jax_x64)}
if fastcall.COMPILED:
    from s2s_runtime import _fastcall
    IMPLEMENTATIONS["c"] = (_fastcall.Caller, _fastcall.ResultBase, _fastcall.set_jax_x64,
                            _fastcall.callers_jax_x64)


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def implementation(request):
    caller, result_base, set_jax_x64, callers_jax_x64 = IMPLEMENTATIONS[request.param]
    yield caller, result_base, set_jax_x64, callers_jax_x64
    from s2s_runtime import xla   # what s2s itself had set up
    set_jax_x64(None, True)
    xla.set_dispatch_x64(xla._x64_default)


def test_the_extension_is_built_where_a_compiler_is():
    if os.environ.get("S2S_PURE_PYTHON_CALLS") == "1" or not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler, or the Python versions asked for")
    assert fastcall.COMPILED and fastcall.Caller is not fastcall.PythonCaller


class Refused(Exception):
    pass


class Clean(Exception):
    pass


def make_caller(caller_class, target):
    class Called(caller_class):
        _refused = (Refused, KeyError)
        _clean = (Clean,)

        def _on_refused(self, error, args, kwargs):
            if isinstance(error, KeyError):
                raise Clean(f"refused {error.args[0]}")
            return ("refused", type(error).__name__, args, kwargs)
    called = Called()
    called._target = target
    return called


def raising(error):
    def target(*args, **kwargs):
        raise error
    return target


def frames_of(error) -> list[str]:
    return [frame.name for frame in traceback.extract_tb(error.__traceback__)]


def test_a_call_is_its_targets(implementation):
    caller = make_caller(implementation[0], lambda *args, **kwargs: (args, kwargs))
    assert caller(1, 2, key=3) == ((1, 2), {"key": 3})
    caller._target = lambda: "swapped"
    assert caller() == "swapped"


def test_a_refused_error_hands_the_call_over(implementation):
    caller = make_caller(implementation[0], raising(Refused("no")))
    assert caller(1, key=2) == ("refused", "Refused", (1,), {"key": 2})
    assert caller() == ("refused", "Refused", (), {})


def test_a_clean_error_leaves_without_the_frames_it_came_through(implementation):
    def deep_inside():
        raise Clean("the user's mistake")
    caller = make_caller(implementation[0], lambda: deep_inside())
    with pytest.raises(Clean) as info:
        caller()
    assert "deep_inside" not in frames_of(info.value)
    with pytest.raises(Clean, match="refused k") as info:   # raised by the refused path
        make_caller(implementation[0], raising(KeyError("k")))()
    assert "_on_refused" not in frames_of(info.value)


def test_other_errors_keep_their_frames(implementation):
    def deep_inside():
        raise ValueError("a bug")
    caller = make_caller(implementation[0], lambda: deep_inside())
    with pytest.raises(ValueError, match="a bug") as info:
        caller()
    assert "deep_inside" in frames_of(info.value)


def test_a_caller_without_a_target_says_so(implementation):
    caller = implementation[0]()
    with pytest.raises(TypeError):
        caller()


class FakeSetting:
    """jaxlib's Config as the swap uses it: a global value and one thread-local value."""
    unset = object()

    def __init__(self, value):
        self.global_value, self.local = value, self.unset
        self.swaps = 0

    @property
    def value(self):
        return self.global_value if self.local is self.unset else self.local

    def swap_local(self, value):
        self.swaps += 1
        previous, self.local = self.local, value
        return previous

    def set_local(self, value):
        self.local = value


def test_jax_x64_is_swapped_for_the_call_and_restored(implementation):
    caller_class, _, set_jax_x64, callers_jax_x64 = implementation
    setting = FakeSetting(False)
    seen = []
    caller = make_caller(caller_class, lambda: seen.append((setting.value, callers_jax_x64())))
    set_jax_x64(setting, True)
    caller()
    assert seen == [(True, FakeSetting.unset)] and setting.local is FakeSetting.unset
    assert callers_jax_x64() is None
    failing = make_caller(caller_class, raising(ValueError("inside")))
    with pytest.raises(ValueError, match="inside"):
        failing()
    assert setting.local is FakeSetting.unset and setting.value is False   # restored on failure too
    setting.global_value = True    # jax's is s2s's already: nothing to swap
    caller()
    assert setting.swaps == 2 and seen[-1] == (True, None)


def test_a_call_inside_a_swapping_call_swaps_and_sees_its_caller(implementation):
    caller_class, _, set_jax_x64, callers_jax_x64 = implementation
    setting = FakeSetting(True)
    seen = []
    inner = make_caller(caller_class, lambda: seen.append(("inner", setting.value, callers_jax_x64())))

    def outer_target():
        setting.set_local(True)     # as staging gives the caller's value back to user code
        inner()
        seen.append(("outer", setting.value, callers_jax_x64()))
    outer = make_caller(caller_class, outer_target)
    set_jax_x64(setting, False)
    outer()
    assert seen == [("inner", False, True), ("outer", True, FakeSetting.unset)]
    assert setting.swaps == 2 and setting.local is FakeSetting.unset and callers_jax_x64() is None


def test_nothing_is_swapped_without_a_setting(implementation):
    caller_class, _, set_jax_x64, callers_jax_x64 = implementation
    set_jax_x64(None, False)
    assert make_caller(caller_class, lambda: callers_jax_x64())() is None


def make_result_class(result_base):
    class Result(result_base):
        __slots__ = ()

        def _live_buffer(self):
            if self._donated_as is not None:
                raise RuntimeError(f"donated as {self._donated_as}")
            return self._buffer
    return Result


def test_results_built_for_the_dispatcher_hold_buffer_and_device(implementation):
    result_class = make_result_class(implementation[1])
    result = result_class._from_dispatch("device 0", ("buffer",))
    assert type(result) is result_class
    assert (result._buffer, result._device) == ("buffer", "device 0")
    assert (result._value, result._donated_as, result._shape, result._dtype) == (None,) * 4
    assert result._to_dispatch() == (("buffer",), "device 0")
    result._donated_as = "`x` of f"
    with pytest.raises(RuntimeError, match="donated as `x` of f"):
        result._to_dispatch()
    with pytest.raises(TypeError):
        result_class._from_dispatch("device 0", ("one", "two"))


def test_block_until_ready_waits_on_the_buffer(implementation):
    class Buffer:
        waits = 0

        def block_until_ready(self):
            self.waits += 1
    result_class = make_result_class(implementation[1])
    buffer = Buffer()
    result = result_class._from_dispatch(None, (buffer,))
    assert result.block_until_ready() is result and buffer.waits == 1
    result._donated_as = "`x` of f"
    with pytest.raises(RuntimeError, match="donated as `x` of f"):
        result.block_until_ready()


def test_results_are_weakly_referenced_and_collected_in_cycles(implementation):
    result_class = make_result_class(implementation[1])
    result = result_class._from_dispatch(None, (None,))
    result._value = [result]    # a cycle through a field
    reference = weakref.ref(result)
    del result
    gc.collect()
    assert reference() is None


def test_numpy_reads_a_result_through_its_memory_without_python():
    if "c" not in IMPLEMENTATIONS:
        pytest.skip("the extension is not built")
    result_class = make_result_class(IMPLEMENTATIONS["c"][1])
    memory = np.arange(4.0)
    memory.flags.writeable = False
    result = result_class._from_dispatch(None, (memory,))
    read = np.asarray(result)
    np.testing.assert_array_equal(read, memory)
    assert not read.flags.writeable and np.shares_memory(read, memory)
    result._value = np.arange(3)     # the NumPy copy, once made, is what is read
    np.testing.assert_array_equal(np.asarray(result), np.arange(3))
    result._value, result._donated_as = None, "`x` of f"
    with pytest.raises(RuntimeError, match="donated as `x` of f"):
        memoryview(result)
    with pytest.raises(BufferError, match="no single device buffer"):
        memoryview(result_class._from_dispatch(None, (None,)))


def test_jit_runs_the_same_with_the_python_versions():
    """The XLA backend's tests, in a process where fastcall uses its Python versions."""
    env = dict(os.environ, S2S_PURE_PYTHON_CALLS="1")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:randomly",
               "tests/test_xla_backend.py", "tests/test_jit.py", "tests/s2s_runtime/test_array.py",
               "-k", "not test_the_extension_is_built"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
