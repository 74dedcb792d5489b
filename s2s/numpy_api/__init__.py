"""The NumPy surface: s2s's versions of NumPy functions, operators and ndarray methods.

Importing this package fills the dispatch table (`NUMPY_IMPLS`) and installs operators and
methods on staged values.
"""
from s2s.numpy_api import (complex_numbers, creation, fft, indexing, linalg, logic, math,  # noqa: F401
                           reductions, searching, shaping)
from s2s.numpy_api import decompositions  # noqa: F401  (np.linalg's eigh, svd, qr, ...)
from s2s.numpy_api import methods  # noqa: F401  (installs operators on Tracer; last)
from s2s.numpy_api._base import NUMPY_IMPLS, implements  # noqa: F401
