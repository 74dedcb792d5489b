"""`s2s_runtime.manifest.load`'s callable checks its arguments against the entry, as a
jitted function's compiled signature would: NumPy arrays of another dtype or shape are a
TypeError (a float64 array was once run as float32 silently), Python numbers and lists of
the input's kind are taken as its dtype."""
import os
import subprocess
import sys

import numpy as np
import pytest

import s2s
from s2s.batch_compile import compile_paths
from s2s_runtime import manifest

MODULE = '''\
import numpy as np
import s2s


@s2s.export("f32[3], i32[2]", transforms=("primal",))
def twice(x, k):
    return x * 2, k + 1
'''


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    """The path of the manifest of MODULE, compiled."""
    root = tmp_path_factory.mktemp("manifest_arguments")
    (root / "arguments_module.py").write_text(MODULE)
    assert compile_paths([str(root / "arguments_module.py")], str(root / "build")) == 0
    return str(root / "build" / "manifest.json")


@pytest.fixture(scope="module")
def twice(built):
    return manifest.load(built, "arguments_module.twice")


def test_loading_an_entry_prints_nothing(built):
    """Regression: manifest imported jaxlib before quieting its logging, and a process that
    only loads and runs an entry printed XLA's INFO lines about its devices."""
    script = ("import numpy as np\nfrom s2s_runtime import manifest\n"
              f"f = manifest.load({built!r}, 'arguments_module.twice')\n"
              "f(np.zeros(3, np.float32), np.zeros(2, np.int32))\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr


def test_loaded_entry_refuses_float64_for_float32(twice):
    with pytest.raises(TypeError, match=r"argument 0 is float64\[3\], the compiled entry takes float32\[3\]"):
        twice(np.zeros(3), np.zeros(2, np.int32))


def test_loaded_entry_refuses_a_wrong_shape(twice):
    with pytest.raises(TypeError, match=r"argument 1 is int32\[3\], the compiled entry takes int32\[2\]"):
        twice(np.zeros(3, np.float32), np.zeros(3, np.int32))


def test_loaded_entry_takes_python_numbers_and_lists_of_the_input_kind(twice):
    doubled, incremented = twice([0.5, -1.0, 2.0], (4, 5))
    assert doubled.dtype == np.float32 and incremented.dtype == np.int32
    np.testing.assert_array_equal(doubled, np.array([1.0, -2.0, 4.0], np.float32))
    np.testing.assert_array_equal(incremented, np.array([5, 6], np.int32))


@pytest.mark.parametrize("x, k", [
    ([1, 2, 3], [1, 2]),                          # ints for a float input
    ([1.0, 2.0, 3.0], [1.5, 2.0]),                # floats for an int input
    ([1.0, 2.0, 3.0], [2 ** 40, 1]),              # an int that int32 cannot hold
    ([True, False, True], [1, 2]),                # bools for a float input
    ([1.0, 2.0], [1, 2]),                         # a list of the wrong length
    ("abc", [1, 2]),                              # not a number at all
    ([[1.0], [2.0, 3.0]], [1, 2]),                # a ragged list
])
def test_loaded_entry_refuses_python_values_of_another_kind_or_shape(twice, x, k):
    with pytest.raises(TypeError, match="the compiled entry takes"):
        twice(x, k)


def test_a_refused_python_value_is_named_as_one(twice):
    """The message said "argument 0 is a int of int64[3]"."""
    with pytest.raises(TypeError, match=r"argument 0 is a Python list of int64\[3\], the compiled "
                                        r"entry takes float32\[3\]"):
        twice([1, 2, 3], [1, 2])


def on_device(value: np.ndarray) -> s2s.Array:
    """`value` as the `s2s.Array` a jitted function returns."""
    return s2s.jit(lambda x: x)(value)


def test_loaded_entry_takes_s2s_arrays_of_its_dtype_and_shape(twice):
    """Regression: an `s2s.Array` (what jit returns) of exactly the input's dtype and shape
    was refused as if it were a Python value of another kind."""
    x, k = on_device(np.array([0.5, -1.0, 2.0], np.float32)), on_device(np.array([4, 5], np.int32))
    assert isinstance(x, s2s.Array) and isinstance(k, s2s.Array)
    doubled, incremented = twice(x, k)
    np.testing.assert_array_equal(doubled, np.array([1.0, -2.0, 4.0], np.float32))
    np.testing.assert_array_equal(incremented, np.array([5, 6], np.int32))


@pytest.mark.parametrize("x, message", [
    (np.zeros(3), r"argument 0 is float64\[3\], the compiled entry takes float32\[3\]"),
    (np.zeros(4, np.float32), r"argument 0 is float32\[4\], the compiled entry takes float32\[3\]"),
])
def test_loaded_entry_refuses_s2s_arrays_of_another_dtype_or_shape(twice, x, message):
    with pytest.raises(TypeError, match=message):
        twice(on_device(x), np.zeros(2, np.int32))
