"""s2s_runtime: what code emitted by s2s needs at run time, and nothing of the compiler.

Emitted modules import only `numpy` and this package (as `rt`). It never imports `s2s`.
"""
from s2s_runtime.bessel import iv, ive, jv, yn
from s2s_runtime.constants import array_from_base64, load_npz
from s2s_runtime.indexing import dynamic_slice, dynamic_update_slice, gather, pad, scatter_add
from s2s_runtime.linalg import eig, eigvals, lu, solve, triangular_solve
from s2s_runtime.ops import (complex_from_parts, float0, generator_seed, generator_state, iota, permutations,
                             swap_generator_state, trunc_divide)
from s2s_runtime.sorting import sort_multi, sort_order
from s2s_runtime.special import betainc, digamma, erf, erfc, lgamma, logistic, polygamma
from s2s_runtime.special import erfcinv, erfinv
from s2s_runtime.special_gamma import gammainc, gammainc_grad_a, gammaincc

__all__ = [
    "array_from_base64", "betainc", "iv", "ive", "jv", "yn", "complex_from_parts", "digamma", "dynamic_slice", "dynamic_update_slice",
    "erf", "erfc", "float0", "generator_seed", "generator_state",
    "gather", "iota", "lgamma", "load_npz", "logistic", "lu", "pad", "permutations", "polygamma",
    "scatter_add", "solve", "sort_multi", "sort_order", "swap_generator_state", "triangular_solve", "trunc_divide",
    "gammainc", "gammainc_grad_a", "gammaincc",
]
__all__ += ["erfcinv", "erfinv"]
