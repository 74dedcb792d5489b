"""Regression: with a warm disk cache, `s2s compile` wrote `.exe` files that jaxlib could not
load (`NOT_FOUND: Function ..._fusion not found`): an executable deserialized from the cache
serialized again without its compiled kernels. An executable now serializes as the bytes it
was loaded from, so what the cache served round-trips."""
import numpy as np

from s2s_runtime.xla import Executable

from tests.reliability import MULTIPLY_ADD_MODULE, cache_dir  # noqa: F401  (a fixture)


def test_executable_loaded_from_the_disk_cache_serializes_to_bytes_that_load(cache_dir):
    cold = Executable(MULTIPLY_ADD_MODULE, ["float32"])
    warm = Executable(MULTIPLY_ADD_MODULE, ["float32"])
    assert not cold.cache_hit and warm.cache_hit
    x = np.array([1.0, -2.0, 0.5], np.float32)
    for data in (warm.serialize(), cold.serialize()):
        loaded = Executable.from_serialized(data, ["float32"])
        (result,) = loaded(x)
        assert type(result) is np.ndarray and result.dtype == np.float32
        np.testing.assert_array_equal(result, x * x + x)
        assert loaded.serialize() == data   # and once more, from a loaded one
