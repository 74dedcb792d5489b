"""Primitive families. Importing this package declares every primitive with all its rules."""
from s2s.primitives import elementwise, indexing, linalg, reductions, structural  # noqa: F401
