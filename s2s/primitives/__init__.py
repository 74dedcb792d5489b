"""Primitive families. Importing this package declares every primitive with all its rules.

A family is one module holding its primitives with every rule of theirs; a family that
outgrows one file becomes a package of modules split by concern (`linalg/`, `loops/`),
whose `__init__` says what each module holds and names its public helpers.

The rules are written with `ops` (the lax-level op layer, which binds primitives by name),
so families need not import one another, and none imports the NumPy surface above them."""
from s2s.primitives import (collectives, complex_parts, cond, custom_derivatives, elementwise,  # noqa: F401
                            fft, implicit, indexing, linalg, loops, pmapped, printing, random, reductions,
                            remat, special, structural)
from s2s.primitives import bessel  # noqa: F401  (J, Y, I of scipy.special; on loops)
