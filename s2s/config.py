"""Global configuration: `s2s.config.update('enable_x64', False)`,
`s2s.config.update('num_cpu_devices', 4)` (before the first jit call).

Options are read when a function is staged, and take part in every cache key, so
changing one never returns a stale result.
"""
from __future__ import annotations

import dataclasses

from s2s_runtime.xla import set_dispatch_key, set_dispatch_x64, set_num_cpu_devices


@dataclasses.dataclass
class _Values:
    # float64 stays float64, as in NumPy. False gives JAX-style 32-bit canonicalization.
    enable_x64: bool = True
    # CPU devices of the XLA client; None: $S2S_NUM_CPU_DEVICES, else 1. Only before first use.
    num_cpu_devices: int | None = None
    # Carries that XLA's reverse mode of a while loop with no bound keeps (its trip count is
    # only known when it runs): memory is that many copies of the carry, and each step is
    # advanced at most r times, r the least with C(k + r, r) >= the steps (k = 32: 3 up to
    # 6,545 steps, 4 up to 58,905). Fewer saves memory on a big carry; more saves time on
    # many steps.
    while_loop_checkpoints: int = 32


values = _Values()
_key: tuple | None = None   # cache_key(), recomputed after each update


def update(name: str, value) -> None:
    """Sets one option; an unknown name is an error that lists the known ones."""
    known = [f.name for f in dataclasses.fields(_Values)]
    if name not in known:
        raise ValueError(f"unknown s2s config option {name!r}; known options: {', '.join(known)}")
    global _key
    if name == "num_cpu_devices":
        set_num_cpu_devices(value)   # refused once the client exists with another count
    if name == "while_loop_checkpoints" and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"while_loop_checkpoints must be a positive int, not {value!r}")
    if name == "enable_x64":
        value = bool(value)
        set_dispatch_x64(value)      # jaxlib's dispatcher types 64-bit NumPy values alike
    setattr(values, name, value)
    _key = None
    set_dispatch_key(cache_key())


def cache_key() -> tuple:
    """The part of every cache key that depends on configuration (asked on every call)."""
    global _key
    if _key is None:
        _key = dataclasses.astuple(values)
    return _key
