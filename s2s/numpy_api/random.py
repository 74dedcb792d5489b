"""NumPy's random sampling in staged code: `np.random.randn(...)` (NumPy's global state),
and the methods of an `np.random.RandomState` or `np.random.Generator` the code reads.

Each call stages draws from that very generator (`primitives/random.py`), made when the
staged code runs, so a function draws on every call what it draws without s2s, in the same
order. Distributions NumPy computes from its basic draws are staged the way NumPy computes
them, so the numbers are NumPy's to the last bit: `normal(loc, scale)` is
`loc + scale * standard_normal()`, `uniform(low, high)` is `low + (high - low) * random()`,
`choice(a)` indexes by `randint(0, len(a))` draws (with `p`, by the cumulative
distribution searched for uniform draws), `permutation(x)` indexes `x` by a permutation of
its length. The reparameterized forms differentiate in their parameters; the draws are
constants.

What cannot be staged faithfully is refused at the line: a shape, bound or population
that is a staged value (it must be known when the function is staged), `shuffle` (in
place, on an array staged code cannot change), `choice(..., replace=False)`, and methods
not listed in `RANDOM_METHODS`.
"""
from __future__ import annotations

import numpy as np

from s2s.core import HostObject
from s2s.errors import StagingError, UnsupportedFunctionError
from s2s.numpy_api._base import NUMPY_IMPLS, has_tracer as is_staged, shape as shape_of
from s2s.primitives.random import draw

GENERATOR_CLASSES = (np.random.RandomState, np.random.Generator)


def host_object(generator) -> HostObject:
    """How staged code names a generator: NumPy's global state as `np.random`, which emitted
    code can write; another RandomState or Generator as a parameter of the emitted function."""
    if generator is np.random.mtrand._rand:
        return HostObject(generator, "np_random", "np.random")
    return HostObject(generator, "random_state" if isinstance(generator, np.random.RandomState) else "rng")


def _size(size, what: str) -> tuple:
    """`size` (None, an int, or a tuple of ints) as a shape; a staged size is refused."""
    if size is None:
        return ()
    if is_staged(size) or (isinstance(size, (tuple, list)) and any(is_staged(s) for s in size)):
        raise StagingError(f"{what}: the size of a draw must be known when the function is staged, "
                           "but it is a staged value", "pass the size as a Python int or tuple (x.shape works)")
    return (int(size),) if np.ndim(size) == 0 else tuple(int(s) for s in size)


def _static_int(value, what: str) -> int:
    if is_staged(value):
        raise StagingError(f"{what} must be known when the function is staged, but it is a staged value",
                           "pass a Python int (a static argument, or len(x) of an array)")
    return int(value)


def _dims(dims) -> tuple:
    return tuple(_static_int(d, "a dimension of randn/rand") for d in dims)


def _standard_normal(source, shape, dtype=np.float64):
    return draw(source, "standard_normal", shape, dtype)


def _uniform_01(source, shape, dtype=np.float64):
    method = "random" if isinstance(source.value, np.random.Generator) else "random_sample"
    return draw(source, method, shape, dtype)


def _broadcast_size(size, *params) -> tuple:
    """The shape of a draw with parameters `params`: `size`, else their broadcast shape."""
    if size is not None:
        return _size(size, "size")
    return np.broadcast_shapes(*(shape_of(p) for p in params))


def _normal(source, loc=0.0, scale=1.0, size=None):
    eps = _standard_normal(source, _broadcast_size(size, loc, scale))
    return NUMPY_IMPLS[np.add](loc, NUMPY_IMPLS[np.multiply](scale, eps))


def _uniform(source, low=0.0, high=1.0, size=None):
    u = _uniform_01(source, _broadcast_size(size, low, high))
    return NUMPY_IMPLS[np.add](low, NUMPY_IMPLS[np.multiply](NUMPY_IMPLS[np.subtract](high, low), u))


