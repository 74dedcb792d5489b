"""What Python's `isinstance` says of a staged value: NumPy's answer for the value it stands
for, decided while staging.

User code checks types to choose a path (`if isinstance(x, np.ndarray):`). Asked of the
staged value itself, `isinstance` would answer for s2s's Tracer: False for ndarray. The
kind of value a staged array stands for follows from its abstract value alone, which is
all a staging is cached by, so the answer is the same for every call the staging serves:

- an array of one or more dimensions is an `np.ndarray`;
- a weakly typed 0-d value is a Python scalar: a Python float argument (s2s stages Python
  scalar arguments weak, NumPy scalars and arrays strong);
- a strongly typed 0-d value is a NumPy scalar (np.float64: what NumPy's functions and
  reductions return), a 0-d array (`np.asarray(x)`, a 0-d array argument) or a Python
  scalar (`y > 1.0` of a Python float `y` is a Python bool, staged strong). These stage alike, so
  where NumPy's answers for them differ the check is refused, not guessed.
"""
from __future__ import annotations

import numpy as np

from s2s.core import ShapedArray
from s2s.errors import StagingError

# The Python scalar type a weakly typed value of each dtype kind stands for.
_PYTHON_SCALAR_OF_KIND = {"b": bool, "i": int, "u": int, "f": float, "c": complex}


def _stand_ins(aval: ShapedArray) -> list:
    """Concrete values of each kind the staged value may stand for in NumPy."""
    if aval.shape:
        return [np.zeros((0,) * aval.ndim, aval.dtype)]
    python_scalar = _PYTHON_SCALAR_OF_KIND[aval.dtype.kind](0)
    if aval.weak_type:
        return [python_scalar]
    return [python_scalar, aval.dtype.type(0), np.zeros((), aval.dtype)]


def numpy_isinstance(value, classinfo) -> bool:
    """`isinstance(value, classinfo)` for a staged `value`, as NumPy's value would answer."""
    answers = {isinstance(stand_in, classinfo) for stand_in in _stand_ins(value.aval)}
    if len(answers) == 1:
        return answers.pop()
    raise StagingError(
        f"isinstance of a staged 0-d value ({value.aval.str_short()}) against {classinfo!r}: "
        f"NumPy's answer depends on whether it is a NumPy scalar, a 0-d array or a Python "
        f"number, which s2s stages alike",
        "test what the code needs instead: np.ndim(x) == 0 for a 0-d value, x.dtype for "
        "its type")
