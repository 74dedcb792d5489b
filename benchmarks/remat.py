"""Remat (issue 15): what checkpointing saves, and what it costs, s2s beside jax in one run.

    python benchmarks/remat.py           # full size
    python benchmarks/remat.py --tiny    # what the test suite runs

(1) 20 blocks of `h = tanh(tanh(h @ W1) @ W2)` (batch 2048, width 1024, float32), the loss
    differentiated with respect to the weights: the bytes reverse mode saves (s2s's and
    jax's `print_saved_residuals`) and `temp_size_in_bytes` of the compiled jit(grad),
    without checkpoint and with each block under `checkpoint(policy=nothing_saveable)`.
    jax compiles with its default flags, under which XLA:CPU drops the optimization
    barriers and merges the recomputation back; s2s keeps them. Target: s2s's per-block
    temp at least 3x below its own no-checkpoint temp.
(2) A 10,000-step tanh RNN (hidden 256, float32) as `lax.scan`, plain and with
    `checkpoints=32` and `"sqrt"`: jit(grad)'s temp, and the median time of a call whose
    gradients are read as NumPy, against the plain scan (and jax's plain scan beside).
    Targets: temp at least 20x below plain, time at most 3x.
(3) Reverse mode of a `while` loop whose trip count depends on the data: Newton's method
    for x**3 + x = a over 100,000 values of a, to a tolerance, differentiated as written
    (the loop is reversed on 32 slots of carries), s2s's emitted NumPy and XLA against
    autograd on the same source: median time of a gradient read as NumPy, and the first
    call (staging, emission, compilation) beside it.
Gradients are checked against each other first; the tiny run asserts them, no times or
byte counts.
"""
import contextlib
import io
import os
import re
import runpy
import sys
import time
import types

import numpy as np

import s2s

