"""XLA HLO text: the unoptimized HLO of a StableHLO module (what `s2s hlo` and
`.as_hlo_text()` show), and the entry signature read back from an optimized module's
text, where jaxlib gives result arrays no shape of their own. Kept apart from
`s2s_runtime.xla`, which holds the client, the arrays and the executables.
"""
from __future__ import annotations

import re

import numpy as np

from s2s_runtime import quiet_logs  # noqa: F401  (before jaxlib loads)
from jaxlib import _hlo, _jax

_HLO_DTYPES = {"pred": np.bool_, "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
               "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
               "f16": np.float16, "f32": np.float32, "f64": np.float64, "c64": np.complex64,
               "c128": np.complex128}


def entry_signature(optimized_hlo: str) -> tuple[list[tuple], list[tuple[tuple, np.dtype]]]:
    """The shape of each parameter and the (shape, dtype) of each result, read from the
    HLO's entry_computation_layout (`{(f32[4]{0})->(f32[4]{0}, f64[])}`): jaxlib gives
    result arrays no shape of their own."""
    header = optimized_hlo.split("\n", 1)[0]
    layout = header[header.index("entry_computation_layout={"):]
    split = layout.index(")->")

    def typed(text):
        return [(tuple(int(d) for d in dims.split(",") if d), np.dtype(_HLO_DTYPES[kind]))
                for kind, dims in re.findall(r"\b(pred|[suf]\d+|c\d+)\[([\d,]*)\]", text)]
    return [shape for shape, _ in typed(layout[:split])], typed(layout[split + 3:])


def hlo_text(mlir_text: str, metadata: bool = False) -> str:
    """The unoptimized XLA HLO of a StableHLO module; `metadata`: with each op's source."""
    computation = _jax.mlir.mlir_module_to_xla_computation(mlir_text, use_tuple_args=False,
                                                           return_tuple=False)
    if not metadata:
        return computation.as_hlo_text()
    options = _hlo.HloPrintOptions()
    options.print_metadata = True
    return computation.get_hlo_module().to_string(options)
