"""What reverse mode of a loop keeps (issue 19): memory of jit(grad) of three loops, s2s
against jax's `lax.scan` versions of the same functions, in the same run.

    python benchmarks/residuals.py           # full size
    python benchmarks/residuals.py --tiny    # what the test suite runs

The loops: 50 steps of logistic-regression gradient descent on X of 200x50 (X.T is the
same at every step), a tanh RNN `h = tanh(W @ h + x_t)` of 1,000 steps, and 50 steps of
attention over a fixed context (its keys and values are the same at every step). Each is
written once with `lax.scan` (run by s2s and by jax) and, for s2s, once as a plain Python
`for` loop, staged as a scan. Float64 throughout.

(1) XLA: `temp_size_in_bytes` of the compiled jit(grad), s2s (`s2s.jit(...).lower(...)
    .compile().memory_analysis()`) against jax's; target: at most jax's.
(2) NumPy: the peak of what the emitted NumPy gradient allocates while it runs
    (tracemalloc; NumPy reports its buffers to it), against the sum of its inputs and of
    the residuals its loops save per step (`saved_by_loops`): target at most 1.2x. Where
    the loop reads values computed once before it (attention's keys and values), those
    are saved too, and the gradients it returns are as big as the inputs, so a second
    column adds both: inputs + every saved residual + the gradients, what must be alive
    at once when the backward loop ends.
Gradients are checked against each other first; the tiny run asserts the results, no
times or byte counts.
"""
import os
import runpy
import sys
import tracemalloc
import types

import numpy as np

import s2s
from s2s.primitives.loops.reverse import saved_by_loops

_xla = types.SimpleNamespace(**runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla.py")))

lax = s2s.lax


def training_for(w, X, y):
    for step in range(50):
        p = 1 / (1 + np.exp(-(X @ w)))
        w = w - 0.1 * (X.T @ (p - y)) / X.shape[0]
    return (w * w).sum()


def training_scan(w, X, y):
    def step(w, _):
        p = 1 / (1 + np.exp(-(X @ w)))
        return w - 0.1 * (X.T @ (p - y)) / X.shape[0], None
    w, _ = lax.scan(step, w, None, length=50)
    return (w * w).sum()


def rnn_for(W, h, xs):
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
    return (h * h).sum()


def rnn_scan(W, h, xs):
    def step(h, x):
        return np.tanh(W @ h + x), None
    h, _ = lax.scan(step, h, xs)
    return (h * h).sum()


def attention_for(Wq, X, Wk, Wv, h):
    for step in range(50):
        q = h @ Wq
        k = X @ Wk
        v = X @ Wv
        s = k @ q / np.sqrt(q.shape[0])
        a = np.exp(s - s.max())
        h = np.tanh(h + (a / a.sum()) @ v)
    return (h * h).sum()


def attention_scan(Wq, X, Wk, Wv, h):
    def step(h, _):
        q = h @ Wq
        k = X @ Wk
        v = X @ Wv
        s = k @ q / np.sqrt(q.shape[0])
        a = np.exp(s - s.max())
        return np.tanh(h + (a / a.sum()) @ v), None
    h, _ = lax.scan(step, h, None, length=50)
    return (h * h).sum()


def problems(tiny: bool):
    """(name, python-for version, lax.scan version, args, argnums)."""
    rng = np.random.default_rng(0)
    n, d = (20, 5) if tiny else (200, 50)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) > 0.5).astype(np.float64)
    hidden, steps = (4, 30) if tiny else (64, 1000)
    W = rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)
    context, width = (6, 4) if tiny else (256, 64)
    Wq, Wk, Wv = (rng.standard_normal((width, width)) / np.sqrt(width) for _ in range(3))
    return [
        (f"logistic GD 50 steps, X {n}x{d}", training_for, training_scan,
         (np.zeros(d), X, y), (0,)),
        (f"RNN {steps} steps, hidden {hidden}", rnn_for, rnn_scan,
         (W, rng.standard_normal(hidden), rng.standard_normal((steps, hidden))), (0, 1, 2)),
        (f"attention 50 steps, context {context}x{width}", attention_for, attention_scan,
         (Wq, rng.standard_normal((context, width)), Wk, Wv, rng.standard_normal(width)), (0, 1, 2, 3, 4)),
    ]


def xla_temp_bytes(jit_grad, args) -> int:
    return jit_grad.lower(*args).compile().memory_analysis().temp_size_in_bytes


def numpy_peak_bytes(grad, args) -> int:
    """Peak bytes allocated while the emitted NumPy gradient runs (staged beforehand)."""
    grad(*args)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        grad(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def saved_bytes(fn, args, argnums) -> tuple[int, int]:
    """(bytes saved per step, bytes saved once) by the loops of grad(fn) at args; what is
    saved once excludes the function's own arguments, counted as inputs."""
    closed = s2s.make_jaxpr(s2s.grad(fn, argnums=argnums))(*args)
    per_step, read_whole = saved_by_loops(closed)
    once = [v for v in read_whole if v not in closed.jaxpr.invars]
    return tuple(sum(v.aval.size * np.dtype(v.aval.dtype).itemsize for v in saved) for saved in (per_step, once))


def run(tiny: bool):
    import jax
    jax.config.update("jax_enable_x64", True)
    rows = []
    for name, for_fn, scan_fn, args, argnums in problems(tiny):
        jax_fn = _xla.fresh(scan_fn, np=jax.numpy, lax=jax.lax)
        expected = jax.grad(jax_fn, argnums=argnums)(*args)
        jax_temp = xla_temp_bytes(jax.jit(jax.grad(jax_fn, argnums=argnums)), args)
        inputs = sum(np.asarray(a).nbytes for a in args)
        for label, fn in [("for", for_fn), ("lax.scan", scan_fn)]:
            grad = s2s.grad(fn, argnums=argnums)
            _xla.assert_trees_close(grad(*args), expected, rtol=1e-9, atol=1e-12)
            _xla.assert_trees_close(s2s.jit(grad)(*args), expected, rtol=1e-9, atol=1e-12)
            per_step, once = saved_bytes(fn, args, argnums)
            grads = sum(np.asarray(g).nbytes for g in s2s.tree_leaves(expected))
            rows.append((f"{name} ({label})", xla_temp_bytes(s2s.jit(grad), args), jax_temp,
                         numpy_peak_bytes(grad, args), inputs + per_step, inputs + per_step + once + grads))
    print(f"{'s2s grad of':46} {'XLA temp':>9} {'jax temp':>9} {'ratio':>6} "
          f"{'NumPy peak':>10} {'in+per-step':>11} {'ratio':>6} {'+once+grads':>11} {'ratio':>6}")
    for name, temp, jax_temp, peak, bound, alive in rows:
        print(f"{name:46} {_kib(temp):>9} {_kib(jax_temp):>9} {temp / max(jax_temp, 1):5.2f}x "
              f"{_kib(peak):>10} {_kib(bound):>11} {peak / bound:5.2f}x {_kib(alive):>11} {peak / alive:5.2f}x")
    return rows


def _kib(n: int) -> str:
    return f"{n / 1024:.1f}K" if n < 2 ** 20 else f"{n / 2 ** 20:.2f}M"


def main(argv=None):
    return _xla.command_line(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
