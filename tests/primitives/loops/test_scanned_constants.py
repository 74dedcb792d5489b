"""The scan family's rewrite of a constant read one row per step at the loop's counter
(`loops.scanned_rows`): it becomes a scanned input, and reverse mode writes its cotangent
a row per step. Checked on the staged jaxpr and against jax's gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import s2s
from s2s.primitives.loops import scan

jax.config.update("jax_enable_x64", True)


def _scans(closed):
    return [e for e in closed.jaxpr.eqns if e.primitive is scan]


def _reads_rows(np_, W, xs, steps, extra):
    h = np_.zeros(W.shape[0])
    for t in range(steps):
        h = np_.tanh(W @ h + xs[t] * xs[t] + extra(np_, xs, t))
    return h.sum()


CASES = {   # extra term -> whether xs is still read whole (so stays a constant)
    "row only": (lambda np_, xs, t: 0.0, False),
    "also the whole": (lambda np_, xs, t: xs.sum() * 0.01, True),
    "another row": (lambda np_, xs, t: xs[-1 - t], True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=5, deadline=None)
@given(steps=st.integers(1, 6), spare_rows=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_a_row_read_at_the_counter_is_scanned_and_differentiates_like_jax(case, steps, spare_rows, seed):
    extra, read_whole = CASES[case]
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((3, 3)) * 0.5
    xs = rng.standard_normal((steps + spare_rows, 3))
    f = lambda W, xs: _reads_rows(np, W, xs, steps, extra)
    closed = s2s.make_jaxpr(f)(W, xs)
    (loop,) = _scans(closed)
    body_reads_slices = "dynamic_slice" in str(loop.params["jaxpr"])
    assert body_reads_slices == read_whole
    assert loop.params["num_consts"] == (2 if read_whole else 1)    # W (and xs when read whole)
    expected = jax.grad(lambda W, xs: _reads_rows(jnp, W, xs, steps, extra), argnums=(0, 1))(W, xs)
    for got, want in zip(s2s.grad(f, argnums=(0, 1))(W, xs), expected):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(s2s.jit(f)(W, xs), f(W, xs), rtol=1e-12)


def test_the_backward_loop_scans_xs_instead_of_saving_its_rows():
    """A row of a scanned input that reverse mode needs (`xs[t] * xs[t]`'s derivative) is
    read from xs by the backward loop, not copied into a per-step buffer."""
    W, xs = np.eye(3) * 0.5, np.ones((10, 3))
    source = s2s.emit_python(s2s.grad(lambda W, xs: _reads_rows(np, W, xs, 10, CASES["row only"][0]),
                                      argnums=(0, 1)), W, xs)
    assert "rt.dynamic_update_slice" not in source and "np.where" not in source
    per_step_buffers = [line for line in source.splitlines() if "_per_step = np.empty" in line]
    assert len(per_step_buffers) == 2   # h and tanh' (xs_bar is written a row per step): no copy of xs


TABLE = np.arange(20.0).reshape(5, 4)   # a NumPy constant with more rows than the loop runs


def _reads_table_rows(np_, h):
    for t in range(3):
        h = h * 1.1 + TABLE[t] * h
    return h.sum()


def test_rows_of_a_numpy_constant_are_scanned_too():
    h = np.linspace(0.1, 0.4, 4)
    (loop,) = _scans(s2s.make_jaxpr(lambda h: _reads_table_rows(np, h))(h))
    assert "dynamic_slice" not in str(loop.params["jaxpr"])
    np.testing.assert_allclose(s2s.jit(lambda h: _reads_table_rows(np, h))(h), _reads_table_rows(np, h))
    np.testing.assert_allclose(s2s.grad(lambda h: _reads_table_rows(np, h))(h),
                               jax.grad(lambda h: _reads_table_rows(jnp, h))(h), rtol=1e-12)
