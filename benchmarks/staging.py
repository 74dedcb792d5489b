"""Staging throughput: equations per second for generated functions of growing size, each
read the first time in the process, s2s beside `jax.make_jaxpr` in the same run.

    python benchmarks/staging.py            # 1k, 4k, 16k and 64k equations
    python benchmarks/staging.py --tiny     # what the test suite runs

Each function is a chain of `x = np.tanh(x) * 1.01 + 0.1` lines (3 equations a line),
written to a new module file for every repeat, so that s2s reads, parses and analyses its
source as it does a user's file it has not seen (what `s2s emit`, `s2s compile` and a
first `grad` call pay; a cached parse would hide that). Two rows a size:

- `stage+emit`: `s2s.emit_python(chain, x)` (staging + the emitted Python module), beside
  `jax.make_jaxpr(chain)(x)` of the same chain written with jnp;
- `grad`: `s2s.emit_python(s2s.grad(loss), x)` where `loss(x) = chain(x).sum()`
  (staging + jvp + partial evaluation + transpose + emission), beside
  `jax.make_jaxpr(jax.grad(loss))(x)`; throughput counted in the chain's (source) equations.

The cost should grow about linearly: microseconds per equation stay flat across sizes.
Medians over repeats. Targets (issue 18): at least 50k equations/s for stage+emit at 16k,
at least 25k source equations/s for grad.
"""
import argparse
import gc
import importlib.util
import itertools
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import s2s

_fresh_names = itertools.count()


def write_chain_module(directory: str, n_lines: int, module: str = "np") -> str:
    """A new module file (a name never used before in this process) defining `chain` and
    `loss` in NumPy (module="np") or jax.numpy ("jnp")."""
    path = os.path.join(directory, f"chain_{module}_{n_lines}_{next(_fresh_names)}.py")
    body = "\n".join(f"    x = {module}.tanh(x) * 1.01 + 0.1" for _ in range(n_lines))
    header = "import numpy as np\n" if module == "np" else "import jax.numpy as jnp\n"
    with open(path, "w") as f:
        f.write(f"{header}\n\ndef chain(x):\n{body}\n    return x\n\n\ndef loss(x):\n    return chain(x).sum()\n")
    return path


def load(path: str):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def median_first_seconds(directory: str, n_lines: int, module: str, work, repeats: int) -> float:
    """Median seconds of `work(new module)` over `repeats` modules, each written and
    imported (not timed) just before, with the garbage of the ones before it collected."""
    times = []
    for _ in range(repeats):
        loaded = load(write_chain_module(directory, n_lines, module))
        gc.collect()   # the last repeat's module is garbage now: not this one's to free
        start = time.perf_counter()
        work(loaded)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(sizes, repeats=3):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jax = None
    arg = s2s.ShapeDtype((8,), "float32")
    x = np.ones(8, np.float32)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for n_eqns in sizes:
            n_lines = n_eqns // 3
            probe = load(write_chain_module(directory, n_lines))
            n_staged = len(s2s.make_jaxpr(probe.chain)(arg).eqns)
            grad_source = s2s.emit_python(s2s.grad(probe.loss), x)
            assert "def " in grad_source and np.isfinite(s2s.grad(probe.loss)(x)).all()
            for what, ours, theirs in (
                    ("stage+emit", lambda m: s2s.emit_python(m.chain, arg),
                     lambda m: jax.make_jaxpr(m.chain)(x)),
                    ("grad", lambda m: s2s.emit_python(s2s.grad(m.loss), arg),
                     lambda m: jax.make_jaxpr(jax.grad(m.loss))(x))):
                seconds = median_first_seconds(directory, n_lines, "np", ours, repeats)
                jax_seconds = median_first_seconds(directory, n_lines, "jnp", theirs, repeats) if jax else None
                rows.append((what, n_staged, seconds, jax_seconds))
    print(f"{'':10} {'equations':>10} {'s2s s':>9} {'eqns/s':>9} {'us/eqn':>8} {'jax s':>9} {'jax eqns/s':>10} "
          f"{'s2s/jax':>8}")
    for what, n, seconds, jax_seconds in rows:
        jax_text = f"{jax_seconds:9.3f} {n / jax_seconds:10.0f} {seconds / jax_seconds:7.2f}x" if jax_seconds \
            else f"{'-':>9} {'-':>10} {'-':>8}"
        print(f"{what:10} {n:10d} {seconds:9.3f} {n / seconds:9.0f} {1e6 * seconds / n:8.1f} {jax_text}")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="small sizes, for the test suite")
    args = parser.parse_args(argv)
    sizes = (30, 120) if args.tiny else (1_000, 4_000, 16_000, 64_000)
    rows = run(sizes, repeats=1 if args.tiny else 3)
    assert all(n >= size - 3 for (_, n, _, _), size in zip(rows[::2], sizes)), rows
    return rows


if __name__ == "__main__":
    sys.setrecursionlimit(100_000)
    main()