def _integers(method: str):
    def integers(source, low, high=None, size=None, dtype=np.int64, endpoint=False):
        low, high = (0, low) if high is None else (low, high)
        low, high = _static_int(low, f"{method}'s low"), _static_int(high, f"{method}'s high") + bool(endpoint)
        if high <= low:
            raise StagingError(f"{method} needs low < high, got low={low}, high={high}", "give a non-empty range")
        return draw(source, method, _size(size, "size"), np.dtype(dtype), (low, high))
    return integers


def _choice(source, a, size=None, replace=True, p=None):
    if not replace:
        raise UnsupportedFunctionError("choice(..., replace=False) is not staged by s2s",
                                       "draw a permutation and take its first entries: rng.permutation(n)[:k]")
    population = _static_int(a, "choice's population size") if not is_staged(a) and np.ndim(a) == 0 \
        else shape_of(a)[0]
    shape = _size(size, "size")
    if p is None:
        method = "integers" if isinstance(source.value, np.random.Generator) else "randint"
        index = draw(source, method, shape, np.int64, (0, population))
    else:
        cdf = NUMPY_IMPLS[np.cumsum](p)
        cdf = NUMPY_IMPLS[np.divide](cdf, cdf[-1])
        index = NUMPY_IMPLS[np.searchsorted](cdf, _uniform_01(source, shape), side="right")
    return index if np.ndim(a) == 0 and not is_staged(a) else NUMPY_IMPLS[np.asarray](a)[index]


def _permutation(source, x):
    if np.ndim(x) == 0 and not is_staged(x):
        return draw(source, "permutation", (_static_int(x, "permutation's length"),), np.int64,
                    (_static_int(x, "permutation's length"),))
    n = shape_of(x)[0]
    return NUMPY_IMPLS[np.asarray](x)[draw(source, "permutation", (n,), np.int64, (n,))]


def _shuffle(source, x):
    raise UnsupportedFunctionError("shuffle changes an array in place, which staged code cannot do",
                                   "write x = rng.permutation(x)")


# (generator class, method name) -> s2s's version, called with the generator's HostObject.
_SHARED = {
    "standard_normal": lambda source, size=None, dtype=np.float64: _standard_normal(source, _size(size, "size"), dtype),
    "normal": _normal,
    "uniform": _uniform,
    "choice": _choice,
    "permutation": _permutation,
    "shuffle": _shuffle,
}
RANDOM_METHODS = {
    np.random.RandomState: {
        **_SHARED,
        "randn": lambda source, *dims: _standard_normal(source, _dims(dims)),
        "rand": lambda source, *dims: _uniform_01(source, _dims(dims)),
        "random_sample": lambda source, size=None: _uniform_01(source, _size(size, "size")),
        "random": lambda source, size=None: _uniform_01(source, _size(size, "size")),
        "sample": lambda source, size=None: _uniform_01(source, _size(size, "size")),
        "ranf": lambda source, size=None: _uniform_01(source, _size(size, "size")),
        "randint": _integers("randint"),
    },
    np.random.Generator: {
        **_SHARED,
        "random": lambda source, size=None, dtype=np.float64: _uniform_01(source, _size(size, "size"), dtype),
        "integers": _integers("integers"),
    },
}


def random_call(generator, name: str, args, kwargs):
    """A call of `generator`'s method `name` in staged code, staged as its draws."""
    kind = np.random.Generator if isinstance(generator, np.random.Generator) else np.random.RandomState
    method = RANDOM_METHODS[kind].get(name)
    if method is None:
        shown = "np.random" if generator is np.random.mtrand._rand else f"a {kind.__name__}"
        raise UnsupportedFunctionError(
            f"{name} of {shown} is not staged by s2s",
            f"draw with one of {', '.join(sorted(RANDOM_METHODS[kind]))}, or outside the function "
            "and pass the numbers in")
    return method(host_object(generator), *args, **kwargs)
