"""Test-wide settings: jax (a test-only oracle) computes in float64 like NumPy."""
import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

# The whole suite (and the subprocesses it starts) uses a temporary on-disk executable
# cache, never the user's ~/.cache/s2s.
import atexit as _atexit
import os as _os
import shutil as _shutil
import tempfile as _tempfile

if "S2S_CACHE_DIR" not in _os.environ:
    _os.environ["S2S_CACHE_DIR"] = _tempfile.mkdtemp(prefix="s2s-test-cache-")
    _atexit.register(_shutil.rmtree, _os.environ["S2S_CACHE_DIR"], True)

# Hypothesis: no per-example deadline (2 shared cores make timings noisy), and in CI
# (CI=true) a fixed sequence of examples, so a run is reproducible.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("s2s", deadline=None, derandomize=bool(_os.environ.get("CI")),
                                      print_blob=True)
_hypothesis_settings.load_profile("s2s")
