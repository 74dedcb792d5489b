"""s2s's XLA backend (`s2s.jit(f)`) against `jax.jit`, in the same run.

    python benchmarks/xla.py           # full size
    python benchmarks/xla.py --tiny    # what the test suite runs

(1) dispatch: a cache-hit call of `x * 2.0 + 1.0` on 4 float32 elements, per call, three
    ways: the call alone, waited for with `block_until_ready`, and read with `np.asarray`
    (what a user does with a result: jax's and s2s's calls return before the computation
    ends, and reading waits for it and copies it to the host); then with jax's x64 on as
    s2s's is, where an s2s call has no x64 setting to swap (as in a process without jax);
(2) reading an existing result (an `s2s.Array` against a jax Array, both already
    computed): `np.asarray`, `float` of a 0-d one, `repr`, and indexing one element;
(3) steady state: jit(grad) of a 784-512-512-10 tanh MLP, batch 128, float32, softmax
    cross-entropy loss (the loss of benchmarks/grad_numpy.py), its six gradients waited for
    with `block_until_ready`, and read as NumPy;
(4) time to first result of (3) for a new function: staging + lowering + compile + the
    first call, against jax's trace + lower + compile + first call.

Both sides are given the same NumPy arrays (so both copy them to the device on each call).
(1)-(3) are medians over batches of calls after a warm-up, the two sides' batches
interleaved so that a noisy machine slows both alike; (4) is the median over 9 fresh copies
of the function, the two sides interleaved, in a process where both backends are already
initialized, with s2s's on-disk executable cache off (jax's persistent cache is off by
default). Results are checked to agree (allclose) before anything is timed.
Targets (issue 18): s2s/jax at most 1.1x for the call alone, 1.15x for the call read with
np.asarray, 1.2x for each of (2), 1.02x for (3) read as NumPy.
"""
import argparse
import contextlib
import os
import runpy
import statistics
import sys
import time
import types

import numpy as np

import s2s



# The same loss as benchmarks/grad_numpy.py (benchmarks/ is not a package: loaded by path).
mlp_loss = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "grad_numpy.py"))["mlp_loss"]


def scale_shift(x):
    return x * 2.0 + 1.0


def total(x):
    return x.sum()


def fresh(fn, **namespace):
    """A new function object with the same code (so no cache keyed on the function answers),
    optionally with globals replaced (`np=jnp` gives the jax version of the same source)."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, **namespace}, fn.__name__)


def medians_per_call(ours, theirs, calls: int, repeats: int) -> tuple[float, float]:
    """Seconds per call of each: medians over `repeats` interleaved batches of `calls` calls,
    after a warm-up."""
    for _ in range(max(calls // 10, 3)):
        ours()
        theirs()
    return interleaved_medians(ours, theirs, repeats, calls)


def interleaved_medians(ours, theirs, repeats: int, calls: int = 1) -> tuple[float, float]:
    """Median seconds per call of each over `repeats` batches of `calls` calls, the two
    sides' batches taking turns so that a noisy machine slows both alike."""
    times = {ours: [], theirs: []}
    for _ in range(repeats):
        for fn in (ours, theirs):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[fn].append((time.perf_counter() - start) / calls)
    return statistics.median(times[ours]), statistics.median(times[theirs])


@contextlib.contextmanager
def disk_cache_off():
    """No s2s on-disk executable cache (S2S_DISK_CACHE=0): (3) times a real compile, as jax's does."""
    before = os.environ.get("S2S_DISK_CACHE")
    os.environ["S2S_DISK_CACHE"] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["S2S_DISK_CACHE"]
        else:
            os.environ["S2S_DISK_CACHE"] = before


def seconds_to_first_result(ours, theirs, repeats: int) -> tuple[float, float]:
    """Median seconds of each of `ours()` and `theirs()` (each makes a new function and calls
    it once), interleaved, s2s's without its disk cache."""
    with disk_cache_off():
        return interleaved_medians(ours, theirs, repeats)


def mlp_problem(tiny: bool):
    rng = np.random.default_rng(0)
    sizes = (12, 16, 16, 4) if tiny else (784, 512, 512, 10)
    batch = 4 if tiny else 128
    params = [((rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32), np.zeros(n, np.float32))
              for m, n in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    y = np.eye(sizes[-1], dtype=np.float32)[rng.integers(0, sizes[-1], batch)]
    return params, x, y


def assert_trees_close(ours, theirs, **tolerances):
    ours_leaves, theirs_leaves = s2s.tree_leaves(ours), s2s.tree_leaves(theirs)
    assert len(ours_leaves) == len(theirs_leaves), (len(ours_leaves), len(theirs_leaves))
    for a, b in zip(ours_leaves, theirs_leaves):
        assert np.shape(a) == np.shape(b), (np.shape(a), np.shape(b))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), **tolerances)


def as_numpy(tree) -> list:
    """Every leaf of a result read as NumPy, as a user reading it would."""
    return [np.asarray(leaf) for leaf in s2s.tree_leaves(tree)]


