"""The compile options of one executable: the device it runs on, and what XLA must keep.

A module holding an optimization barrier (a checkpoint's recomputation, see
`s2s/primitives/remat.py`) is compiled without XLA's `cse_barrier_expander`: on CPU that
pass removes the barriers, after which CSE merges the recomputation back into the forward
pass and the checkpoint saves nothing (JAXLIB_NOTES.md, "Remat on CPU"). The override is
per executable, so nothing else is compiled differently, and like every option it is part
of the disk-cache key (`xla.disk_cache_key`).
"""
from __future__ import annotations

import numpy as np

from s2s_runtime import quiet_logs  # noqa: F401  (before jaxlib loads)
from jaxlib import xla_client


def placement(device, mlir_text: str = ""):
    """The device list and compile options that put the one-device computation
    `mlir_text` on `device`."""
    options = xla_client.CompileOptions()
    options.executable_build_options.device_assignment = xla_client.DeviceAssignment.create(
        np.array([[device.id]]))
    if "stablehlo.optimization_barrier" in mlir_text:
        options.env_option_overrides = [("xla_disable_hlo_passes", "cse_barrier_expander")]
    return xla_client.DeviceList((device,)), options
