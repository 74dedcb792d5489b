"""The executable the runtime's tests run on (jaxlib only)."""
import numpy as np
import pytest

from s2s_runtime.xla import Executable

IDENTITY_AND_CONSTANT = """module @m attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<i64>) {
    %c = stablehlo.constant dense<7> : tensor<i64>
    return %x, %c : tensor<2x3xf32>, tensor<i64>
  }
}
"""


@pytest.fixture(scope="package")
def executable():
    return Executable(IDENTITY_AND_CONSTANT, [np.float32])
