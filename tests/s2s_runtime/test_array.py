"""s2s_runtime.array: the Array result type, on an executable's results (jaxlib only)."""
import copy
import pickle

import numpy as np
import pytest

from s2s_runtime.array import Array, DonatedBufferError
from s2s_runtime.xla import Executable


def test_results_are_arrays_that_numpy_reads(executable):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, c = executable.execute([x])
    assert isinstance(a, Array) and a.shape == (2, 3) and a.dtype == np.float32 and a.ndim == 2
    assert a.size == 6 and a.device == executable.device
    assert c.shape == () and c.dtype == np.int64 and int(c) == 7 and c.block_until_ready() is c
    np.testing.assert_array_equal(np.asarray(a), x)
    assert np.asarray(a, dtype=np.float64).dtype == np.float64
    assert "Array([[0., 1., 2.]" in repr(a) and "dtype=float32" in repr(a)


def test_arithmetic_indexing_and_methods_fall_back_to_numpy(executable):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, c = executable.execute([x])
    np.testing.assert_array_equal(a + 1, x + 1)
    np.testing.assert_array_equal(2 * a, 2 * x)
    np.testing.assert_array_equal(a @ a.T, x @ x.T)
    np.testing.assert_array_equal(-a, -x)
    np.testing.assert_array_equal(a == x, np.ones((2, 3), bool))
    np.testing.assert_array_equal(np.sin(a), np.sin(x))
    np.testing.assert_array_equal(np.concatenate([a, x]), np.concatenate([x, x]))
    assert a[1, 2] == 5 and a.sum() == 15 and a.reshape(3, 2).shape == (3, 2)
    assert len(a) == 2 and [list(r) for r in a] == x.tolist() and float(c / 2) == 3.5


def test_arrays_are_passed_back_without_a_host_round_trip(executable):
    x = np.ones((2, 3), np.float32)
    a, _ = executable.execute([x])
    b, _ = executable.execute([a])
    assert b._buffer is not None and a._value is None   # `a` was never read into NumPy
    np.testing.assert_array_equal(b, x)


def donating_executable(executable) -> Executable:
    """`executable` with its parameter donated to its first result."""
    return Executable(executable.text.replace("%x: tensor<2x3xf32>", "%x: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}"),
                      [np.float32])


def test_a_donated_array_raises_on_every_use(executable):
    exe = donating_executable(executable)
    a, _ = exe.execute([np.ones((2, 3), np.float32)])
    b, _ = exe.execute([a], donated={0: "`x` of f"})
    assert a.is_donated() and not b.is_donated()
    for use in (np.asarray, lambda v: v + 1, lambda v: v.shape, lambda v: v[0], lambda v: exe.execute([v])):
        with pytest.raises(DonatedBufferError, match="donated as `x` of f"):
            use(a)
    assert "donated" in repr(a)
    np.testing.assert_array_equal(b, 1.0)


def test_probing_for_attributes_does_not_read_the_array(executable):
    a, _ = executable.execute([np.ones((2, 3), np.float32)])
    assert not hasattr(a, "_fields") and not hasattr(a, "__dataclass_fields__")
    assert a._value is None        # pytree code's probes copied nothing to the host


def test_a_result_pickles_as_its_numpy_value(executable):
    """pickle.dumps of a result failed ("cannot pickle ArrayImpl"). It pickles as its NumPy
    value and unpickles as that ndarray (writable, as any unpickled one), which loads
    where s2s is not installed; a donated one has no value to pickle."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, c = executable.execute([x])
    for result, value in ((a, x), (c, np.int64(7))):
        loaded = pickle.loads(pickle.dumps({"w": result}))["w"]
        assert type(loaded) is np.ndarray and loaded.dtype == value.dtype and loaded.flags.writeable
        np.testing.assert_array_equal(loaded, value)
    assert pickle.dumps(a) == pickle.dumps(x)
    donating = donating_executable(executable)
    donated, _ = donating.execute([x])
    donating.execute([donated], donated={0: "`x` of f"})
    for use in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(DonatedBufferError, match="donated as `x` of f"):
            use(donated)


def test_a_copy_owns_its_data(executable):
    """A copy (and a deep copy) has a device buffer of its own, on the same device, typed
    as the original: donating the original leaves it readable and usable as an argument."""
    donating = donating_executable(executable)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    a, _ = donating.execute([x])
    copies = copy.copy(a), copy.deepcopy([a, a])
    assert copies[1][0] is copies[1][1]   # deepcopy's memo: one copy of one array
    donating.execute([a], donated={0: "`x` of f"})
    for copied in (copies[0], copies[1][0]):
        assert type(copied) is Array and copied._buffer is not a._buffer and copied.device == donating.device
        assert copied.shape == (2, 3) and copied.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(copied), x)
        np.testing.assert_array_equal(donating.execute([copied])[0], x)
