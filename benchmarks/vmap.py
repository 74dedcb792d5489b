"""Per-example gradients with `s2s.vmap`, and `s2s.jacrev`, against jax and against loops,
in the same run.

    python benchmarks/vmap.py           # full size
    python benchmarks/vmap.py --tiny    # what the test suite runs

(a) compiled per-example gradients of a 784-512-512-10 tanh MLP's softmax cross-entropy,
    batch 128, float32: `s2s.jit(s2s.vmap(s2s.grad(loss), in_axes=(None, 0, 0)))` against
    `jax.jit(jax.vmap(jax.grad(loss), in_axes=(None, 0, 0)))`;
(b) the same per-example gradients as emitted NumPy (`s2s.vmap(s2s.grad(loss), ...)` called
    on NumPy arrays) against a Python loop of `autograd.grad` and a Python loop of
    `s2s.grad`, one example per call;
(c) `s2s.jit(s2s.jacrev(f))` of a 100 -> 100 function against `jax.jit(jax.jacrev(f))`.

Every side gets the same NumPy arrays and its results are read as NumPy (`np.asarray`), so
each time includes the transfer back; each figure is a median over interleaved repeats after
a warm-up, and the results are checked to agree before anything is timed.
"""
import os
import runpy
import sys
import types

import numpy as np

import s2s


# benchmarks/xla.py's timing, checking and printing helpers (benchmarks/ is not a package).
_xla = types.SimpleNamespace(**runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla.py")))


def example_loss(params, x, y):
    """Softmax cross-entropy of one example `x` with one-hot label `y`."""
    h = x
    for W, b in params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = params[-1]
    logits = h @ W + b
    shifted = logits - logits.max()
    return -(y * (shifted - np.log(np.exp(shifted).sum()))).sum()


def mixing(x, A):
    """A 100 -> 100 function of `x` (A is a fixed weight)."""
    h = np.tanh(A @ x)
    return h * np.sin(x) + (A.T @ h) ** 2


def as_numpy(tree):
    return s2s.tree_map(np.asarray, tree)


def loop_of(grad_fn, params, xs, ys):
    """Per-example gradients by calling `grad_fn` once per example, stacked like vmap's."""
    grads = [grad_fn(params, x, y) for x, y in zip(xs, ys)]
    return s2s.tree_map(lambda *leaves: np.stack(leaves), *grads)


def run(tiny: bool):
    import autograd
    import autograd.numpy as anp
    import jax
    import jax.numpy as jnp

    repeats = 3 if tiny else 15
    params, xs, ys = _xla.mlp_problem(tiny)
    label = "MLP tiny" if tiny else "MLP 784-512-512-10, b128"
    rows = []

    # (a) compiled, against jax.
    with _xla.disk_cache_off():  # nothing written to the user's cache by a benchmark
        ours = s2s.jit(s2s.vmap(s2s.grad(example_loss), in_axes=(None, 0, 0)))
        theirs = jax.jit(jax.vmap(jax.grad(_xla.fresh(example_loss, np=jnp)), in_axes=(None, 0, 0)))
        compiled = as_numpy(ours(params, xs, ys))
    _xla.assert_trees_close(compiled, as_numpy(theirs(params, xs, ys)), rtol=2e-3, atol=1e-5)
    rows.append((f"(a) jit(vmap(grad)) {label}", "jax",
                 *_xla.medians_per_call(lambda: as_numpy(ours(params, xs, ys)),
                                        lambda: as_numpy(theirs(params, xs, ys)), 3, repeats)))

    # (b) emitted NumPy, against loops of autograd.grad and of s2s.grad.
    per_example = s2s.vmap(s2s.grad(example_loss), in_axes=(None, 0, 0))
    autograd_grad = autograd.grad(_xla.fresh(example_loss, np=anp))
    s2s_grad = s2s.grad(example_loss)
    emitted = per_example(params, xs, ys)
    for against in (autograd_grad, s2s_grad):
        _xla.assert_trees_close(emitted, loop_of(against, params, xs, ys), rtol=2e-3, atol=1e-5)
    _xla.assert_trees_close(emitted, compiled, rtol=2e-3, atol=1e-5)
    for name, against in (("loop of autograd.grad", autograd_grad), ("loop of s2s.grad", s2s_grad)):
        rows.append((f"(b) vmap(grad) NumPy {label}", name,
                     *_xla.interleaved_medians(lambda: per_example(params, xs, ys),
                                               lambda: loop_of(against, params, xs, ys), repeats)))

    # (c) jacrev, compiled, against jax.
    n = 8 if tiny else 100
    rng = np.random.default_rng(1)
    x = rng.standard_normal(n).astype(np.float32)
    A = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    with _xla.disk_cache_off():
        ours = s2s.jit(s2s.jacrev(mixing))
        theirs = jax.jit(jax.jacrev(_xla.fresh(mixing, np=jnp)))
        _xla.assert_trees_close(as_numpy(ours(x, A)), as_numpy(theirs(x, A)), rtol=1e-4, atol=1e-5)
    rows.append((f"(c) jit(jacrev) {n} -> {n}, f32", "jax",
                 *_xla.medians_per_call(lambda: np.asarray(ours(x, A)), lambda: np.asarray(theirs(x, A)),
                                        3 if tiny else 200, repeats)))
    return print_rows(rows)


def print_rows(rows):
    """Prints (name, what s2s is against, s2s seconds, their seconds) rows with the ratio."""
    print(f"{'benchmark':52} {'against':22} {'s2s':>10} {'them':>10} {'s2s/them':>9}")
    for name, against, t_ours, t_theirs in rows:
        print(f"{name:52} {against:22} {_xla._fmt(t_ours):>10} {_xla._fmt(t_theirs):>10} "
              f"{t_ours / t_theirs:8.2f}x")
    return rows


def main(argv=None):
    return _xla.command_line(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
