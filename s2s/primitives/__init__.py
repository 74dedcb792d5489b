"""Primitive families. Importing this package declares every primitive with all its rules.

The rules are written with `ops` (the lax-level op layer, which binds primitives by name),
so families need not import one another, and none imports the NumPy surface above them."""
from s2s.primitives import (collectives, cond, custom_derivatives, elementwise, implicit,  # noqa: F401
                            indexing, linalg, loop_emission, loop_reverse, loops, reductions,
                            remat, special, structural)
