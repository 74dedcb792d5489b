"""Staging + emission throughput: equations per second for generated functions of growing size.

    python benchmarks/staging.py            # 1k, 4k and 16k equations
    python benchmarks/staging.py --tiny     # what the test suite runs

Each function is a chain of `x = np.tanh(x) * 1.01 + 0.1` lines (3 equations a line),
written to a temporary module so s2s reads it from source like any user file. The cost
should grow about linearly: the last column (microseconds per equation) stays flat.
When jax is installed, `jax.make_jaxpr` of the same chain (jnp) is timed alongside.
"""
import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time

import s2s


def write_chain_module(directory: str, n_lines: int, module: str = "np") -> str:
    path = os.path.join(directory, f"chain_{module}_{n_lines}.py")
    body = "\n".join("    x = {m}.tanh(x) * 1.01 + 0.1".format(m=module) for _ in range(n_lines))
    header = "import numpy as np\n" if module == "np" else "import jax.numpy as jnp\n"
    with open(path, "w") as f:
        f.write(f"{header}\n\ndef chain(x):\n{body}\n    return x\n")
    return path


def load(path: str):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.chain


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(sizes, repeats=3):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jax = None
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for n_eqns in sizes:
            fn = load(write_chain_module(directory, n_eqns // 3))
            arg = s2s.ShapeDtype((8,), "float32")

            def stage_and_emit():
                # A fresh function object each time, so the staging cache does not answer.
                f = type(fn)(fn.__code__, fn.__globals__, fn.__name__)
                s2s.emit_python(f, arg)

            seconds = median_seconds(stage_and_emit, repeats)
            n_staged = len(s2s.make_jaxpr(fn)(arg).eqns)
            jax_seconds = None
            if jax is not None:
                jfn = load(write_chain_module(directory, n_eqns // 3, "jnp"))
                x = jnp.ones(8, jnp.float32)
                fresh = lambda: type(jfn)(jfn.__code__, jfn.__globals__, jfn.__name__)  # noqa: E731
                jax_seconds = median_seconds(lambda: jax.make_jaxpr(fresh())(x), repeats)
            rows.append((n_staged, seconds, jax_seconds))
    print(f"{'equations':>10} {'stage+emit s':>13} {'eqns/s':>10} {'us/eqn':>8} {'jax.make_jaxpr s':>17} {'s2s/jax':>8}")
    for n, seconds, jax_seconds in rows:
        jax_text = f"{jax_seconds:17.3f} {seconds / jax_seconds:8.2f}" if jax_seconds else f"{'-':>17} {'-':>8}"
        print(f"{n:10d} {seconds:13.3f} {n / seconds:10.0f} {1e6 * seconds / n:8.1f} {jax_text}")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="small sizes, for the test suite")
    args = parser.parse_args(argv)
    sizes = (30, 120) if args.tiny else (1_000, 4_000, 16_000)
    rows = run(sizes, repeats=1 if args.tiny else 3)
    assert all(n >= size - 3 for (n, _, _), size in zip(rows, sizes)), rows
    return rows


if __name__ == "__main__":
    sys.setrecursionlimit(100_000)
    main()
