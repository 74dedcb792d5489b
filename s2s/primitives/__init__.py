"""Primitive families. Importing this package declares every primitive with all its rules."""
from s2s.primitives import (control_flow, custom_derivatives, elementwise, implicit,  # noqa: F401
                            indexing, linalg, reductions, structural)
