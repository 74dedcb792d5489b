"""Time per optimizer step of autograd's neural_net.py example, under autograd and s2s.autograd.

    python benchmarks/minibatch_steps.py           # 10000 x 784 training set, 40 steps
    python benchmarks/minibatch_steps.py --tiny    # what the test suite runs

The objective reads a global training set through a minibatch slice computed from the
step number `i`, which `adam` passes as a Python int: s2s stages it again at each step
(ints are static), so a step costs a staging, a derivation and an emitted module. Each
staging captures only the minibatch the slice reads (issue 42: it used to capture, and
write out as text, the whole set: 5 s per step at 10000 rows). Figures are medians over
the steps after the first (the first, which stages or traces first, is shown apart); the
optimized parameters of both agree.
"""
import argparse
import statistics
import sys
import time
import warnings

import numpy as np

BATCH = 256
train_images = train_labels = None   # set by `run`: the global training set the objective reads


def objective_of(np, flatten):
    """autograd's neural_net.py objective, written against `np` (autograd's or s2s's NumPy)."""
    def predict(params, inputs):
        for W, b in params:
            outputs = np.dot(inputs, W) + b
            inputs = np.tanh(outputs)
        return outputs - np.log(np.sum(np.exp(outputs), axis=1, keepdims=True))

    def batch_indices(step):
        k = step % (len(train_images) // BATCH)
        return slice(k * BATCH, (k + 1) * BATCH)

    def objective(params, step):
        rows = batch_indices(step)
        flat, _ = flatten(params)
        return np.dot(flat, flat) - np.sum(predict(params, train_images[rows]) * train_labels[rows])
    return objective


def seconds_per_step(grad, adam, flatten, np_module, params, steps: int):
    times = []
    last = [time.perf_counter()]

    def tick(params, step, gradient):
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
    out = adam(grad(objective_of(np_module, flatten)), params, step_size=0.001, num_iters=steps, callback=tick)
    return statistics.median(times[1:]), times[0], out


def run(tiny: bool, steps: int):
    import autograd
    import autograd.numpy as anp
    from autograd.misc.flatten import flatten as autograd_flatten
    from autograd.misc.optimizers import adam as autograd_adam

    import s2s
    import s2s.autograd
    from s2s.autograd.misc.flatten import flatten
    from s2s.autograd.misc.optimizers import adam
    global train_images, train_labels
    rows, sizes = (4 * BATCH, [12, 8, 3]) if tiny else (10000, [784, 200, 100, 10])
    rng = np.random.RandomState(0)
    train_images = rng.randint(0, 256, (rows, sizes[0])) / 255.0
    train_labels = np.eye(sizes[-1])[rng.randint(0, sizes[-1], rows)]
    params = [(0.1 * rng.randn(m, n), 0.1 * rng.randn(n)) for m, n in zip(sizes[:-1], sizes[1:])]
    try:
        theirs, theirs_first, theirs_out = seconds_per_step(autograd.grad, autograd_adam, autograd_flatten, anp,
                                                            params, steps)
        with warnings.catch_warnings():   # (that it captures the global training set: as the example does)
            warnings.filterwarnings("ignore", message=r".* reads the global 'train_")
            ours, ours_first, ours_out = seconds_per_step(s2s.autograd.grad, adam, flatten, np, params, steps)
    finally:
        train_images = train_labels = None
    for a, b in zip(s2s.tree_leaves(ours_out), s2s.tree_leaves(theirs_out)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    print(f"{rows} x {sizes[0]} training set, batch {BATCH}, {steps} adam steps (ms per step):")
    print(f"{'':12} {'first':>8} {'median':>8}")
    print(f"{'autograd':12} {theirs_first * 1e3:8.1f} {theirs * 1e3:8.1f}")
    print(f"{'s2s':12} {ours_first * 1e3:8.1f} {ours * 1e3:8.1f}")
    return ours, theirs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a small problem, for the test suite")
    parser.add_argument("--steps", type=int, default=None, help="adam steps (default 40, 6 with --tiny)")
    args = parser.parse_args(argv)
    return run(args.tiny, steps=args.steps or (6 if args.tiny else 40))


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
