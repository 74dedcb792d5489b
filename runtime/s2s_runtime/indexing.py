"""Indexing and padding helpers for emitted code, where NumPy has no one-liner.

They follow XLA's semantics, so emitted modules compute what the StableHLO lowering
computes:

- `dynamic_slice` / `dynamic_update_slice` clamp each start index into
  `[0, dim - size]`, so the window always lies inside the array (never an IndexError).
- `gather` clamps every index into `[0, dim - 1]`; `scatter_add` clamps the same way, so
  it stays the exact transpose of `gather`.
- `pad` is lax.pad: low/high padding may be negative (it crops), and `interior` puts that
  many padding values between neighbouring elements.

Everything here takes and returns plain NumPy values; it never imports the compiler.
"""
from __future__ import annotations

import numpy as np

__all__ = ["dynamic_slice", "dynamic_update_slice", "gather", "pad", "scatter_add"]


def _clamped_starts(starts, shape, sizes):
    return tuple(int(np.clip(int(s), 0, d - n)) for s, d, n in zip(starts, shape, sizes))


def dynamic_slice(x, starts, sizes):
    """`x[s0:s0+n0, s1:s1+n1, ...]` with each start clamped so the window fits."""
    x = np.asarray(x)
    starts = _clamped_starts(starts, x.shape, sizes)
    return x[tuple(slice(s, s + n) for s, n in zip(starts, sizes))]


def dynamic_update_slice(x, update, starts):
    """A copy of `x` with `update` written at `starts` (clamped so the window fits)."""
    out = np.array(x, copy=True)
    update = np.asarray(update)
    starts = _clamped_starts(starts, out.shape, update.shape)
    out[tuple(slice(s, s + n) for s, n in zip(starts, update.shape))] = update
    return out


def pad(x, value, config):
    """lax.pad: `config` holds `(low, high, interior)` per axis; low/high may be negative."""
    x = np.asarray(x)
    grown = []   # the shape with interior and non-negative edge padding only
    placed = []  # where x's elements land in it
    for d, (lo, hi, interior) in zip(x.shape, config):
        lo_pos, hi_pos = max(lo, 0), max(hi, 0)
        inner = d + max(d - 1, 0) * interior
        grown.append(lo_pos + inner + hi_pos)
        placed.append(slice(lo_pos, lo_pos + inner, interior + 1) if d else slice(lo_pos, lo_pos))
    out = np.full(grown, value, dtype=x.dtype)
    out[tuple(placed)] = x
    crop = tuple(slice(max(-lo, 0), size - max(-hi, 0))
                 for size, (lo, hi, _) in zip(grown, config))
    return out[crop]


def _leading(x, axes):
    """A view of `x` with `axes` moved to the front, in the order given."""
    return np.moveaxis(x, tuple(axes), tuple(range(len(axes))))


def _clamped_indices(shape, indices, axes):
    return tuple(np.clip(np.asarray(i), 0, max(shape[a] - 1, 0)) for i, a in zip(indices, axes))


def gather(x, indices, axes):
    """Picks `x[..., i, ...]` along `axes`: the result has the index arrays' (common) shape
    followed by the remaining axes of `x` in order. Indices are clamped into range."""
    x = np.asarray(x)
    return _leading(x, axes)[_clamped_indices(x.shape, indices, axes)]


def scatter_add(x, updates, indices, axes):
    """A copy of `x` with `updates` added where `gather(x, indices, axes)` reads;
    repeated indices accumulate. The transpose of `gather`."""
    out = np.array(x, copy=True)
    np.add.at(_leading(out, axes), _clamped_indices(out.shape, indices, axes), updates)
    return out
