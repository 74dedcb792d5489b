"""Test-wide settings: jax (a test-only oracle) computes in float64 like NumPy."""
import jax

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
