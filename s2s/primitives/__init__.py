"""Primitive families. Importing this package declares every primitive with all its rules.

The rules are written with `ops` (the lax-level op layer, which binds primitives by name),
so families need not import one another, and none imports the NumPy surface above them."""
from s2s.primitives import (collectives, complex_parts, cond, custom_derivatives, elementwise,  # noqa: F401
                            fft, implicit, indexing, linalg, loop_emission, loop_reverse, loops,
                            pmapped, reductions, remat, special, structural)
from s2s.primitives import decompositions  # noqa: F401  (eigh, svd, qr, pinv; on linalg's helpers)
from s2s.primitives import bessel  # noqa: F401  (J, Y, I of scipy.special; on loops)
