"""The NumPy surface: s2s's versions of NumPy functions, operators and ndarray methods.

Importing this package fills the dispatch table (`NUMPY_IMPLS`) and installs operators and
methods on staged values; SciPy's functions join the table when SciPy is imported.
"""
from s2s.numpy_api import (complex_numbers, creation, fft, indexing, linalg, logic, math,  # noqa: F401
                           random, reductions, scipy_signal, scipy_special, scipy_stats, searching,
                           shaping)
from s2s.numpy_api import decompositions  # noqa: F401  (np.linalg's eigh, svd, qr, ...)
from s2s.numpy_api import scipy_linalg  # noqa: F401  (scipy.linalg, mapped when imported)
from s2s.numpy_api import methods  # noqa: F401  (installs operators on Tracer; last)
from s2s.numpy_api._base import NUMPY_IMPLS, implements  # noqa: F401

# SciPy's functions are mapped once the user's code has imported them, never before.
NUMPY_IMPLS.when_imported("scipy.special", scipy_special.register_scipy_special)
NUMPY_IMPLS.when_imported("scipy.stats", scipy_stats.register_scipy_stats)
NUMPY_IMPLS.when_imported("scipy.special", scipy_special.register_inverse_error_functions)
NUMPY_IMPLS.when_imported("scipy.special", scipy_stats.register_normal_special)
NUMPY_IMPLS.when_imported("scipy.stats", scipy_stats.register_quantiles_and_more_distributions)
NUMPY_IMPLS.when_imported("scipy.signal", scipy_signal.register_scipy_signal)
NUMPY_IMPLS.when_imported("scipy.linalg", scipy_linalg.register_scipy_linalg)
