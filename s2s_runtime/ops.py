"""Array helpers that emitted modules call where plain NumPy has no one-liner."""
from __future__ import annotations

import numpy as np

# The tangent dtype of integer and boolean values (jax's float0): carries no data. Emitted
# modules name it `rt.float0` where a jaxpr holds float0 zeros.
float0 = np.dtype([("float0", np.void, 0)])


def trunc_divide(x, y):
    """Integer division rounding toward zero (C and XLA semantics; NumPy's // floors)."""
    # Not via abs and negation: abs(int8 -128) is -128, and negating unsigned values warns.
    q, r = np.divmod(x, y)
    q = q + ((r != 0) & ((x < 0) != (y < 0)))   # floor is one below trunc there; q < 0
    return np.asarray(q).astype(np.result_type(x, y))[()]


def iota(dtype, shape, dimension):
    """An array of `shape` counting 0, 1, ... along `dimension`."""
    shape = tuple(shape)
    line = np.arange(shape[dimension], dtype=dtype)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.broadcast_to(line.reshape(view), shape).copy()


def complex_from_parts(real, imag):
    """real + i*imag, exactly (`real + 1j * imag` has a NaN real part where imag is infinite).
    float32 parts make complex64, as in NumPy's promotion."""
    real, imag = np.asarray(real), np.asarray(imag)
    out = np.empty(np.broadcast_shapes(real.shape, imag.shape), np.result_type(real, imag, np.complex64))
    out.real, out.imag = real, imag
    return out[()]


def permutations(generator, n: int, batch: tuple = ()):
    """`generator.permutation(n)` drawn once per index of `batch`, one after the other, as
    a loop over a batch of examples would draw them (vmap of a draw of a permutation)."""
    if not batch:
        return generator.permutation(n)
    count = int(np.prod(batch))
    return np.stack([generator.permutation(n) for _ in range(count)]).reshape(*batch, n)


def generator_seed(generator) -> np.ndarray:
    """A fresh state for a compiled program's draws (two 64-bit words), taken from the NumPy
    generator (RandomState or Generator) its code draws from: each call advances it, so
    successive calls draw differently and a seeded program is reproducible."""
    draw = generator.integers if isinstance(generator, np.random.Generator) else generator.randint
    return draw(0, 2**64, size=2, dtype=np.uint64)
