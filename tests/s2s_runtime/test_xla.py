"""s2s_runtime.xla: the Array result type and the executable wrapper (jaxlib only)."""
import numpy as np
import pytest

from s2s_runtime.hlo import entry_signature
from s2s_runtime.xla import Array, DonatedBufferError, Executable

IDENTITY_AND_CONSTANT = """module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<i64>) {
    %c = stablehlo.constant dense<7> : tensor<i64>
    return %x, %c : tensor<2x3xf32>, tensor<i64>
  }
}
"""


@pytest.fixture(scope="module")
def executable():
    return Executable(IDENTITY_AND_CONSTANT, [np.float32])


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


def test_a_donated_array_raises_on_every_use():
    donating = IDENTITY_AND_CONSTANT.replace("%x: tensor<2x3xf32>", "%x: tensor<2x3xf32> {tf.aliasing_output = 0 : i32}")
    exe = Executable(donating, [np.float32])
    a, _ = exe.execute([np.ones((2, 3), np.float32)])
    b, _ = exe.execute([a], donated={0: "`x` of f"})
    assert a.is_donated() and not b.is_donated()
    for use in (np.asarray, lambda v: v + 1, lambda v: v.shape, lambda v: v[0], lambda v: exe.execute([v])):
        with pytest.raises(DonatedBufferError, match="donated as `x` of f"):
            use(a)
    assert "donated" in repr(a)
    np.testing.assert_array_equal(b, 1.0)


def test_parameter_shapes_and_results_are_read_from_the_entry_layout():
    header = ("HloModule m, is_scheduled=true, entry_computation_layout="
              "{(f32[4]{0}, pred[])->(f32[4,3]{1,0}, s64[], u8[0]{0}, pred[2]{0})}\n")
    assert entry_signature(header) == ([(4,), ()], [((4, 3), np.float32), ((), np.int64), ((0,), np.uint8),
                                                      ((2,), np.bool_)])
    assert entry_signature("HloModule m, entry_computation_layout={(f64[])->f64[2]{0}}\n") == \
        ([()], [((2,), np.float64)])
    assert entry_signature("HloModule m, entry_computation_layout={()->f64[]}\n") == ([], [((), np.float64)])


def test_probing_for_attributes_does_not_read_the_array(executable):
    a, _ = executable.execute([np.ones((2, 3), np.float32)])
    assert not hasattr(a, "_fields") and not hasattr(a, "__dataclass_fields__")
    assert a._value is None        # pytree code's probes copied nothing to the host


def test_the_dispatchers_put_fallback_puts_a_value_on_the_sharding_device(executable):
    """jaxlib's C++ dispatcher calls it for arguments it cannot put itself (other layouts,
    arrays spread over another number of devices); here it is called directly."""
    from s2s_runtime.xla import _device_put_fallback
    put = _device_put_fallback(np.arange(6.0).reshape(2, 3), executable._sharding, None)
    np.testing.assert_array_equal(np.asarray(put), np.arange(6.0).reshape(2, 3))
    assert list(put.sharding.device_set) == [executable.device]
