"""The public API's type hints, as a user's type checker reads them: every function s2s and
s2s.lax export is annotated throughout (and the hints resolve), and mypy --strict, finding
s2s by its `py.typed` marker, passes a program written against the API and reports a
program's misuse at its lines. `api_boundary` keeps each function's signature for it
(a decorator without hints would turn every entry point into `Any`)."""
import inspect
import os
import subprocess
import sys
import textwrap
import typing

import pytest

import s2s
from tests.helpers import CHECKOUT_PATH

PUBLIC = [(f"s2s.{name}", getattr(s2s, name)) for name in s2s.__all__] + \
         [(f"s2s.lax.{name}", getattr(s2s.lax, name)) for name in s2s.lax.__all__]
FUNCTIONS = [(name, obj) for name, obj in PUBLIC if inspect.isfunction(obj)]


@pytest.mark.parametrize("name, fn", FUNCTIONS, ids=[name for name, _ in FUNCTIONS])
def test_every_public_function_is_annotated_throughout(name, fn):
    signature = inspect.signature(fn)
    assert [p.name for p in signature.parameters.values() if p.annotation is p.empty] == []
    assert signature.return_annotation is not signature.empty
    typing.get_type_hints(inspect.unwrap(fn))   # every name a hint uses exists


USES = '''\
from typing import Any

import numpy as np
import s2s


def loss(w: np.ndarray, x: np.ndarray) -> Any:
    return np.sum(np.tanh(x @ w))


w, x = np.ones(3), np.ones((2, 3))
grads = s2s.grad(loss)(w, x)
value, both = s2s.value_and_grad(loss, argnums=(0, 1))(w, x)
fast = s2s.jit(loss, static_argnums=(), backend="python")
batched = s2s.vmap(loss, in_axes=(None, 0))(w, x)
out, tangent = s2s.jvp(loss, (w, x), (w, x))
out, pullback = s2s.vjp(loss, w, x)
jaxpr: s2s.ClosedJaxpr = s2s.make_jaxpr(loss)(w, x)
source: str = s2s.emit_python(s2s.grad(loss), w, x)
leaves = s2s.tree_leaves({"w": w})
carry, ys = s2s.lax.scan(lambda c, row: (c + row, c), 0.0, x)
saved = s2s.checkpoint(loss, static_argnames=("x",))
'''

MISUSES = {   # line → what mypy says of it
    "s2s.grad(loss, argnums='w')": 'Argument "argnums" to "grad" has incompatible type "str"',
    "s2s.vmap(loss, axis_size='3')": 'Argument "axis_size" to "vmap" has incompatible type "str"',
    "lines: int = s2s.emit_python(loss, w, x)": 'Incompatible types in assignment (expression has type "str"',
    "s2s.jit(loss, backend=2)": 'Argument "backend" to "jit" has incompatible type "int"',
}


def mypy(tmp_path, program: str) -> subprocess.CompletedProcess:
    path = tmp_path / "program.py"
    path.write_text(program)
    env = dict(os.environ, MYPYPATH=CHECKOUT_PATH)
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                           "--cache-dir", str(tmp_path / "cache"), str(path)],
                          env=env, capture_output=True, text=True)


def test_mypy_strict_passes_a_program_written_against_the_api_and_reports_misuse_at_its_lines(tmp_path):
    passed = mypy(tmp_path, USES)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    program = USES + "".join(f"{line}\n" for line in MISUSES)
    failed = mypy(tmp_path, program)
    first = USES.count("\n") + 1
    for number, (line, message) in enumerate(MISUSES.items(), first):
        assert f"program.py:{number}: error: {message}" in failed.stdout, (line, failed.stdout)
    assert failed.stdout.count(": error:") == len(MISUSES), failed.stdout