def run(tiny: bool):
    import jax
    import jax.numpy as jnp

    calls, repeats, first_repeats = (20, 3, 1) if tiny else (2000, 15, 9)
    rows = []

    # (1) dispatch of a tiny function, cache hit; (2) reading a result.
    x4 = np.arange(4, dtype=np.float32)
    with disk_cache_off():
        ours = s2s.jit(scale_shift)
        theirs = jax.jit(fresh(scale_shift, np=jnp))
        assert_trees_close(ours(x4), theirs(x4), rtol=1e-6)
        ours_total, theirs_total = s2s.jit(total)(x4), jax.jit(fresh(total, np=jnp))(x4)
    for how, wait in (("call alone", lambda r: r), ("block_until_ready", lambda r: r.block_until_ready()),
                      ("read, np.asarray", np.asarray)):
        rows.append((f"(1) dispatch, x*2+1 on 4 f32, {how}",
                     *medians_per_call(lambda: wait(ours(x4)), lambda: wait(theirs(x4)), calls, repeats)))
    # s2s's x64 is on by default (NumPy's types) and jax's is off: with jax loaded, each s2s
    # call sets jax's for its thread (the dispatcher reads jax's). With jax's on as well
    # (or no jax in the process) the call swaps nothing; both sides still run in float32.
    jax_x64 = jax.config.jax_enable_x64   # (put back as it was: the test suite runs this in-process)
    jax.config.update("jax_enable_x64", True)
    try:
        theirs_x64 = jax.jit(fresh(scale_shift, np=jnp))
        assert_trees_close(ours(x4), theirs_x64(x4), rtol=1e-6)
        for how, wait in (("call alone", lambda r: r), ("read, np.asarray", np.asarray)):
            rows.append((f"(1) jax's x64 on too (no swap), {how}",
                         *medians_per_call(lambda: wait(ours(x4)), lambda: wait(theirs_x64(x4)), calls, repeats)))
    finally:
        jax.config.update("jax_enable_x64", jax_x64)
    ours_result, theirs_result = ours(x4), theirs(x4)
    assert float(ours_total) == float(theirs_total) and repr(ours_result).startswith("Array([1., 3., 5., 7.]")
    for how, read in (("np.asarray", np.asarray), ("repr", repr), ("index [1]", lambda r: r[1])):
        rows.append((f"(2) read a result of (1): {how}",
                     *medians_per_call(lambda: read(ours_result), lambda: read(theirs_result),
                                       max(calls // 10, 3), repeats)))
    rows.append(("(2) read a result of (1): float of a 0-d result",
                 *medians_per_call(lambda: float(ours_total), lambda: float(theirs_total), calls, repeats)))

    # (4) first: time to first result of jit(grad) of a function neither side has seen.
    args = mlp_problem(tiny)

    def s2s_first():
        return as_numpy(s2s.jit(s2s.grad(fresh(mlp_loss)))(*args))

    def jax_first():
        return as_numpy(jax.jit(jax.grad(fresh(mlp_loss, np=jnp)))(*args))

    t_first_ours, t_first_theirs = seconds_to_first_result(s2s_first, jax_first, first_repeats)

    # (3) steady state of the same jit(grad).
    with disk_cache_off():  # nothing written to the user's cache by a benchmark
        ours = s2s.jit(s2s.grad(mlp_loss))
        theirs = jax.jit(jax.grad(fresh(mlp_loss, np=jnp)))
        g_ours, g_theirs = ours(*args), theirs(*args)
    assert_trees_close(g_ours, g_theirs, rtol=2e-4, atol=1e-5)
    assert_trees_close(s2s.grad(mlp_loss)(*args), g_theirs, rtol=2e-4, atol=1e-5)  # the NumPy path too
    label = "MLP tiny" if tiny else "MLP 784-512-512-10, b128"
    mlp_calls = max(calls // 100, 3) if not tiny else 3
    rows.append((f"(3) jit(grad) {label}, block_until_ready",
                 *medians_per_call(lambda: s2s.block_until_ready(ours(*args)), lambda: jax.block_until_ready(theirs(*args)),
                                   mlp_calls, repeats * 2)))
    rows.append((f"(3) jit(grad) {label}, read as NumPy",
                 *medians_per_call(lambda: as_numpy(ours(*args)), lambda: as_numpy(theirs(*args)),
                                   mlp_calls, repeats * 2)))
    rows.append((f"(4) jit(grad) {label}, first result", t_first_ours, t_first_theirs))

    return print_rows(rows)


def print_rows(rows):
    """Prints (name, s2s seconds, jax seconds) rows side by side with their ratio."""
    print(f"{'benchmark':56} {'s2s':>11} {'jax':>11} {'s2s/jax':>8}")
    for name, t_ours, t_theirs in rows:
        print(f"{name:56} {_fmt(t_ours):>11} {_fmt(t_theirs):>11} {t_ours / t_theirs:7.2f}x")
    return rows


def _fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f}us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f}ms"
    return f"{seconds:.2f}s"


def command_line(run, doc: str, argv=None):
    """`run(tiny)` for `--tiny` or not, as the benchmarks' command line."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="small problems, for the test suite")
    return run(parser.parse_args(argv).tiny)


def main(argv=None):
    return command_line(run, __doc__, argv)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
