"""Gradient of an RNN written with `s2s.lax.scan`, against jax.jit(jax.grad) of the same
source with `jax.lax.scan`, in the same run.

    python benchmarks/control_flow.py           # 1,000 steps, hidden 256
    python benchmarks/control_flow.py --tiny    # what the test suite runs

(1) time to first result: staging + differentiation + lowering + compile + the first call
    of a function neither side has seen (s2s's on-disk cache off);
(2) steady state: a cached call, median over interleaved batches.
Both get the same NumPy arrays and are waited for. Results are checked against each other
first. Targets: s2s/jax at most 1.0x on both.
"""
import os
import runpy
import sys
import types

import numpy as np

import s2s


# benchmarks/xla.py's timing, checking and printing helpers (benchmarks/ is not a package).
_xla = types.SimpleNamespace(**runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla.py")))

lax = s2s.lax


def rnn_loss(W_h, W_x, b, h0, xs):
    """Mean squared hidden state of a tanh RNN over the sequence `xs`."""
    def step(h, x):
        h = np.tanh(W_h @ h + W_x @ x + b)
        return h, (h * h).sum()
    _, energies = lax.scan(step, h0, xs)
    return energies.mean()


def problem(tiny: bool):
    rng = np.random.default_rng(0)
    hidden, inputs, steps = (8, 4, 10) if tiny else (256, 64, 1000)
    W_h = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    W_x = (rng.standard_normal((hidden, inputs)) / np.sqrt(inputs)).astype(np.float32)
    b = np.zeros(hidden, np.float32)
    h0 = np.zeros(hidden, np.float32)
    xs = rng.standard_normal((steps, inputs)).astype(np.float32)
    return W_h, W_x, b, h0, xs, steps, hidden


def run(tiny: bool):
    import jax
    import jax.numpy as jnp

    W_h, W_x, b, h0, xs, steps, hidden = problem(tiny)
    args = (W_h, W_x, b, h0, xs)
    argnums = (0, 1, 2)

    def jax_version():
        return _xla.fresh(rnn_loss, np=jnp, lax=jax.lax)

    def s2s_first():
        return s2s.block_until_ready(s2s.jit(s2s.grad(_xla.fresh(rnn_loss), argnums=argnums))(*args))

    def jax_first():
        return jax.block_until_ready(jax.jit(jax.grad(jax_version(), argnums=argnums))(*args))

    t_first_ours, t_first_theirs = _xla.seconds_to_first_result(s2s_first, jax_first, 1 if tiny else 5)

    with _xla.disk_cache_off():
        ours = s2s.jit(s2s.grad(rnn_loss, argnums=argnums))
        theirs = jax.jit(jax.grad(jax_version(), argnums=argnums))
        g_ours, g_theirs = ours(*args), theirs(*args)
    _xla.assert_trees_close(g_ours, g_theirs, rtol=2e-3, atol=1e-5)
    steady = _xla.medians_per_call(lambda: s2s.block_until_ready(ours(*args)),
                                   lambda: jax.block_until_ready(theirs(*args)),
                                   3, 3 if tiny else 15)
    label = f"{steps} steps, hidden {hidden}"
    rows = [(f"(1) grad RNN {label}, first result", t_first_ours, t_first_theirs),
            (f"(2) grad RNN {label}, steady state", *steady)]
    return _xla.print_rows(rows)


def main(argv=None):
    return _xla.command_line(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
