"""The emitted NumPy gradient against autograd.grad and against the forward NumPy function.

    python benchmarks/grad_numpy.py           # full size
    python benchmarks/grad_numpy.py --tiny    # what the test suite runs

(a) a 784-512-512-10 tanh MLP, batch 128, float32, softmax cross-entropy loss;
(b) 50 iterations of `x = np.sin(x) * 1.01 + 0.1` on 8 elements, summed.

s2s.grad runs the module s2s emits for the gradient (NumPy only). Each figure is the
median of repeated calls; ratios are taken in the same run.
Targets: s2s at least 5x faster than autograd on both; gradient at most 3x forward on (a).
"""
import argparse
import statistics
import sys
import time

import numpy as np

import s2s


def mlp_loss(params, x, y):
    h = x
    for W, b in params[:-1]:
        h = np.tanh(h @ W + b)
    W, b = params[-1]
    logits = h @ W + b
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -(y * logp).sum() / x.shape[0]


def sin_loop(x):
    for _ in range(50):
        x = np.sin(x) * 1.01 + 0.1
    return x.sum()


def median_seconds(fn, repeats: int) -> float:
    fn()  # warm up (compiles once)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def as_autograd(fn):
    """The same source with autograd.numpy as `np`."""
    import types

    import autograd.numpy as anp
    return types.FunctionType(fn.__code__, {**fn.__globals__, "np": anp}, fn.__name__)


def problems(tiny: bool):
    rng = np.random.default_rng(0)
    sizes = (12, 16, 16, 4) if tiny else (784, 512, 512, 10)
    batch = 4 if tiny else 128
    params = [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
    return [("(a) MLP 784-512-512-10, batch 128, f32" if not tiny else "(a) MLP tiny", mlp_loss, (params, x, y)),
            ("(b) 50 x sin loop on 8 elements", sin_loop, (rng.standard_normal(8),))]


def run(tiny: bool, repeats: int):
    import autograd
    rows = []
    for name, fn, args in problems(tiny):
        ours = s2s.grad(fn)
        theirs = autograd.grad(as_autograd(fn))
        g_ours, g_theirs = ours(*args), theirs(*args)
        for a, b in zip(s2s.tree_leaves(g_ours), s2s.tree_leaves(g_theirs)):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-5)
        t_forward = median_seconds(lambda: fn(*args), repeats)
        t_ours = median_seconds(lambda: ours(*args), repeats)
        t_theirs = median_seconds(lambda: theirs(*args), repeats)
        rows.append((name, t_forward, t_ours, t_theirs))
    print(f"{'problem':42} {'forward':>10} {'s2s grad':>10} {'autograd':>10} {'autograd/s2s':>13} {'s2s/forward':>12}")
    for name, t_forward, t_ours, t_theirs in rows:
        print(f"{name:42} {t_forward * 1e3:8.3f}ms {t_ours * 1e3:8.3f}ms {t_theirs * 1e3:8.3f}ms "
              f"{t_theirs / t_ours:12.1f}x {t_ours / t_forward:11.2f}x")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="small problems, for the test suite")
    args = parser.parse_args(argv)
    return run(args.tiny, repeats=3 if args.tiny else 30)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
