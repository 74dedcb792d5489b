"""Primitive families. Importing this package declares every primitive with all its rules."""
from s2s.primitives import (custom_derivatives, elementwise, indexing, linalg,  # noqa: F401
                            reductions, structural)
