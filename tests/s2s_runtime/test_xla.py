"""s2s_runtime.xla: the executable wrapper (jaxlib only)."""
import numpy as np

from s2s_runtime.hlo import entry_signature


def test_parameter_shapes_and_results_are_read_from_the_entry_layout():
    header = ("HloModule m, is_scheduled=true, entry_computation_layout="
              "{(f32[4]{0}, pred[])->(f32[4,3]{1,0}, s64[], u8[0]{0}, pred[2]{0})}\n")
    assert entry_signature(header) == ([(4,), ()], [((4, 3), np.float32), ((), np.int64), ((0,), np.uint8),
                                                      ((2,), np.bool_)])
    assert entry_signature("HloModule m, entry_computation_layout={(f64[])->f64[2]{0}}\n") == \
        ([()], [((2,), np.float64)])
    assert entry_signature("HloModule m, entry_computation_layout={()->f64[]}\n") == ([], [((), np.float64)])


def test_the_dispatchers_put_fallback_puts_a_value_on_the_sharding_device(executable):
    """jaxlib's C++ dispatcher calls it for arguments it cannot put itself (other layouts,
    arrays spread over another number of devices); here it is called directly."""
    from s2s_runtime.xla import _device_put_fallback
    put = _device_put_fallback(np.arange(6.0).reshape(2, 3), executable._sharding, None)
    np.testing.assert_array_equal(np.asarray(put), np.arange(6.0).reshape(2, 3))
    assert list(put.sharding.device_set) == [executable.device]
