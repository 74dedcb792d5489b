"""Global configuration: `s2s.config.update('enable_x64', False)`.

Options are read when a function is staged, and take part in every cache key, so
changing one never returns a stale result.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class _Values:
    # float64 stays float64, as in NumPy. False gives JAX-style 32-bit canonicalization.
    enable_x64: bool = True


values = _Values()
_key: tuple | None = None   # cache_key(), recomputed after each update


def update(name: str, value) -> None:
    """Sets one option; an unknown name is an error that lists the known ones."""
    known = [f.name for f in dataclasses.fields(_Values)]
    if name not in known:
        raise ValueError(f"unknown s2s config option {name!r}; known options: {', '.join(known)}")
    global _key
    setattr(values, name, value)
    _key = None


def cache_key() -> tuple:
    """The part of every cache key that depends on configuration (asked on every call)."""
    global _key
    if _key is None:
        _key = dataclasses.astuple(values)
    return _key
