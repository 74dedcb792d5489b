"""Primitive families. Importing this package declares every primitive with all its rules."""
from s2s.primitives import (control_flow, custom_derivatives, elementwise, indexing,  # noqa: F401
                            linalg, reductions, structural)