_xla = types.SimpleNamespace(**runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla.py")))

lax = s2s.lax


def block(h, W1, W2):
    return np.tanh(np.tanh(h @ W1) @ W2)


def model(step):
    """The loss of 20 blocks (as many as weights are given), each computed by `step`."""
    def loss(weights, h):
        for W1, W2 in weights:
            h = step(h, W1, W2)
        return (h * h).sum()
    return loss


def rnn_plain(W, h, xs):
    def step(h, x):
        return np.tanh(W @ h + x), None
    h, _ = lax.scan(step, h, xs)
    return (h * h).sum()


def rnn(checkpoints):
    def loss(W, h, xs):
        def step(h, x):
            return np.tanh(W @ h + x), None
        h, _ = lax.scan(step, h, xs, checkpoints=checkpoints)
        return (h * h).sum()
    return loss


def newton_cubic(a):
    """The sum of the x with x**3 + x = a, elementwise, by Newton's method."""
    x = a
    while np.max(np.abs(x ** 3 + x - a)) > 1e-9:
        x = x - (x ** 3 + x - a) / (3 * x ** 2 + 1)
    return np.sum(x)


def jax_saved_bytes(fn, *args) -> int:
    """The total jax's print_saved_residuals lists for grad of `fn` (it prints one line per
    residual, starting with its type, `f32[2048,1024]`)."""
    from jax.ad_checkpoint import print_saved_residuals
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        print_saved_residuals(fn, *args)
    total = 0
    for dtype, dims in re.findall(r"^(\w+)\[([\d,]*)\]", printed.getvalue(), re.M):
        itemsize = np.dtype({"f32": "float32", "f64": "float64", "i32": "int32", "bool": "bool"}[dtype]).itemsize
        total += itemsize * int(np.prod([int(d) for d in dims.split(",") if d]))
    return total


def s2s_saved_bytes(fn, *args) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return sum(r.nbytes for r in s2s.print_saved_residuals(fn, *args))


def temp_bytes(jitted, *args) -> int:
    return jitted.lower(*args).compile().memory_analysis().temp_size_in_bytes


def seconds_per_call(fn, args, repeats: int) -> float:
    """Median seconds of a call whose results are read as NumPy (the first call, which
    compiles, is left out)."""
    [np.asarray(g) for g in fn(*args)]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        [np.asarray(g) for g in fn(*args)]
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def model_rows(tiny: bool):
    import jax
    batch, width, depth = (8, 16, 3) if tiny else (2048, 1024, 20)
    rng = np.random.default_rng(0)
    weights = [tuple((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(2))
               for _ in range(depth)]
    h = rng.standard_normal((batch, width), dtype=np.float32)
    rows, grads = [], {}
    for label, ours, theirs in [("no checkpoint", None, None),
                                ("per-block nothing_saveable", s2s.checkpoint_policies.nothing_saveable,
                                 jax.checkpoint_policies.nothing_saveable)]:
        jax_block = _xla.fresh(block, np=jax.numpy)
        loss = model(block if ours is None else s2s.checkpoint(block, policy=ours))
        jax_loss = model(jax_block if theirs is None else jax.checkpoint(jax_block, policy=theirs))
        grad = s2s.jit(s2s.grad(loss))
        grads[label] = grad(weights, h)
        _xla.assert_trees_close(grads[label], jax.grad(jax_loss)(weights, h), rtol=2e-3, atol=1e-4)
        rows.append((label, s2s_saved_bytes(loss, weights, h), jax_saved_bytes(jax_loss, weights, h),
                     temp_bytes(grad, weights, h), temp_bytes(jax.jit(jax.grad(jax_loss)), weights, h)))
    _xla.assert_trees_close(*grads.values(), rtol=1e-5, atol=1e-6)
    return rows


def rnn_rows(tiny: bool):
    import jax
    steps, hidden, repeats = (40, 8, 1) if tiny else (10_000, 256, 7)
    rng = np.random.default_rng(1)
    args = ((rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32),
            rng.standard_normal(hidden, dtype=np.float32), rng.standard_normal((steps, hidden), dtype=np.float32))
    jax_grad = jax.jit(jax.grad(_xla.fresh(rnn_plain, np=jax.numpy, lax=jax.lax), argnums=(0, 1, 2)))
    rows, plain = [], None
    for checkpoints in (None, 32, "sqrt"):
        grad = s2s.jit(s2s.grad(rnn(checkpoints), argnums=(0, 1, 2)))
        got = grad(*args)
        if plain is None:
            plain = got
            _xla.assert_trees_close(got, jax_grad(*args), rtol=1e-4, atol=1e-5)
        _xla.assert_trees_close(got, plain, rtol=1e-5, atol=1e-6)
        rows.append((checkpoints, temp_bytes(grad, *args), seconds_per_call(grad, args, repeats)))
    return rows, (temp_bytes(jax_grad, *args), seconds_per_call(jax_grad, args, repeats))


def newton_rows(tiny: bool):
    """(label, first call seconds, median seconds) of the gradient of `newton_cubic`."""
    import autograd
    size, repeats = (8, 1) if tiny else (100_000, 7)
    a = np.random.default_rng(2).uniform(-50, 50, size)
    ours = {"s2s grad (NumPy)": s2s.grad(newton_cubic), "s2s jit(grad) (XLA)": s2s.jit(s2s.grad(newton_cubic))}
    theirs = autograd.grad(_xla.fresh(newton_cubic, np=autograd.numpy))
    rows = []
    for label, grad in [*ours.items(), ("autograd grad", theirs)]:
        start = time.perf_counter()
        first = np.asarray(grad(a))
        first_seconds = time.perf_counter() - start
        x = np.cbrt(a)       # close enough to check: the gradient is 1 / (3 x**2 + 1) at the root
        for _ in range(60):
            x = x - (x ** 3 + x - a) / (3 * x ** 2 + 1)
        np.testing.assert_allclose(first, 1 / (3 * x ** 2 + 1), rtol=1e-6)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            np.asarray(grad(a))
            times.append(time.perf_counter() - start)
        rows.append((label, first_seconds, float(np.median(times))))
    return rows


def run(tiny: bool):
    import jax
    jax.config.update("jax_enable_x64", True)
    model, (rnns, jax_rnn), newton = model_rows(tiny), rnn_rows(tiny), newton_rows(tiny)
    print(f"{'20 tanh blocks, grad':30} {'s2s saved':>10} {'jax saved':>10} {'s2s temp':>10} {'jax temp':>10}")
    for label, saved, jax_saved, temp, jax_temp in model:
        print(f"{label:30} {_mib(saved):>10} {_mib(jax_saved):>10} {_mib(temp):>10} {_mib(jax_temp):>10}")
    print(f"s2s temp, no checkpoint / per-block: {model[0][3] / max(model[1][3], 1):.1f}x")
    plain_temp, plain_time = rnns[0][1], rnns[0][2]
    print(f"\n{'RNN scan, jit(grad)':30} {'temp':>10} {'vs plain':>9} {'time':>10} {'vs plain':>9}")
    for checkpoints, temp, seconds in rnns:
        print(f"{'checkpoints=' + repr(checkpoints):30} {_mib(temp):>10} {plain_temp / max(temp, 1):8.1f}x "
              f"{seconds * 1e3:8.1f}ms {seconds / plain_time:8.2f}x")
    print(f"{'jax plain scan':30} {_mib(jax_rnn[0]):>10} {'':>9} {jax_rnn[1] * 1e3:8.1f}ms")
    autograd_time = newton[-1][2]
    print(f"\n{'Newton while loop, grad':30} {'first call':>10} {'median':>10} {'vs autograd':>12}")
    for label, first, median in newton:
        print(f"{label:30} {first * 1e3:8.1f}ms {median * 1e3:8.1f}ms {median / autograd_time:11.2f}x")
    return model, rnns, newton


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:.2f}M"


def main(argv=None):
    return _xla.command_line(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
