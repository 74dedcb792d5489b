"""How a staging error reaches the user: as a compiler error, without s2s's frames."""
from __future__ import annotations

from s2s.errors import S2SError


def reraise_clean(error: S2SError):
    """Raises a user-facing error without s2s's internal frames behind it."""
    error.__cause__ = None
    error.__suppress_context__ = True
    raise error.with_traceback(None)
